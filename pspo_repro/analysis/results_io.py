"""Read the result trees (evaluation cells, training runs) into long pandas tables.

The file schemas are the contract in ``docs/architecture.md``; this module is the only reader of
them, so a schema change touches one place. Everything here is validation plus reshaping: a
result that is malformed, duplicated or inconsistent with its neighbours raises
:class:`ResultsError` naming the files, because a table built from it would be silently wrong.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from pspo_repro.analysis.cell_checks import cell_problem, location_problem
from pspo_repro.analysis.result_files import ResultsError, checked_files, read_json, utf8_names
from pspo_repro.analysis.run_records import run_dirs as run_dirs  # re-exported: aggregate reads it here
from pspo_repro.evaluation.cells import cell_files, completions_path, read_completions

# Identity of one evaluation cell file; two files with the same identity are an error.
CELL_KEYS = ("model", "method", "seed", "tag", "dataset", "temperature")
# A table cell pools seeds, so it is identified by the cell keys minus the seed.
GROUP_KEYS = ("model", "method", "tag", "dataset", "temperature")
# Settings that must agree within one table cell (otherwise the seeds measure different things).
# A cell written before eval.top_k existed has no ``top_k``: it sampled with no top-k filter (None).
MATCH_SETTINGS = (
    "max_new_tokens", "n_samples", "top_p", "top_k", "prompt_template", "rows_sha256", "num_prompts"
)  # fmt: skip
OPTIONAL_SETTINGS = {"top_k": None}
# Metrics whose per-prompt counts exist (correct samples out of samples: the long table's correct/total).
COUNT_METRICS = {"true_acc": "true_correct", "reward_acc": "reward_correct", "authors_acc": "authors_correct"}
# Proportions: per prompt a 0/1 or a share of its samples (accuracy, pass@k, majority votes, top-1,
# best-of-n), so a table value is a success rate and ci=wilson_pooled applies; the tables recompute
# them from the per-prompt rows. Not: mean_length, agreement, unique_answers, reward_corr, counts.
PROPORTION_RE = re.compile(r"(?:reward|true|authors)_(?:acc|maj|top1|best_of_n|pass@\d+)|maj@\d+")


_read_json, _utf8_names = read_json, utf8_names  # the names this module's readers have always used


def eval_files(root: Path) -> list[Path]:
    """Evaluation cell files under ``root/eval`` (sorted, so every output is deterministic); ResultsError
    when a name on the way is not UTF-8 or a symlink on the way leads out of ``root``."""
    return checked_files(lambda: cell_files(root / "eval"))


def _counts(cell: dict[str, Any], field: str, metric: str, path: Path) -> tuple[int, int]:
    """(correct samples, samples) for one metric; from ``per_prompt`` when present, else derived."""
    rows = cell.get("per_prompt") or []
    if rows:
        try:
            return int(sum(r[field] for r in rows)), int(sum(r["n"] for r in rows))
        except (KeyError, TypeError) as exc:
            raise ResultsError(f"{path}: per_prompt rows need 'n' and '{field}' ({exc})") from exc
    # Without per-prompt rows, the counts follow from the mean over num_prompts x n_samples samples.
    total = int(cell["num_prompts"]) * int(cell["n_samples"])
    return int(round(float(cell["metrics"][metric]) * total)), total


def load_eval_cells(root: Path, left_out: list[str] | None = None) -> pd.DataFrame:
    """One row per evaluation cell file: identity, settings, file path and raw metrics dict.

    A cell that fails ``cell_problem`` never reaches a table: with ``left_out`` given, one line naming the
    file and the reason is appended to it and the cell is skipped; without, ResultsError.
    """
    rows = []
    for path in eval_files(root):
        cell = _read_json(path)
        missing = [k for k in (*CELL_KEYS, *MATCH_SETTINGS, "metrics") if k not in cell]
        # an absent tag means default hyperparameters; an absent optional setting, its default
        missing = [k for k in missing if k != "tag" and k not in OPTIONAL_SETTINGS]
        if missing:
            raise ResultsError(f"{path}: missing field(s) {', '.join(missing)}")
        if cell.get("schema_version", 1) != 1:
            raise ResultsError(f"{path}: unsupported schema_version {cell.get('schema_version')!r}")
        recomputed: dict[str, float] = {}
        why = cell_problem(cell, recomputed)
        if why is not None:
            if left_out is None:
                raise ResultsError(f"{path}: {why}")
            left_out.append(f"{path}: {why}; left out of every table")
            continue
        row = {k: cell.get(k, OPTIONAL_SETTINGS.get(k)) for k in (*CELL_KEYS, *MATCH_SETTINGS)}
        row["tag"] = row["tag"] or ""
        row["seed"] = int(row["seed"])
        row["temperature"] = round(float(row["temperature"]), 6)
        row["file"] = str(path)
        # The tables show what the records give, never the stored cache (cell_problem compared the two).
        row["metrics"] = dict(sorted(recomputed.items()))  # as cells store them
        row["per_prompt"] = cell.get("per_prompt") or []  # for ci=bootstrap and paired comparisons
        row["provisional"] = cell.get("provisional")  # evaluate: a checkpoint asked for by name, unfinished
        row["foreign_checkpoint"] = cell.get("foreign_checkpoint")  # evaluate: allow_foreign_checkpoint=true
        for metric, field in COUNT_METRICS.items():
            if metric in row["metrics"]:
                row[f"{metric}__correct"], row[f"{metric}__total"] = _counts(cell, field, metric, path)
        row["misplaced"] = location_problem(path, root, cell)
        rows.append(row)
    cells = pd.DataFrame(rows)
    if cells.empty:
        return cells
    check_duplicates(cells)  # a copy of a cell in another folder is a duplicate, as before
    for path, why in zip(cells["file"], cells["misplaced"], strict=True):
        if isinstance(why, str):  # (None reads NaN in a column that holds text)
            if left_out is None:
                raise ResultsError(f"{path}: {why}")
            left_out.append(f"{path}: {why}; left out of every table")
    cells = cells[cells["misplaced"].isna()].drop(columns="misplaced").reset_index(drop=True)
    if not cells.empty:
        check_settings(cells)
    return cells


def checked_metrics(path: Path, root: Path) -> tuple[dict[str, float] | None, str | None]:
    """One cell file's metrics recomputed from its records, or (None, why) when the cell fails its checks
    (``cell_problem``, ``location_problem``): for readers of single cells (the regime tables)."""
    try:
        cell = _read_json(path)
        recomputed: dict[str, float] = {}
        why = cell_problem(cell, recomputed) or location_problem(path, root, cell)
    except (ResultsError, KeyError) as exc:
        return None, str(exc) if isinstance(exc, ResultsError) else f"missing field {exc}"
    return (None, why) if why else (recomputed, None)


def check_duplicates(cells: pd.DataFrame) -> None:
    """Raise if two files hold the same (model, method, seed, tag, dataset, temperature)."""
    dup = cells[cells.duplicated(list(CELL_KEYS), keep=False)]
    if dup.empty:
        return
    lines = []
    for key, grp in dup.groupby(list(CELL_KEYS), sort=True):
        ident = ", ".join(f"{k}={v}" for k, v in zip(CELL_KEYS, key, strict=True))
        lines.append(f"duplicate results for {ident}:\n" + "\n".join(f"  {f}" for f in grp["file"]))
    raise ResultsError("\n".join(lines))


def _setting_text(value: Any) -> str:
    """A setting as text for comparison: None and NaN (a missing value in a float column) read 'None'."""
    return "None" if value is None or (isinstance(value, float) and math.isnan(value)) else str(value)


def check_settings(cells: pd.DataFrame, settings: Sequence[str] = MATCH_SETTINGS) -> None:
    """Raise if the seeds of one table cell differ in a setting that must match, naming the files."""
    problems = []
    for key, grp in cells.groupby(list(GROUP_KEYS), sort=True):
        for setting in settings:
            # As text, one spelling for None/NaN: pandas' astype(str) keeps NaN missing, and nunique would
            # then not count a seed with no top-k beside one with top-k 50 as a difference.
            if grp[setting].map(_setting_text).nunique(dropna=False) > 1:
                ident = ", ".join(f"{k}={v}" for k, v in zip(GROUP_KEYS, key, strict=True))
                files = "\n".join(
                    f"  {f}: {setting}={v!r}" for f, v in zip(grp["file"], grp[setting], strict=True)
                )
                problems.append(f"{setting} differs within one cell ({ident}):\n{files}")
    if problems:
        raise ResultsError("\n".join(problems))


def is_proportion(metric: str) -> bool:
    """Whether ``metric`` is a success rate (``PROPORTION_RE``): the only kind ci=wilson_pooled takes."""
    return PROPORTION_RE.fullmatch(metric) is not None


def is_authors_metric(metric: str) -> bool:
    """Whether ``metric`` grades with the authors' reward, so it is taken over the rows they score."""
    return metric.startswith("authors_") and is_proportion(metric)


