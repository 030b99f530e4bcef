"""Every CPU pipeline, end to end: ``python -m pspo_repro.mini [pipeline=<grid>]`` runs the grid its config names
(the driver's settings: conf/mini.yaml; the grids: conf/pipeline/mini.yaml, ``make mini``; study.yaml, ``make
study``; leaderboard.yaml, ``make leaderboard``; ``pipeline=scale_rung``, conf/pipeline/scale_rung.yaml: each rung
of ``make scale``).

Stages, each through the project's own entry points so the mini run exercises the GPU grid's code paths:

1. ``data``: the synthetic splits (``pspo_repro.data.synthetic``) written to ``<root>/work/data/synthetic/``;
   every later stage reads them through ``PSPO_DATA_DIR``.
2. ``sft``: ``python -m pspo_repro.sft`` trains the base model (``<root>/work/sft/model``).
3. ``rl``: Hydra multiruns of ``python -m pspo_repro.train -m experiment=mini method=... seed=0,1,2
   hydra/launcher=<basic|slurm|...>``, ``parallel`` processes at once (largest group first).
4. ``eval``: ``python -m pspo_repro.evaluate -m run=...`` over the finished main runs, plus the SFT
   model as the ``baseline`` row, split over ``parallel`` processes.
5. ``aggregate``: ``python -m pspo_repro.aggregate results_dir=<root> out_dir=<root>``.

Layout under ``root`` (default ``results/mini``): ``runs/`` and ``eval/`` (the usual schemas), the
tables and figures, ``timings.json``; ``work/`` holds data, the SFT checkpoint, logs and stage markers.
A stage whose marker records the same settings is skipped on a rerun; inside a stage the entry points
skip finished runs and cells and resume unfinished ones, so an interrupted ``make mini`` continues.
Subprocess output goes to ``work/logs/``; the console shows one progress bar per stage and a summary.
"""

from __future__ import annotations

import logging
import os
import sys
import time
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from pspo_repro.common.atomic import write_json
from pspo_repro.common.cli import run_command
from pspo_repro.pipelines import committed_copy, warm_start
from pspo_repro.pipelines.jobs import StageError, child_env
from pspo_repro.pipelines.markers import (
    STAGES,
    fingerprint,
    marker_path,
    read_record,
    stage_done,
    stage_seconds,
)
from pspo_repro.pipelines.settings import SettingsError, check_settings, pipeline_root
from pspo_repro.pipelines.stages import STAGE_FUNCS, check_same_base

log = logging.getLogger("pspo_repro.mini")


def _place_committed_copy(cfg: DictConfig, root: Path, wanted: list[str]) -> None:
    """Before the rl or eval stage: keep the committed runs and cells (``reuse_committed``) or move them aside
    (``committed_copy.set_aside``); refused first, with nothing moved, when the stages before them are not
    wanted on a fresh clone (they would have no outputs)."""
    if not {"rl", "eval"} & set(wanted):
        return
    fresh = not (root / "work").exists() and any((root / d).is_dir() for d in ("runs", "eval"))
    missing = [s for s in STAGES[: STAGES.index("eval")] if s not in wanted]
    if fresh and missing:  # checked before anything moves: the committed copy stays where it is
        raise SettingsError(
            f"stages={wanted}: {root} holds committed results and no work/ folder (a fresh clone), so the "
            f"stages before them ({', '.join(missing)}) have no outputs here; run every stage to recompute "
            "and compare with the committed copy (nothing was moved)"
        )
    if cfg.get("reuse_committed"):
        if not isinstance(cfg.reuse_committed, bool):
            raise SettingsError(f"reuse_committed must be true or false, got {cfg.reuse_committed!r}")
        print(f"[mini] reuse_committed: the finished runs and cells under {root} are kept and skipped; only "
              "what is missing runs (the SFT base is recomputed and checked against the committed one)",
              flush=True)  # fmt: skip
    else:
        committed_copy.set_aside(root)


def _run_stages(
    cfg: DictConfig, root: Path, wanted: list[str], timings: dict[str, Any], previous: Any
) -> None:
    """Each wanted stage in order, skipped when its marker matches; each finished stage's marker and its record
    in ``timings`` (written at once: it survives a later stage's failure)."""
    # reuse_committed acts only where there are results to reuse (a first run has nothing to check against)
    reusing = bool(cfg.get("reuse_committed")) and any((root / d).is_dir() for d in ("runs", "eval"))
    for stage in (s for s in STAGES if s in wanted):
        fp = fingerprint(cfg, stage)
        done = None if cfg.force else stage_done(root, stage, fp)
        if done is not None:
            print(f"[mini] {stage}: done already ({done['seconds']:.0f} s when it ran); skipped", flush=True)
            continue
        t0, c0 = time.time(), warm_start.children_cpu()
        info = STAGE_FUNCS[stage](cfg, root)
        if stage == "sft" and reusing:
            check_same_base(info, (previous or {}).get("sft") if isinstance(previous, dict) else None, root)
        rec = {
            "seconds": round(time.time() - t0, 1),
            "cpu_seconds": round(warm_start.children_cpu() - c0, 1),
            **info,
        }
        write_json(marker_path(root, stage), {"fingerprint": fp, **rec})
        timings["stages"][stage] = rec
        write_json(root / "timings.json", timings)


