"""The committed copy of the mini reproduction, on a fresh clone.

``results/mini/`` is committed (tables, figures, run.json/metrics.jsonl, evaluation cells) but its
``work/`` folder (data, SFT checkpoint, RL checkpoints, stage markers) is not. Left in place, those files
would make a fresh ``make mini`` skip every run and cell as finished and merely re-aggregate them. So
when ``work/`` is missing, the committed results are moved to ``work/committed/``, everything is
recomputed, and the new numbers are compared with the committed ones at the end (``git diff`` shows the
same from the other side).
"""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path
from typing import Any

log = logging.getLogger("pspo_repro.mini")

COMMITTED = "committed"  # under <root>/work/
# What the comparison reads: the numbers, not provenance (git SHA, versions, paths) or timings.
TABLES = ("main_reward_acc.csv", "main_true_acc.csv", "temperature_reward_acc.csv",
          "temperature_true_acc.csv", "alpha_ablation.csv")  # fmt: skip
CELL_KEYS = ("metrics", "per_prompt")
TIMING_WORDS = ("time", "runtime", "per_second")


def committed_dir(root: Path) -> Path:
    """Where ``set_aside`` puts the committed results of ``root``."""
    return root / "work" / COMMITTED


def set_aside(root: Path) -> Path | None:
    """Move committed results out of the way when ``root`` has results but no ``work/`` folder.

    Returns the folder they were moved to, or None when there was nothing to move (a first run, or a
    rerun on the machine that produced them, whose ``work/`` is there and whose finished stages count).
    """
    if (root / "work").exists() or not any((root / d).is_dir() for d in ("runs", "eval")):
        return None
    dest = committed_dir(root)
    dest.mkdir(parents=True)
    for entry in sorted(root.iterdir()):
        if entry.name != "work":
            shutil.move(str(entry), dest / entry.name)
    log.warning(
        "%s holds results but no work/ folder (a fresh clone of the committed copy): moved them to %s; "
        "this run recomputes everything and compares with them at the end", root, dest,
    )  # fmt: skip
    return dest


def _metrics_rows(path: Path) -> list[dict[str, Any]]:
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return [{k: v for k, v in r.items() if not any(w in k for w in TIMING_WORDS)} for r in rows]


def _cell(path: Path) -> dict[str, Any]:
    d = json.loads(path.read_text())
    return {k: d.get(k) for k in CELL_KEYS}


def compare(old: Path, new: Path) -> dict[str, Any]:
    """Tables (CSV), training metrics (metrics.jsonl without timing keys) and evaluation cells (metrics
    and per-prompt counts) of ``old`` against ``new``: counts of identical files and the paths that
    differ or are missing on either side."""

    def on_either_side(pattern: str) -> list[Path]:
        return sorted({p.relative_to(tree) for tree in (old, new) for p in tree.glob(pattern)})

    groups = {
        "tables": [Path(t) for t in TABLES],
        "runs": on_either_side("runs/**/metrics.jsonl"),
        "cells": on_either_side("eval/**/T*.json"),
    }
    read = {"tables": lambda p: p.read_text(), "runs": _metrics_rows, "cells": _cell}
    report: dict[str, Any] = {"identical": {}, "different": [], "missing": []}
    for kind, rels in groups.items():
        same = 0
        for rel in rels:
            a, b = old / rel, new / rel
            if not (a.is_file() and b.is_file()):
                report["missing"].append(str(rel))
            elif read[kind](a) == read[kind](b):
                same += 1
            else:
                report["different"].append(str(rel))
        report["identical"][kind] = same
    return report


def describe(report: dict[str, Any]) -> str:
    """One line for the final summary."""
    same = ", ".join(f"{n} {kind}" for kind, n in report["identical"].items())
    if not report["different"] and not report["missing"]:
        return f"matches the committed copy: {same} identical"
    parts = [f"identical: {same}"]
    if report["different"]:
        shown = ", ".join(report["different"][:5]) + (" ..." if len(report["different"]) > 5 else "")
        parts.append(f"{len(report['different'])} differ ({shown})")
    if report["missing"]:
        parts.append(f"{len(report['missing'])} on one side only")
    return "differs from the committed copy: " + "; ".join(parts)
