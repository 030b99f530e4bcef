"""Build the paper's tables from the long result tables and render them (Markdown, LaTeX, CSV).

A :class:`Table` holds intervals, not strings, so the three renderings cannot disagree and the
CSV keeps full precision. Seeds are never silently dropped: a cell with fewer seeds than
expected carries a dagger and is listed in the table's notes.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
import scipy.stats

from pspo_repro.analysis.results_io import (
    GROUP_KEYS,
    ResultsError,
    is_authors_metric,
    is_proportion,
    prompt_values,
)
from pspo_repro.analysis.stats import (
    BOOTSTRAP_RESAMPLES,
    CLIPPED,
    Interval,
    bootstrap_interval,
    clip_interval,
    seed_interval,
    t_interval,
)
from pspo_repro.analysis.units import unit_of, with_unit

SHORT = "†"  # fewer seeds than the table expects
NO_CI = "‡"  # one seed under t_seeds: no interval exists


@dataclass
class Cell:
    """One table cell: its interval, the seeds behind it and how many were expected."""

    interval: Interval
    seeds: tuple[int, ...]
    expected: int
    bold: bool = False

    @property
    def short(self) -> bool:
        """Fewer seeds than expected."""
        return len(self.seeds) < self.expected


@dataclass
class Table:
    """A rendered-later table: row labels (one tuple per row), column names and cells."""

    name: str
    caption: str
    row_header: list[str]
    columns: list[str]
    rows: list[tuple[tuple[str, ...], list[Cell | None]]]
    notes: list[str] = field(default_factory=list)
    scale: float = 100.0  # fractions shown as percentages
    digits: int = 1
    unit: str = "%"  # what a shown number is (``units.unit_of``); the CSV keeps the unscaled value


@dataclass
class Names:
    """Display names and orderings from the aggregate config."""

    models: Mapping[str, str]
    methods: Mapping[str, str]
    datasets: Mapping[str, str]
    model_order: Sequence[str]
    method_order: Sequence[str]
    dataset_order: Sequence[str]

    def model(self, key: str) -> str:
        """Display name of a model key (the key itself if unnamed)."""
        return self.models.get(key, key)

    def method(self, key: str, tag: str = "") -> str:
        """Display name of a method key, with ``[tag]`` for non-default hyperparameters."""
        name = self.methods.get(key, key)
        return f"{name} [{tag}]" if tag else name

    def dataset(self, key: str) -> str:
        """Display name of a dataset key (the key itself if unnamed)."""
        return self.datasets.get(key, key)


def ordered(values: Iterable, preferred: Sequence) -> list:
    """Unique ``values``: those in ``preferred`` first, in that order, then the rest sorted."""
    values = list(dict.fromkeys(values))
    rank = {v: i for i, v in enumerate(preferred)}
    return sorted(values, key=lambda v: (0, rank[v], "") if v in rank else (1, 0, str(v)))


def row_order(keys: Iterable[tuple[str, str, str]], names: Names) -> list[tuple[str, str, str]]:
    """Order (model, method, tag) rows: models by config, the baseline first, then config order."""
    keys = list(dict.fromkeys(keys))
    models = ordered((k[0] for k in keys), names.model_order)
    methods = ordered((k[1] for k in keys), ["baseline", *names.method_order])
    m_rank, me_rank = {m: i for i, m in enumerate(models)}, {m: i for i, m in enumerate(methods)}
    return sorted(keys, key=lambda k: (m_rank[k[0]], me_rank[k[1]], k[2] != "", k[2]))


def expected_for(method: str, expected_seeds: int, by_method: Mapping[str, int]) -> int:
    """Seeds a cell of ``method`` should have (the untrained baseline has one by design)."""
    return int(by_method.get(method, expected_seeds))


def seed_counts(stats: Mapping[tuple, tuple[Interval, tuple[int, ...]]], names: Names) -> dict[str, set[int]]:
    """Row label (method [tag]) -> the seed counts of its cells, from ``cell_intervals``' output."""
    out: dict[str, set[int]] = {}
    for key, (_, seeds) in stats.items():
        out.setdefault(names.method(key[1], key[2]), set()).add(len(seeds))
    return out


def _t_value(n: int, confidence: float) -> float:
    return float(scipy.stats.t.ppf((1 + confidence) / 2, n - 1))


