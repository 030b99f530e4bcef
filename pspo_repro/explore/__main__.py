"""Hydra entry point: ``python -m pspo_repro.explore [overrides]`` (config: ``conf/explore.yaml``)."""

from __future__ import annotations

import sys

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig

from pspo_repro.explore.runner import run


@hydra.main(version_base="1.3", config_path="../../conf", config_name="explore")
def main(cfg: DictConfig) -> None:
    """Entry point of ``python -m pspo_repro.explore``; a failed check exits non-zero."""
    code = run(cfg, overrides=list(HydraConfig.get().overrides.task))
    if code:
        sys.exit(code)  # SystemExit passes through Hydra: the exit code reaches the shell


if __name__ == "__main__":
    main()
