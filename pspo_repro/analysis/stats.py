"""Statistics for tables: confidence intervals over seeds or prompts, paired comparisons.

(The per-prompt estimators pass@k and the majority vote are ``evaluation.metrics``'.)

Pure numpy/scipy/statsmodels: no torch, so it is testable and importable anywhere.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np
import scipy.stats
from statsmodels.stats.proportion import proportion_confint

# --- Confidence intervals for tables -------------------------------------------------------------
# Three interval methods, chosen per aggregation run and named in every caption:
#   t_seeds        Student t over the per-seed means (seed-to-seed variation; needs n >= 2 seeds);
#   wilson_pooled  Wilson score interval on a proportion pooled over seeds as the authors' maths_plots.py
#                  pools it (``_pooled_binom``): correct = round(sum over seeds of mean x prompts), trials =
#                  prompts x seeds, mean = correct / trials; for proportions only (accuracy, pass@k, ...);
#   bootstrap      percentile bootstrap over prompts of the seed-averaged per-prompt values
#                  (prompt-to-prompt variation; the authors' evaluation code defines one).
CI_METHODS = ("t_seeds", "wilson_pooled", "bootstrap")
BOOTSTRAP_RESAMPLES = 2000
BOOTSTRAP_SEED = 0


@dataclass(frozen=True)
class Interval:
    """A point estimate with its interval; ``low``/``high`` are NaN when no interval exists."""

    mean: float
    low: float
    high: float
    n: int  # number of seeds behind the estimate
    method: str
    clipped: bool = False  # the interval reached past the metric's range and was cut at it (clip_interval)

    @property
    def has_interval(self) -> bool:
        """Whether a real interval exists (a single seed under ``t_seeds`` has none)."""
        return not (math.isnan(self.low) or math.isnan(self.high))


CLIPPED = "§"  # the interval reached past the metric's range (below 0 % or above 100 %) and was cut there


def clip_interval(iv: Interval, low: float, high: float) -> Interval:
    """``iv`` cut to a metric's range [``low``, ``high``] (a t interval of an accuracy can reach below 0 %
    or above 100 %, which no accuracy can be); ``clipped`` says whether a bound was cut."""
    if not iv.has_interval or (iv.low >= low and iv.high <= high):
        return iv
    return replace(iv, low=max(iv.low, low), high=min(iv.high, high), clipped=True)


def check_ci_method(method: str) -> str:
    """Return ``method`` if it is a known CI method, else raise ValueError listing the allowed ones."""
    if method not in CI_METHODS:
        raise ValueError(f"unknown ci method {method!r}; allowed: {', '.join(CI_METHODS)}")
    return method


def t_interval(values: Sequence[float], confidence: float = 0.95) -> Interval:
    """Student t interval for the mean of per-seed values: mean +- t_{(1+c)/2, n-1} * s / sqrt(n).

    With one value there is no interval (``low``/``high`` NaN): a fake zero-width interval
    would claim a precision that one seed cannot show.
    """
    x = np.asarray(values, dtype=float)
    if x.ndim != 1 or x.size == 0:
        raise ValueError(f"t_interval needs a non-empty 1-d sequence, got shape {x.shape}")
    mean = float(x.mean())
    if x.size < 2:
        return Interval(mean, math.nan, math.nan, int(x.size), "t_seeds")
    # scipy.stats.sem's and t.interval's own arithmetic (sd with ddof=1 / n**0.5; the standard quantile
    # times the scale plus the mean), bit for bit, without their wrappers' overhead: the tables and tests
    # make thousands of calls.
    sem = float(np.std(x, ddof=1) / x.size**0.5)
    if sem == 0.0:
        # scipy returns NaN for scale 0; identical seeds give a degenerate but real interval.
        return Interval(mean, mean, mean, int(x.size), "t_seeds")
    q_low, q_high = _t_quantiles(float(confidence), int(x.size) - 1)
    return Interval(mean, float(q_low * sem + mean), float(q_high * sem + mean), int(x.size), "t_seeds")


@functools.lru_cache(maxsize=256)
def _t_quantiles(confidence: float, df: int) -> tuple[float, float]:
    """The standard Student t interval's ends for ``confidence`` with ``df`` degrees of freedom."""
    return scipy.stats.t.interval(confidence, df)


