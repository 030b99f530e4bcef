"""Read the result trees (evaluation cells, training runs) into long pandas tables.

The file schemas are the contract in ``docs/architecture.md``; this module is the only reader of
them, so a schema change touches one place. Everything here is validation plus reshaping: a
result that is malformed, duplicated or inconsistent with its neighbours raises
:class:`ResultsError` naming the files, because a table built from it would be silently wrong.
"""

from __future__ import annotations

import functools
import hashlib
import math
import re
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from pspo_repro.analysis.result_files import ResultsError, read_json, utf8_names
from pspo_repro.analysis.run_records import run_dirs as run_dirs  # re-exported: aggregate reads it here
from pspo_repro.evaluation.cells import cell_files, cell_name, completions_path, read_completions
from pspo_repro.evaluation.metrics import (
    SAMPLE_FIELDS,
    cell_metrics,
    has_samples,
    is_metric_name,
    majority_vote,
)

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
    when a name on the way is not UTF-8."""
    return _utf8_names(cell_files(root / "eval"))


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


def _is_int(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _is_num(x: Any) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x)


# Metrics that are fractions of samples or prompts (accuracies, majority votes, pass@k, maj@k): in [0, 1].
_RATE_RE = re.compile(r"acc|maj|pass@")
# Tolerance when a stored metric is compared with the value recomputed from its per-prompt records.
_RECOMPUTE_TOL = 1e-9
_SHA_RE = re.compile(r"[0-9a-f]{64}")
_NONE = object()  # "no bad entry found"


def cell_problem(cell: dict[str, Any], recomputed: dict[str, float] | None = None) -> str | None:
    """Why an evaluation cell read back from disk must not reach a table (None: it may).

    The file is untrusted (hand-edited, written by another version): settings must have their types and
    ranges; there must be one per-prompt record per prompt (``num_prompts``), each consistent in itself
    (``record_problem``: counts in range and equal to its per-sample lists), with distinct ids whose hash is
    ``rows_sha256`` (when that is a sha256); and every stored metric must equal its recomputation from the
    records (``metrics_problem``): the stored ``metrics`` is a cache, compared, never shown. A cell without
    per-prompt records has nothing to recompute from and is refused. Unknown per-prompt fields and metric
    keys are tolerated (never tabled); a rate-like one (``acc``/``maj``/``pass@`` in its name) must still be
    a finite number in [0, 1]. ``recomputed``, when given, receives the metrics recomputed from the records
    (so a reader does not recompute them a second time).
    """
    for key in ("model", "method", "dataset"):
        if not isinstance(cell.get(key), str) or not cell[key]:
            return f"{key} must be a non-empty string, got {cell.get(key)!r}"
    if cell.get("tag") is not None and not isinstance(cell["tag"], str):
        return f"tag must be a string, got {cell['tag']!r}"
    if not _is_int(cell["seed"]) or cell["seed"] < 0:
        return f"seed must be a non-negative integer, got {cell['seed']!r}"
    if not _is_num(cell["temperature"]) or cell["temperature"] < 0:
        return f"temperature must be a finite number >= 0, got {cell['temperature']!r}"
    for key in ("n_samples", "num_prompts", "max_new_tokens"):
        if not _is_int(cell[key]) or cell[key] < 1:
            return f"{key} must be a positive integer, got {cell[key]!r}"
    if not _is_num(cell["top_p"]) or not 0 < cell["top_p"] <= 1:
        return f"top_p must be in (0, 1], got {cell['top_p']!r}"
    top_k = cell.get("top_k")
    if top_k is not None and (not _is_int(top_k) or top_k < 1):
        return f"top_k must be a positive integer or null, got {top_k!r}"
    metrics = cell["metrics"]
    if not isinstance(metrics, dict):
        return f"metrics must be an object, got {type(metrics).__name__}"
    for name, value in metrics.items():
        if _RATE_RE.search(name) and not (_is_num(value) and 0 <= value <= 1):
            return f"metric {name}={value!r} is not a fraction in [0, 1]"
    rows = cell.get("per_prompt")
    if rows is None:
        return "no per_prompt records, so no metric of it can be recomputed"
    if not isinstance(rows, list) or len(rows) != cell["num_prompts"]:
        got = len(rows) if isinstance(rows, list) else type(rows).__name__
        return f"num_prompts={cell['num_prompts']!r} but per_prompt holds {got} records"
    with_lists = None
    for i, r in enumerate(rows):
        if not isinstance(r, dict):
            return f"per_prompt[{i}] is not an object"
        if why := record_problem(r, cell["n_samples"]):
            return f"per_prompt[{i}] {why}"
        holds = has_samples(r)
        if with_lists is not None and holds != with_lists:
            return f"per_prompt[{i}] and per_prompt[0] differ in holding the per-sample lists"
        with_lists = holds
    ids = [r.get("id") for r in rows]
    if not all(isinstance(x, str) and x for x in ids) or len(set(ids)) != len(ids):
        return "per_prompt ids must be distinct non-empty strings"
    sha = cell.get("rows_sha256")
    if isinstance(sha, str) and _SHA_RE.fullmatch(sha):  # the evaluator's hash of the ids, in order
        if hashlib.sha256("\n".join(ids).encode()).hexdigest() != sha:
            return "rows_sha256 is not the hash of its per_prompt ids"
    computed = recompute_metrics(rows)
    if recomputed is not None:
        recomputed.update(computed)
    return metrics_problem(metrics, computed)


# Per-sample list checks: field -> (whole-list check, per-entry check). The whole-list check accepts only lists
# every entry of which passes the per-entry one (plain ints, floats, str, None; bools and other subclasses fall
# through to the per-entry scan, which names the first bad entry).
_INT, _NUMBER, _BITS = frozenset({int}), frozenset({int, float}), frozenset({0, 1})
_TEXT = frozenset({str, type(None)})
_FLAG_CHECKS = (lambda v: set(map(type, v)) <= _INT and set(v) <= _BITS, lambda x: _is_int(x) and x in (0, 1))
_SAMPLE_CHECKS = {
    "reward_flags": _FLAG_CHECKS,
    "true_flags": _FLAG_CHECKS,
    "lengths": (
        lambda v: set(map(type, v)) <= _INT and (not v or min(v) >= 0),
        lambda x: _is_int(x) and x >= 0,
    ),
    "rewards": (lambda v: set(map(type, v)) <= _NUMBER and all(map(math.isfinite, v)), _is_num),
    "answers": (lambda v: set(map(type, v)) <= _TEXT, lambda x: x is None or isinstance(x, str)),
}


# A record's count or flag, the per-sample lists (or count) it is derived from, and the derivation (record, n).
_DERIVED = (
    ("reward_correct", frozenset({"reward_flags"}), lambda r, n: sum(r["reward_flags"])),
    ("true_correct", frozenset({"true_flags"}), lambda r, n: sum(r["true_flags"])),
    ("authors_correct", frozenset({"rewards"}), lambda r, n: sum(x > 0.5 for x in r["rewards"])),
    ("authors_reward_mean", frozenset({"rewards"}), lambda r, n: sum(r["rewards"]) / n),
    ("mean_length", frozenset({"lengths"}), lambda r, n: sum(r["lengths"]) / n),
    ("reward_maj", frozenset({"answers", "reward_flags"}),
     lambda r, n: int(majority_vote(r["answers"], r["reward_flags"]))),
    ("true_maj", frozenset({"true_correct"}), lambda r, n: int(2 * r["true_correct"] > n)),
)  # fmt: skip
_COUNTS = ("reward_correct", "true_correct", "authors_correct", "timeouts")


def record_problem(r: dict[str, Any], n_samples: int) -> str | None:
    """Why one per-prompt record is inconsistent (None: it is not): counts in range, and every count and
    flag equal to what the per-sample lists give where the record holds them (as ``per_prompt_row`` makes
    them: ``reward_correct = sum(reward_flags)``, ``authors_correct`` = rewards above 0.5, ``reward_maj``
    the vote over ``answers``, ``true_maj`` = more than half true, ``mean_length`` = mean of ``lengths``).

    Analysis checks every record of every cell it reads (hundreds of thousands for a results tree): the
    checks look each field up once and compare a derived value only where it differs."""
    n = r.get("n")
    if not _is_int(n) or not 1 <= n <= n_samples:
        return f"n={n!r} is not an integer in [1, n_samples={n_samples}]"
    for field in _COUNTS:
        c = r.get(field, _NONE)
        if c is not _NONE and (not _is_int(c) or not 0 <= c <= n):
            return f"{field}={c!r} is not an integer in [0, n={n}]"
    for field in ("reward_maj", "true_maj"):
        c = r.get(field, _NONE)
        if c is not _NONE and (not _is_int(c) or c not in (0, 1)):
            return f"{field}={c!r} is not 0 or 1"
    c = r.get("mean_length", _NONE)
    if c is not _NONE and not (_is_num(c) and c >= 0):
        return f"mean_length={c!r} is not a finite number >= 0"
    c = r.get("authors_reward_mean", _NONE)
    if c is not _NONE and not _is_num(c):
        return f"authors_reward_mean={c!r} is not a finite number"
    for field in SAMPLE_FIELDS:
        c = r.get(field, _NONE)
        if c is not _NONE and (not isinstance(c, list) or len(c) != n):
            return f"{field} is not a list of n={n} entries"
    for field, (all_ok, ok) in _SAMPLE_CHECKS.items():
        values = r.get(field, [])
        if all_ok(values):  # the common case at C speed; the scan below names the first bad entry
            continue
        bad = next((x for x in values if not ok(x)), _NONE)
        if bad is not _NONE:
            return f"{field} holds {bad!r}"
    keys = r.keys()
    for field, needs, value in _DERIVED:
        if field in keys and keys >= needs:
            stored, expect = r[field], value(r, n)
            if stored != expect and not math.isclose(
                stored, expect, rel_tol=_RECOMPUTE_TOL, abs_tol=_RECOMPUTE_TOL
            ):
                return f"{field}={stored!r} but its per-sample lists give {expect:.6g}"
    if "grading_error" in r and not isinstance(r["grading_error"], str):
        return f"grading_error={r['grading_error']!r} is not a string"
    return None


def recompute_metrics(rows: list[dict[str, Any]]) -> dict[str, float]:
    """Every metric of a cell from its (checked) per-prompt records, with the evaluator's own code
    (``evaluation.metrics.cell_metrics``): the only values a table shows."""
    return cell_metrics(rows)


def metrics_problem(stored: dict[str, Any], computed: dict[str, float]) -> str | None:
    """Why a cell's stored ``metrics`` (a cache) disagrees with the recomputed ones (None: it agrees).

    Every stored metric a cell can hold (``metrics.is_metric_name``) must be recomputable and equal (1e-9,
    relative or absolute); a stored key of no known metric is ignored and never tabled. A recomputed metric
    the cache lacks is no disagreement (the tables show the recomputed value)."""
    for name, value in stored.items():
        if not is_metric_name(name):
            continue
        if name not in computed:
            return f"metric {name} is stored but its per-prompt records cannot give it"
        if not _is_num(value) or not math.isclose(
            value, computed[name], rel_tol=_RECOMPUTE_TOL, abs_tol=_RECOMPUTE_TOL
        ):
            return f"metric {name}={value!r} but its per-prompt records give {computed[name]:.6g}"
    return None


def location_problem(path: Path, root: Path, cell: dict[str, Any]) -> str | None:
    """Why a cell's identity disagrees with where it sits (None: it does not): the evaluator files a cell
    as ``eval/{model}/{method}/seed{seed}[-{tag}]/{dataset}/T{temperature:.1f}.json``, so an edited
    ``method`` (or seed, tag, ...) would otherwise move its numbers into another row of the tables."""
    tag = cell.get("tag") or ""
    expect = (
        cell["model"], cell["method"], f"seed{cell['seed']}" + (f"-{tag}" if tag else ""), cell["dataset"],
        f"{cell_name(float(cell['temperature']))}.json",
    )  # fmt: skip
    if float(cell["temperature"]) != round(float(cell["temperature"]), 1):
        return f"temperature={cell['temperature']!r} has more than the one decimal its file name holds"
    try:
        got = path.relative_to(root / "eval").parts
    except ValueError:
        return None
    if got != expect:
        return f"its fields say {'/'.join(expect)} but it sits at {'/'.join(got)}"
    return None


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