@functools.lru_cache(
    maxsize=1 << 16
)  # a prompt set's golds recur in every cell of it (~120,000 rows, ~100 golds)
def authors_gold_parses(gold: str) -> bool:
    """Whether the authors' extractor reads a number from ``gold``; their maths_plots.py ``load_runs``
    skips a prompt whose gold it cannot read (``continue``), so no metric of theirs counts it."""
    from pspo_repro.scoring.authors_reward import extract_final_answer

    return extract_final_answer(gold) is not None


def _golds_in_rows(rec: dict[str, Any]) -> dict[str, str] | None:
    """{prompt id: the gold string the authors' reward was given} from per-prompt ``authors_gold``
    fields, or None when the rows do not carry them (cells written before the field existed)."""
    rows = rec["per_prompt"]
    if not rows or not all("authors_gold" in r for r in rows):
        return None
    for i, r in enumerate(rows):
        if not isinstance(r["authors_gold"], str):
            raise ResultsError(
                f"{rec['file']}: per_prompt[{i}] authors_gold must be a string, got {r['authors_gold']!r}"
            )
    return {r["id"]: r["authors_gold"] for r in rows}


def _golds_in_completions(rec: dict[str, Any]) -> dict[str, str] | None:
    """{prompt id: gold string} from the completions file beside the cell (None when it is absent)."""
    path = completions_path(rec["file"])
    if not path.is_file():
        return None
    try:
        lines = read_completions(path)
    except (OSError, EOFError, ValueError) as exc:  # OSError: not gzip; ValueError: bad JSON or UTF-8
        raise ResultsError(f"{path}: cannot read the completions ({exc})") from None
    golds = {}
    for lineno, obj in enumerate(lines, 1):
        # The evaluator grades with `problem.authors_gold or problem.answer`: the same string here.
        gold = obj.get("authors_gold") or obj.get("gold") if isinstance(obj, dict) else None
        if not isinstance(gold, str) or "id" not in obj:
            raise ResultsError(f"{path}: line {lineno} needs 'id' and a gold string")
        golds[obj["id"]] = gold
    if list(golds) != [r["id"] for r in rec["per_prompt"]]:
        raise ResultsError(f"{path}: its prompt ids differ from those of {rec['file']}")
    return golds


