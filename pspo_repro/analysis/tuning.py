"""Hyperparameter selection on validation: which value of a swept knob each method is reported at.

A tuning-matched comparison (the claims study's head-to-heads) runs every method over the same sweep of a
knob (the learning rate) on *selection seeds*, picks each method's value by its validation reward, and
reports it on other seeds at that value. Selection reads only ``eval/reward`` of ``metrics.jsonl`` (the
validation split, never the test problems). Both the pipeline (which runs the reported seeds at the chosen
value) and the claims table (which recomputes the choice from the same records and checks that the reported
runs used it) call :func:`select`, so the choice is made in one place.

Run folders of a sweep are tagged as ``run_dir.tag_from_overrides`` builds tags: ``{tag}-{key}{value}`` with
the other swept keys of the point beside it, sorted (``tune-learning_rate0.0003_num_iterations2``).

The score of a value is the mean over its selection seeds of each run's best validation reward after the
start (the checkpoint that ``load_best_model_at_end`` keeps and evaluation reads; the step-0 validation,
the base model's, is left out). Ties go to the value listed first (the sweep's order).
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pspo_repro.analysis.result_files import ResultsError
from pspo_repro.analysis.run_records import read_info, read_metrics, read_run
from pspo_repro.common.run_dir import swept_tag
from pspo_repro.common.run_folder import run_json

VALIDATION_METRIC = "eval/reward"


class TuningError(ValueError):
    """A selection whose runs are missing, unfinished or without validation."""


def fmt(value: Any) -> str:
    """A swept value as folder tags write it (``run_dir._fmt``: floats with ``%g``)."""
    try:
        return f"{float(value):g}"
    except (TypeError, ValueError):
        return str(value)


def point_tag(tag: str, point: dict[str, Any]) -> str:
    """The folder tag of a sweep point: ``tag`` then ``{leaf}{value}`` of its method./trainer. keys, sorted
    by key (as ``run_dir.tag_from_overrides``)."""
    keys = sorted(k for k in point if k.startswith(("method.", "trainer.")))
    swept = swept_tag([f"{k.split('.', 1)[1]}{fmt(point[k])}" for k in keys])
    return "-".join(t for t in (tag, swept) if t)


@dataclass
class Selection:
    """One method's choice: the value kept, each value's score and per-seed scores."""

    method: str
    key: str
    chosen: str
    scores: dict[str, float]
    per_seed: dict[str, dict[int, float]] = field(default_factory=dict)
    tags: dict[str, str] = field(default_factory=dict)
    point: dict[str, Any] = field(default_factory=dict)  # the sweep point's other keys (e.g. num_iterations)

    def near(self, tolerance: float) -> list[str]:
        """The selection set (issue 55: the values within the selection's noise of the best), best first: the
        chosen value, every value a leave-one-seed-out subset of the selection seeds would choose, and every
        value whose mean score is within ``tolerance`` (validation reward) of the chosen one's. A comparison
        reported at each of them shows whether a verdict hangs on the pick."""
        keep = {self.chosen}
        seeds = sorted({s for got in self.per_seed.values() for s in got})
        if len(seeds) >= 3:
            for left in seeds:
                sub = {v: [x for s, x in got.items() if s != left] for v, got in self.per_seed.items()}
                means = {v: sum(x) / len(x) for v, x in sub.items() if x}
                keep.add(max(means, key=lambda v: (means[v], -list(self.scores).index(v))))
        best = self.scores[self.chosen]
        keep |= {v for v, sc in self.scores.items() if best - sc <= tolerance + 1e-12}
        return sorted(keep, key=lambda v: (-self.scores[v], list(self.scores).index(v)))

    def text(self, tolerance: float | None = None) -> str:
        """``noclip (num_iterations=2) learning_rate: 0.0001: 0.212, **0.0003: 0.241**, 0.001: 0.120``."""
        leaf = self.key.split(".", 1)[-1]
        where = ", ".join(f"{k.split('.', 1)[-1]}={fmt(v)}" for k, v in sorted(self.point.items()))
        parts = [
            (f"**{v}: {s:.3f}**" if v == self.chosen else f"{v}: {s:.3f}") for v, s in self.scores.items()
        ]
        n = {len(p) for p in self.per_seed.values()}
        seeds = f" ({n.pop()} selection seeds each)" if len(n) == 1 else ""
        near = ""
        if tolerance is not None:
            members = self.near(tolerance)
            near = (f"; selection set (within the noise of the pick): {', '.join(members)}" if len(members) > 1
                    else f"; selection set: the pick alone (no leave-one-seed-out subset picks another value, none "
                    f"within {tolerance:g} of it)")  # fmt: skip
        return f"{self.method}{f' ({where})' if where else ''} {leaf}: " + ", ".join(parts) + seeds + near


def best_validation(metrics_path: Path) -> float:
    """A run's best validation reward after step 0 (NaN when it never validated after the start), from its
    metrics.jsonl read and checked by the one reader of run records (``run_records.read_metrics``: a torn,
    blank or non-numeric line is TuningError naming the file and line)."""
    if not metrics_path.is_file():
        raise TuningError(f"{metrics_path}: no such file")
    try:
        return best_of(read_metrics(metrics_path))
    except ResultsError as exc:
        raise TuningError(str(exc)) from None


def best_of(rows: list[dict[str, Any]]) -> float:
    """The best ``eval/reward`` after step 0 among checked metrics rows (NaN when there is none)."""
    values = [
        float(r[VALIDATION_METRIC]) for r in rows if r["step"] > 0 and r.get(VALIDATION_METRIC) is not None
    ]
    return max(values) if values else math.nan


def select(
    runs_root: Path,
    method: str,
    tag: str,
    key: str,
    values: Sequence[Any],
    seeds: Sequence[int],
    point: dict[str, Any] | None = None,
) -> Selection:
    """Choose ``key`` for ``method`` among ``values`` from the finished runs ``runs_root/{method}/seed{s}-{tag}``.

    ``point`` holds the other swept keys of the method's sweep point (e.g. ``method.num_iterations: 2``).
    Every (value, seed) run must be finished and have validated: a missing one is TuningError, never a
    choice made on fewer runs.
    """
    point = dict(point or {})
    scores: dict[str, float] = {}
    per_seed: dict[str, dict[int, float]] = {}
    tags: dict[str, str] = {}
    for value in values:
        vtag = point_tag(tag, {**point, key: value})
        got = {}
        for seed in seeds:
            folder = runs_root / method / f"seed{int(seed)}-{vtag}"
            status = None
            try:  # the one reader of run records: run.json and metrics.jsonl checked as every table's are
                if run_json(folder).is_file():
                    status = read_info(folder).get("status")
                if status == "finished":
                    score = best_of(read_run(folder).rows)
            except ResultsError as exc:
                raise TuningError(f"selection of {key} for {method}: {exc}") from None
            if status != "finished":
                raise TuningError(f"selection of {key} for {method}: run {folder} is not finished ({status})")
            if math.isnan(score):
                raise TuningError(f"selection of {key} for {method}: {folder} has no validation after step 0")
            got[int(seed)] = score
        per_seed[fmt(value)] = got
        scores[fmt(value)] = sum(got.values()) / len(got)
        tags[fmt(value)] = vtag
    if not scores:
        raise TuningError(f"selection of {key} for {method}: no values")
    chosen = max(scores, key=lambda v: (scores[v], -list(scores).index(v)))
    return Selection(method, key, chosen, scores, per_seed, tags, point)


_NUM = r"[0-9.eE+-]+"


def split_tag(tag: str, prefix: str, leaf: str) -> tuple[str, str] | None:
    """``(value, rest)`` of a swept tag ``{prefix}-...{leaf}{value}...``, or None when it has no such part."""
    if not tag.startswith(prefix + "-"):
        return None
    body = tag[len(prefix) + 1 :]
    m = re.search(rf"(?:^|_){re.escape(leaf)}({_NUM})(?=_|$)", body)
    if not m:
        return None
    rest = (body[: m.start()] + body[m.end() :]).strip("_")
    rest = re.sub(r"__+", "_", rest)
    return m.group(1), rest
