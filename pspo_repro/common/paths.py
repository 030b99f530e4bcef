"""Where the project keeps caches and results, and where offline data lives.

Everything is relative to the project root unless an environment variable says otherwise, so a
clone works the same on a laptop, in CI and on a cluster's shared file system.
"""

from __future__ import annotations

import os
from pathlib import Path

from pspo_repro.common.overrides import override, quoted_text

PROJECT_ROOT = Path(__file__).resolve().parents[2]
CONF_DIR = PROJECT_ROOT / "conf"  # the Hydra configs of every entry point


def cache_dir() -> Path:
    """Folder for locally built artefacts (the tiny model, prompt token counts); ``PSPO_CACHE_DIR`` overrides it."""
    return Path(os.environ.get("PSPO_CACHE_DIR", PROJECT_ROOT / ".cache" / "pspo_repro"))


def results_dir() -> Path:
    """Root of ``results/``; ``PSPO_RESULTS_DIR`` overrides it (tests point it at a temp folder)."""
    return Path(os.environ.get("PSPO_RESULTS_DIR", PROJECT_ROOT / "results"))


# The offline data folder when ``PSPO_DATA_DIR`` is unset: ``../shared/data`` beside the project root (the
# README's default, the one ``make`` sets), so ``python -m`` outside make finds the same folder.
DEFAULT_DATA_DIR = PROJECT_ROOT.parent / "shared" / "data"


def data_dir() -> Path | None:
    """The offline data folder (layout of ``../shared/data/README.md``): ``PSPO_DATA_DIR`` when set, else
    ``DEFAULT_DATA_DIR`` when that folder exists; None (read the hub) when neither, or when
    ``PSPO_DATA_DIR`` is set empty (``PSPO_DATA_DIR=``: the hub on purpose)."""
    value = os.environ.get("PSPO_DATA_DIR")
    if value is None:
        return DEFAULT_DATA_DIR.resolve() if DEFAULT_DATA_DIR.is_dir() else None
    return Path(value).expanduser().resolve() if value else None


def data_dir_hint() -> str:
    """How to point a command at the offline data, for the one-line errors of a hub that cannot be read."""
    why = (
        "it is set empty"
        if os.environ.get("PSPO_DATA_DIR") == ""
        else f"the default {DEFAULT_DATA_DIR} does not exist"
    )
    return f"set PSPO_DATA_DIR to the offline data folder (the layout of ../shared/data/README.md; {why})"


# Folders users give as environment variables: made absolute once, in the process the user started.
PATH_ENV_VARS = ("PSPO_DATA_DIR", "PSPO_RESULTS_DIR", "PSPO_LOG_DIR", "PSPO_CACHE_DIR")


def absolutize_env(environ: dict[str, str] | None = None) -> dict[str, str]:
    """Make relative ``PATH_ENV_VARS`` absolute (against the current folder) in ``environ`` (default:
    ``os.environ``), so every child process, whatever its working folder, sees the same folder the user
    meant (``PSPO_DATA_DIR=../shared/data make test``). Runs when ``pspo_repro`` is imported. Returns the
    variables it changed."""
    env = os.environ if environ is None else environ
    changed = {}
    for key in PATH_ENV_VARS:
        value = env.get(key)
        if value and not os.path.isabs(os.path.expanduser(value)):
            env[key] = changed[key] = os.path.abspath(os.path.expanduser(value))
    return changed


# Command-line settings that name a local folder: made absolute before Hydra sees them, so a launcher job
# (Slurm, another working folder) and the stored overrides name the folder the user meant.
PATH_ARGS = ("model.path", "model_path", "paths.results_dir", "paths.log_dir", "results_dir", "out_dir")


def absolutize_args(argv: list[str], keys: tuple[str, ...] = PATH_ARGS) -> list[str]:
    """``argv`` with relative folder values of ``keys`` (``model.path=../w``) made absolute; a
    ``model.tokenizer`` that starts with ``.`` or ``~`` too (otherwise it may be a hub id)."""
    out = []
    for arg in argv:
        key, sep, value = arg.partition("=")
        bare = key.lstrip("+~")
        local_tokenizer = bare == "model.tokenizer" and value.startswith((".", "~"))
        if sep and value.startswith(("'", '"')):  # a quoted folder (overrides.override): its text
            text = quoted_text(value)
            if bare in keys and text is not None and not os.path.isabs(os.path.expanduser(text)):
                arg = override(key, os.path.abspath(os.path.expanduser(text)))
        elif sep and (bare in keys or local_tokenizer) and value not in ("", "null"):
            if any(c in value for c in "$,()[]"):  # interpolations and sweeps: left to Hydra
                out.append(arg)
                continue
            expanded = os.path.expanduser(value)
            if not os.path.isabs(expanded):
                arg = f"{key}={os.path.abspath(expanded)}"
        out.append(arg)
    return out
