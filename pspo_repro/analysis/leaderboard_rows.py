"""The leaderboard's rows: every method of one regime measured from the records (``measures.Records``), its
intervals, rank interval, equivalence class, run statistics and the Holm-adjusted paired test against the
regime's reference (the definitions: ``analysis.leaderboard``'s docstring, which renders these rows).
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from pspo_repro.analysis.claims_spec import ClaimsError
from pspo_repro.analysis.knobs import method_knobs, run_method_configs
from pspo_repro.analysis.measures import Records
from pspo_repro.analysis.ranking import equivalence_classes, rank_intervals
from pspo_repro.analysis.results_io import prompt_values
from pspo_repro.analysis.run_stats import StepNorms, mean_finite, rows_stats, step_norms
from pspo_repro.analysis.stats import Interval, holm, paired_comparison, t_interval

DATASET = "synthetic"  # the rewarded task
HELDOUT = "synthetic_heldout"  # the held-out skill (never rewarded)
TEMPERATURES = (0.0, 0.8)
METRICS = ("true_acc", "reward_acc")
SAME = "≡"  # the reference's own equivalence class


class UnknownReference(ValueError):
    """``reference=`` names no method of the records (a bad argument: exit 2)."""


@dataclass
class Regime:
    """One regime's table: its rows and what they were measured against."""

    title: str
    tag: str
    rows: list[dict[str, Any]]
    reference: str  # the method the comparisons are against
    reference_note: str  # why that one (the given reference= or the fallback, and its reason)
    classes: list[list[str]] = field(default_factory=list)  # equivalence classes of two or more
    learning_rates: list[str] = field(default_factory=list)


def _values(
    rec: Records, method: str, tag: str, dataset: str, temperature: float, metric: str
) -> pd.DataFrame:
    """The cells of one method (one per seed) for a metric, or an empty frame when there are none."""
    try:
        return rec.cells(
            {"method": method, "tag": tag, "dataset": dataset, "temperature": temperature}, metric
        )
    except ClaimsError:
        return pd.DataFrame()


def _per_seed(cells: pd.DataFrame) -> dict[int, float]:
    return (
        dict(zip(cells["seed"].astype(int), cells["value"].astype(float), strict=True)) if len(cells) else {}
    )


def _interval(values: list[float], confidence: float) -> Interval | None:
    return t_interval(values, confidence) if values else None


def base_accuracy(rec: Records, dataset: str) -> float | None:
    """The base model's greedy true accuracy on ``dataset`` (its ``baseline`` cell), or None without one."""
    cells = _values(rec, "baseline", "", dataset, 0.0, "true_acc")
    return float(cells["value"].iloc[0]) if len(cells) else None


def _finished(rec: Records, method: str, tag: str | None = None) -> list[dict[str, Any]]:
    """The finished runs of ``method`` (of ``tag``; every tag when None), sorted by tag and seed."""
    runs = rec.runs
    if runs.empty:
        return []
    sel = runs[(runs["method"] == method) & (runs["status"] == "finished")]
    if tag is not None:
        sel = sel[sel["tag"] == tag]
    return sel.sort_values(["tag", "seed"]).to_dict("records")


def _run_rows(rec: Records, method: str, tag: str) -> list[dict[str, Any]]:
    """Regime statistics of each finished run of (method, tag), from its metrics.jsonl and run.json as the
    one reader read them (``Records.run``)."""
    out = []
    runs = rec.runs
    if not runs.empty:  # a run left out of the statistics is named: no share moves without a word
        for r in runs[
            (runs["method"] == method) & (runs["tag"] == tag) & (runs["status"] != "finished")
        ].to_dict("records"):
            print(f"warning: {r['run_dir']}: status {r['status']}; left out of the leaderboard's run statistics "
                  "(finished runs only)", file=sys.stderr, flush=True)  # fmt: skip
    for r in _finished(rec, method, tag):
        run = rec.run(r["run_dir"])
        if note := run.norm_note():
            print(f"warning: {note}", file=sys.stderr, flush=True)
        limit = None if math.isinf(run.max_grad_norm) else run.max_grad_norm  # None: clipping off
        out.append({"seed": int(r["seed"]), **rows_stats(run.rows, run.max_grad_norm),
                    "norms": step_norms(run.rows, limit), "hyperparameters": _hyperparameters(run.info),
                    "learning_rate": ((run.info.get("config") or {}).get("trainer") or {}).get("learning_rate")})  # fmt: skip
    return out


def _hyperparameters(info: dict[str, Any]) -> str:
    """The method settings a run trained with (run.json's config.method), as ``key=value`` text."""
    method = dict((info.get("config") or {}).get("method") or {})
    method.pop("name", None)
    return ", ".join(f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}" for k, v in sorted(method.items()))


def _record(rec: Records, method: str, tag: str) -> dict[int, dict[tuple, tuple]]:
    """seed -> {(dataset, temperature, metric): per-prompt values}: what two methods must share to be one
    equivalence class."""
    out: dict[int, dict[tuple, tuple]] = {}
    for dataset in (DATASET, HELDOUT):
        for temp in TEMPERATURES:
            for metric in METRICS:
                cells = _values(rec, method, tag, dataset, temp, metric)
                if not len(cells):
                    continue
                for seed, values in zip(cells["seed"].astype(int), prompt_values(cells), strict=True):
                    out.setdefault(int(seed), {})[(dataset, temp, metric)] = tuple(sorted(values.items()))
    return out


