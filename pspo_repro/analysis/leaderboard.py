"""The policy-loss leaderboard: every method under one token budget, with intervals and what separates them.

``python -m pspo_repro.leaderboard results_dir=<root> out_dir=<root> [tag=] [offpolicy_tag=<tag>]
[reference=clip] [alpha=0.05]``

Reads the evaluation cells and training runs under ``results_dir`` (``make leaderboard`` writes them:
conf/leaderboard.yaml) and writes ``leaderboard.md``, ``leaderboard.csv`` and ``leaderboard.png`` into
``out_dir``. One table per regime: the runs tagged ``tag`` (the learning regime, untagged by default) and,
when given, those tagged ``offpolicy_tag`` (rollout reuse). Per method, every number from the records:

- true and reward-style accuracy on the rewarded task's test split at T = 0 and T = 0.8: mean over seeds
  with a Student t interval over seeds; a proportion's interval is clipped to [0, 100] and marked;
- the gain over the base model (the ``baseline`` cell), greedy true accuracy, per seed, t interval;
- preservation: the held-out skill's greedy true accuracy minus the base model's (when its cells exist);
- against the reference method (GRPO-clip): the per-prompt paired difference in greedy true accuracy
  (each prompt averaged over seeds), its bootstrap interval and paired t-test, the p-values Holm-adjusted
  over the methods of the regime; ``=`` marks a method that cannot be told apart from the reference
  at level ``alpha``, ``>``/``<`` one that is better/worse;
- tokens without gradient (``method/zero_grad_frac``, mean over optimizer steps) and the KL from the
  behaviour policy (``train/behaviour_kl``, mean over the steps that reuse a rollout), from metrics.jsonl;
- collapses: seeds whose final greedy true accuracy is not above the base model's, or whose training
  reward in the last quarter of steps fell below half of the first steps' (``regime.run_stats``).

Methods are sorted by greedy true accuracy. A method added to the registry appears with no edit here.
"""

from __future__ import annotations

import csv
import json
import math
import sys
from pathlib import Path
from typing import Any

import pandas as pd

from pspo_repro.analysis.claims import ClaimsError, Records
from pspo_repro.analysis.regime import folder_stats, mean_finite
from pspo_repro.analysis.results_io import prompt_values
from pspo_repro.analysis.stats import Interval, clip_interval, paired_comparison, t_interval
from pspo_repro.analysis.tables import CLIPPED
from pspo_repro.common.atomic import atomic_open
from pspo_repro.common.cli import parse_key_values, run_writer

DATASET = "synthetic"  # the rewarded task
HELDOUT = "synthetic_heldout"  # the held-out skill (never rewarded)
TEMPERATURES = (0.0, 0.8)
METRICS = ("true_acc", "reward_acc")
GROUP_TEXT = {"=": "cannot be told apart from", ">": "better than", "<": "worse than", "ref": "reference"}


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


def _base(rec: Records, dataset: str) -> float | None:
    cells = _values(rec, "baseline", "", dataset, 0.0, "true_acc")
    return float(cells["value"].iloc[0]) if len(cells) else None


def _run_rows(rec: Records, method: str, tag: str) -> list[dict[str, Any]]:
    """Regime statistics of each finished run of (method, tag), from its metrics.jsonl and run.json."""
    runs = rec.runs
    if runs.empty:
        return []
    sel = runs[(runs["method"] == method) & (runs["tag"] == tag) & (runs["status"] == "finished")]
    out = []
    for r in sel.sort_values("seed").to_dict("records"):
        folder = Path(r["run_dir"])
        info = json.loads((folder / "run.json").read_text())
        out.append(
            {"seed": int(r["seed"]), **folder_stats(folder, info), "hyperparameters": _hyperparameters(info)}
        )
    return out


def _hyperparameters(info: dict[str, Any]) -> str:
    """The method settings a run trained with (run.json's config.method), as ``key=value`` text."""
    method = dict(info.get("config", {}).get("method") or {})
    method.pop("name", None)
    return ", ".join(f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}" for k, v in sorted(method.items()))


