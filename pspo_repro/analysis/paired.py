"""Paired comparison of two methods on the same prompts ("is PSPO better than clip?").

For each (model, dataset, temperature) where both methods have untagged cells, every prompt's value is
averaged over each method's seeds and the per-prompt differences A - B are summarised: mean difference,
a percentile bootstrap interval over prompts and a two-sided paired t-test (``stats.paired_comparison``).
Pairing removes the prompt-difficulty variance that separate intervals carry, so a difference can be
clear here while two per-method intervals overlap.
"""

from __future__ import annotations

import pandas as pd

from pspo_repro.analysis.results_io import ResultsError, prompt_values
from pspo_repro.analysis.stats import BOOTSTRAP_RESAMPLES, paired_comparison
from pspo_repro.analysis.tables import Names, ordered
from pspo_repro.analysis.units import PERCENT, Unit


def paired_frame(long: pd.DataFrame, metric: str, a: str, b: str, confidence: float) -> pd.DataFrame:
    """One row per (model, dataset, temperature) holding both methods' untagged cells for ``metric``."""
    sub = long[(long["metric"] == metric) & (long["tag"] == "") & long["method"].isin([a, b])]
    recs = []
    for (model, dataset, temp), grp in sub.groupby(["model", "dataset", "temperature"], sort=True):
        ga, gb = grp[grp["method"] == a].sort_values("seed"), grp[grp["method"] == b].sort_values("seed")
        if ga.empty or gb.empty:
            continue
        try:
            res = paired_comparison(prompt_values(ga), prompt_values(gb), confidence)
        except ValueError as exc:
            raise ResultsError(f"paired {a} vs {b}, {model}/{dataset}/T={temp:g}: {exc}") from None
        recs.append({
            "model": model, "dataset": dataset, "temperature": temp, "metric": metric,
            "method_a": a, "method_b": b, "mean_a": res.mean_a, "mean_b": res.mean_b, "diff": res.diff,
            "ci_low": res.low, "ci_high": res.high, "p_value": res.p_value, "n_prompts": res.n_prompts,
            "a_better": res.wins, "b_better": res.losses,
            "seeds_a": " ".join(str(s) for s in ga["seed"]), "seeds_b": " ".join(str(s) for s in gb["seed"]),
        })  # fmt: skip
    return pd.DataFrame(recs)


def paired_markdown(
    frame: pd.DataFrame, label: str, a: str, b: str, confidence: float, names: Names, unit: Unit = PERCENT
) -> str:
    """The comparison as a Markdown table in ``unit`` (percentage points for proportions), caption first."""
    pct = f"{confidence * 100:g}%"
    na, nb = names.method(a), names.method(b)
    points = "percentage points" if unit == PERCENT else unit.unit
    s, d = unit.scale, unit.digits
    caption = (
        f"**{label}: {na} minus {nb} on the same prompts ({points}). Each prompt's value is "
        f"averaged over each method's seeds; {pct} percentile bootstrap interval over prompts "
        f"({BOOTSTRAP_RESAMPLES} resamples) and a two-sided paired t-test on the per-prompt differences. "
        f"Untagged runs only. Prompts better / worse: where {na}'s per-prompt value is above / below {nb}'s.**"
    )
    lines = [
        caption,
        "",
        f"| Model | Dataset | T | {na} | {nb} | Difference [{pct} CI] | p | prompts | better / worse |",
    ]
    lines.append("|:---|:---|---:|---:|---:|---:|---:|---:|---:|")
    if frame.empty:
        return "\n".join([*lines, "", "No (model, dataset, temperature) has both methods."]) + "\n"
    frame = frame.assign(
        _m=frame["model"].map({m: i for i, m in enumerate(ordered(frame["model"], names.model_order))}),
        _d=frame["dataset"].map({d: i for i, d in enumerate(ordered(frame["dataset"], names.dataset_order))}),
    ).sort_values(["_m", "_d", "temperature"])
    for r in frame.to_dict("records"):
        lines.append(
            f"| {names.model(r['model'])} | {names.dataset(r['dataset'])} | {r['temperature']:g} | "
            f"{s * r['mean_a']:.{d}f} | {s * r['mean_b']:.{d}f} | {s * r['diff']:+.{d}f} "
            f"[{s * r['ci_low']:+.{d}f}, {s * r['ci_high']:+.{d}f}] | {r['p_value']:.3g} | {r['n_prompts']} | "
            f"{r['a_better']} / {r['b_better']} |"
        )
    return "\n".join(lines) + "\n"
