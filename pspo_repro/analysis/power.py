"""How many seeds a comparison needs, and what a design as run can detect (statsmodels' t-test power).

A replicate is a seed (a training run from a random start): a paired comparison of two methods over ``n`` seeds
is a one-sample t test on the ``n`` per-seed differences. Its minimum detectable effect (MDE) at 80% power is the
true mean difference the test would declare at level ``alpha`` four times in five, given the per-seed standard
deviation ``sd`` of the differences: ``sd`` times statsmodels' solved effect size. An unpaired comparison (two
groups of seeds) uses the two-sample test with ``sd`` the common per-seed standard deviation.

For an equivalence claim (TOST with margin ``m``), the power at a true difference of 0 is that of two one-sided
tests at ``alpha``; ``tost_seeds`` is the smallest n reaching the asked power there.

    from pspo_repro.analysis.power import mde, seeds_for
    mde(sd=6.0, n=3)          # what the paper's 3 seeds can detect, in the units of sd (points)
    seeds_for(effect=3.0, sd=6.0)   # seeds for a 3-point difference at 80% power

Used by the claims report (the MDE beside every "not resolved") and by ``python -m pspo_repro.analysis.power``.
"""

from __future__ import annotations

import argparse
import math

from scipy import stats
from statsmodels.stats.power import TTestIndPower, TTestPower

POWER = 0.8
ALPHA = 0.05


def _check(sd: float, n: int | None = None) -> None:
    if not (isinstance(sd, int | float) and math.isfinite(sd) and sd >= 0):
        raise ValueError(f"sd must be a finite number >= 0, got {sd!r}")
    if n is not None and (isinstance(n, bool) or not isinstance(n, int) or n < 2):
        raise ValueError(f"n must be an integer >= 2 (a t test needs two seeds), got {n!r}")


def mde(sd: float, n: int, *, alpha: float = ALPHA, power: float = POWER, paired: bool = True) -> float:
    """The smallest true difference a two-sided t test over ``n`` seeds detects with probability ``power``.

    ``paired``: ``n`` per-seed differences with standard deviation ``sd``; else two groups of ``n`` seeds each,
    common standard deviation ``sd``. 0 when ``sd`` is 0 (nothing varies)."""
    _check(sd, n)
    if sd == 0:
        return 0.0
    if paired:
        d = TTestPower().solve_power(nobs=n, alpha=alpha, power=power, alternative="two-sided")
    else:
        d = TTestIndPower().solve_power(nobs1=n, ratio=1.0, alpha=alpha, power=power, alternative="two-sided")
    return float(d) * sd


def power_at(effect: float, sd: float, n: int, *, alpha: float = ALPHA, paired: bool = True) -> float:
    """The probability that a two-sided t test over ``n`` seeds declares a true difference ``effect``."""
    _check(sd, n)
    if sd == 0:
        return 1.0 if effect != 0 else alpha
    d = abs(effect) / sd
    if paired:
        return float(TTestPower().power(effect_size=d, nobs=n, alpha=alpha, alternative="two-sided"))
    return float(
        TTestIndPower().power(effect_size=d, nobs1=n, ratio=1.0, alpha=alpha, alternative="two-sided")
    )


def seeds_for(
    effect: float, sd: float, *, alpha: float = ALPHA, power: float = POWER, paired: bool = True
) -> int:
    """Seeds (per arm when unpaired) for a two-sided t test to detect ``effect`` with probability ``power``."""
    _check(sd)
    if not (math.isfinite(effect) and effect != 0):
        raise ValueError(f"effect must be a finite non-zero difference, got {effect!r}")
    if sd == 0:
        return 2
    n = 2
    while power_at(effect, sd, n, alpha=alpha, paired=paired) < power:
        n += 1
        if n > 100_000:
            raise ValueError(
                f"effect {effect} is too small against sd {sd} for any practical number of seeds"
            )
    return n


def tost_power(margin: float, sd: float, n: int, *, alpha: float = ALPHA, true_diff: float = 0.0) -> float:
    """Power of the paired TOST (two one-sided t tests at ``alpha``, bounds +-``margin``) at ``true_diff``: a lower
    bound on the probability that both reject, P(lower rejects) + P(upper rejects) - 1, each from the noncentral
    t distribution (the two share one estimated standard error; the bound is within ~0.01 of a simulation at
    the sizes here, tests/analysis/test_power.py)."""
    _check(sd, n)
    if margin <= 0:
        raise ValueError(f"margin must be > 0, got {margin!r}")
    if sd == 0:
        return 1.0 if abs(true_diff) < margin else 0.0
    df = n - 1
    se = sd / math.sqrt(n)
    crit = stats.t.ppf(1 - alpha, df)
    # reject both: (xbar + m) / s > crit and (xbar - m) / s < -crit, s the estimated standard error
    nc_low = (true_diff + margin) / se
    nc_high = (true_diff - margin) / se
    p_low = stats.nct.sf(crit, df, nc_low)  # lower test rejects
    p_high = stats.nct.cdf(-crit, df, nc_high)  # upper test rejects
    return max(0.0, float(p_low + p_high - 1.0))


def tost_seeds(margin: float, sd: float, *, alpha: float = ALPHA, power: float = POWER) -> int:
    """The smallest n whose paired TOST at +-``margin`` reaches ``power`` at a true difference of 0."""
    n = 2
    while tost_power(margin, sd, n, alpha=alpha) < power:
        n += 1
        if n > 100_000:
            raise ValueError(
                f"margin {margin} is too small against sd {sd} for any practical number of seeds"
            )
    return n


def main() -> None:
    """``python -m pspo_repro.analysis.power --sd S [--n N | --effect E | --margin M]``: plan seeds from a pilot."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument(
        "--sd", type=float, required=True, help="per-seed standard deviation (of the paired differences)"
    )
    p.add_argument("--n", type=int, help="seeds: print the minimum detectable effect at 80%% power")
    p.add_argument("--effect", type=float, help="a difference: print the seeds that detect it at 80%% power")
    p.add_argument("--margin", type=float, help="an equivalence margin: print the seeds a TOST needs")
    p.add_argument("--unpaired", action="store_true", help="two independent groups of seeds")
    a = p.parse_args()
    try:
        if a.n is not None:
            print(f"MDE at 80% power, {a.n} seeds: {mde(a.sd, a.n, paired=not a.unpaired):.3g}")
        if a.effect is not None:
            print(f"seeds for {a.effect:g} at 80% power: {seeds_for(a.effect, a.sd, paired=not a.unpaired)}")
        if a.margin is not None:
            print(f"seeds for a TOST at +-{a.margin:g} (80% power at 0): {tost_seeds(a.margin, a.sd)}")
    except ValueError as exc:
        raise SystemExit(f"error: {exc}") from None


if __name__ == "__main__":
    main()
