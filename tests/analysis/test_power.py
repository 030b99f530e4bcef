"""analysis.power: minimum detectable effects, seed counts and TOST power, against simulation."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from pspo_repro.analysis import power


def _simulated_power(effect, sd, n, draws=20_000, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.normal(effect, sd, size=(draws, n))
    p = stats.ttest_1samp(x, 0.0, axis=1).pvalue
    return float((p < 0.05).mean())


@pytest.mark.parametrize("n", [3, 5, 10, 20])
def test_mde_is_detected_four_times_in_five(n):
    effect = power.mde(6.0, n)
    assert _simulated_power(effect, 6.0, n) == pytest.approx(0.8, abs=0.015)


def test_three_seeds_detect_only_large_effects():
    # the paper's 3 seeds: a paired difference must be ~3.3 per-seed standard deviations to be seen
    assert power.mde(1.0, 3) == pytest.approx(3.27, abs=0.02)
    assert power.mde(1.0, 20) < 0.7


def test_seeds_for_is_the_smallest_n_reaching_the_power():
    n = power.seeds_for(3.0, 6.0)
    assert power.power_at(3.0, 6.0, n) >= 0.8 > power.power_at(3.0, 6.0, n - 1)
    assert power.seeds_for(3.0, 6.0, paired=False) > n  # two groups need more


@pytest.mark.parametrize(("margin", "n"), [(3.0, 10), (3.0, 20), (2.0, 30)])
def test_tost_power_bounds_a_simulation(margin, n):
    sd, rng = 4.0, np.random.default_rng(1)
    x = rng.normal(0.0, sd, size=(20_000, n))
    m, se = x.mean(1), x.std(1, ddof=1) / np.sqrt(n)
    crit = stats.t.ppf(0.95, n - 1)
    sim = float((((m + margin) / se > crit) & ((m - margin) / se < -crit)).mean())
    bound = power.tost_power(margin, sd, n)
    assert bound <= sim + 0.01 and bound >= sim - 0.02


def test_tost_seeds_and_refusals():
    n = power.tost_seeds(3.0, 4.0)
    assert power.tost_power(3.0, 4.0, n) >= 0.8 > power.tost_power(3.0, 4.0, n - 1)
    with pytest.raises(ValueError, match="n must be an integer >= 2"):
        power.mde(1.0, 1)
    with pytest.raises(ValueError, match="sd must be a finite number >= 0"):
        power.mde(float("nan"), 3)
    with pytest.raises(ValueError, match="effect must be a finite non-zero"):
        power.seeds_for(0.0, 1.0)
    with pytest.raises(ValueError, match="margin must be > 0"):
        power.tost_power(0.0, 1.0, 3)