def regime_rows(
    rec: Records, tag: str, reference: str, confidence: float, alpha: float
) -> list[dict[str, Any]]:
    """One row per method of the runs tagged ``tag``: the leaderboard's numbers (module docstring)."""
    from statsmodels.stats.multitest import multipletests

    e = rec.evals
    if e.empty:
        raise ValueError(f"no evaluation cells under {rec.root / 'eval'}")
    sel = e[(e["tag"] == tag) & (e["dataset"] == DATASET) & (e["method"] != "baseline")]
    methods = sorted(set(sel["method"]))
    if not methods:
        raise ValueError(f"no evaluation cells of runs tagged {tag!r} on {DATASET} under {rec.root / 'eval'}")
    base, base_held = _base(rec, DATASET), _base(rec, HELDOUT)
    ref_cells = _values(rec, reference, tag, DATASET, 0.0, "true_acc")
    rows = []
    for method in methods:
        row: dict[str, Any] = {"tag": tag, "method": method}
        for metric in METRICS:
            for temp in TEMPERATURES:
                seeds = _per_seed(_values(rec, method, tag, DATASET, temp, metric))
                row[f"{metric}_T{temp:g}"] = _interval(list(seeds.values()), confidence)
        greedy_cells = _values(rec, method, tag, DATASET, 0.0, "true_acc")  # the gain, collapses, the test
        greedy = _per_seed(greedy_cells)
        row["n_seeds"] = len(greedy)
        row["gain"] = _interval([v - base for v in greedy.values()], confidence) if base is not None else None
        held = _per_seed(_values(rec, method, tag, HELDOUT, 0.0, "true_acc"))
        row["preservation"] = (
            _interval([v - base_held for v in held.values()], confidence) if base_held is not None else None
        )
        runs = _run_rows(rec, method, tag)
        row["zero_grad"] = mean_finite([r["zero_grad"] for r in runs])
        row["behaviour_kl"] = mean_finite([r["behaviour_kl"] for r in runs])
        fell = {r["seed"] for r in runs if r["reward_fell"]}
        lost = {s for s, v in greedy.items() if base is not None and v <= base}
        row["collapsed"] = len(fell | lost)
        row["hyperparameters"] = runs[0]["hyperparameters"] if runs else ""
        row["paired"] = None
        if method != reference and len(ref_cells) and greedy:
            row["paired"] = paired_comparison(
                prompt_values(greedy_cells), prompt_values(ref_cells), confidence
            )
        rows.append(row)
    tested = [r for r in rows if r["paired"] is not None and not math.isnan(r["paired"].p_value)]
    if tested:
        adjusted = multipletests([r["paired"].p_value for r in tested], alpha=alpha, method="holm")[1]
        for r, p in zip(tested, adjusted, strict=True):
            r["p_holm"] = float(p)
            r["group"] = "=" if p >= alpha else (">" if r["paired"].diff > 0 else "<")
    for r in rows:
        r.setdefault("p_holm", math.nan)
        r.setdefault("group", "ref" if r["method"] == reference else "")
    rows.sort(key=lambda r: (-_mean_of(r["true_acc_T0"]), r["method"]))
    for rank, r in enumerate(rows, 1):
        r["rank"] = rank
    return rows


def _mean_of(iv: Interval | None) -> float:
    return iv.mean if iv is not None else -math.inf


# ---------------------------------------------------------------- formatting


def _pct(iv: Interval | None, signed: bool = False) -> str:
    """``31.2 [24.0, 38.4]`` in percent; a proportion's interval is cut at [0, 100] and marked ``§``."""
    if iv is None:
        return "-"
    f = (lambda x: f"{100 * x:+.1f}") if signed else (lambda x: f"{100 * x:.1f}")
    if not iv.has_interval:
        return f"{f(iv.mean)} (1 seed)"
    if not signed:
        iv = clip_interval(iv, 0.0, 1.0)
    return f"{f(iv.mean)} [{f(iv.low)}, {f(iv.high)}]" + (CLIPPED if iv.clipped else "")


def _num(x: float, pct: bool = False, digits: int = 4) -> str:
    if x is None or not math.isfinite(x):
        return "-"
    return f"{100 * x:.2f}" if pct else f"{x:.{digits}f}"


def _versus(r: dict[str, Any]) -> str:
    p = r["paired"]
    if p is None:
        return "-"
    return f"{100 * p.diff:+.1f} [{100 * p.low:+.1f}, {100 * p.high:+.1f}], p = {r['p_holm']:.2g}"


