"""The experiment tracker of one training job: one wandb run per job, finished at the job's end.

transformers' ``WandbCallback`` (TRL's trainer reports through it, ``report_to="wandb"``) starts a run
only when ``wandb.run`` is None and never finishes it, so in a local ``-m`` grid (Hydra's basic launcher
runs every job in one process) each later job logged into the first job's run. ``tracker_run`` starts the
job's own run first (``wandb.init`` with its name, group, project and folder; the callback then logs into
it), then calls ``wandb.finish`` when the job ends, however it ends (a failed job's run is
marked failed), so the next job starts a run of its own.

The run is named after the run folder (``GRPOConfig.run_name``, e.g. ``tiny/pspo/seed0``) and grouped by
the grid: ``logger.group`` (default ``$WANDB_RUN_GROUP``), else the ``run_tag`` a grid's experiment file
sets, else the name of a multirun's sweep folder (``hydra.sweep.dir``); a single untagged run has no group.
The project is ``logger.project`` (``$WANDB_PROJECT``, else ``pspo-repro``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any


def grid_group(cfg: Any) -> str | None:
    """The wandb group of a job: the grid it belongs to (the module doc's order), None for a lone run."""
    if cfg.logger.get("group"):
        return str(cfg.logger.group)
    if cfg.get("run_tag"):
        return str(cfg.run_tag)
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    if HydraConfig.initialized() and HydraConfig.get().mode == RunMode.MULTIRUN:
        return Path(HydraConfig.get().sweep.dir).name
    return None


def wandb_init_kwargs(cfg: Any, folder: Path, name: str) -> dict[str, Any]:
    """``wandb.init``'s arguments for one job. Passed, not set in the environment: wandb reads its
    environment once per process, so a second job of a local grid would write into the first job's folder."""
    return {
        "project": str(cfg.logger.project),
        "entity": str(cfg.logger.entity) if cfg.logger.get("entity") else None,
        "group": grid_group(cfg),
        "name": name,
        "dir": str(folder),  # offline runs under the run folder, beside its records
        "mode": str(cfg.logger.mode or "offline"),
        "job_type": "train",
    }


@contextlib.contextmanager
def tracker_run(cfg: Any, folder: Path, name: str, main_process: bool) -> Iterator[None]:
    """The ``with`` block is one job with its own wandb run, finished after it (exit code 1 when the block
    raised); the trainer's ``WandbCallback`` logs into that run. Nothing with ``logger=none``, and on any
    process but the main one (the callback logs from the main process only)."""
    if cfg.logger.name != "wandb" or not main_process:
        yield
        return
    import wandb

    wandb.init(**wandb_init_kwargs(cfg, folder, name))
    failed = False
    try:
        yield
    except BaseException:
        failed = True
        raise
    finally:
        wandb.finish(exit_code=1 if failed else 0)
