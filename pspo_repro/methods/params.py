"""Hyperparameter rules, keyed by parameter name so every method shares one definition of each range."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any


def _real(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)


def _rule(check: Callable[[float], bool], allowed: str, *, nullable: bool = False, integer: bool = False):
    def ok(v: Any) -> bool:
        if v is None:
            return nullable
        if integer and not (isinstance(v, int) and not isinstance(v, bool)):
            return False
        return _real(v) and check(v)

    return ok, allowed


# name -> (predicate, allowed range as shown in error messages)
PARAM_RULES: dict[str, tuple[Callable[[Any], bool], str]] = {
    "alpha": _rule(lambda v: 0.0 <= v <= 1.0, "a number in [0, 1]"),
    "tau": _rule(lambda v: v > 0, "a number > 0"),
    "tau_pos": _rule(lambda v: v > 0, "a number > 0"),
    "tau_neg": _rule(lambda v: v > 0, "a number > 0"),
    "eps_low": _rule(lambda v: v >= 0, "a number >= 0"),
    "eps_high": _rule(lambda v: v >= 0, "a number >= 0"),
    "delta": _rule(lambda v: v >= 0, "null or a number >= 0", nullable=True),
    "delta_low": _rule(lambda v: v >= 0, "a number >= 0"),
    "delta_high": _rule(lambda v: v >= 0, "a number >= 0"),
    "kl_coef": _rule(lambda v: v >= 0, "a number >= 0"),
    "ratio_cap": _rule(lambda v: v > 0, "a number > 0"),
    "topk": _rule(lambda v: v >= 1, "an integer >= 1", integer=True),
    # Clip-Cov / KL-Cov: the fraction of tokens selected, and Clip-Cov's covariance window
    "clip_cov_ratio": _rule(lambda v: 0 < v <= 1, "a number in (0, 1]"),
    "kl_cov_ratio": _rule(lambda v: 0 < v <= 1, "a number in (0, 1]"),
    "cov_lb": _rule(lambda v: True, "a finite number"),
    "cov_ub": _rule(lambda v: True, "a finite number"),
    "dro_beta": _rule(lambda v: v > 0, "a number > 0"),  # verl raises unless dro_beta > 0
    # VESPO's gamma weighting phi(w) = e^lambda w^k e^(-lambda w)
    "k_pos": _rule(lambda v: v >= 0, "a number >= 0"),
    "k_neg": _rule(lambda v: v >= 0, "a number >= 0"),
    "lambda_pos": _rule(lambda v: v > 0, "a number > 0"),
    "lambda_neg": _rule(lambda v: v > 0, "a number > 0"),
    # dual-clip cap c of GPPO / CE-GPPO / DCPO: the authors' code asserts clip_ratio_c > 1
    "clip_c": _rule(lambda v: v > 1, "a number > 1"),
    # CE-GPPO's gradient scales on low-clipped (A < 0) and high-clipped (A > 0) tokens
    "beta_low": _rule(lambda v: v >= 0, "a number >= 0"),
    "beta_high": _rule(lambda v: v >= 0, "a number >= 0"),
    # M2PO: the authors' budget on the harmful tokens' mean (log r)^2 and their floors on the clip band's width
    "m2_budget": _rule(lambda v: v > 0, "a number > 0"),
    "miniclip_low": _rule(lambda v: 0 <= v <= 1, "null or a number in [0, 1]", nullable=True),
    "miniclip_high": _rule(lambda v: v >= 0, "null or a number >= 0", nullable=True),
    # AReaL's M2PO port: its bound on the kept tokens' mean (log r)^2, and whether it divides by the kept count
    "m2_threshold": _rule(lambda v: v > 0, "a number > 0"),
    "kept_token_norm": (lambda v: isinstance(v, bool), "true or false"),
    "kl_tau": _rule(lambda v: v >= 0, "a number >= 0"),  # prime-rl's weight of the (log r)^2 term
    "ipo_threshold": _rule(lambda v: v >= 0, "a number >= 0"),  # prime-rl ipo's bound on |p - q|
    # ASPO / Archer: the clip bounds of the high-entropy tokens, and the per-response entropy quantile
    "eps_low_high_entropy": _rule(lambda v: v >= 0, "a number >= 0"),
    "eps_high_high_entropy": _rule(lambda v: v >= 0, "a number >= 0"),
    "entropy_quantile": _rule(lambda v: 0.0 <= v <= 1.0, "a number in [0, 1]"),
    # AReaL's decoupled PPO: tokens with pi_prox / pi_behav above it are rejected (its RejectionSamplingConfig:
    # "for 'ratio' metric: must be > 1.0")
    "behav_imp_weight_cap": _rule(
        lambda v: v > 1, "null or a number > 1", nullable=True
    ),  # null: no rejection
    # BAPO: explicit ratio bounds searched per batch (start, maximum, step) and the target P / N
    "adv_ratio_target": _rule(lambda v: v >= 0, "a number >= 0"),
    "ratio_lower_start": _rule(lambda v: 0 < v <= 1, "a number in (0, 1]"),
    "ratio_lower_max": _rule(lambda v: 0 < v <= 1, "a number in (0, 1]"),
    "ratio_lower_step": _rule(lambda v: v >= 0, "a number >= 0"),
    "ratio_upper_start": _rule(lambda v: v >= 1, "a number >= 1"),
    "ratio_upper_max": _rule(lambda v: v >= 1, "a number >= 1"),
    "ratio_upper_step": _rule(lambda v: v >= 0, "a number >= 0"),
    # ERC: the open band (low, high) of H_theta / H_old inside which a token keeps its gradient
    "entropy_ratio_low": _rule(lambda v: v >= 0, "a number >= 0"),
    "entropy_ratio_high": _rule(lambda v: v > 0, "a number > 0"),
    # verl bypass_mode's rejection thresholds between the current and the rollout policy; null: estimator off.
    # k1 bounds the ratio pi_old / pi_theta from below / above (so the kept band always contains ratio 1)
    "rs_k1_low": _rule(lambda v: 0 < v <= 1, "null or a number in (0, 1]", nullable=True),
    "rs_k1_high": _rule(lambda v: v >= 1, "null or a number >= 1", nullable=True),
    "rs_k2": _rule(lambda v: v > 0, "null or a number > 0", nullable=True),
    "rs_k3": _rule(lambda v: v > 0, "null or a number > 0", nullable=True),
}


# Pairs of hyperparameters that must agree, checked for every method that has both: (low, high, strict).
# strict: low < high (an open band that would be empty otherwise); else low <= high (a start and its maximum).
PARAM_ORDER: tuple[tuple[str, str, bool], ...] = (
    ("ratio_lower_start", "ratio_lower_max", False),  # BAPO raises c_low from its start up to its maximum
    ("ratio_upper_start", "ratio_upper_max", False),  # and c_high likewise
    ("entropy_ratio_low", "entropy_ratio_high", True),  # ERC's band (low, high) of H_theta / H_old
    ("cov_lb", "cov_ub", True),  # Clip-Cov's window cov_lb < cov < cov_ub
)


def check_param_order(method: str, params: dict[str, Any]) -> None:
    """Raise a one-line ValueError if a pair of ``PARAM_ORDER`` is out of order in ``params`` (each value
    already checked by ``check_param``)."""
    for low, high, strict in PARAM_ORDER:
        if low not in params or high not in params:
            continue
        a, b = params[low], params[high]
        if (a >= b) if strict else (a > b):
            rule = f"{low} < {high}" if strict else f"{low} <= {high}"
            what = "not below" if strict else "above"
            raise ValueError(f"method {method!r}: {low}={a!r} is {what} {high}={b!r}; allowed: {rule}")


def check_param(method: str, key: str, value: Any) -> None:
    """Raise a one-line ValueError if ``value`` is not allowed for parameter ``key``."""
    ok, allowed = PARAM_RULES[key]
    if not ok(value):
        shown = repr(value).replace("\n", " ")[:80]
        raise ValueError(
            f"method {method!r}: parameter {key}={shown} is invalid; allowed: {key} is {allowed}"
        )