def seeds_text(ci: str, confidence: float, counts: Mapping[str, Iterable[int]]) -> str:
    """ "n = 3 seeds per cell, t = 4.303; Base model: 1 seed, no interval; GR-PSPO: 10 seeds, t = 2.262":
    the seed count most rows have, then every other count with its rows, each with its own t (t_seeds)."""
    by_n: dict[int, list[str]] = {}
    for label, ns in counts.items():
        for n in sorted(set(ns)):
            by_n.setdefault(int(n), []).append(label)
    if not by_n:
        return "n = 0 seeds"

    def tail(n: int) -> str:
        if ci != "t_seeds":
            return ""
        return f", t = {_t_value(n, confidence):.3f}" if n > 1 else ", no interval"

    default = max(by_n, key=lambda n: (len(by_n[n]), n))
    parts = [f"n = {default} seed{'s' if default != 1 else ''} per cell{tail(default)}"]
    for n in sorted(by_n):
        if n != default:
            parts.append(f"{', '.join(by_n[n])}: {n} seed{'s' if n != 1 else ''}{tail(n)}")
    return "; ".join(parts)


def ci_caption(ci: str, confidence: float, counts: Mapping[str, Iterable[int]]) -> str:
    """Caption fragment naming the CI method and n: the seeds behind the cells of each row (``counts``: row
    label -> seed counts, ``seed_counts``), with the t quantile of each count under t_seeds."""
    n_text = seeds_text(ci, confidence, counts)
    pct = f"{confidence * 100:g}%"
    if ci == "t_seeds":
        return f"mean over seeds with {pct} Student t interval over per-seed means (ci=t_seeds, {n_text})"
    if ci == "bootstrap":
        return (
            f"mean over prompts (each averaged over its seeds) with {pct} percentile bootstrap interval over "
            f"prompts ({BOOTSTRAP_RESAMPLES} resamples; prompt-to-prompt variation, not seed-to-seed; "
            f"ci=bootstrap, {n_text})"
        )
    return (
        f"mean of per-prompt values pooled over seeds with {pct} Wilson interval, trials = prompts x seeds "
        f"(the authors' interval; successes = sum over seeds of mean x prompts rounded to a whole count, "
        f"half to even, and the mean shown = successes / trials, as their maths_plots.py pools; "
        f"ci=wilson_pooled, {n_text})"
    )


def clip_caption(table: Table, metric: str) -> str:
    """The caption sentence for cut intervals ("" when no cell of ``table`` was cut)."""
    if not any(c is not None and c.interval.clipped for _, cells in table.rows for c in cells):
        return ""
    return (
        f" {CLIPPED}: the interval reached past the range of {metric} ({unit_of(metric).range_text}) and is "
        "cut at it (a t interval is symmetric; the metric is not)."
    )


def wilson_refusal(metric: str) -> str:
    """The one-line reason ci=wilson_pooled refuses a metric that is not a proportion."""
    return (
        f"ci=wilson_pooled takes proportions only (accuracies, majority votes, maj@k, top-1, best-of-n, "
        f"pass@k); {metric!r} is not one: use ci=t_seeds or ci=bootstrap"
    )


def cell_intervals(
    long: pd.DataFrame, ci: str, confidence: float
) -> dict[tuple, tuple[Interval, tuple[int, ...]]]:
    """Interval and seeds per (model, method, tag, dataset, temperature) for one metric's rows, in the
    groups' sorted order, each group's rows by seed."""
    if long.empty:
        return {}
    # Positions of each group in a frame sorted by seed, read as arrays: building a DataFrame per group (pandas'
    # groupby iteration) and pandas' groupby ``indices`` cost far more than a dict over the key columns on a
    # metric's few hundred rows (the tables call this once per metric and interval kind). Rows with a missing
    # key are dropped, as groupby does.
    ordered = long.sort_values("seed", kind="stable")
    grouped: dict[tuple, list[int]] = {}
    for pos, key in enumerate(zip(*(ordered[k].tolist() for k in GROUP_KEYS), strict=True)):
        if not any(x is None or (isinstance(x, float) and math.isnan(x)) for x in key):
            grouped.setdefault(key, []).append(pos)
    groups = {key: np.array(pos) for key, pos in grouped.items()}
    values, seeds = ordered["value"].to_numpy(), ordered["seed"].to_numpy()
    metrics = ordered["metric"].to_numpy()
    all_prompts = ordered["prompts"].to_numpy(dtype=float) if ci == "wilson_pooled" else None
    out = {}
    for key in sorted(groups):
        pos = groups[key]
        metric, seed_ids = str(metrics[pos[0]]), tuple(int(s) for s in seeds[pos])
        if ci == "bootstrap":
            try:
                interval = bootstrap_interval(prompt_values(ordered.iloc[pos]), confidence)
            except ValueError as exc:
                raise ResultsError(f"ci=bootstrap: {exc}") from None
            out[key] = (clip_to_unit(interval, metric), seed_ids)
            continue
        if ci == "wilson_pooled" and not is_proportion(metric):
            raise ResultsError(wilson_refusal(metric))
        # The authors' pooled Wilson (maths_plots.py's _pooled_binom): per seed, the mean over prompts times
        # the prompts; their sum rounded is the count, trials = prompts x seeds. Samples of one prompt are
        # not independent trials, so they are not counted as such.
        prompts = all_prompts[pos] if all_prompts is not None else None
        interval = seed_interval(
            ci,
            values[pos],
            values[pos].astype(float) * prompts if ci == "wilson_pooled" else None,
            prompts,
            confidence,
        )
        out[key] = (clip_to_unit(interval, metric), seed_ids)
    return out