def authors_rows(cells: pd.DataFrame) -> dict[tuple[str, str], tuple[frozenset[str] | None, str]]:
    """Per (dataset, rows_sha256): the ids of the rows whose gold the authors' extractor parses, and where
    the golds were read ("per-prompt authors_gold", or the completions file); (None, "") when no cell of
    that prompt set stores its golds, so no row can be dropped.

    One prompt set has one set of golds, so the per-prompt fields of every cell are checked against each
    other and a completions file is read only when no cell carries the fields, and then only the first
    one found (they are large). A row counted unscorable whose authors' reward ever exceeded 0.5 is a
    contradiction (their reward is 0 whenever the gold has no number): ResultsError naming the file.
    """
    out: dict[tuple[str, str], tuple[frozenset[str] | None, str]] = {}
    if cells.empty:
        return out
    recs = sorted(cells.to_dict("records"), key=lambda r: r["file"])
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for rec in recs:
        if rec["per_prompt"] and any(is_authors_metric(m) for m in rec["metrics"]):
            groups.setdefault((rec["dataset"], str(rec["rows_sha256"])), []).append(rec)
    for key, members in groups.items():
        found: tuple[frozenset[str] | None, str] = (None, "")
        for rec in members:
            golds = _golds_in_rows(rec)
            if golds is None:
                continue
            ids = frozenset(i for i, g in golds.items() if authors_gold_parses(g))
            if found[0] is not None and ids != found[0]:
                raise ResultsError(
                    f"{rec['file']}: its golds differ from other cells of {key[0]} with the same rows"
                )
            found = (ids, "per-prompt authors_gold")
        if found[0] is None:
            for rec in members:
                golds = _golds_in_completions(rec)
                if golds is not None:
                    ids = frozenset(i for i, g in golds.items() if authors_gold_parses(g))
                    found = (ids, f"the completions file beside {Path(rec['file']).name}")
                    break
        if found[0] is not None:
            for rec in members:
                bad = [
                    r["id"] for r in rec["per_prompt"] if r["id"] not in found[0] and r.get("authors_correct")
                ]
                if bad:
                    raise ResultsError(
                        f"{rec['file']}: prompt {bad[0]} has authors_correct > 0 but its gold has no number "
                        "the authors' extractor reads: the golds do not belong to this cell"
                    )
        out[key] = found
    return out


