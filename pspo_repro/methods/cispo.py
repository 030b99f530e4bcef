"""CISPO (MiniMax-M1): REINFORCE weighted by the detached, upper-clamped importance ratio."""

from __future__ import annotations

import torch

from pspo_repro.methods.base import Masked, MethodOutput, log_ratio, token_advantages
from pspo_repro.methods.registry import register_method


@register_method("cispo")
def cispo(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    eps_high: float = 5.0,
) -> MethodOutput:
    """``-sg(min(r, eps_high)) A logp`` (TRL's one-sided clamp; verl also clamps below).

    ``eps_high`` is an absolute cap on r (TRL ``epsilon_high`` with ``loss_type="cispo"``), not 1 + eps.
    The weight is detached, so no token's gradient is zeroed: clipping only bounds its size.
    """
    adv = token_advantages(advantages)
    with torch.no_grad():
        lr, _ = log_ratio(logp, old_logp)
        ratio = torch.exp(lr)
        weight = ratio.clamp(max=eps_high)
    loss = (weight * -adv) * logp
    m = Masked(mask)
    with torch.no_grad():
        metrics = {
            **m.stats("ratio", ratio),
            "clip_frac": m.frac((ratio > eps_high) & (adv > 0)),  # TRL's cispo_clip_ratio
        }
    return MethodOutput(m.select(loss), metrics)
