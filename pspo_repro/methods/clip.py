"""GRPO-clip: PPO's clipped surrogate, with DAPO's decoupled eps_low/eps_high and an optional dual clip."""

from __future__ import annotations

import math

import torch

from pspo_repro.methods.base import (
    Masked,
    MethodOutput,
    constant,
    log_ratio,
    saturated,
    token_advantages,
    zero_grad_frac,
)
from pspo_repro.methods.registry import register_method


def ppo_clip_bounds(
    adv: torch.Tensor,
    eps_low: float,
    eps_high: float,
    delta: float | None,
    dtype: torch.dtype | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-row (or per-token) bounds ``(lo, hi)`` such that ``-A clamp(r, lo, hi)`` is the PPO loss.

    ``min(r A, clip(r, 1-eps_low, 1+eps_high) A)`` equals ``A min(r, 1+eps_high)`` for A > 0 and
    ``A max(r, 1-eps_low)`` for A < 0; a dual clip at ``delta`` caps the first at ``min(1+eps_high, delta)``
    and the second at ``max(1+eps_high, delta)``. One clamp with broadcast bounds replaces TRL's
    clamp + two products + min (same values and gradients, ~2x cheaper), and the bounds say exactly where
    the gradient is zero.

    The bounds are in ``dtype`` (the ratio's; default ``adv``'s) on ``adv``'s device, each rounded once from
    the Python float, exactly as ``torch.clamp(r, 1 - eps_low, 1 + eps_high)`` rounds TRL's bounds: built
    from Python floats, ``torch.where`` would make them float32, so a float64 ``1 + 0.2`` became
    1.2000000477 and a ratio of 1.2000000001 escaped the clip.
    """

    def c(value: float) -> torch.Tensor:
        return constant(value, adv.dtype if dtype is None else dtype, adv.device)

    upper = 1.0 + eps_high
    pos_hi, neg_hi = (upper, math.inf) if delta is None else (min(upper, delta), max(upper, delta))
    lo = torch.where(adv < 0, c(1.0 - eps_low), c(-math.inf))
    hi = torch.where(adv > 0, c(pos_hi), torch.where(adv < 0, c(neg_hi), c(math.inf)))
    return lo, hi


@register_method("clip")
def clip(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    eps_low: float = 0.2,
    eps_high: float = 0.2,
    delta: float | None = None,
) -> MethodOutput:
    """``-min(r A, clip(r, 1 - eps_low, 1 + eps_high) A)``; with ``delta``, ``r`` is capped at ``delta`` in the
    unclipped branch (TRL's ``delta``: bounds the loss of negative-advantage tokens whose ratio exploded)."""
    adv = token_advantages(advantages)
    lr, raw = log_ratio(logp, old_logp)
    ratio = torch.exp(lr)
    lo, hi = ppo_clip_bounds(adv, eps_low, eps_high, delta, ratio.dtype)
    loss = -adv * ratio.clamp(lo, hi)

    m = Masked(mask)
    with torch.no_grad():
        r = ratio.detach()
        low = r < lo  # == TRL's clip_ratio/low: r < 1 - eps_low and A < 0
        high = (r > 1.0 + eps_high) & (adv > 0)  # TRL's clip_ratio/high
        low_frac, high_frac = m.frac(low), m.frac(high)
        zero = low | (r > hi) | saturated(lr, raw)
        metrics = {
            **m.stats("ratio", r),
            "clip_frac": low_frac + high_frac,  # disjoint (different advantage signs): TRL's region_mean
            "clip_low_frac": low_frac,
            "clip_high_frac": high_frac,
            "zero_grad_frac": zero_grad_frac(m, zero, adv),
        }
    return MethodOutput(m.select(loss), metrics)
