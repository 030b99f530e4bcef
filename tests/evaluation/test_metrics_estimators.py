"""pass@k and majority vote against hand-computed values."""

import math

import pytest

from pspo_repro.evaluation.metrics import majority_vote, pass_at_k


def test_pass_at_k_hand_values():
    assert pass_at_k(16, 0, 1) == 0.0
    assert pass_at_k(16, 16, 16) == 1.0
    assert pass_at_k(4, 1, 1) == pytest.approx(0.25)
    # 1 - C(2,2)/C(4,2) = 1 - 1/6
    assert pass_at_k(4, 2, 2) == pytest.approx(5 / 6)
    assert pass_at_k(16, 3, 4) == pytest.approx(1 - math.comb(13, 4) / math.comb(16, 4))
    assert pass_at_k(5, 4, 2) == 1.0  # n - c < k


def test_pass_at_k_rejects_bad_input():
    with pytest.raises(ValueError, match="k <= n"):
        pass_at_k(4, 1, 8)


def test_majority_vote():
    assert majority_vote(["3", "3", "4"], [True, True, False]) is True
    assert majority_vote(["4", "3", "4"], [False, True, False]) is False
    assert majority_vote([None, None, "5"], [False, False, True]) is True
    assert majority_vote([None, None], [False, False]) is False
    assert majority_vote(["4", "3"], [False, True]) is False  # tie: first seen
