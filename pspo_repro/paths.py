"""Where the project keeps caches and results, and where offline data lives.

Everything is relative to the project root unless an environment variable says otherwise, so a
clone works the same on a laptop, in CI and on a cluster's shared file system.
"""

from __future__ import annotations

import os
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parent.parent


def cache_dir() -> Path:
    """Folder for locally built artefacts (the tiny model); ``PSPO_CACHE_DIR`` overrides it."""
    return Path(os.environ.get("PSPO_CACHE_DIR", PROJECT_ROOT / ".cache" / "pspo_repro"))


def results_dir() -> Path:
    """Root of ``results/``; ``PSPO_RESULTS_DIR`` overrides it (tests point it at a temp folder)."""
    return Path(os.environ.get("PSPO_RESULTS_DIR", PROJECT_ROOT / "results"))


def data_dir() -> Path | None:
    """The offline data folder from ``PSPO_DATA_DIR`` (layout of ``../shared/data/README.md``), or None."""
    value = os.environ.get("PSPO_DATA_DIR")
    return Path(value).expanduser().resolve() if value else None
