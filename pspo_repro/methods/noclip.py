"""GRPO-noclip: the plain importance-weighted surrogate (paper's baseline; with num_iterations=1, r == 1)."""

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


@register_method("noclip")
def noclip(
    logp: torch.Tensor, old_logp: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor
) -> MethodOutput:
    """``-r A`` with no trust region; its gradient ``-A r grad(logp)`` is the reference the others modify."""
    adv = token_advantages(advantages)
    lr, raw = log_ratio(logp, old_logp)
    ratio = torch.exp(lr)
    loss = -ratio * adv
    m = Masked(mask)
    with torch.no_grad():
        metrics = {
            **m.stats("ratio", ratio.detach()),
            "zero_grad_frac": zero_grad_frac(m, saturated(lr, raw), adv),
        }
    return MethodOutput(m.select(loss), metrics)
