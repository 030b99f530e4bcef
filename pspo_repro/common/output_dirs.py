"""Output folders checked before any work: the front door every command's writes go through.

A results or log folder that is a file, cannot be written, has a name too long for the file system, or
sits on a full disk is one line naming it, before anything is computed, loaded or made: never a traceback
from the first write, minutes later, beside half-written outputs. Nothing is created here (the folder is
made by the write that needs it), so a refused command leaves no trace.
"""

from __future__ import annotations

import os
from pathlib import Path

from pspo_repro.common.paths import results_dir

# Fallbacks where the file system does not say (Linux's common values).
_NAME_MAX, _PATH_MAX = 255, 4096


def _nearest_existing(path: Path) -> Path:
    """``path`` or its closest ancestor that exists (a dangling link counts as existing)."""
    while not os.path.lexists(path) and path != path.parent:
        path = path.parent
    return path


def _limit(folder: Path, name: str, fallback: int) -> int:
    try:
        return int(os.pathconf(folder, name))
    except (OSError, ValueError):
        return fallback


def folder_problem(path: str | os.PathLike) -> str | None:
    """Why ``path`` cannot be (or become) a folder this process writes into, else None; nothing is made.

    A component of it that exists as a file (or a link to one); a name longer than the file system allows
    (or a path longer than its limit); the nearest folder that exists not writable (read-only, no
    permission); no free space left there."""
    path = Path(os.path.abspath(os.path.expanduser(path)))
    existing = _nearest_existing(path)
    if not existing.is_dir():  # a file where a folder should be (or a link to a file, or a dangling one)
        kind = (
            "a dangling link" if existing.is_symlink() and not existing.exists() else "a file, not a folder"
        )
        return f"{existing} is {kind}"
    name_max = _limit(existing, "PC_NAME_MAX", _NAME_MAX)
    for part in path.relative_to(existing).parts:
        size = len(os.fsencode(part))
        if size > name_max:
            shown = part if len(part) <= 40 else f"{part[:20]}...{part[-10:]}"
            return f"the name {shown!r} is {size} bytes, longer than the file system allows ({name_max})"
    path_max = _limit(existing, "PC_PATH_MAX", _PATH_MAX)
    if len(os.fsencode(str(path))) >= path_max:
        return f"the path is {len(os.fsencode(str(path)))} bytes, longer than the file system allows ({path_max})"
    if not os.access(existing, os.W_OK | os.X_OK):
        return f"{existing} cannot be written (read-only or no permission)"
    try:
        stat = os.statvfs(existing)
    except OSError:
        return None
    if stat.f_bavail == 0 and stat.f_blocks > 0:
        return f"no space left on the file system of {existing}"
    return None


def env_folders_problem(results_sub: str | None = None, results: bool = True) -> str | None:
    """One line when the results folder (``PSPO_RESULTS_DIR``, or ``results/``; ``results_sub`` below it
    when given: ``runs``, ``eval``; left out when not ``results``) or a set ``PSPO_LOG_DIR`` fails
    ``folder_problem``, else None."""
    checks = []
    if results:
        label = (
            "PSPO_RESULTS_DIR=" + os.environ["PSPO_RESULTS_DIR"]
            if os.environ.get("PSPO_RESULTS_DIR")
            else "results/"
        )
        folder = results_dir() / results_sub if results_sub else results_dir()
        checks.append((label, folder, "PSPO_RESULTS_DIR"))
    if os.environ.get("PSPO_LOG_DIR"):
        checks.append(
            ("PSPO_LOG_DIR=" + os.environ["PSPO_LOG_DIR"], Path(os.environ["PSPO_LOG_DIR"]), "PSPO_LOG_DIR")
        )
    for label, folder, var in checks:
        if why := folder_problem(folder):
            return f"cannot write the outputs under {label}: {why}; set {var} to a folder that can be written"
    return None


def out_dir_error(out_dir: str | os.PathLike) -> str | None:
    """The one line an analysis command (regime, claims, leaderboard) prints, before any work, when its
    ``out_dir`` fails ``folder_problem``; None when it can be written."""
    if why := folder_problem(out_dir):
        return f"cannot write the outputs under out_dir={out_dir}: {why}"
    return None
