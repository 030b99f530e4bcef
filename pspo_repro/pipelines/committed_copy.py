"""The committed copy of the mini reproduction, on a fresh clone.

``results/mini/`` is committed (tables, figures, run.json/metrics.jsonl, evaluation cells) but its
``work/`` folder (data, SFT checkpoint, RL checkpoints, stage markers) is not. Left in place, those files
would make a fresh ``make mini`` skip every run and cell as finished and merely re-aggregate them. So
when ``work/`` is missing, the committed results are moved to ``work/committed/``, everything is
recomputed, and the new numbers are compared with the committed ones at the end (``git diff`` shows the
same from the other side).

Two statements come out of the comparison, because they answer different questions:

- ``agreement``: what a user on ANOTHER machine can check. Floating-point kernels differ between CPUs,
  so the SFT model, and everything after it, differs in its low bits and then in its samples; the
  question is whether the rerun agrees with the committed copy within seed variance. Each evaluation
  cell group (method, tag, temperature, metric) is tested: Welch's t-test on the per-seed values of
  the two copies (seed variance on both sides), or, for a group with one seed on a side (the base
  model: one model, no seeds), a two-sided Fisher exact test on the pooled correct counts (problem
  sampling only). The p-values are Holm-adjusted over all groups (family-wise 5%); the report names
  the groups whose adjusted p is below it, or says "agrees".
- ``identical`` (``compare``): bitwise identity of tables, training metrics and per-prompt counts. It
  holds on the machine that produced the copy (one torch thread, seeded), not across machines.
"""

from __future__ import annotations

import json
import logging
import math
import shutil
from pathlib import Path
from typing import Any

from pspo_repro.evaluation.cells import cell_files, cell_name

log = logging.getLogger("pspo_repro.mini")

COMMITTED = "committed"  # under <root>/work/
# What the comparison reads: the numbers, not provenance (git SHA, versions, paths) or timings.
TABLES = ("main_reward_acc.csv", "main_true_acc.csv", "temperature_reward_acc.csv",
          "temperature_true_acc.csv", "alpha_ablation.csv")  # fmt: skip
