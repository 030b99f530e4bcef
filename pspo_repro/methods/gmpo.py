"""GMPO (Zhao et al. 2025, "Geometric-Mean Policy Optimization", arXiv 2507.20673), verl ``loss_mode="geo_mean"``.

GRPO maximises the arithmetic mean of the token terms ``r_t A``; GMPO maximises their geometric mean,
``A * prod_t r_t^(1/|y|)`` for a sequence-level advantage, which an outlier ratio moves far less. The clip
acts per token in log space *before* the mean, one-sided by the advantage's sign (PPO's pessimistic bound):
``log r_t`` is capped at ``eps_high`` when ``A > 0`` and floored at ``-eps_low`` when ``A < 0``.
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


@register_method("geo_mean")
def geo_mean(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    eps_low: float = 0.4,
    eps_high: float = 0.4,
) -> MethodOutput:
    """``-A_seq exp(mean_t l_t)`` on every unmasked token of the sequence, where ``l_t = min(log r_t, eps_high)``
    if ``A_t > 0``, ``max(log r_t, -eps_low)`` if ``A_t < 0``, ``0`` if ``A_t = 0``, and ``A_seq`` is the masked
    mean of ``A_t`` (verl: "we only support sequence level advantage").

    ``eps_*`` are in log space: the ratio band is ``(exp(-eps_low), exp(eps_high))``. The per-token loss is the
    sequence loss repeated on each token, so ``loss_agg=grpo`` (the default in conf/method/geo_mean.yaml)
    gives verl's ``mean over sequences``; the log-ratio is clamped to +-20 first (verl leaves it unclamped).
    """
    adv = token_advantages(advantages).expand_as(logp)
    lr, raw = log_ratio(logp, old_logp)
    pos, neg = adv > 0, adv < 0
    lr_min = torch.where(pos, lr.clamp(max=eps_high), torch.where(neg, lr.clamp(min=-eps_low), 0.0))
    maskf = mask.to(lr.dtype)
    n = maskf.sum(-1, keepdim=True).clamp(min=1.0)
    seq_ratio = torch.exp((lr_min * maskf).sum(-1, keepdim=True) / n)  # [B, 1]
    seq_adv = (adv * maskf).sum(-1, keepdim=True) / n
    loss = (-seq_adv * seq_ratio).expand_as(lr)
    m = Masked(mask)
    with torch.no_grad():
        high = pos & (lr > eps_high)
        low = neg & (lr < -eps_low)
        seq = Masked(mask.sum(-1) > 0)
        metrics = {
            **m.stats("ratio", torch.exp(lr.detach())),
            **seq.stats("seq_ratio", seq_ratio.detach().squeeze(-1)),
            "clip_frac": m.frac(high | low),
            "clip_high_frac": m.frac(high),
            "clip_low_frac": m.frac(low),
            "zero_grad_frac": zero_grad_frac(m, high | low | saturated(lr, raw), adv),
        }
    return MethodOutput(m.select(loss), metrics)
