"""Reproduction report: our numbers next to the paper's published ones (``results/paper_reference.csv``).

The reference CSV has one row per published number: ``kind=value`` is an accuracy cell,
``kind=difference`` a published gap (``method`` minus ``versus``, in points). Values are in
percent, as the paper prints them; ``source`` says where each number comes from, the optional ``set``
which evaluation rows it is compared on (shown with the source) and ``evidence`` the paper's sentence
that fixes the metric.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pandas as pd

from pspo_repro.analysis.results_io import ResultsError
from pspo_repro.analysis.stats import Interval
from pspo_repro.analysis.tables import Names

REFERENCE_COLUMNS = (
    "model",
    "method",
    "dataset",
    "metric",
    "temperature",
    "value",
    "kind",
    "versus",
    "source",
)

Lookup = Callable[[str, str, str, str, float], "tuple[Interval, tuple[int, ...]] | None"]


def load_reference(path: Path) -> pd.DataFrame:
    """Read and check the paper's reference numbers."""
    try:
        ref = pd.read_csv(path, dtype={"versus": str, "note": str}, keep_default_na=False, na_values=[""])
    except (OSError, pd.errors.ParserError) as exc:
        raise ResultsError(f"{path}: cannot read the paper reference ({exc})") from exc
    missing = [c for c in REFERENCE_COLUMNS if c not in ref.columns]
    if missing:
        raise ResultsError(f"{path}: missing column(s) {', '.join(missing)}")
    bad = ref[~ref["kind"].isin(["value", "difference"])]
    if not bad.empty:
        raise ResultsError(f"{path}: kind must be 'value' or 'difference', got {sorted(set(bad['kind']))}")
    return ref


def _fmt(iv: Interval) -> str:
    text = f"{iv.mean * 100:.1f}"
    return text + (f" [{iv.low * 100:.1f}, {iv.high * 100:.1f}]" if iv.has_interval else "")


def reproduction_report(ref: pd.DataFrame, lookup: Lookup, names: Names, ci_text: str, source: Path) -> str:
    """Markdown: ours, the paper's and the difference for every shared cell; then what we have not run."""
    done, missing = [], []
    for r in ref.to_dict("records"):
        temp = float(r["temperature"])
        if isinstance(r.get("set"), str) and r["set"]:  # the evaluation rows the number is compared on
            r["source"] = f"{r['source']}; {r['set']}"
        ours = lookup(r["model"], r["method"], r["dataset"], r["metric"], temp)
        method = names.method(r["method"])
        if r["kind"] == "difference":
            other = lookup(r["model"], r["versus"], r["dataset"], r["metric"], temp)
            method = f"{method} − {names.method(r['versus'])}"
        label = (names.model(r["model"]), method, names.dataset(r["dataset"]), r["metric"], f"{temp:g}")
        if ours is None or (r["kind"] == "difference" and other is None):
            missing.append((*label, r["value"], r["source"]))
            continue
        if r["kind"] == "difference":
            value = (ours[0].mean - other[0].mean) * 100
            ours_text, n = f"{value:+.1f}", f"{len(ours[1])} / {len(other[1])}"
        else:
            value = ours[0].mean * 100
            ours_text, n = _fmt(ours[0]), str(len(ours[1]))
        done.append((*label, ours_text, n, f"{r['value']:g}", f"{value - r['value']:+.1f}", r["source"]))
    lines = [
        "# Reproduction report",
        "",
        f"Our values: {ci_text}; in percent (points for differences). Paper values from `{source.name}`.",
        "",
    ]
    if done:
        lines += [
            "| Model | Method | Dataset | Metric | T | Ours | Seeds | Paper | Ours − paper | Source |",
            "|:---|:---|:---|:---|---:|---:|---:|---:|---:|:---|",
        ]
        lines += ["| " + " | ".join(row) + " |" for row in done]
    else:
        lines.append("No cell the paper reports has been run yet.")
    lines += ["", "## Published cells not run here", ""]
    if missing:
        lines += [
            f"- {m} / {me} / {ds} / {metric} / T={t}: paper {v:g} ({src})"
            for m, me, ds, metric, t, v, src in missing
        ]
    else:
        lines.append("None: every published cell has a reproduction.")
    return "\n".join(lines) + "\n"
