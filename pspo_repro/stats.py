"""Statistics for evaluation and tables: pass@k, majority vote, confidence intervals.

Pure numpy/scipy/statsmodels: no torch, so it is testable and importable anywhere.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Hashable, Sequence

import numpy as np


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