def regime_markdown(
    rows: list[dict[str, Any]], title: str, reference: str, base: float | None, alpha: float
) -> str:
    """One regime's table under its caption (percent; intervals over seeds)."""
    n = {r["n_seeds"] for r in rows}
    seeds = "/".join(str(s) for s in sorted(n))
    same = [r["method"] for r in rows if r["group"] == "="]
    better = [r["method"] for r in rows if r["group"] == ">"]
    worse = [r["method"] for r in rows if r["group"] == "<"]
    base_text = "-" if base is None else f"{100 * base:.1f}"
    lines = [
        f"### {title}",
        "",
        f"{len(rows)} methods, {seeds} seeds each; base model (SFT) greedy true accuracy {base_text}%. "
        f"Against {reference} on the same prompts (greedy true accuracy, Holm-adjusted over {len(rows) - 1} "
        f"comparisons, level {alpha:g}): {len(same)} cannot be told apart, {len(better)} better"
        + (f" ({', '.join(better)})" if better else "")
        + f", {len(worse)} worse"
        + (f" ({', '.join(worse)})" if worse else "")
        + ".",
        "",
        "| # | Method | vs " + reference + " | True acc. T=0 | True acc. T=0.8 | Reward-style T=0 | "
        "Reward-style T=0.8 | Gain over base (true, T=0) | Held-out minus base | Per prompt vs "
        + reference
        + " (pp), Holm p | Zero-grad tokens % | KL(old\\|\\|new) | Collapsed |",
        "|---:|:---|:---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r['rank']} | {r['method']} | {r['group']} | {_pct(r['true_acc_T0'])} | {_pct(r['true_acc_T0.8'])} | "
            f"{_pct(r['reward_acc_T0'])} | {_pct(r['reward_acc_T0.8'])} | {_pct(r['gain'], True)} | "
            f"{_pct(r['preservation'], True)} | {_versus(r)} | {_num(r['zero_grad'], pct=True)} | "
            f"{_num(r['behaviour_kl'])} | {r['collapsed']}/{r['n_seeds']} |"
        )
    return "\n".join(lines) + "\n"


def markdown(
    regimes: list[tuple[str, list[dict[str, Any]]]], reference: str, base: float | None, alpha: float
) -> str:
    """The whole leaderboard: a caption, one table per regime, the hyperparameters each method ran with."""
    head = (
        "## Policy-loss leaderboard\n\n"
        "Every registered method under the same token budget on the mini's task and SFT base "
        "(pspo_repro/analysis/leaderboard.py; docs/leaderboard.md). Accuracies in percent: mean over seeds "
        "[95% Student t interval over seeds]; an interval cut at [0, 100] is marked `§`. Gain and held-out "
        "columns: per-seed differences from the base model, percentage points. Per prompt vs "
        f"{reference}: each prompt's greedy true accuracy averaged over seeds, mean difference [95% percentile "
        "bootstrap over prompts] and the paired t-test's p-value, Holm-adjusted within the table; vs column: "
        f"`=` cannot be told apart from {reference} at level {alpha:g}, `>` better, `<` worse. Zero-grad tokens: "
        "share of completion tokens whose gradient the method zeroes, mean over optimizer steps; KL: "
        "KL(pi_old || pi_theta) per token over the steps that reuse a rollout (`-`: none does). Collapsed: "
        "seeds whose final greedy true accuracy is not above the base's, or whose training reward fell below "
        "half of its start.\n"
    )
    parts = [head]
    for title, rows in regimes:
        parts.append(regime_markdown(rows, title, reference, base, alpha))
    params = {}
    for _, rows in regimes:
        for r in rows:
            params.setdefault(r["method"], r["hyperparameters"])
    parts.append(
        "### Hyperparameters (conf/method/<name>.yaml; each value's source is commented there)\n\n"
        "| Method | Settings (learning regime) |\n|:---|:---|\n"
        + "\n".join(f"| {m} | {params[m] or '-'} |" for m in sorted(params))
        + "\n"
    )
    return "\n".join(parts)


def csv_rows(regimes: list[tuple[str, list[dict[str, Any]]]]) -> list[dict[str, Any]]:
    """Flat rows (fractions, not percent) for leaderboard.csv."""
    out = []
    for title, rows in regimes:
        for r in rows:
            rec: dict[str, Any] = {"regime": title, "tag": r["tag"], "rank": r["rank"], "method": r["method"],
                                   "n_seeds": r["n_seeds"], "group_vs_reference": r["group"]}  # fmt: skip
            for key in (
                "true_acc_T0",
                "true_acc_T0.8",
                "reward_acc_T0",
                "reward_acc_T0.8",
                "gain",
                "preservation",
            ):
                iv = r[key]
                rec[key] = iv.mean if iv else math.nan
                rec[f"{key}_low"] = iv.low if iv else math.nan
                rec[f"{key}_high"] = iv.high if iv else math.nan
            p = r["paired"]
            rec["prompt_diff"] = p.diff if p else math.nan
            rec["prompt_diff_low"] = p.low if p else math.nan
            rec["prompt_diff_high"] = p.high if p else math.nan
            rec["p_value"] = p.p_value if p else math.nan
            rec["p_holm"] = r["p_holm"]
            for key in ("zero_grad", "behaviour_kl", "collapsed", "hyperparameters"):
                rec[key] = r[key]
            out.append(rec)
    return out