def choose_reference(rows: list[dict[str, Any]], reference: str) -> tuple[str, str]:
    """The regime's reference and a caption line saying why: ``reference`` where it has cells and none of
    its seeds collapsed, otherwise the method with the best mean greedy true accuracy (``rows`` sorted
    by it, best first), naming the reason."""
    best = rows[0]["method"]
    given = next((r for r in rows if r["method"] == reference), None)
    if given is not None and given["collapsed"] == 0:
        return reference, f"the reference is {reference} (given; none of its seeds collapsed here)"
    why = (
        f"{reference} has no evaluation cells here"
        if given is None
        else f"{reference} collapsed here ({given['collapsed']} of {given['n_seeds']} seeds)"
    )
    return best, (
        f"{why}, so the reference is the method with the best mean greedy true accuracy here, {best} "
        f"(not the given {reference})"
    )


def regime_rows(
    rec: Records, tag: str, reference: str, confidence: float, alpha: float, title: str = ""
) -> Regime:
    """One row per method of the runs tagged ``tag``: the leaderboard's numbers (module docstring)."""
    e = rec.evals
    if e.empty:
        raise ValueError(f"no evaluation cells under {rec.root / 'eval'}")
    sel = e[(e["tag"] == tag) & (e["dataset"] == DATASET) & (e["method"] != "baseline")]
    methods = sorted(set(sel["method"]))
    if not methods:
        raise ValueError(f"no evaluation cells of runs tagged {tag!r} on {DATASET} under {rec.root / 'eval'}")
    base, base_held = base_accuracy(rec, DATASET), base_accuracy(rec, HELDOUT)
    rows, greedy_cells, lrs = [], {}, set()
    for method in methods:
        row: dict[str, Any] = {"tag": tag, "method": method}
        for metric in METRICS:
            for temp in TEMPERATURES:
                seeds = _per_seed(_values(rec, method, tag, DATASET, temp, metric))
                row[f"{metric}_T{temp:g}"] = _interval(list(seeds.values()), confidence)
        greedy_cells[method] = _values(rec, method, tag, DATASET, 0.0, "true_acc")
        greedy = _per_seed(greedy_cells[method])
        row["greedy"] = greedy
        row["n_seeds"] = len(greedy)
        row["gain"] = _interval([v - base for v in greedy.values()], confidence) if base is not None else None
        held = _per_seed(_values(rec, method, tag, HELDOUT, 0.0, "true_acc"))
        row["preservation"] = (
            _interval([v - base_held for v in held.values()], confidence) if base_held is not None else None
        )
        runs = _run_rows(rec, method, tag)
        row["zero_grad"] = mean_finite([r["zero_grad"] for r in runs])
        row["behaviour_kl"] = mean_finite([r["behaviour_kl"] for r in runs])
        row["norms"] = sum((r["norms"] for r in runs), StepNorms())
        lrs |= {f"{r['learning_rate']:g}" for r in runs if isinstance(r["learning_rate"], int | float)}
        fell = {r["seed"] for r in runs if r["reward_fell"]}
        lost = {s for s, v in greedy.items() if base is not None and v <= base}
        row["collapsed"] = len(fell | lost)
        row["hyperparameters"] = runs[0]["hyperparameters"] if runs else ""
        row["knobs"] = method_knobs(
            method, run_method_configs([rec.run(r["run_dir"]).info for r in _finished(rec, method)])
        )
        rows.append(row)
    rows.sort(key=lambda r: (-_mean_of(r["true_acc_T0"]), r["method"]))

    classes = [c for c in equivalence_classes({m: _record(rec, m, tag) for m in methods}) if len(c) > 1]
    labels = {m: class_label(i) for i, c in enumerate(classes) for m in c}
    ranked = {r["method"]: list(r["greedy"].values()) for r in rows if r["greedy"]}
    intervals = rank_intervals(ranked, labels, confidence)
    ref, note = choose_reference(rows, reference)
    ref_class = labels.get(ref)
    for r in rows:
        r["class"] = labels.get(r["method"], "")
        r["rank"] = intervals.get(r["method"])
        r["paired"] = None
        if r["method"] == ref:
            r["group"] = "ref"
        elif ref_class is not None and r["class"] == ref_class:
            r["group"] = SAME  # the same computation as the reference: nothing to test
        elif r["greedy"] and len(greedy_cells[ref]):
            r["paired"] = paired_comparison(
                prompt_values(greedy_cells[r["method"]]), prompt_values(greedy_cells[ref]), confidence
            )
    tested = [r for r in rows if r["paired"] is not None and not math.isnan(r["paired"].p_value)]
    if tested:
        adjusted = holm([r["paired"].p_value for r in tested])
        for r, p in zip(tested, adjusted, strict=True):
            r["p_holm"] = float(p)
            r["group"] = "=" if p >= alpha else (">" if r["paired"].diff > 0 else "<")
    for r in rows:
        r.setdefault("p_holm", math.nan)
        r.setdefault("group", "")
    return Regime(title, tag, rows, ref, note, classes, sorted(lrs))


def _mean_of(iv: Interval | None) -> float:
    return iv.mean if iv is not None else -math.inf


def class_label(i: int) -> str:
    """The label of a regime's ``i``-th equivalence class: A, B, ..., Z, then C27, C28, ..."""
    return chr(ord("A") + i) if i < 26 else f"C{i + 1}"
