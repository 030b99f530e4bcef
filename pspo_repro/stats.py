"""Statistics for evaluation and tables: pass@k, majority vote, confidence intervals.

Pure numpy/scipy/statsmodels: no torch, so it is testable and importable anywhere.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Hashable, Sequence
from dataclasses import dataclass

import numpy as np
import scipy.stats
from statsmodels.stats.proportion import proportion_confint


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k for one prompt: 1 - C(n-c, k) / C(n, k) (Chen et al. 2021).

    ``n`` samples of which ``c`` are correct. Requires 1 <= k <= n and 0 <= c <= n.
    """
    if not (0 <= c <= n) or not (1 <= k <= n):
        raise ValueError(f"pass_at_k needs 0 <= c <= n and 1 <= k <= n, got n={n}, c={c}, k={k}")
    if n - c < k:
        return 1.0
    # Product form avoids huge binomials: prod_{i=n-c+1}^{n} (1 - k/i).
    return float(1.0 - np.prod(1.0 - k / np.arange(n - c + 1, n + 1)))


def majority_vote(answers: Sequence[Hashable | None], correct: Sequence[bool]) -> bool:
    """Whether the most frequent non-empty answer is a correct one (ties: first seen wins).

    ``answers[i]`` is sample i's normalised final answer (None when none was found) and
    ``correct[i]`` whether sample i was graded correct.
    """
    if len(answers) != len(correct):
        raise ValueError(f"majority_vote: {len(answers)} answers but {len(correct)} grades")
    counts = Counter(a for a in answers if a is not None)
    if not counts:
        return False
    top = max(counts.values())
    winner = next(a for a in answers if a is not None and counts[a] == top)
    return bool(next(c for a, c in zip(answers, correct, strict=True) if a == winner))


# --- Confidence intervals for tables -------------------------------------------------------------
# Two interval methods, chosen per aggregation run and named in every caption:
#   t_seeds        Student t over the per-seed means (seed-to-seed variation; needs n >= 2 seeds);
#   wilson_pooled  Wilson score interval on the mean of per-prompt accuracies pooled over seeds, trials =
#                  prompts x seeds (the authors' code, pooled over seeds).
CI_METHODS = ("t_seeds", "wilson_pooled")


@dataclass(frozen=True)
class Interval:
    """A point estimate with its interval; ``low``/``high`` are NaN when no interval exists."""

    mean: float
    low: float
    high: float
    n: int  # number of seeds behind the estimate
    method: str

    @property
    def has_interval(self) -> bool:
        """Whether a real interval exists (a single seed under ``t_seeds`` has none)."""
        return not (math.isnan(self.low) or math.isnan(self.high))


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
    sem = float(scipy.stats.sem(x))  # sample sd (ddof=1) / sqrt(n)
    if sem == 0.0:
        # scipy returns NaN for scale 0; identical seeds give a degenerate but real interval.
        return Interval(mean, mean, mean, int(x.size), "t_seeds")
    low, high = scipy.stats.t.interval(confidence, x.size - 1, loc=mean, scale=sem)
    return Interval(mean, float(low), float(high), int(x.size), "t_seeds")


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
    """Wilson interval on successes pooled over seeds (one entry per seed).

    The point estimate is the pooled proportion sum(successes) / sum(trials). The tables pass, per seed,
    mean per-prompt accuracy x prompts and prompts (the authors' trials = prompts x seeds).
    """
    if len(successes) != len(trials) or len(successes) == 0:
        raise ValueError(
            f"wilson_pooled needs equal, non-empty sequences; got {len(successes)}, {len(trials)}"
        )
    p, low, high = wilson_interval(float(np.sum(successes)), float(np.sum(trials)), confidence)
    return Interval(p, low, high, len(successes), "wilson_pooled")


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
    if successes is None or trials is None:
        raise ValueError("wilson_pooled needs correct counts and trials per seed")
    return wilson_pooled(successes, trials, confidence)