def metric_from_rows(rows: list[dict[str, Any]], metric: str, file: str) -> float:
    """A proportion metric of one cell from its per-prompt rows, as ``evaluation.metrics.cell_metrics``
    computes it: ``*_acc`` samples correct over samples, the others the mean over prompts."""
    from pspo_repro.evaluation.metrics import prompt_value

    try:
        if metric in COUNT_METRICS:
            return sum(r[COUNT_METRICS[metric]] for r in rows) / sum(r["n"] for r in rows)
        values = [prompt_value(r, metric) for r in rows]
    except (KeyError, TypeError, ValueError) as exc:
        raise ResultsError(f"{file}: per_prompt rows cannot give {metric} ({exc})") from None
    if any(v is None for v in values):
        raise ResultsError(f"{file}: per_prompt rows lack what {metric} needs, though the cell reports it")
    return float(np.nanmean(np.array(values, dtype=float)))


def eval_long(cells: pd.DataFrame) -> pd.DataFrame:
    """The long table: one row per (model, method, tag, seed, dataset, temperature, metric).

    Every value is what the cell's per-prompt rows give (``load_eval_cells`` recomputed each metric from
    them; the stored cache is only compared). An authors' metric (``is_authors_metric``) keeps only the
    rows whose gold the authors' extractor parses (``authors_rows``), as their tables do, and a proportion
    (``is_proportion``) is recomputed from those rows; ``golds`` says where those golds were read ("" when
    no cell stores them: every row kept; None for other metrics).
    ``prompts`` is the rows used (the authors' Wilson trials per seed), ``rows`` the rows evaluated;
    ``correct``/``total`` the sample counts behind the accuracies (NaN for others); ``per_prompt``
    references the rows used (not copied; drop it before writing a CSV).
    """
    cols = [
        *CELL_KEYS,
        "metric",
        "value",
        "correct",
        "total",
        "prompts",
        "rows",
        "golds",
        "file",
        "per_prompt",
    ]
    scorable = authors_rows(cells)
    rows = []
    for rec in cells.to_dict("records"):
        all_rows = rec.get("per_prompt") or []
        for metric, value in rec["metrics"].items():
            if not isinstance(value, int | float) or isinstance(value, bool):
                continue  # nested or textual metrics have no place in a numeric table
            used, golds = all_rows, None
            if all_rows and is_authors_metric(metric):
                ids, golds = scorable[(rec["dataset"], str(rec["rows_sha256"]))]
                used = all_rows if ids is None else [r for r in all_rows if r["id"] in ids]
                if not used:
                    continue  # no row the authors' extractor can score: no value to show
            if used is not all_rows and is_proportion(metric):
                # The authors' subset of the rows. Over all of them, ``value`` is already what the records
                # give: load_eval_cells recomputed every metric from them (cell_metrics, the same sums).
                value = metric_from_rows(used, metric, rec["file"])
            correct, total = rec.get(f"{metric}__correct", math.nan), rec.get(f"{metric}__total", math.nan)
            if used and metric in COUNT_METRICS:
                correct = sum(r[COUNT_METRICS[metric]] for r in used)
                total = sum(r["n"] for r in used)
            rows.append(
                {
                    **{k: rec[k] for k in CELL_KEYS},
                    "metric": metric,
                    "value": float(value),
                    "correct": correct,
                    "total": total,
                    "prompts": len(used) if used else int(rec["num_prompts"]),
                    "rows": int(rec["num_prompts"]),
                    "golds": golds,
                    "file": rec["file"],
                    "per_prompt": used,
                }
            )
    return pd.DataFrame(rows, columns=cols)