COLORS = {"ref": "tab:blue", "=": "tab:gray", ">": "tab:green", "<": "tab:red", "": "black"}


def figure(regimes: list[tuple[str, list[dict[str, Any]]]], base: float | None, reference: str):
    """Greedy true accuracy per method with its interval, one panel per regime, coloured by the test."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    n = max(len(rows) for _, rows in regimes)
    fig, axes = plt.subplots(1, len(regimes), figsize=(5.2 * len(regimes), 0.28 * n + 1.6), squeeze=False)
    for ax, (title, rows) in zip(axes[0], regimes, strict=True):
        for y, r in enumerate(reversed(rows)):
            iv = r["true_acc_T0"]
            if iv is None:
                continue
            low = max(iv.low, 0.0) if iv.has_interval else iv.mean
            high = min(iv.high, 1.0) if iv.has_interval else iv.mean
            ax.errorbar(100 * iv.mean, y, xerr=[[100 * (iv.mean - low)], [100 * (high - iv.mean)]], fmt="o",
                        color=COLORS.get(r["group"], "black"), ms=4, capsize=2)  # fmt: skip
        ax.set_yticks(range(len(rows)), [r["method"] for r in reversed(rows)], fontsize=8)
        if base is not None:
            ax.axvline(100 * base, color="k", ls=":", lw=1, label="base (SFT)")
        ax.set_xlabel("greedy true accuracy (%), 95% t interval over seeds")
        ax.set_title(title, fontsize=9)
    handles = [plt.Line2D([], [], color=c, marker="o", ls="", label=f"{GROUP_TEXT[g]} {reference}" if g != "ref" else reference)
               for g, c in COLORS.items() if g]  # fmt: skip
    axes[0][-1].legend(handles=handles, fontsize=7, loc="lower right")
    fig.tight_layout()
    return fig


def write(
    results_dir: Path, out_dir: Path, tag: str = "", offpolicy_tag: str | None = None,
    reference: str = "clip", alpha: float = 0.05,
) -> list[Path]:  # fmt: skip
    """Compute the leaderboard from ``results_dir``; write leaderboard.md/.csv/.png into ``out_dir``."""
    rec = Records.read(results_dir)
    regimes = [
        ("Learning regime" + (f" (tag {tag})" if tag else ""), regime_rows(rec, tag, reference, 0.95, alpha))
    ]
    if offpolicy_tag:
        title = f"Stale mini-batches (tag {offpolicy_tag})"
        regimes.append((title, regime_rows(rec, offpolicy_tag, reference, 0.95, alpha)))
    base = _base(rec, DATASET)
    md = markdown(regimes, reference, base, alpha)  # everything computed before anything is written
    rows = csv_rows(regimes)
    from pspo_repro.analysis.plots import render

    png = render(figure(regimes, base, reference))["png"]
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = [out_dir / "leaderboard.md", out_dir / "leaderboard.csv", out_dir / "leaderboard.png"]
    with atomic_open(paths[0], "w", encoding="utf-8") as fh:
        fh.write(md)
    with atomic_open(paths[1], "w", encoding="utf-8", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    with atomic_open(paths[2], "wb") as fh:
        fh.write(png)
    return paths


KEYS = ("results_dir", "out_dir", "tag", "offpolicy_tag", "reference", "alpha")


def main(argv: list[str] | None = None) -> int:
    """``python -m pspo_repro.leaderboard results_dir=... out_dir=... [tag=] [offpolicy_tag=] [reference=clip]
    [alpha=0.05]``; returns the exit code."""
    args = parse_key_values(sys.argv[1:] if argv is None else argv, KEYS, ("results_dir", "out_dir"))
    if isinstance(args, str):
        print(f"error: {args}", file=sys.stderr)
        return 2
    try:
        alpha = float(args.get("alpha") or 0.05)
    except ValueError:
        alpha = math.nan
    if not 0 < alpha < 1:
        print(f"error: alpha={args.get('alpha')!r} must be a number in (0, 1)", file=sys.stderr)
        return 2
    return run_writer(write, Path(args["results_dir"]), Path(args["out_dir"]), args.get("tag") or "",
                      args.get("offpolicy_tag") or None, args.get("reference") or "clip", alpha)  # fmt: skip
