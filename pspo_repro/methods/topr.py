"""TOPR (Le Roux et al. 2025): REINFORCE on positive advantages, truncated importance sampling on negative ones."""

from __future__ import annotations

import torch

from pspo_repro.methods.base import Masked, MethodOutput, log_ratio, token_advantages
from pspo_repro.methods.registry import register_method


@register_method("topr")
def topr(
    logp: torch.Tensor, old_logp: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor
) -> MethodOutput:
    """``-sg(w) A logp`` with ``w = 1`` if ``A >= 0`` else ``clamp(r, 0, 1)``.

    Token-level ratio, as in the public implementations (the TOPR paper uses the sequence ratio). The weight is
    detached, so the gradient ``-w A grad(logp)`` is never zero for ``A != 0`` (w >= exp(-20) > 0).
    """
    adv = token_advantages(advantages)
    with torch.no_grad():
        lr, _ = log_ratio(logp, old_logp)
        ratio = torch.exp(lr)
        weight = torch.where(adv >= 0, 1.0, ratio.clamp(max=1.0))
    loss = (weight * -adv) * logp
    m = Masked(mask)
    with torch.no_grad():
        metrics = {
            **m.stats("ratio", ratio),
            "weight_mean": m.mean(weight),
            "truncated_frac": m.frac((adv < 0) & (ratio < 1.0)),  # negative tokens down-weighted
        }
    return MethodOutput(m.select(loss), metrics)
