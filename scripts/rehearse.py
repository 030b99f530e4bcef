#!/usr/bin/env python3
"""The real-size rehearsal (``make rehearse``; issue 37 item 1): the paper's 0.5B runs end to end on CPU.

For Qwen2.5-0.5B's real architecture (random weights, the real 151,936-token vocabulary, the tiny
tokenizer padded to it as scripts/gpu_check.py does; its functions build the folder), each paper config
(``experiment=paper_qwen2p5_0p5b`` with clip, noclip, pspo and the as-run clip) runs through the project's
own entry points, each in its own process:

1. ``python -m pspo_repro.train`` until its first checkpoint is marked complete, then SIGKILL;
2. the same command again: it resumes from that checkpoint, validates and saves again, and records the
   best checkpoint (HF's load_best_model_at_end by mean validation reward) in run.json;
3. ``python -m pspo_repro.evaluate run=<folder>``: one ``eval=paper`` cell (GSM8K, T = 0) of the best
   checkpoint with the Hugging Face backend on a few problems;

then ``python -m pspo_repro.aggregate`` tabulates the four cells. Qwen2.5-1.5B and Qwen2-Math-1.5B do not
fit AdamW's fp32 state in this machine's memory (16 bytes per parameter: ~23 GiB each), so for them it
builds the random-init architecture and runs one evaluation cell (load, forward, generate, grade).

The paper's settings are unchanged except ``OVERRIDES`` (printed at the start and stored in the JSON).
Recorded in ``<results>/rehearse/rehearse.json`` (``<results>``: ``PSPO_RESULTS_DIR`` when set, else the
checkout's ``results/``, as for every command; rewritten after every stage): per stage the wall time,
CPU seconds and peak resident memory (the child's own ``ru_maxrss`` from ``os.wait4``); the parameter
and autocast dtypes training ran with; the best checkpoint's size and tensor dtypes; TRL's per-step time
split into generation and the rest. Everything else goes to ``<results>/rehearse/scratch/`` (checkpoints
are deleted once evaluated: ~6 GB each). ``--dry-run`` does the same on the tiny architecture in seconds
(tests/test_rehearse.py). ``_wrap`` is the internal entry that times a training process from inside.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import math
import os
import resource
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # this checkout's package, not whichever one the interpreter has installed
from pspo_repro.common.output_dirs import folder_problem  # noqa: E402
from pspo_repro.common.paths import results_dir  # noqa: E402
from pspo_repro.common.safe_paths import UnsafePathError, no_symlink_escape  # noqa: E402

_spec = importlib.util.spec_from_file_location("gpu_check", ROOT / "scripts" / "gpu_check.py")
gpu_check = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(gpu_check)

SCHEMA_VERSION = 1
EXPERIMENT = "paper_qwen2p5_0p5b"
# name -> the overrides that select the paper config (the as-run clip: the released script's eps 0, lr 5e-7)
METHODS = {
    "clip": ["method=clip"],
    "noclip": ["method=noclip"],
    "pspo": ["method=pspo"],
    "clip_as_run": ["method=clip", "variant=as_run"],
}
BIG_MODELS = ("qwen2p5_1p5b", "qwen2_math_1p5b")
ADAMW_BYTES_PER_PARAM = 16  # fp32 weight + gradient + two Adam moments


def overrides(mode: dict[str, Any], model_dir: Path, num_iterations: int) -> list[str]:
    """The only settings changed from the paper config, each with why (the JSON stores this list).

    Checkpoints every ``num_iterations`` steps (save_steps must be a multiple of it, for resume) and two of
    them: the first is killed, the second is reached after the resume.
    """
    every = num_iterations
    return [
        f"model.path={model_dir}",  # the random-init real architecture built here (no hub)
        "logger=none",  # no wandb on this machine
        "trainer.token_budget=null",  # steps instead of 150M tokens ...
        f"trainer.max_steps={2 * every}",  # ... two checkpoints' worth
        f"trainer.save_steps={every}",
        f"trainer.eval_steps={every}",  # validation at each checkpoint (best-checkpoint selection)
        "trainer.gradient_accumulation_steps=1",  # one micro-batch (4 completions, G = 4) per step, not 16
        f"trainer.max_completion_length={mode['completion_tokens']}",  # 128 in the paper
        f"trainer.eval_limit={mode['val_prompts']}",  # validation prompts (the whole split in the paper)
        f"trainer.per_device_eval_batch_size={4 * mode['val_prompts']}",  # G = 4 completions per prompt
        "trainer.logging_steps=1",  # a metrics.jsonl line per step (10 in the paper)
        "trainer.bf16=true",  # the GPU path's bf16 autocast (auto = off on CPU): fp32 masters under autocast
        "trainer.disable_tqdm=true",  # progress bars in a log file are noise
    ]


MODES = {
    "real": {"arch": "qwen2p5_0p5b", "dtype": "bfloat16", "completion_tokens": 16, "val_prompts": 1,
             "eval_prompts": 2, "eval_tokens": 16, "budget_s": 1800.0, "hard_s": 7200.0},
    "dry": {"arch": "tiny", "dtype": "float32", "completion_tokens": 8, "val_prompts": 1,
            "eval_prompts": 2, "eval_tokens": 8, "budget_s": 120.0, "hard_s": 600.0},
}  # fmt: skip


def eval_overrides(mode: dict[str, Any], prompts: int) -> list[str]:
    """One ``eval=paper`` cell: GSM8K only, T = 0 (the paper's headline), one sample, the HF backend."""
    return [
        "eval=paper", "eval.datasets=[gsm8k]", f"eval.limit={prompts}", "temperatures=[0.0]",
        "n_samples=1", f"max_new_tokens={mode['eval_tokens']}", "backend=hf",
    ]  # fmt: skip


# ---------------------------------------------------------------- arguments


def _names(allowed: tuple[str, ...]):
    def parse(text: str) -> tuple[str, ...]:
        names = tuple(x.strip() for x in text.split(",") if x.strip() and x.strip() != "none")
        bad = [x for x in names if x not in allowed]
        if bad:
            raise argparse.ArgumentTypeError(f"unknown {bad}; allowed: {', '.join(allowed)} or none")
        return names

    return parse


def _seconds(text: str) -> float:
    """``--hard-s``: a finite number of seconds >= 0 (``nan`` compared false with every time left, so no
    stage was ever skipped)."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value >= 0):
        raise argparse.ArgumentTypeError(f"{text!r}: allowed a finite number of seconds >= 0")
    return value


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="rehearse.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--dry-run", action="store_true", help="the tiny architecture: seconds, for the tests")
    p.add_argument("--methods", type=_names(tuple(METHODS)), default=tuple(METHODS))
    p.add_argument("--big", type=_names(BIG_MODELS), default=BIG_MODELS, help="1.5B models: eval cell only")
    p.add_argument("--out", type=Path, default=None, help="result JSON (default <results>/rehearse/...)")
    p.add_argument("--scratch", type=Path, default=None, help="default <results>/rehearse/scratch[_dry]")
    p.add_argument("--keep-checkpoints", action="store_true", help="do not delete evaluated checkpoints")
    p.add_argument(
        "--hard-s", type=_seconds, default=None, help="stop starting stages after this many seconds"
    )
    args = p.parse_args(argv)
    # Training and the GSM8K cell read the offline data: without it every stage would fail, each after its
    # model had been built. Checked before anything runs.
    data = os.environ.get("PSPO_DATA_DIR")
    if not data or not (Path(data) / "gsm8k").is_dir():
        p.error(f"PSPO_DATA_DIR={data!r} is not the offline data folder (../shared/data, with gsm8k/ in it)")
    try:
        args.scratch, args.out = output_paths(args.scratch, args.out, args.dry_run)
    except UnsafePathError as exc:
        p.error(str(exc))
    # Where it writes, before any stage: a file, a read-only folder or a full disk is one line, not a
    # traceback from the first write (the scratch folder) or after every stage has run (the report).
    if why := folder_problem(args.scratch):
        p.error(f"--scratch={args.scratch}: {why}; allowed: a folder that can be written")
    if args.out.is_dir():
        p.error(f"--out={args.out} is a folder; allowed: the report's file path (a .json file)")
    if why := folder_problem(args.out.parent):
        p.error(f"--out={args.out}: {why}; allowed: a file in a folder that can be written")
    return args


def output_paths(scratch: Path | None, out: Path | None, dry_run: bool) -> tuple[Path, Path]:
    """(scratch folder, report JSON): the ones given, else under ``<results>/rehearse/`` (``results_dir()``:
    ``PSPO_RESULTS_DIR`` when set, as for every command); a path in the results folder is held to its link
    rule (``no_symlink_escape``: UnsafePathError naming a link out of it)."""
    rehearse = results_dir() / "rehearse"
    if scratch is None:
        scratch = rehearse / ("scratch_dry" if dry_run else "scratch")
    if out is None:
        out = (scratch / "rehearse.json") if dry_run else rehearse / "rehearse.json"
    for what, path in (("--scratch", scratch), ("--out", out)):
        no_symlink_escape(results_dir(), path, what)
    return scratch, out


# ---------------------------------------------------------------- child processes


def child_env(scratch: Path) -> dict[str, str]:
    """Every child writes under the scratch folder; no hub, no wandb."""
    env = dict(os.environ)
    env.update(
        PSPO_RESULTS_DIR=str(scratch / "results"),
        PSPO_LOG_DIR=str(scratch / "logs"),
        PYTHONPATH=os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep),
        HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", HF_DATASETS_OFFLINE="1",
        WANDB_MODE="disabled", TOKENIZERS_PARALLELISM="false",
    )  # fmt: skip
    return env


def run_stage(name: str, cmd: list[str], env: dict[str, str], log: Path, timeout: float,
              kill_when=None) -> dict[str, Any]:  # fmt: skip
    """Run one child in its own session; its wall time, CPU seconds and peak RSS (``os.wait4``: this
    child's own rusage, so stages do not blur). ``kill_when()`` true: SIGKILL the child's group."""
    log.parent.mkdir(parents=True, exist_ok=True)
    print(f"[rehearse] {name}: start (log {log})", flush=True)
    t0 = time.time()
    killed = timed_out = False
    beat = t0
    with open(log, "w") as fh:
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=fh, stderr=subprocess.STDOUT,
                                start_new_session=True)  # fmt: skip
        try:
            while True:
                pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
                if pid:
                    proc.returncode = os.waitstatus_to_exitcode(status)
                    break
                now = time.time()
                if not killed and kill_when is not None and kill_when():
                    os.killpg(proc.pid, signal.SIGKILL)
                    killed = True
                elif not timed_out and now - t0 > timeout:
                    os.killpg(proc.pid, signal.SIGKILL)
                    timed_out = True
                if now - beat >= 60:  # progress on long work
                    print(f"[rehearse] {name}: running, {now - t0:.0f} s", flush=True)
                    beat = now
                time.sleep(0.1)
        except BaseException:  # Ctrl-C / SIGTERM: the child is in its own session and would train on
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            raise
    rc = proc.returncode
    ok = killed or (rc == 0 and not timed_out)
    out = {
        "status": "killed" if killed else ("ok" if ok else ("timeout" if timed_out else "failed")),
        "rc": rc, "wall_s": round(time.time() - t0, 2),
        "cpu_s": round(usage.ru_utime + usage.ru_stime, 2),
        "peak_rss_mib": round(usage.ru_maxrss / 1024),  # Linux: KiB
        "log": str(log),
    }  # fmt: skip
    if not ok:
        out["log_tail"] = log.read_text(errors="replace")[-3000:]
    print(f"[rehearse] {name}: {out['status']} in {out['wall_s']} s, {out['cpu_s']} CPU s, "
          f"peak RSS {out['peak_rss_mib']} MiB", flush=True)  # fmt: skip
    return out


def _wrap_train_modes(figures: dict[str, Any]) -> None:
    """On top of gpu_check's step and profiling timers: each profiled block's seconds under ``train`` or
    ``eval``, by whether it ran inside an optimizer step (validation runs between steps)."""
    from transformers.trainer_callback import CallbackHandler
    from trl.extras import profiling

    gpu_check._wrap_train(figures)  # step_s, profiling_s (all blocks)
    begin, end, exit_ = (
        CallbackHandler.on_step_begin,
        CallbackHandler.on_step_end,
        profiling.ProfilingContext.__exit__,
    )
    state = {"in_step": False}

    def on_step_begin(self, args, st, control):
        state["in_step"] = True
        return begin(self, args, st, control)

    def on_step_end(self, args, st, control):
        state["in_step"] = False
        return end(self, args, st, control)

    def prof_exit(self, exc_type, exc, tb):
        if self._start_time is not None:
            mode = "train" if state["in_step"] else "eval"
            figures.setdefault("profiling_by_mode", {}).setdefault(mode, {}).setdefault(
                self.name.split(".", 1)[-1], []
            ).append(round(time.perf_counter() - self._start_time, 4))
        return exit_(self, exc_type, exc, tb)

    CallbackHandler.on_step_begin, CallbackHandler.on_step_end = on_step_begin, on_step_end
    profiling.ProfilingContext.__exit__ = prof_exit


def wrap_main(argv: list[str]) -> int:
    """``_wrap FIGURES.json -- <train overrides>``: ``python -m pspo_repro.train`` in this process,
    timed; the figures are written on exit (a SIGKILLed process leaves none)."""
    import runpy

    if len(argv) < 2 or argv[0] in ("", "--") or argv[1] != "--":
        print(f"rehearse.py _wrap: error: got {argv!r}; allowed: _wrap FIGURES.json -- <train overrides>",
              file=sys.stderr)  # fmt: skip
        return 2
    figures_path, rest = Path(argv[0]), argv[2:]
    why = f"{figures_path} is a folder" if figures_path.is_dir() else folder_problem(figures_path.parent)
    if why:
        print(f"rehearse.py _wrap: error: FIGURES.json={figures_path}: {why}", file=sys.stderr)
        return 2
    figures: dict[str, Any] = {}
    sys.path.insert(0, str(ROOT))
    _wrap_train_modes(figures)
    sys.argv = ["pspo_repro.train", *rest]
    try:
        runpy.run_module("pspo_repro.train", run_name="__main__", alter_sys=True)
    except SystemExit as exc:
        if exc.code not in (None, 0):
            raise
    finally:
        gpu_check.write_json(figures_path, figures)
    return 0


# ---------------------------------------------------------------- reading what a run left


def safetensors_dtypes(path: Path) -> dict[str, int]:
    """Tensor count per dtype from a safetensors header (8-byte length + JSON), without loading weights."""
    with open(path, "rb") as fh:
        n = int.from_bytes(fh.read(8), "little")
        header = json.loads(fh.read(n))
    counts: dict[str, int] = {}
    for key, meta in header.items():
        if key != "__metadata__":
            counts[meta["dtype"]] = counts.get(meta["dtype"], 0) + 1
    return counts


def checkpoint_facts(ckpt: Path) -> dict[str, Any]:
    """Size per file (MiB) and the saved weights' dtypes."""
    files = {f.name: round(f.stat().st_size / 2**20, 1) for f in sorted(ckpt.iterdir()) if f.is_file()}
    weights = sorted(ckpt.glob("model*.safetensors"))
    dtypes: dict[str, int] = {}
    for w in weights:
        for k, v in safetensors_dtypes(w).items():
            dtypes[k] = dtypes.get(k, 0) + v
    return {"name": ckpt.name, "total_mib": round(sum(files.values()), 1), "files_mib": files,
            "weight_dtypes": dtypes}  # fmt: skip


def step_split(metrics_path: Path, figures: dict[str, Any]) -> dict[str, Any]:
    """TRL's ``train/step_time`` per step (metrics.jsonl) and the generation inside optimizer steps
    (TRL's profiling blocks, from the resumed process only: the killed one leaves no figures)."""
    rows = [json.loads(x) for x in metrics_path.read_text().splitlines() if x.strip()]
    step_time = {r["step"]: round(r["train/step_time"], 3) for r in rows if "train/step_time" in r}
    by_mode = figures.get("profiling_by_mode") or {}
    gen_keys = ("transformers.generate", "transformers.generate_batch", "vLLM.generate")
    gen_train = sum(sum(v) for k, v in (by_mode.get("train") or {}).items() if k in gen_keys)
    steps = figures.get("step_s") or []
    total = sum(steps)
    return {
        "trl_step_time_s": step_time,  # whole run, both processes
        "resumed_process": {
            "step_s": steps,
            "generation_s": round(gen_train, 3),
            "rest_s": round(total - gen_train, 3),
            "generation_share": round(gen_train / total, 3) if total else None,
            "validation_generation_s": round(
                sum(sum(v) for k, v in (by_mode.get("eval") or {}).items() if k in gen_keys), 3),
            "profiled_train_s": {k: round(sum(v), 3) for k, v in (by_mode.get("train") or {}).items()},
        },
    }  # fmt: skip


def _new_run(runs: Path, before: set[Path]) -> Path | None:
    found = [p.parent for p in runs.glob("*/*/*/run.json") if p.parent not in before]
    return found[0] if len(found) == 1 else None


def _marked_checkpoint(runs: Path, before: set[Path]):
    def check() -> bool:
        run = _new_run(runs, before)
        return run is not None and any(run.glob("checkpoint-*/pspo_complete.json"))

    return check


# ---------------------------------------------------------------- the rehearsal


class Rehearsal:
    """The stages in order; the report is rewritten after each."""

    def __init__(self, args: argparse.Namespace):
        self.args = args
        self.mode = MODES["dry" if args.dry_run else "real"]
        self.scratch = args.scratch.resolve()
        self.env = child_env(self.scratch)
        self.logs = self.scratch / "stage_logs"
        self.started = time.time()
        self.failed: list[str] = []
        self.report: dict[str, Any] = {
            "schema_version": SCHEMA_VERSION, "kind": "rehearse", "dry_run": args.dry_run,
            "finished": False, "started_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "experiment": EXPERIMENT, "mode": self.mode, "environment": gpu_check.environment(),
            "cpu_model": _cpu_model(), "nproc": os.cpu_count(),
            "load_average_at_start": list(os.getloadavg()),
            "stages": {}, "runs": {}, "big_models": {},
        }  # fmt: skip

    def save(self) -> None:
        self.report["total_wall_s"] = round(time.time() - self.started, 2)
        kids = resource.getrusage(resource.RUSAGE_CHILDREN)
        self.report["total_child_cpu_s"] = round(kids.ru_utime + kids.ru_stime, 2)
        gpu_check.write_json(self.args.out, self.report)

    def time_left(self) -> float:
        hard = self.args.hard_s if self.args.hard_s is not None else self.mode["hard_s"]
        return hard - (time.time() - self.started)

    def stage(self, name: str, cmd: list[str], kill_when=None) -> dict[str, Any]:
        if self.time_left() < 60:  # a stage cut short tells nothing: skip it, named, rather than start it
            res = {"status": "skipped", "rc": None, "reason": "past --hard-s", "log_tail": "past --hard-s"}
        else:
            res = run_stage(name, cmd, self.env, self.logs / f"{name}.log", self.time_left(), kill_when)
        self.report["stages"][name] = res
        if res["status"] not in ("ok", "killed"):
            self.failed.append(name)
            tail = (res.get("log_tail") or "").strip().splitlines()
            print(f"[rehearse] error: stage {name} {res['status']} (rc {res['rc']}): "
                  f"{tail[-1] if tail else ''} (log {res.get('log')})", file=sys.stderr, flush=True)  # fmt: skip
        self.save()
        return res

    def build(self, name: str, preset: str) -> Path | None:
        """A random-init model folder of ``preset``'s architecture (gpu_check's build, its own process)."""
        model_dir = self.scratch / "models" / name
        arch = gpu_check.model_arch(preset, self.args.dry_run)
        spec = {"dir": str(model_dir), "arch": arch, "dtype": self.mode["dtype"]}
        figures = self.scratch / f"build_{name}.figures.json"
        res = self.stage(f"build_{name}", gpu_check._wrap_cmd("build", figures, [json.dumps(spec)]))
        if res["status"] != "ok":
            return None
        res["figures"] = json.loads(figures.read_text())
        self.save()
        return model_dir

    def method(self, name: str, model_dir: Path) -> None:
        """Train to the first checkpoint and kill, resume to the second, evaluate the best checkpoint."""
        from pspo_repro.common import cli

        base = [f"experiment={EXPERIMENT}", *METHODS[name], "seed=0"]
        num_it = int(cli.compose_config(ROOT / "conf", "train", base).method.num_iterations)
        ov = overrides(self.mode, model_dir, num_it)
        cmd_args = [*base, *ov]
        entry: dict[str, Any] = {"command": "python -m pspo_repro.train " + " ".join(cmd_args),
                                 "num_iterations": num_it}  # fmt: skip
        self.report["runs"][name] = entry
        runs = self.scratch / "results" / "runs"
        before = {p.parent for p in runs.glob("*/*/*/run.json")}
        figures = self.scratch / f"train_{name}.figures.json"
        cmd = [sys.executable, str(Path(__file__).resolve()), "_wrap", str(figures), "--", *cmd_args]
        first = self.stage(f"train_{name}_until_kill", cmd, _marked_checkpoint(runs, before))
        run = _new_run(runs, before)
        if first["status"] != "killed" or run is None:
            if first["status"] == "ok":  # finished before the kill landed: the resume would test nothing
                self.failed.append(f"train_{name}_until_kill")
                print(
                    f"[rehearse] error: {name} finished before its kill; nothing was resumed", file=sys.stderr
                )
            return
        entry["run_folder"] = str(run.relative_to(self.scratch))
        entry["killed_after"] = sorted(p.parent.name for p in run.glob("checkpoint-*/pspo_complete.json"))
        second = self.stage(f"train_{name}_resume", cmd)
        if second["status"] != "ok":
            return
        record = json.loads((run / "run.json").read_text())
        t = record.get("config", {}).get("trainer") or {}
        entry.update(
            status=record.get("status"), final_step=record.get("final_step"),
            resumed_from=record.get("resumed_from"), best_checkpoint=record.get("best_checkpoint"),
            best_metric=record.get("best_metric"), precision=record.get("precision"),
            trainer_bf16=t.get("bf16"), learning_rate=t.get("learning_rate"),
            method_params={k: v for k, v in (record.get("config", {}).get("method") or {}).items()
                           if k in ("eps_low", "eps_high", "alpha", "num_iterations")},
        )  # fmt: skip
        fig = json.loads(figures.read_text()) if figures.is_file() else {}
        entry["step_time"] = step_split(run / "metrics.jsonl", fig)
        if record.get("best_checkpoint"):
            entry["best_checkpoint_facts"] = checkpoint_facts(run / record["best_checkpoint"])
        self.save()
        ev = self.stage(f"eval_{name}", [sys.executable, "-m", "pspo_repro.evaluate", f"run={run}",
                                         *eval_overrides(self.mode, self.mode["eval_prompts"])])  # fmt: skip
        if ev["status"] == "ok":
            entry["eval_cells"] = _cells(self.scratch / "results" / "eval", run)
        if not self.args.keep_checkpoints:  # ~6 GB each at 0.5B: the disk holds the four runs' one at a time
            for ckpt in run.glob("checkpoint-*"):
                shutil.rmtree(ckpt, ignore_errors=True)
        self.save()

    def big(self, preset: str) -> None:
        """Build, load, forward and generate through one evaluation cell; AdamW's state is not tried."""
        entry: dict[str, Any] = {}
        self.report["big_models"][preset] = entry
        model_dir = self.build(preset, preset)
        if model_dir is None:
            return
        params = self.report["stages"][f"build_{preset}"]["figures"]["params"]
        entry["params"] = params
        entry["adamw_fp32_state_gib"] = round(params * ADAMW_BYTES_PER_PARAM / 2**30, 1)
        entry["machine_memory_gib"] = round(
            os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1
        )
        # Not attempted even where it fits (the dry run's tiny stand-in): at real size it cannot.
        entry["training"] = "not run: AdamW's fp32 weights, gradients and moments need adamw_fp32_state_gib"
        cmd = [sys.executable, "-m", "pspo_repro.evaluate", f"model={preset}", f"model_path={model_dir}",
               *eval_overrides(self.mode, 1)]  # fmt: skip
        if self.stage(f"eval_{preset}", cmd)["status"] == "ok":
            entry["eval_cells"] = _cells(self.scratch / "results" / "eval", None, preset)
        shutil.rmtree(model_dir, ignore_errors=True)
        self.save()

    def run(self) -> int:
        self.scratch.mkdir(parents=True, exist_ok=True)
        example = overrides(self.mode, self.scratch / "models" / "qwen2p5_0p5b", 2)
        self.report["overrides"] = example
        self.report["eval_overrides"] = eval_overrides(self.mode, self.mode["eval_prompts"])
        print("[rehearse] the paper configs run unchanged except (num_iterations 2 shown; 1: steps halve):")
        for ov in example + self.report["eval_overrides"]:
            print(f"[rehearse]   {ov}")
        self.save()
        if self.args.methods:
            model_dir = self.build("qwen2p5_0p5b", self.mode["arch"])
            if model_dir is not None:
                self.report["model"] = self.report["stages"]["build_qwen2p5_0p5b"].get("figures")
                for name in self.args.methods:
                    self.method(name, model_dir)
                agg = self.stage(
                    "aggregate", [sys.executable, "-m", "pspo_repro.aggregate", "expected_seeds=1"]
                )
                if agg["status"] == "ok":
                    self.report["tables"] = _tables(self.scratch / "results" / "tables")
                shutil.rmtree(model_dir, ignore_errors=True)
        for preset in self.args.big:
            self.big(preset)
        self.report["finished"] = True
        self.report["failed_stages"] = self.failed
        self.report["within_budget"] = self.report["total_wall_s"] <= self.mode["budget_s"]
        self.save()
        print(f"[rehearse] {'FAILED ' + ', '.join(self.failed) if self.failed else 'ok'}: "
              f"{self.report['total_wall_s']:.0f} s wall, {self.report['total_child_cpu_s']:.0f} CPU s; "
              f"{self.args.out}", flush=True)  # fmt: skip
        return 1 if self.failed else 0


def _cells(eval_root: Path, run: Path | None, model: str | None = None) -> dict[str, Any]:
    """The evaluation cells of ``run`` (or of ``model``'s baseline): accuracy and mean length per cell."""
    if run is not None:
        parts = run.parts[-3:]  # model / method / seed folder
        pattern = "/".join(parts) + "/*/T*.json"
    else:
        pattern = f"{model}/baseline/seed0/*/T*.json"
    out = {}
    for cell in sorted(eval_root.glob(pattern)):
        if cell.name.endswith(".completions.jsonl.gz"):
            continue
        m = json.loads(cell.read_text())["metrics"]
        out[f"{cell.parent.name}/{cell.stem}"] = {k: m.get(k) for k in ("true_acc", "mean_length")}
    return out


def _tables(tables: Path) -> dict[str, Any]:
    """Which tables the aggregation wrote, and the main one's text (a handful of lines)."""
    files = sorted(str(p.relative_to(tables)) for p in tables.rglob("*") if p.is_file())
    main = next((tables / f for f in files if f.endswith("true_acc.md") and f.startswith("main")), None)
    return {"files": files, "main_table": main.read_text()[:3000] if main else None}


def _cpu_model() -> str | None:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return None


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "_wrap":
        return wrap_main(argv[1:])
    args = parse_args(argv)
    # `kill <pid>` as a KeyboardInterrupt would be: run_stage then ends the running stage's process group
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    return Rehearsal(args).run()


if __name__ == "__main__":
    sys.exit(main())