def clip_to_unit(interval: Interval, metric: str) -> Interval:
    """``interval`` cut to the range of ``metric`` (``units.unit_of``; ``clipped`` marks a cut)."""
    unit = unit_of(metric)
    return clip_interval(interval, unit.low, unit.high)


def mark_best(rows: list[tuple[tuple[str, ...], list[Cell | None]]], group_of: int = 0) -> None:
    """Bold the best mean per column within each group of rows (same label at ``group_of``)."""
    groups: dict[str, list[list[Cell | None]]] = {}
    for labels, cells in rows:
        groups.setdefault(labels[group_of], []).append(cells)
    for block in groups.values():
        if len(block) < 2:
            continue  # a lone row is not "best" of anything
        for j in range(len(block[0])):
            col = [cells[j] for cells in block if cells[j] is not None]
            if len(col) < 2:
                continue
            best = max(c.interval.mean for c in col)
            for c in col:
                c.bold = bool(np.isclose(c.interval.mean, best, rtol=0, atol=1e-12))


def short_notes(table_rows: list[tuple[tuple[str, ...], list[Cell | None]]], columns: list[str]) -> list[str]:
    """One line per cell with fewer seeds than expected: which seeds it has."""
    notes = []
    for labels, cells in table_rows:
        for col, cell in zip(columns, cells, strict=True):
            if cell is not None and cell.short:
                seeds = ", ".join(str(s) for s in cell.seeds)
                notes.append(
                    f"{SHORT} {' / '.join(labels)} / {col}: {len(cell.seeds)} of {cell.expected} "
                    f"expected seeds (seeds {seeds})"
                )
    return notes


def grid_table(
    long: pd.DataFrame,
    *,
    name: str,
    caption: str,
    row_keys: list[tuple],
    row_label,
    col_keys: list,
    col_label,
    lookup,
    ci: str,
    confidence: float,
    expected: Mapping[str, int],
    bold: bool,
    row_header: list[str],
) -> Table:
    """Shared builder: ``lookup(row_key, col_key)`` gives the interval key of a cell."""
    stats = cell_intervals(long, ci, confidence)
    rows = []
    for rk in row_keys:
        cells: list[Cell | None] = []
        for ck in col_keys:
            hit = stats.get(lookup(rk, ck))
            cells.append(None if hit is None else Cell(hit[0], hit[1], expected[rk[1]]))
        rows.append((row_label(rk), cells))
    if bold:
        mark_best(rows)
    columns = [col_label(ck) for ck in col_keys]
    return Table(name, caption, row_header, columns, rows, short_notes(rows, columns))


def rows_used(df: pd.DataFrame, datasets: Sequence[str], names: Names) -> str:
    """Caption sentence naming the evaluation rows behind each column (``prompts`` of the long table).

    An authors' metric is over the rows whose gold the authors' extractor parses (``prompts`` of ``rows``),
    so the sentence says how many rows each dataset used and why the rest are missing."""
    if "prompts" not in df:
        return ""
    metric = str(df["metric"].iloc[0]) if len(df) else ""
    if not (is_authors_metric(metric) and {"rows", "golds"} <= set(df.columns)):
        parts = []
        for ds in datasets:
            counts = sorted({int(n) for n in df.loc[df["dataset"] == ds, "prompts"].dropna()})
            parts.append(f"{names.dataset(ds)} {'/'.join(str(n) for n in counts)}")
        return f"Rows evaluated: {', '.join(parts)}."
    parts = []
    for ds in datasets:
        sub = df[df["dataset"] == ds]
        texts = []
        # Grouped by whether the golds were known, not where they were read.
        known = sub["golds"].fillna("").astype(bool).rename("known")
        for (used, rows, golds_known), _ in sub.groupby(["prompts", "rows", known], sort=True):
            text = f"{used} of {rows}"
            if not golds_known:
                text += " (golds not stored with the cells: no row could be dropped)"
            elif used < rows:
                text += f" ({rows - used} golds the authors' extractor cannot parse dropped)"
            texts.append(text)
        parts.append(f"{names.dataset(ds)} {'/'.join(texts)}")
    return (
        f"Rows used: {metric} over the rows whose gold the authors' extractor parses, as their maths_plots.py "
        f"drops the rest: {', '.join(parts)}."
    )