def wilson_interval(successes: float, trials: float, confidence: float = 0.95) -> tuple[float, float, float]:
    """Wilson score interval for ``successes`` out of ``trials``: (proportion, low, high).

    ``successes`` may be fractional (a mean of per-prompt accuracies times the number of prompts, as the
    authors' ``_wilson_ci(p_hat, n)`` uses it)."""
    if trials <= 0 or not (0 <= successes <= trials):
        raise ValueError(
            f"wilson_interval needs 0 <= successes <= trials, trials > 0; got {successes}/{trials}"
        )
    low, high = proportion_confint(successes, trials, alpha=1.0 - confidence, method="wilson")
    return successes / trials, float(low), float(high)


def wilson_pooled(successes: Sequence[float], trials: Sequence[float], confidence: float = 0.95) -> Interval:
    """Wilson interval on successes pooled over seeds (one entry per seed), exactly as the authors pool.

    Their ``_pooled_binom`` (maths_plots.py) rounds the pooled count before the interval:
    correct = round(sum(successes)) with numpy's round half to even, total = sum(trials), and reports
    correct / total as the point estimate, with ``proportion_confint(correct, total, method="wilson")``.
    The tables pass, per seed, the metric's mean over prompts x prompts and the prompts (trials = prompts
    x seeds), so a fractional per-prompt value (pass@k of 1 of 4 samples) enters as its share of a prompt.
    """
    if len(successes) != len(trials) or len(successes) == 0:
        raise ValueError(
            f"wilson_pooled needs equal, non-empty sequences; got {len(successes)}, {len(trials)}"
        )
    n = np.asarray(trials, dtype=float)
    if not np.array_equal(n, np.round(n)):
        raise ValueError(f"wilson_pooled needs whole trials (prompts per seed), got {list(trials)}")
    # Round the pool, not each seed: theirs is int(np.round((acc * n).sum())).
    correct = int(np.round(np.sum(np.asarray(successes, dtype=float))))
    total = int(n.sum())
    _, low, high = wilson_interval(correct, total, confidence)
    return Interval(correct / total, low, high, len(successes), "wilson_pooled")


def seed_interval(
    method: str,
    values: Sequence[float],
    successes: Sequence[int] | None = None,
    trials: Sequence[int] | None = None,
    confidence: float = 0.95,
) -> Interval:
    """Interval for one table cell by ``method``; ``wilson_pooled`` needs per-seed counts."""
    check_ci_method(method)
    if method == "t_seeds":
        return t_interval(values, confidence)
    if method == "bootstrap":
        raise ValueError("bootstrap needs per-prompt values: use bootstrap_interval")
    if successes is None or trials is None:
        raise ValueError("wilson_pooled needs correct counts and trials per seed")
    return wilson_pooled(successes, trials, confidence)


def _prompt_matrix(per_seed: Sequence[dict[str, float]]) -> tuple[list[str], np.ndarray]:
    """Prompt ids present in every seed and a (seeds x prompts) array of their values."""
    if not per_seed:
        raise ValueError("bootstrap needs at least one seed of per-prompt values")
    ids = sorted(set.intersection(*(set(d) for d in per_seed)))
    if not ids:
        raise ValueError("bootstrap: the seeds share no prompt")
    return ids, np.array([[d[i] for i in ids] for d in per_seed], dtype=float)


def _resample_means(values: np.ndarray, resamples: int, seed: int) -> np.ndarray:
    """Means of ``values`` over ``resamples`` bootstrap draws of its entries (with replacement)."""
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, values.size, size=(resamples, values.size))
    return values[idx].mean(axis=1)


