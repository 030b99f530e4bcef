"""PSPO (arXiv 2509.21282): smooth pi_theta toward pi_old before forming the ratio; no clip, no min.

pi~ = (1 - alpha) pi_theta + alpha pi_old  =>  r~ = pi~ / pi_old = (1 - alpha) r + alpha, so
r~ - 1 = (1 - alpha)(r - 1) and the gradient is (1 - alpha) times noclip's everywhere (never zero for
alpha < 1, apart from log-ratios beyond the shared clamp).
"""

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


def smoothed_ratio(ratio: torch.Tensor, alpha: float) -> torch.Tensor:
    """The PSPO ratio ``(1 - alpha) r + alpha`` (paper Eq. 7)."""
    return ratio * (1.0 - alpha) + alpha


@register_method("pspo")
def pspo(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    alpha: float = 0.1,
) -> MethodOutput:
    """``-((1 - alpha) r + alpha) A``."""
    adv = token_advantages(advantages)
    lr, raw = log_ratio(logp, old_logp)
    ratio = torch.exp(lr)
    loss = -smoothed_ratio(ratio, alpha) * adv
    m = Masked(mask)
    with torch.no_grad():
        stats = m.stats("ratio", ratio.detach())
        zero = saturated(lr, raw) if alpha < 1.0 else torch.ones_like(raw, dtype=torch.bool)
        metrics = {
            **stats,
            # r~ is affine and increasing in r, so its stats follow from r's without another pass
            # (an empty batch keeps 0.0 rather than alpha).
            **{
                f"smoothed_{k}": torch.where(m.count > 0, smoothed_ratio(v, alpha), 0.0)
                for k, v in stats.items()
            },
            "zero_grad_frac": zero_grad_frac(m, zero, adv),
        }
    return MethodOutput(m.select(loss), metrics)