CELL_KEYS = ("metrics", "per_prompt")
AGREEMENT_METRICS = ("reward_acc", "true_acc")  # the main and temperature tables' metrics
FAMILY_ALPHA = 0.05  # family-wise error rate of the agreement test (Holm over all cell groups)
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

    def cells_on_either_side() -> list[Path]:
        return sorted({p.relative_to(tree) for tree in (old, new) for p in cell_files(tree / "eval")})

    groups = {
        "tables": [Path(t) for t in TABLES if (old / t).is_file() or (new / t).is_file()],
        "runs": on_either_side("runs/**/metrics.jsonl"),
        "cells": cells_on_either_side(),
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


def _cell_groups(tree: Path, metrics: tuple[str, ...]) -> dict[tuple, dict[int, tuple[float, float, float]]]:
    """``{(model, method, tag, dataset, T, metric): {seed: (value, correct, total)}}`` from ``tree/eval``."""
    out: dict[tuple, dict[int, tuple[float, float, float]]] = {}
    for path in cell_files(tree / "eval"):
        try:
            d = json.loads(path.read_text())
            key = (d["model"], d["method"], d.get("tag") or "", d["dataset"], float(d["temperature"]))
            seed, n = int(d["seed"]), int(d["num_prompts"]) * int(d.get("n_samples") or 1)
        except (OSError, ValueError, KeyError, TypeError):
            continue  # an unreadable cell is reported by compare() as different or missing
        for metric in metrics:
            value = (d.get("metrics") or {}).get(metric)
            if isinstance(value, int | float) and math.isfinite(value):
                out.setdefault((*key, metric), {})[seed] = (float(value), round(value * n), float(n))
    return out


def _group_p(a: dict[int, tuple], b: dict[int, tuple]) -> tuple[float, str]:
    """Two-sided p-value that two copies of one cell group have the same mean, and the test used."""
    import numpy as np
    import scipy.stats

    va, vb = np.array([v[0] for v in a.values()]), np.array([v[0] for v in b.values()])
    if len(va) >= 2 and len(vb) >= 2:
        if va.std() == 0 and vb.std() == 0:  # Welch is undefined; equal constants agree, others do not
            return (1.0 if va.mean() == vb.mean() else 0.0), "welch"
        return float(scipy.stats.ttest_ind(va, vb, equal_var=False).pvalue), "welch"
    ca, ta = sum(v[1] for v in a.values()), sum(v[2] for v in a.values())
    cb, tb = sum(v[1] for v in b.values()), sum(v[2] for v in b.values())
    table = [[int(ca), int(ta - ca)], [int(cb), int(tb - cb)]]
    return float(scipy.stats.fisher_exact(table).pvalue), "fisher"


def agreement(
    old: Path, new: Path, metrics: tuple[str, ...] = AGREEMENT_METRICS, alpha: float = FAMILY_ALPHA
) -> dict[str, Any]:
    """Whether ``new`` agrees with ``old`` within seed variance, per evaluation cell group (module doc).

    Returns ``{"groups", "disagree": [{"cell", "old", "new", "p_holm", "test"}], "only_one_side",
    "min_p_holm", "alpha"}``; ``old``/``new`` are the group means over seeds.
    """
    ga, gb = _cell_groups(old, metrics), _cell_groups(new, metrics)
    keys = sorted(set(ga) & set(gb))
    tested = [(k, *_group_p(ga[k], gb[k])) for k in keys]
    # Holm step-down: the i-th smallest p times (m - i), made monotone, capped at 1.
    order = sorted(range(len(tested)), key=lambda i: tested[i][1])
    adjusted, running = [1.0] * len(tested), 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (len(tested) - rank) * tested[i][1]))
        adjusted[i] = running
    disagree = []
    for (key, _, test), p_holm in zip(tested, adjusted, strict=True):
        if p_holm < alpha:
            model, method, tag, dataset, temp, metric = key
            mean = lambda g: sum(v[0] for v in g.values()) / len(g)  # noqa: E731
            disagree.append({
                "cell": f"{model}/{method}{'-' + tag if tag else ''}/{dataset}/{cell_name(temp)}/{metric}",
                "old": round(mean(ga[key]), 4), "new": round(mean(gb[key]), 4),
                "p_holm": round(p_holm, 5), "test": test,
            })  # fmt: skip
    only = sorted("/".join(map(str, k)) for k in set(ga) ^ set(gb))
    return {
        "groups": len(tested),
        "disagree": disagree,
        "only_one_side": only,
        "min_p_holm": round(min(adjusted), 5) if adjusted else None,
        "alpha": alpha,
    }


def describe_agreement(report: dict[str, Any]) -> str:
    """One line: "agrees ..." or the cell groups that do not (the cross-machine statement)."""
    if not report["groups"]:
        return "agreement with the committed copy: no evaluation cells in common"
    head = (
        f"{report['groups']} cell groups; Welch t over seeds, Fisher exact for the one-model base, "
        f"Holm {report['alpha']:g}"
    )
    if not report["disagree"] and not report["only_one_side"]:
        return f"agrees with the committed copy within seed variance ({head}; smallest adjusted p {report['min_p_holm']})"
    parts = []
    if report["disagree"]:
        cells = ", ".join(f"{d['cell']} {d['old']:.3f}->{d['new']:.3f}" for d in report["disagree"][:6])
        more = " ..." if len(report["disagree"]) > 6 else ""
        parts.append(f"{len(report['disagree'])} disagree ({cells}{more})")
    if report["only_one_side"]:
        parts.append(f"{len(report['only_one_side'])} on one side only")
    return f"does NOT agree with the committed copy ({head}): " + "; ".join(parts)


def describe(report: dict[str, Any]) -> str:
    """One line for the final summary: bitwise identity (a same-machine statement)."""
    same = ", ".join(f"{n} {kind}" for kind, n in report["identical"].items())
    if not report["different"] and not report["missing"]:
        return f"bitwise identical to the committed copy: {same} (same-machine check)"
    parts = [f"identical: {same}"]
    if report["different"]:
        shown = ", ".join(report["different"][:5]) + (" ..." if len(report["different"]) > 5 else "")
        parts.append(f"{len(report['different'])} differ ({shown})")
    if report["missing"]:
        parts.append(f"{len(report['missing'])} on one side only")
    return "not bitwise identical to the committed copy (expected on another machine): " + "; ".join(parts)