def main_table(
    long: pd.DataFrame,
    metric: str,
    label: str,
    temperature: float,
    ci: str,
    confidence: float,
    expected_seeds: int,
    by_method: Mapping[str, int],
    names: Names,
) -> Table | None:
    """The paper's Table 2 for one metric: rows model x method, columns datasets, at ``temperature``."""
    df = long[(long["metric"] == metric) & np.isclose(long["temperature"], temperature)]
    if df.empty:
        return None
    row_keys = row_order(zip(df["model"], df["method"], df["tag"], strict=True), names)
    datasets = ordered(df["dataset"], names.dataset_order)
    expected = {m: expected_for(m, expected_seeds, by_method) for m in df["method"].unique()}
    table = grid_table(
        df, name=f"main_{metric}", caption="", row_keys=row_keys,
        row_label=lambda rk: (names.model(rk[0]), names.method(rk[1], rk[2])),
        col_keys=datasets, col_label=names.dataset,
        lookup=lambda rk, ds: (*rk, ds, round(float(temperature), 6)),
        ci=ci, confidence=confidence, expected=expected, bold=True, row_header=["Model", "Method"],
    )  # fmt: skip
    return with_caption(
        table, metric, f"{with_unit(label, unit_of(metric))} at T = {temperature:g}", ci, confidence,
        f"Bold: best mean per column within each model. {SHORT}: fewer seeds than expected; "
        f"{NO_CI}: one seed, no interval.", rows_used(df, datasets, names),
    )  # fmt: skip


def with_caption(
    table: Table, metric: str, title: str, ci: str, confidence: float, marks: str, rows_text: str
) -> Table:
    """``table`` with the unit, scale and digits of ``metric`` (``units.unit_of``) and its caption: the
    ``title`` (``{unit}`` filled in), the CI method with the seeds of each row as the cells hold them
    (``seeds_text``), the ``marks`` and the sentence for intervals cut at the metric's range."""
    unit = unit_of(metric)
    table.unit, table.scale, table.digits = unit.unit, unit.scale, unit.digits
    counts: dict[str, set[int]] = {}
    for labels, cells in table.rows:
        counts.setdefault(labels[1], set()).update(len(c.seeds) for c in cells if c is not None)
    table.caption = (
        f"{title.format(unit=unit.unit)}: {ci_caption(ci, confidence, counts)}. {marks}"
        f"{clip_caption(table, metric)} {rows_text}"
    ).rstrip()
    return table


def temperature_table(
    long: pd.DataFrame,
    metric: str,
    label: str,
    ci: str,
    confidence: float,
    expected_seeds: int,
    by_method: Mapping[str, int],
    names: Names,
) -> Table | None:
    """Accuracy against sampling temperature: rows model x method x dataset, columns temperatures."""
    df = long[long["metric"] == metric]
    if df.empty:
        return None
    methods = row_order(zip(df["model"], df["method"], df["tag"], strict=True), names)
    datasets = ordered(df["dataset"], names.dataset_order)
    present = set(zip(df["model"], df["method"], df["tag"], df["dataset"], strict=True))
    row_keys = [(*rk, ds) for rk in methods for ds in datasets if (*rk, ds) in present]
    temps = sorted(df["temperature"].unique())
    expected = {m: expected_for(m, expected_seeds, by_method) for m in df["method"].unique()}
    table = grid_table(
        df, name=f"temperature_{metric}", caption="", row_keys=row_keys,
        row_label=lambda rk: (names.model(rk[0]), names.method(rk[1], rk[2]), names.dataset(rk[3])),
        col_keys=temps, col_label=lambda t: f"T={t:g}",
        lookup=lambda rk, t: (*rk, t),
        ci=ci, confidence=confidence, expected=expected, bold=False,
        row_header=["Model", "Method", "Dataset"],
    )  # fmt: skip
    return with_caption(
        table, metric, f"{with_unit(label, unit_of(metric))} against sampling temperature", ci, confidence,
        f"{SHORT}: fewer seeds than expected; {NO_CI}: one seed, no interval.", rows_used(df, datasets, names),
    )  # fmt: skip


