"""GRPO-clip: PPO's clipped surrogate, with DAPO's decoupled eps_low/eps_high and an optional dual clip."""

from __future__ import annotations

import torch

from pspo_repro.methods.base import (
    Masked,
    MethodOutput,
    log_ratio,
    saturated,
    token_advantages,
    zero_grad_frac,
)
from pspo_repro.methods.registry import register_method


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
    clipped = ratio.clamp(1.0 - eps_low, 1.0 + eps_high)
    unclipped = ratio if delta is None else ratio.clamp(max=delta)
    loss = -torch.minimum(unclipped * adv, clipped * adv)

    m = Masked(mask)
    with torch.no_grad():
        r = ratio.detach()
        low = (r < 1.0 - eps_low) & (adv < 0)  # TRL's clip_ratio/low: clipped branch selected, A < 0
        high = (r > 1.0 + eps_high) & (adv > 0)  # TRL's clip_ratio/high
        region = low | high
        zero = region | saturated(raw)
        if delta is not None:
            # The capped branch delta*A is constant: it wins for A > 0 once r > delta, and for A < 0 once
            # r > max(delta, 1 + eps_high) (below that the clipped branch still follows r).
            capped = ((adv > 0) & (r > delta)) | ((adv < 0) & (r > max(delta, 1.0 + eps_high)))
            zero = zero | capped
        metrics = {
            **m.stats("ratio", r),
            "clip_frac": m.frac(region),
            "clip_low_frac": m.frac(low),
            "clip_high_frac": m.frac(high),
            "zero_grad_frac": zero_grad_frac(m, zero, adv),
        }
    return MethodOutput(m.select(loss), metrics)
