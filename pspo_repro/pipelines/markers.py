"""The pipeline's records of itself: a marker per finished stage (``<root>/work/stages/<stage>.json``, with the
fingerprint of the settings it ran with) and ``timings.json``.

A stage whose marker records the same settings is skipped on a rerun; a marker that is missing, cut, edited or
of other settings is not (the stage runs again, and its entry points skip the work that is finished).
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

STAGES = ("data", "sft", "rl", "eval", "aggregate")


def fingerprint(cfg: DictConfig, stage: str) -> str:
    """Hash of the settings a stage's output depends on (its marker must match to skip the stage)."""
    part = {
        "data": ["data"],
        "sft": ["data", "prompt_template", "sft"],
        "rl": ["data", "prompt_template", "sft", "rl"],
        "eval": ["data", "prompt_template", "sft", "rl", "eval"],
        "aggregate": ["data", "prompt_template", "sft", "rl", "eval", "aggregate"],
    }[stage]
    blob = {
        k: OmegaConf.to_container(cfg[k], resolve=True) if OmegaConf.is_config(cfg[k]) else cfg[k]
        for k in part
    }
    # Where jobs run (the launcher) does not change results; it is left out on purpose.
    if "rl" in blob:
        blob["rl"].pop("launcher", None)
    return hashlib.sha256(json.dumps(blob, sort_keys=True).encode()).hexdigest()[:16]


def marker_path(root: Path, stage: str) -> Path:
    """``<root>/work/stages/<stage>.json``: written when a stage finishes."""
    return root / "work" / "stages" / f"{stage}.json"


def read_record(path: Path) -> dict[str, Any] | None:
    """A JSON object the pipeline wrote (a stage marker, timings.json), or None when there is none; a file
    that is not one (cut, edited, not UTF-8, another JSON type) or a folder in its place is named on stdout
    and read as None."""
    if not os.path.lexists(path):
        return None
    if not path.is_file():  # check_settings refuses these first; named, never read
        print(f"[mini] {path} is not a regular file; ignored", flush=True)
        return None
    try:
        rec = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:  # ValueError: bad JSON or bytes that are not UTF-8
        rec = exc
    if isinstance(rec, dict):
        return rec
    why = f"{type(rec).__name__}: {rec}" if isinstance(rec, Exception) else f"a JSON {type(rec).__name__}"
    print(f"[mini] {path} is unreadable ({why}); ignored", flush=True)
    return None


def stage_done(root: Path, stage: str, fp: str) -> dict[str, Any] | None:
    """The stage's marker if it finished with the same settings, else None (a corrupted marker too: the
    stage runs again, and its entry points skip the work that is finished)."""
    rec = read_record(marker_path(root, stage))
    if rec is None or rec.get("fingerprint") != fp:
        return None
    if stage_seconds(rec) is None:
        print(f"[mini] {marker_path(root, stage)}: no time recorded (seconds); running the stage again")
        return None
    return rec


def stage_seconds(rec: dict[str, Any]) -> float | None:
    """A stage record's ``seconds`` when it is a finite number >= 0, else None."""
    seconds = rec.get("seconds")
    if isinstance(seconds, bool) or not isinstance(seconds, int | float):
        return None
    return float(seconds) if math.isfinite(seconds) and seconds >= 0 else None