def final_rewards(runs: pd.DataFrame, runs_long: pd.DataFrame, metric: str, step: int | None) -> pd.DataFrame:
    """Per run: ``metric`` at ``step`` (None: the run's last logged value of it) with that step."""
    df = runs_long[runs_long["metric"] == metric]
    if step is not None:
        df = df[df["step"] == step]
    last = df.sort_values("step").groupby("run_dir", sort=True).tail(1)
    return runs.merge(last[["run_dir", "step", "value"]], on="run_dir", how="inner")


def ablation_table(
    runs: pd.DataFrame,
    runs_long: pd.DataFrame,
    *,
    method: str,
    param: str,
    metric: str,
    step: int | None,
    confidence: float,
    expected_seeds: int,
    names: Names,
    ci: str,
    tag_prefix: str | None = None,
) -> tuple[Table | None, list[str]]:
    """The paper's Table 8: mean ``metric`` at the final step per ``param`` value, t interval over seeds.

    ``tag_prefix`` keeps only runs whose tag starts with it (the ablation's own runs, not the main runs or a
    hyperparameter search of the same method). Returns the table (None when no such runs exist) and notes
    about runs left out.
    """
    notes = []
    if runs.empty or param not in runs:
        return None, notes
    sel = runs[(runs["method"] == method) & runs[param].notna()]
    if tag_prefix:
        keep = sel["tag"].fillna("").astype(str).str.startswith(tag_prefix)
        if (~keep).any():
            notes.append(
                f"alpha ablation: {int((~keep).sum())} {method} run(s) with {param} left out: their tag does "
                f"not start with {tag_prefix!r} (ablation.tag_prefix)"
            )
        sel = sel[keep]
    unfinished = sel[sel["status"] != "finished"]
    for d in unfinished["run_dir"]:
        notes.append(f"alpha ablation: left out unfinished run {d}")
    final = final_rewards(sel[sel["status"] == "finished"], runs_long, metric, step)
    if final.empty:
        return None, notes
    rows = []
    for (model, value, tag), grp in final.groupby(["model", param, "tag"], sort=True):
        if grp["step"].nunique() > 1:
            # Averaging step 200 of one seed with step 250 of another compares different budgets.
            listing = "\n".join(f"  {d}: step {s}" for d, s in zip(grp["run_dir"], grp["step"], strict=True))
            raise ResultsError(
                f"final {metric} steps differ across seeds ({model}, {param}={value}):\n{listing}"
            )
        grp = grp.sort_values("seed")
        cell = Cell(t_interval(grp["value"].to_numpy(), confidence), tuple(int(s) for s in grp["seed"]),
                    expected_seeds)  # fmt: skip
        rows.append(((names.model(model), f"{value:g}", tag or "-", str(int(grp["step"].iloc[0]))), [cell]))
    models = ordered((r[0][0] for r in rows), [names.model(m) for m in names.model_order])
    rows.sort(key=lambda r: (models.index(r[0][0]), float(r[0][1]), r[0][2]))
    mark_best(rows)
    why = (
        " (a Wilson interval needs correct counts; validation reward is not a proportion)"
        if ci != "t_seeds"
        else ""
    )
    counts: dict[str, set[int]] = {}
    for labels, cells in rows:
        counts.setdefault(
            f"{param} = {labels[1]}" + (f" [{labels[2]}]" if labels[2] != "-" else ""), set()
        ).add(len(cells[0].seeds))
    caption = (
        f"{names.method(method)} {param} ablation"
        + (f" (runs tagged {tag_prefix}*)" if tag_prefix else "")
        + f": mean validation reward ({metric}) at "
        + (f"step {step}" if step is not None else "the final step")
        + ", "
        f"{confidence * 100:g}% Student t interval over seeds (t_seeds, {seeds_text('t_seeds', confidence, counts)}"
        + f"){why}. Bold: best per model. {SHORT}: fewer seeds than expected; {NO_CI}: one seed, no interval."
    )
    table = Table("alpha_ablation", caption, ["Model", param, "Tag", "Step"], ["Val. reward"], rows,
                  short_notes(rows, ["Val. reward"]), scale=1.0, digits=3, unit="validation reward")  # fmt: skip
    return table, notes
