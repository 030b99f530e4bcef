"""Confidence intervals in pspo_repro.analysis.stats against scipy/statsmodels and hand arithmetic."""

from __future__ import annotations

import math

import numpy as np
import pytest
import scipy.stats
from statsmodels.stats.proportion import proportion_confint

from pspo_repro.analysis.stats import (
    CI_METHODS,
    check_ci_method,
    seed_interval,
    t_interval,
    wilson_interval,
    wilson_pooled,
)


def test_t_interval_by_hand_n3():
    # values 0.40, 0.44, 0.48: mean 0.44; deviations -0.04, 0, 0.04; s^2 = (0.0016 + 0 + 0.0016) / 2
    # = 0.0016, s = 0.04; sem = 0.04 / sqrt(3) = 0.023094; t_{0.975, 2} = 4.302653;
    # half-width = 4.302653 * 0.023094 = 0.099365 -> [0.340635, 0.539365].
    iv = t_interval([0.40, 0.44, 0.48])
    assert iv.mean == pytest.approx(0.44)
    assert iv.low == pytest.approx(0.340635, abs=1e-6)
    assert iv.high == pytest.approx(0.539365, abs=1e-6)
    assert iv.n == 3 and iv.method == "t_seeds" and iv.has_interval
    assert scipy.stats.t.ppf(0.975, 2) == pytest.approx(4.303, abs=5e-4)


def test_t_interval_matches_scipy():
    x = np.array([0.31, 0.45, 0.38, 0.52, 0.29])
    low, high = scipy.stats.t.interval(0.9, len(x) - 1, loc=x.mean(), scale=scipy.stats.sem(x))
    iv = t_interval(x, confidence=0.9)
    assert (iv.low, iv.high) == pytest.approx((low, high))


def test_t_interval_is_scipys_bit_for_bit():
    """t_interval does scipy's sem and t.interval arithmetic itself (their wrappers cost ~30x the sum):
    the same floats, not merely close ones, so no committed table moves by a last digit."""
    rng = np.random.default_rng(0)
    for _ in range(2000):
        x = rng.random(int(rng.integers(2, 12))) * rng.choice([1.0, 100.0, 1e-6])
        confidence = float(rng.choice([0.5, 0.9, 0.95, 0.99]))
        sem = float(scipy.stats.sem(x))
        low, high = scipy.stats.t.interval(confidence, x.size - 1, loc=float(x.mean()), scale=sem)
        iv = t_interval(x, confidence)
        assert (iv.mean, iv.low, iv.high) == (float(x.mean()), float(low), float(high)), (x, confidence)


def test_t_interval_single_seed_has_no_interval():
    iv = t_interval([0.5])
    assert iv.mean == 0.5 and iv.n == 1 and not iv.has_interval
    assert math.isnan(iv.low) and math.isnan(iv.high)


def test_t_interval_identical_seeds_is_degenerate_not_nan():
    iv = t_interval([0.3, 0.3, 0.3])
    assert (iv.low, iv.high) == (pytest.approx(0.3), pytest.approx(0.3))


def test_t_interval_rejects_empty():
    with pytest.raises(ValueError):
        t_interval([])


def test_wilson_matches_statsmodels_and_formula():
    p, low, high = wilson_interval(63, 150)
    ref = proportion_confint(63, 150, alpha=0.05, method="wilson")
    assert (low, high) == pytest.approx(ref)
    # Wilson by hand: centre (p + z^2/2n) / (1 + z^2/n), half z sqrt(p(1-p)/n + z^2/4n^2) / (1 + z^2/n).
    z, n = scipy.stats.norm.ppf(0.975), 150
    centre = (p + z**2 / (2 * n)) / (1 + z**2 / n)
    half = z * math.sqrt(p * (1 - p) / n + z**2 / (4 * n**2)) / (1 + z**2 / n)
    assert (low, high) == pytest.approx((centre - half, centre + half))
    assert p == pytest.approx(0.42)


def test_wilson_edge_counts_stay_in_unit_interval():
    _, low, high = wilson_interval(0, 20)
    assert low == pytest.approx(0.0, abs=1e-12) and 0 < high < 0.2
    _, low, high = wilson_interval(20, 20)
    assert 0.8 < low < 1 and high == pytest.approx(1.0)
    with pytest.raises(ValueError):
        wilson_interval(3, 0)


def test_wilson_pooled_pools_counts():
    iv = wilson_pooled([20, 21, 22], [50, 50, 50])
    ref = proportion_confint(63, 150, alpha=0.05, method="wilson")
    assert iv.mean == pytest.approx(0.42) and (iv.low, iv.high) == pytest.approx(ref)
    assert iv.n == 3 and iv.method == "wilson_pooled"


def test_seed_interval_dispatch_and_unknown_method():
    assert seed_interval("t_seeds", [0.4, 0.44, 0.48]).method == "t_seeds"
    assert seed_interval("wilson_pooled", [0.4], [20], [50]).method == "wilson_pooled"
    with pytest.raises(ValueError, match="wilson_pooled needs correct counts"):
        seed_interval("wilson_pooled", [0.4])
    with pytest.raises(ValueError, match="allowed: t_seeds, wilson_pooled, bootstrap"):
        check_ci_method("jackknife")
    assert CI_METHODS == ("t_seeds", "wilson_pooled", "bootstrap")
    with pytest.raises(ValueError, match="per-prompt values"):
        seed_interval("bootstrap", [0.4])
