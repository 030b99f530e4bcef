"""What a table of methods can say about their order: rank intervals by bootstrap over seeds, and which
methods computed the same thing.

- ``bootstrap_ranks`` / ``rank_intervals``: resample each method's seeds with replacement, recompute the
  per-method means, rank them (1 = highest mean; tied means share the better rank), and report the
  2.5th-97.5th percentile of each method's rank. Methods of one equivalence class share each draw, as they
  are one computation: their means stay equal and so do their ranks.
- ``equivalence_classes``: methods whose per-prompt values are identical on every seed they share, in every
  cell, are one class. Computed from the values, never from names.

Pure numpy; no records are read here (pspo_repro/analysis/leaderboard.py feeds it).
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from typing import Any

import numpy as np

N_BOOT = 10_000
RNG_SEED = 0  # fixed, so the same records always give the same intervals


def bootstrap_ranks(
    seed_values: Mapping[str, Sequence[float]],
    classes: Mapping[str, Hashable] | None = None,
    n_boot: int = N_BOOT,
    rng_seed: int = RNG_SEED,
) -> tuple[list[str], np.ndarray]:
    """The methods (sorted) and an ``[n_boot, n_methods]`` array of their ranks over bootstrap resamples.

    Each resample draws, per method, as many seeds as it has, with replacement, and ranks the means
    descending with competition ranking (1 + the number of methods with a strictly higher mean). Members of
    one class in ``classes`` (method -> class key; a method not in it is its own class) share the drawn seed
    positions, so identical values stay identical. A method with no values is refused.
    """
    methods = sorted(seed_values)
    empty = [m for m in methods if len(seed_values[m]) == 0]
    if empty:
        raise ValueError(f"no seed values for {', '.join(empty)}: a rank needs at least one seed")
    if n_boot < 1:
        raise ValueError(f"n_boot={n_boot!r} must be at least 1")
    rng = np.random.default_rng(rng_seed)
    classes = classes or {}
    draws: dict[tuple[Hashable, int], np.ndarray] = {}
    means = np.empty((n_boot, len(methods)))
    for j, m in enumerate(methods):
        vals = np.asarray(seed_values[m], dtype=float)
        key = (classes.get(m, ("own", m)), len(vals))
        if key not in draws:  # first member of its class (methods are visited in sorted order)
            draws[key] = rng.integers(0, len(vals), size=(n_boot, len(vals)))
        means[:, j] = vals[draws[key]].mean(axis=1)
    higher = (means[:, None, :] > means[:, :, None]).sum(axis=2)  # [boot, method]: methods above it
    return methods, 1 + higher


def rank_intervals(
    seed_values: Mapping[str, Sequence[float]],
    classes: Mapping[str, Hashable] | None = None,
    confidence: float = 0.95,
    n_boot: int = N_BOOT,
    rng_seed: int = RNG_SEED,
) -> dict[str, tuple[int, int]]:
    """Per method, the (low, high) percentiles of its bootstrap rank (``bootstrap_ranks``): the
    ``(1 - confidence) / 2`` and ``(1 + confidence) / 2`` quantiles, inverted-CDF, so both are ranks."""
    if not 0 < confidence < 1:
        raise ValueError(f"confidence={confidence!r} must be in (0, 1)")
    methods, ranks = bootstrap_ranks(seed_values, classes, n_boot, rng_seed)
    qs = [(1 - confidence) / 2, (1 + confidence) / 2]
    out = {}
    for j, m in enumerate(methods):
        low, high = np.quantile(ranks[:, j], qs, method="inverted_cdf")
        out[m] = (int(low), int(high))
    return out


def same_values(a: Mapping[Any, Mapping[Any, Any]], b: Mapping[Any, Mapping[Any, Any]]) -> bool:
    """Whether two methods' records (seed -> {cell: per-prompt values}) are identical on every shared
    seed: at least one seed shared, and on each the same cells with equal values."""
    shared = set(a) & set(b)
    return bool(shared) and all(a[s] == b[s] for s in shared)


def equivalence_classes(records: Mapping[str, Mapping[Any, Mapping[Any, Any]]]) -> list[list[str]]:
    """Classes of methods with identical records (``same_values``), each sorted, in order of their first
    member; singletons included. A method joins the first class every member of which it equals, so a
    class never holds two methods that differ."""
    classes: list[list[str]] = []
    for m in sorted(records):
        for cls in classes:
            if all(same_values(records[m], records[o]) for o in cls):
                cls.append(m)
                break
        else:
            classes.append([m])
    return classes
