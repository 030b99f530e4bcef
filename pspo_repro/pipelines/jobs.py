"""The pipelines' job runner: each stage's subprocesses, ``parallel`` at a time, with their logs and a progress bar.

Every job runs one of the project's own entry points (``python -m pspo_repro.<command> ...``) with the
pipeline's environment (``child_env``); a job whose environment is the one ``warm_start.configure`` was given
is forked from an interpreter that has imported the ML stack once (``warm_start``). The first failure stops
the others and raises :class:`StageError` with the failed log's tail.
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from omegaconf import DictConfig

from pspo_repro.common.paths import PROJECT_ROOT
from pspo_repro.common.redact import redact_text
from pspo_repro.pipelines import warm_start

POLL_S = 2.0  # progress bar refresh

WAIT_S = 0.2  # how often a finished job is looked for: a core idles at most this long between jobs


class StageError(RuntimeError):
    """A stage's subprocess failed; the message names its log file and ends with the log's tail."""


@dataclass
class Job:
    """One subprocess of a stage: its command, a relative cost (for scheduling) and its log file."""

    name: str
    cmd: list[str]
    cost: float = 1.0
    log: Path | None = None
    priority: int = 0  # higher first (before cost): jobs whose results unlock others
    proc: subprocess.Popen | warm_start.WarmJob | None = field(default=None, repr=False)


def child_env(cfg: DictConfig, root: Path, threads: int) -> dict[str, str]:
    """The environment of every stage's subprocess: results, data and SFT folders, thread count, offline."""
    env = dict(os.environ)
    env.update(
        PSPO_RESULTS_DIR=str(root),
        PSPO_DATA_DIR=str(root / "work" / "data"),
        PSPO_MINI_SFT_DIR=str(root / "work" / "sft"),
        # One thread per process: two processes on two cores beat one with two threads (docs/benchmarks.md).
        OMP_NUM_THREADS=str(threads),
        MKL_NUM_THREADS=str(threads),
        TOKENIZERS_PARALLELISM="false",
        PYTHONUNBUFFERED="1",
    )
    for key in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_DATASETS_OFFLINE"):
        env.setdefault(key, "1")  # nothing here needs the hub; never wait on a look-up
    env.setdefault("WANDB_MODE", "offline")
    return env


def _tail(path: Path | None, n: int = 25) -> str:
    if path is None or not path.is_file():
        return ""
    lines = path.read_text(errors="replace").splitlines()
    return "\n".join(lines[-n:])


def run_jobs(
    jobs: list[Job],
    parallel: int,
    env: dict[str, str],
    bar,
    progress,
    ready: Callable[[], list[Job]] | None = None,
) -> None:
    """Run ``jobs`` with at most ``parallel`` at once, highest priority then largest cost first;
    ``progress()`` -> units done. ``ready()``, when given, is asked for more jobs whenever one ends (jobs that
    waited on finished ones, e.g. the tuned runs on their sweeps), so no core idles at a phase boundary.
    A job whose environment is the one ``warm_start.configure`` was given starts warm (``warm_start``).

    Each job's output goes to its log file. The first failure stops the others (their finished work
    stays on disk and is reused by a rerun) and raises StageError with the failed log's tail.
    """
    queue = sorted(jobs, key=lambda j: (-j.priority, -j.cost))
    running: list[Job] = []
    next_refresh = time.monotonic() + POLL_S
    try:
        while queue or running:
            while queue and len(running) < max(1, parallel):
                job = queue.pop(0)
                assert job.log is not None
                job.log.parent.mkdir(parents=True, exist_ok=True)
                with open(job.log, "w") as fh:
                    fh.write(
                        redact_text("$ " + " ".join(job.cmd)) + "\n"
                    )  # the stage's own lines are redacted by it
                job.proc = warm_start.start(job.cmd, PROJECT_ROOT, env, job.log)
                running.append(job)
            time.sleep(WAIT_S)
            if time.monotonic() >= next_refresh:
                bar.n = progress()
                bar.refresh()
                next_refresh = time.monotonic() + POLL_S
            for job in list(running):
                rc = job.proc.poll()
                if rc is None:
                    continue
                running.remove(job)
                if rc != 0:
                    raise StageError(f"{job.name} failed (exit {rc}); log {job.log}:\n{_tail(job.log)}")
                if ready is not None:
                    queue = sorted(queue + ready(), key=lambda j: (-j.priority, -j.cost))
    finally:
        for job in running:  # only our own children, by handle
            if job.proc is not None and job.proc.poll() is None:
                job.proc.terminate()
                job.proc.wait()
    bar.n = progress()
    bar.refresh()


def progress_bar(total: int | None, desc: str, unit: str):
    """A tqdm progress bar for one stage (``total`` None: not known yet)."""
    from tqdm.auto import tqdm

    return tqdm(total=total, desc=desc, unit=unit)


def with_logs(root: Path, jobs: list[Job]) -> list[Job]:
    """``jobs``, each with its log file under ``<root>/work/logs/``."""
    for j in jobs:
        j.log = root / "work" / "logs" / f"{j.name}.log"
    return jobs
