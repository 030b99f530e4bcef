"""Rank intervals by bootstrap over seeds and equivalence classes, on numbers small enough to do by hand."""

from __future__ import annotations

import numpy as np
import pytest

from pspo_repro.analysis.ranking import bootstrap_ranks, equivalence_classes, rank_intervals, same_values


def test_separated_methods_get_single_ranks():
    # every resample of a's seeds is above every resample of b's
    assert rank_intervals({"a": [0.9, 0.8], "b": [0.1, 0.2]}) == {"a": (1, 1), "b": (2, 2)}


def test_overlapping_methods_by_hand():
    # a's mean over 2 resampled seeds is 0 (1/4), 0.5 (1/2) or 1 (1/4); b's is always 0.5. Ties share the
    # better rank, so a is 1 unless its mean is 0 (P = 1/4), and b is 1 unless a's mean is 1 (P = 1/4).
    methods, ranks = bootstrap_ranks({"a": [0.0, 1.0], "b": [0.5, 0.5]}, n_boot=20_000)
    assert methods == ["a", "b"]
    assert np.mean(ranks[:, 0] == 2) == pytest.approx(0.25, abs=0.015)
    assert np.mean(ranks[:, 1] == 2) == pytest.approx(0.25, abs=0.015)
    assert np.mean((ranks[:, 0] == 1) & (ranks[:, 1] == 1)) == pytest.approx(0.5, abs=0.015)
    assert rank_intervals({"a": [0.0, 1.0], "b": [0.5, 0.5]}) == {"a": (1, 2), "b": (1, 2)}


def test_a_rare_rank_stays_outside_the_interval():
    # c ranks 1 only when its mean ties a's at 0.5: every draw of c is its 0.5 and every draw of a its 0.5.
    # With 2 seeds each P = 1/4 * 1/4 = 1/16 > 2.5%, so 1 is inside; with 3, P = 1/27 * 1/27 < 2.5%: outside
    assert rank_intervals({"a": [0.5, 0.6], "c": [0.5, 0.4]})["c"] == (1, 2)
    assert rank_intervals({"a": [0.5, 0.6, 0.6], "c": [0.5, 0.4, 0.4]})["c"] == (2, 2)


def test_a_class_resamples_as_one_and_ties():
    values = {"a": [0.0, 1.0], "b": [0.0, 1.0]}
    # drawn together, a and b always have the same mean: both rank 1 in every resample
    _, ranks = bootstrap_ranks(values, {"a": "A", "b": "A"})
    assert (ranks == 1).all()
    # drawn apart, their means (0, 0.5, 1 w.p. 1/4, 1/2, 1/4) differ in 1 - (1/16 + 1/4 + 1/16) = 5/8 of resamples
    _, ranks = bootstrap_ranks(values, n_boot=20_000)
    assert np.mean(ranks.max(axis=1) == 2) == pytest.approx(5 / 8, abs=0.015)


def test_deterministic_and_bad_input():
    values = {"a": [0.1, 0.5, 0.3], "b": [0.2, 0.4, 0.3], "c": [0.35, 0.3]}
    assert (bootstrap_ranks(values)[1] == bootstrap_ranks(values)[1]).all()
    with pytest.raises(ValueError, match="no seed values for b"):
        rank_intervals({"a": [0.1], "b": []})
    with pytest.raises(ValueError, match="confidence=1.5"):
        rank_intervals({"a": [0.1]}, confidence=1.5)


def test_same_values_needs_a_shared_seed_and_every_cell_equal():
    a = {0: {"x": (1, 0)}, 1: {"x": (1, 1)}}
    assert same_values(a, {0: {"x": (1, 0)}})  # only seed 0 shared, and equal there
    assert not same_values(a, {2: {"x": (1, 0)}})  # no seed shared
    assert not same_values(a, {0: {"x": (1, 0), "y": (0,)}})  # a cell the other lacks
    assert not same_values(a, {0: {"x": (0, 0)}})


def test_equivalence_classes_from_values_not_names():
    same = {0: {"synthetic": (1, 0, 1)}, 1: {"synthetic": (0, 0, 1)}}
    records = {
        "pspo": same,
        "noclip": dict(same),
        "cispo": {0: same[0], 1: {"synthetic": (0, 1, 1)}},  # one prompt differs on seed 1
        "zz": dict(same),
    }
    assert equivalence_classes(records) == [["cispo"], ["noclip", "pspo", "zz"]]
    assert equivalence_classes({"a": same}) == [["a"]]