def _lookup(config: dict[str, Any], dotted: str) -> Any:
    node: Any = config
    for part in dotted.split("."):
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
    return node


def find_param(config: dict[str, Any], keys: Iterable[str]) -> Any:
    """The first of the dotted ``keys`` present in ``config`` (None when none is)."""
    for key in keys:
        value = _lookup(config or {}, key)
        if value is not None:
            return value
    return None


def load_runs(
    root: Path, param_keys: dict[str, Sequence[str]] | None = None, left_out: list[str] | None = None
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Training runs: (one row per run, long metrics table one row per run x step x metric).

    Every run is read and checked by ``run_records.read_runs``, the one reader of run records: a malformed
    run.json or metrics.jsonl is ResultsError naming the file, line and field; a failed run is left out of
    both tables and named in ``left_out`` (printed as a warning when it is None). Identity comes from
    ``run.json`` (model, method, seed, tag), falling back to the folder layout
    ``runs/{model}/{method}/seed{seed}[-{tag}]``. ``param_keys`` maps a column name (e.g. ``alpha``) to
    dotted keys to try in ``run.json``'s ``config``.
    """
    from pspo_repro.analysis.run_records import read_runs

    return runs_frames(read_runs(root, left_out), param_keys)


def runs_frames(
    records: Sequence[Any], param_keys: dict[str, Sequence[str]] | None = None
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """``load_runs``' two tables from runs already read by ``run_records.read_runs`` (``RunRecord``s);
    ResultsError when two of them have one identity (model, method, seed, tag)."""
    runs, long_rows = [], []
    for rec in records:
        ident = {"model": rec.model, "method": rec.method, "seed": rec.seed, "tag": rec.tag}
        run = {**ident, "status": rec.status, "run_dir": str(rec.folder)}
        for column, keys in (param_keys or {}).items():
            run[column] = find_param(rec.info.get("config", {}), keys)
        runs.append(run)
        for line in rec.rows:
            for metric, value in line.items():
                if metric in ("step", "num_tokens") or value is None:
                    continue
                long_rows.append(
                    {
                        **ident,
                        "step": line["step"],
                        "num_tokens": line.get("num_tokens"),
                        "metric": metric,
                        "value": float(value),
                        "run_dir": str(rec.folder),
                    }
                )
    runs_df = pd.DataFrame(runs)
    if not runs_df.empty:
        dup = runs_df[runs_df.duplicated(["model", "method", "seed", "tag"], keep=False)]
        if not dup.empty:
            raise ResultsError(
                "duplicate training runs (same model, method, seed, tag):\n"
                + "\n".join(f"  {d}" for d in dup["run_dir"])
            )
    cols = ["model", "method", "seed", "tag", "step", "num_tokens", "metric", "value", "run_dir"]
    return runs_df, pd.DataFrame(long_rows, columns=cols)


def prompt_values(long_rows: pd.DataFrame) -> list[dict[str, float]]:
    """Per seed (one entry per row of ``long_rows``, all one metric): {prompt id: that prompt's value}.

    Raises ResultsError naming the file when a cell's per-prompt rows cannot give the metric (cells
    written before the per-sample lists existed lack what maj@k, top-1 and agreement need).
    """
    from pspo_repro.evaluation.metrics import prompt_value

    out = []
    for rec in long_rows.to_dict("records"):
        rows, metric = rec["per_prompt"], rec["metric"]
        if not rows:
            raise ResultsError(f"{rec['file']}: no per_prompt rows, so {metric} has no per-prompt values")
        try:
            values = {r["id"]: prompt_value(r, metric) for r in rows}
        except (KeyError, TypeError, ValueError) as exc:
            raise ResultsError(f"{rec['file']}: no per-prompt values for {metric} ({exc})") from None
        if any(v is None for v in values.values()):
            raise ResultsError(
                f"{rec['file']}: per_prompt rows lack the per-sample lists {metric} needs "
                "(written before they were stored): rerun this cell's evaluation"
            )
        out.append({k: float(v) for k, v in values.items()})
    return out