def bootstrap_interval(
    per_seed: Sequence[dict[str, float]],
    confidence: float = 0.95,
    resamples: int = BOOTSTRAP_RESAMPLES,
    seed: int = BOOTSTRAP_SEED,
) -> Interval:
    """Percentile bootstrap over prompts: each prompt's value averaged over seeds, prompts resampled.

    ``per_seed`` holds one {prompt id: value} per seed (NaN values, e.g. no answer to count, are left
    out of that prompt's average; a prompt NaN in every seed is dropped). The interval reflects which
    prompts the benchmark happens to hold, not seed-to-seed variation.
    """
    _, matrix = _prompt_matrix(per_seed)
    with np.errstate(all="ignore"):
        values = np.nanmean(matrix, axis=0) if np.isnan(matrix).any() else matrix.mean(axis=0)
    values = values[np.isfinite(values)]
    if values.size == 0:
        raise ValueError("bootstrap: no prompt has a value")
    means = _resample_means(values, resamples, seed)
    alpha = 1.0 - confidence
    low, high = np.quantile(means, [alpha / 2, 1 - alpha / 2])
    return Interval(float(values.mean()), float(low), float(high), len(per_seed), "bootstrap")


@dataclass(frozen=True)
class Paired:
    """Method A minus method B on the same prompts: mean difference, its interval and a paired test."""

    mean_a: float
    mean_b: float
    diff: float
    low: float
    high: float
    p_value: float
    n_prompts: int
    wins: int  # prompts where A > B
    losses: int  # prompts where A < B


def paired_comparison(
    a: Sequence[dict[str, float]],
    b: Sequence[dict[str, float]],
    confidence: float = 0.95,
    resamples: int = BOOTSTRAP_RESAMPLES,
    seed: int = BOOTSTRAP_SEED,
) -> Paired:
    """Compare two methods prompt by prompt (each averaged over its seeds) on the prompts both have.

    The interval is a percentile bootstrap over prompts of the mean difference; the p-value is a
    two-sided paired t-test (scipy ``ttest_rel``) on the per-prompt differences (1.0 when they are all 0).
    """
    ids_a, ma = _prompt_matrix(a)
    ids_b, mb = _prompt_matrix(b)
    common = sorted(set(ids_a) & set(ids_b))
    if not common:
        raise ValueError("paired comparison: the two methods share no prompt")
    pos_a, pos_b = {i: j for j, i in enumerate(ids_a)}, {i: j for j, i in enumerate(ids_b)}
    with np.errstate(all="ignore"):
        va = np.nanmean(ma[:, [pos_a[i] for i in common]], axis=0)
        vb = np.nanmean(mb[:, [pos_b[i] for i in common]], axis=0)
    keep = np.isfinite(va) & np.isfinite(vb)
    va, vb = va[keep], vb[keep]
    if va.size == 0:
        raise ValueError("paired comparison: no prompt has a value for both methods")
    d = va - vb
    means = _resample_means(d, resamples, seed)
    alpha = 1.0 - confidence
    low, high = np.quantile(means, [alpha / 2, 1 - alpha / 2])
    if np.allclose(d, d[0]) and d[0] == 0:
        p = 1.0
    elif d.size < 2 or np.all(d == d[0]):
        p = 0.0 if d.size > 1 else math.nan  # a constant non-zero difference: no variance, certain sign
    else:
        p = float(scipy.stats.ttest_rel(va, vb).pvalue)
    return Paired(float(va.mean()), float(vb.mean()), float(d.mean()), float(low), float(high), p,
                  int(d.size), int((d > 0).sum()), int((d < 0).sum()))  # fmt: skip


# --- Multiple comparisons --------------------------------------------------------------------------


def holm(pvalues: Sequence[float | None]) -> list[float]:
    """Holm's step-down adjusted p-values, in the input order; a missing (None or NaN) p-value stays NaN.

    The formula of statsmodels' ``multipletests(method="holm")`` (tests hold the two equal, bit for bit):
    sorted p times (m, m-1, ..., 1), running maximum, capped at 1. Written out because that function runs a
    full ``gc.collect()`` on every call: 0.2-0.3 s in a process that has imported transformers, and the
    claims table calls it once per claim (37 s of tests/analysis' 4 CPU minutes).
    """
    idx = [i for i, p in enumerate(pvalues) if p is not None and not math.isnan(p)]
    out = [math.nan] * len(pvalues)
    if idx:
        p = np.asarray([pvalues[i] for i in idx], dtype=float)
        order = np.argsort(p)
        adjusted = np.minimum(np.maximum.accumulate(p[order] * np.arange(p.size, 0, -1)), 1.0)
        for i, a in zip(np.asarray(idx)[order], adjusted, strict=True):
            out[int(i)] = float(a)
    return out
