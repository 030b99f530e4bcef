"""The five stages of a CPU pipeline (data -> sft -> rl -> eval -> aggregate), each returning the record its
marker and ``timings.json`` keep: the data splits written as files, then each later stage's jobs
(``pipelines.grid``) run by the job runner (``pipelines.jobs``) with a progress bar.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from pspo_repro.pipelines.grid import (
    aggregate_cmd,
    claims_cmds,
    count_cells,
    eval_jobs,
    group_seeds,
    leaderboard_cmds,
    n_temperatures,
    ready_select_jobs,
    regime_cmds,
    rl_jobs,
    rl_runs,
    run_dir_of,
    run_status,
    selected_values,
    selections,
    sft_cmd,
    sweep_points,
)
from pspo_repro.pipelines.jobs import Job, StageError, child_env, progress_bar, run_jobs, with_logs
from pspo_repro.training.sft import PROGRESS


def stage_data(cfg: DictConfig, root: Path) -> dict[str, Any]:
    """Write the synthetic splits as GSM8K-layout jsonl under ``work/data/synthetic``; return their hashes."""
    from pspo_repro.data.synthetic import SyntheticConfig, write_jsonl

    out: dict[str, Any] = {}
    tasks = {"synthetic": cfg.data.sizes, "synthetic_heldout": cfg.data.get("heldout_sizes")}
    for task, task_sizes in tasks.items():
        if not task_sizes:
            continue
        sizes = {k: int(v) for k, v in task_sizes.items()}
        paths = write_jsonl(
            root / "work" / "data" / task, sizes, SyntheticConfig(seed=int(cfg.data.seed)), task
        )
        record = {
            split: {"rows": sizes[split], "sha256": hashlib.sha256(p.read_bytes()).hexdigest()}
            for split, p in paths.items()
        }
        if task == "synthetic":
            out.update(record)  # the rewarded task's splits at the top level, as before
        else:
            out[task] = record
    return out


def do_data(cfg: DictConfig, root: Path) -> dict[str, Any]:
    """Stage 1: the synthetic splits as files."""
    with progress_bar(1, "data", "stage") as bar:
        info = {"splits": stage_data(cfg, root)}
        bar.update(1)
    return info


def do_sft(cfg: DictConfig, root: Path) -> dict[str, Any]:
    """Stage 2: the base model (``pspo_repro.sft`` skips itself when its marker matches)."""
    job = Job("sft", sft_cmd(cfg, root), log=root / "work" / "logs" / "sft.log")
    marker = root / "work" / "sft" / "sft.json"
    progress_file = root / "work" / "sft" / PROGRESS

    def progress() -> int:  # training steps from the SFT process's progress file; total once it is known
        if marker.is_file():
            bar.total = max(bar.total or 0, bar.n, 1)
            return bar.total
        try:
            p = json.loads(progress_file.read_text())
        except (OSError, ValueError):
            return 0
        bar.total = int(p["max_steps"]) + 1  # + 1: the greedy validation after training
        return int(p["step"])

    with progress_bar(None, "sft", "step") as bar:
        run_jobs([job], 1, child_env(cfg, root, int(cfg.sft.threads)), bar, progress)
    return {
        "val_accuracy": json.loads(marker.read_text())["val"]["accuracy"],
        "model_sha256": model_sha256(root / "work" / "sft" / "model"),
    }


def model_sha256(folder: Path) -> str | None:
    """sha256 over the SFT model's weight files (sorted by name), or None when there are none."""
    files = sorted(folder.glob("*.safetensors")) if folder.is_dir() else []
    if not files:
        return None
    h = hashlib.sha256()
    for f in files:
        h.update(f.name.encode())
        with open(f, "rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                h.update(block)
    return h.hexdigest()


def check_same_base(info: dict[str, Any], committed: dict[str, Any] | None, root: Path) -> None:
    """``reuse_committed``: the recomputed SFT base must be the one the committed runs were trained from
    (same weights hash where the committed record has one, else the same validation accuracy), or the new
    runs would be compared with runs of another base. StageError otherwise."""
    if not isinstance(committed, dict):
        raise StageError(
            f"reuse_committed: {root / 'timings.json'} has no sft record to check the base against"
        )
    want, got = committed.get("model_sha256"), info.get("model_sha256")
    if want is not None and want != got:
        raise StageError(f"reuse_committed: the recomputed SFT base (sha256 {got}) differs from the committed "
                         f"runs' ({want}); rerun without reuse_committed to recompute every run")  # fmt: skip
    if committed.get("val_accuracy") != info.get("val_accuracy"):
        raise StageError(
            f"reuse_committed: the recomputed SFT base's validation accuracy {info.get('val_accuracy')} differs "
            f"from the committed runs' base ({committed.get('val_accuracy')}); rerun without reuse_committed"
        )
    print(f"[mini] reuse_committed: SFT base matches the committed one (validation accuracy "
          f"{info.get('val_accuracy')}{', weights sha256 ' + got[:12] if want else ''})", flush=True)  # fmt: skip


def do_rl(cfg: DictConfig, root: Path) -> dict[str, Any]:
    """Stage 3: the GRPO grid as Hydra multiruns; progress = finished run folders.

    When a group selects a value from another's runs (``select``, the tuning-matched protocol), its jobs
    wait for their sweeps: each starts, at the value its tuning runs chose, once they have finished.
    """
    env = child_env(cfg, root, int(cfg.threads))
    info: dict[str, Any] = {}
    total = len(rl_runs(cfg, root, unresolved=True)) + sum(
        len(sweep_points(g)) * len(group_seeds(cfg, g)) for g in cfg.rl.groups if g.get("select")
    )
    with progress_bar(total, "rl runs", "run") as bar:
        # The sweeps first (those the tuned groups read at the head of the queue); each tuned point joins
        # the queue as soon as its own sweep has finished, beside the sweeps still running.
        jobs = rl_jobs(cfg, root, "sweep")
        issued: set[str] = set()
        jobs += ready_select_jobs(cfg, root, issued)  # a resumed stage: sweeps already finished
        runs = rl_runs(cfg, root, unresolved=True)

        def ready() -> list[Job]:
            new = ready_select_jobs(cfg, root, issued)
            if new:
                runs[:] = rl_runs(cfg, root, unresolved=True)  # now with the new jobs' runs
            return with_logs(root, new)

        run_jobs(with_logs(root, jobs), int(cfg.parallel), env, bar,
                 lambda: sum(run_status(run_dir_of(root, *r)) == "finished" for r in runs), ready)  # fmt: skip
        info["runs"] = len(rl_runs(cfg, root))
        chosen = {
            f"{g.name}/{s.method}": {"key": s.key, "chosen": s.chosen, "scores": s.scores,
                                     "set": selected_values(g, s)}
            for g in cfg.rl.groups if g.get("select") for s in selections(cfg, root, g)
        }  # fmt: skip
        if chosen:
            info["selected"] = chosen
    return info


def do_eval(cfg: DictConfig, root: Path) -> dict[str, Any]:
    """Stage 4: temperature sweeps of every main run and the baseline; progress = finished cells."""
    jobs, n_models = eval_jobs(cfg, root)
    for j in jobs:
        j.log = root / "work" / "logs" / f"{j.name}.log"

    overrides = [str(o) for o in cfg.eval.overrides]
    heldout = [str(o) for o in (cfg.eval.get("heldout") or [])]
    tagged = [str(o) for o in (cfg.eval.get("tagged_overrides") or [])]
    tags = {"", *map(str, cfg.eval.get("tags") or [])}
    prefixes = tuple(f"{p}-" for p in (cfg.eval.get("tag_prefixes") or []))
    n_tagged = sum(1 for m, t, _ in rl_runs(cfg, root)
                   if t and (t in tags or t.startswith(prefixes)) and m in set(cfg.eval.methods))  # fmt: skip
    n_cells = (n_models - n_tagged) * n_temperatures(overrides) + n_tagged * n_temperatures(
        overrides + tagged
    )
    n_cells += n_models * n_temperatures(overrides + heldout) if heldout else 0
    with progress_bar(n_cells, "eval cells", "cell") as bar:
        run_jobs(
            jobs, int(cfg.parallel), child_env(cfg, root, int(cfg.threads)), bar, lambda: count_cells(root)
        )
    return {"models": n_models}


def do_aggregate(cfg: DictConfig, root: Path) -> dict[str, Any]:
    """Stage 5: tables and figures into ``root`` (pspo_repro.aggregate, the regime, claims and leaderboard
    tables)."""
    job = Job("aggregate", aggregate_cmd(cfg, root), log=root / "work" / "logs" / "aggregate.log")
    regime = [*regime_cmds(cfg, root), *claims_cmds(cfg, root), *leaderboard_cmds(cfg, root)]
    env = child_env(cfg, root, int(cfg.threads))
    with progress_bar(1 + len(regime), "aggregate", "table set") as bar:
        for j in (job, *regime):
            run_jobs([j], 1, env, bar, lambda: bar.n)
            bar.update(1)
    return {"args": job.cmd[3:]}


STAGE_FUNCS = {"data": do_data, "sft": do_sft, "rl": do_rl, "eval": do_eval, "aggregate": do_aggregate}
