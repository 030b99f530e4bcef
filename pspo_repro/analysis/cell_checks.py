"""The checks of one evaluation cell read back from disk (``cell_problem``): its settings' types and ranges,
its per-prompt records each consistent in itself and with their per-sample lists, every stored metric equal
to its recomputation from those records, and its identity equal to where it sits (``location_problem``). The
file is untrusted: a cell that fails never reaches a table. ``results_io`` reads cells through these checks.
"""

from __future__ import annotations

import hashlib
import math
import re
from pathlib import Path
from typing import Any

from pspo_repro.evaluation.cells import cell_name
from pspo_repro.evaluation.metrics import (
    SAMPLE_FIELDS,
    cell_metrics,
    has_samples,
    is_metric_name,
    majority_vote,
)


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