def run_pipeline(cfg: DictConfig) -> dict[str, Any]:
    """Run the configured stages in order (skipping finished ones); returns the timings record."""
    root = pipeline_root(cfg)
    wanted = check_settings(cfg)
    _place_committed_copy(cfg, root, wanted)
    timings_path = root / "timings.json"
    previous = (read_record(timings_path) or {}).get("stages")
    timings: dict[str, Any] = {
        "parallel": int(cfg.parallel),
        "threads": int(cfg.threads),
        "cpus": os.cpu_count(),
        # earlier stages' records, those that hold a time (a stage rerun now replaces its own)
        "stages": {
            k: v
            for k, v in (previous.items() if isinstance(previous, dict) else [])
            if isinstance(v, dict) and stage_seconds(v) is not None
        },
    }
    t_all = time.time()
    # The jobs with the pipeline's own environment (every one but an SFT at other sft.threads) start warm.
    warm_start.configure(child_env(cfg, root, int(cfg.threads)) if cfg.warm_start else None)
    try:
        _run_stages(cfg, root, wanted, timings, previous)
    finally:
        warm_start.stop()
    timings["this_invocation_seconds"] = round(time.time() - t_all, 1)
    timings["total_seconds"] = round(sum(s["seconds"] for s in timings["stages"].values()), 1)
    committed = committed_copy.committed_dir(root)
    if committed.is_dir() and "aggregate" in wanted:
        # Two statements: agreement within seed variance (what another machine can check) and bitwise
        # identity (the same machine only); committed_copy's docstring says why both.
        timings["vs_committed"] = {
            "agreement": committed_copy.agreement(committed, root),
            "bitwise": committed_copy.compare(committed, root),
        }
    write_json(timings_path, timings)
    return timings


def summary(root: Path, timings: dict[str, Any]) -> str:
    """Where everything is, the stage times and the main table."""
    lines = ["", "== mini reproduction: done ==", f"results: {root}"]
    for stage, rec in timings["stages"].items():
        lines.append(f"  {stage:<10} {rec['seconds']:>7.1f} s wall, {rec.get('cpu_seconds', 0):>7.1f} s CPU")
    lines.append(
        f"  {'total':<10} {timings['total_seconds']:>7.1f} s "
        f"(this invocation {timings['this_invocation_seconds']:.1f} s)"
    )
    if "vs_committed" in timings:
        vs = timings["vs_committed"]
        lines.append(f"  {committed_copy.describe_agreement(vs['agreement'])}")
        lines.append(f"  {committed_copy.describe(vs['bitwise'])} ({committed_copy.committed_dir(root)})")
    names = ("main_reward_acc.md", "temperature_reward_acc.png", "training_curves.png", "alpha_ablation.md")
    for name in (*names, "summary.md"):
        path = root / name
        lines.append(f"  {'ok ' if path.is_file() else 'missing'} {path}")
    lines.append(f"  runs: {root / 'runs'}  eval cells: {root / 'eval'}  logs: {root / 'work' / 'logs'}")
    main = root / "main_reward_acc.md"
    if main.is_file():
        lines += ["", main.read_text()]
    return "\n".join(lines)


def _task(cfg: DictConfig) -> None:
    """The Hydra task: the pipeline, then where everything is."""
    try:
        timings = run_pipeline(cfg)
    except StageError as exc:  # bad settings (nothing ran or moved): 2, as every command; a failed stage: 1
        print(f"error: {exc}", file=sys.stderr, flush=True)
        sys.exit(2 if isinstance(exc, SettingsError) else 1)
    print(summary(pipeline_root(cfg), timings), flush=True)


def main() -> int:
    """Entry point of ``python -m pspo_repro.mini [pipeline=study|leaderboard] [key=value ...]``:
    ``cli.run_command`` (SIGTERM unwinds like Ctrl-C, so ``run_jobs`` stops its own children), then Hydra."""
    return run_command("mini", _task, stop_on_sigterm=True)
