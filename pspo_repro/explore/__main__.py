"""Hydra entry point: ``python -m pspo_repro.explore [overrides]`` (config: ``conf/explore.yaml``)."""

from __future__ import annotations

import sys

from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig

from pspo_repro.common.cli import run_command
from pspo_repro.explore.runner import run


def _task(cfg: DictConfig) -> int:
    """The Hydra task: the explorer; a failed check is a non-zero exit status."""
    return run(cfg, overrides=list(HydraConfig.get().overrides.task))


def main() -> int:
    """Entry point of ``python -m pspo_repro.explore`` (``cli.run_command``, then Hydra)."""
    return run_command("explore", _task)


if __name__ == "__main__":
    sys.exit(main())
