"""GSPO (Zheng et al. 2025): the clipped surrogate on the sequence ratio exp(mean_t log r_t)."""

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
from pspo_repro.methods.clip import ppo_clip_bounds
from pspo_repro.methods.registry import register_method


def sequence_clip(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    eps_low: float,
    eps_high: float,
    delta: float | None = None,
) -> MethodOutput:
    """``-min(s A, clip(s, 1 - eps_low, 1 + eps_high) A)`` on every unmasked token, ``s`` the sequence ratio.

    Shared by GSPO and LUSPO (same per-token loss; LUSPO differs in its aggregation only). Token log-ratios
    are clamped before the mean, so the mean is within the clamp too. ``delta``: TRL's dual clip, ``s`` capped
    at ``delta`` in the unclipped branch (as clip's).
    """
    adv = token_advantages(advantages)
    lr, raw = log_ratio(logp, old_logp)
    maskf = mask.to(lr.dtype)
    seq_lr = (lr * maskf).sum(-1, keepdim=True) / maskf.sum(-1, keepdim=True).clamp(min=1.0)
    s = torch.exp(seq_lr)  # [B, 1]
    lo, hi = ppo_clip_bounds(adv, eps_low, eps_high, delta, s.dtype)
    loss = -adv * s.clamp(lo, hi)
    m = Masked(mask)
    with torch.no_grad():
        sd = s.detach()
        region = (sd < lo) | (sd > hi)
        # the clamp of one token removes that token's contribution; the sequence's others still flow
        zero = region | saturated(lr, raw)
        seq = Masked(mask.sum(-1) > 0)  # sequences with at least one token
        metrics = {
            **seq.stats("seq_ratio", sd.squeeze(-1)),
            "clip_frac": m.frac(region),
            "zero_grad_frac": zero_grad_frac(m, zero, adv),
        }
    return MethodOutput(m.select(loss.expand_as(lr)), metrics)


@register_method("gspo")
def gspo(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    eps_low: float = 3e-4,
    eps_high: float = 4e-4,
) -> MethodOutput:
    """``-min(s A, clip(s, 1 - eps_low, 1 + eps_high) A)`` with ``s = exp(masked mean of log r)`` per sequence.

    Matches TRL's ``importance_sampling_level="sequence"``. ``clip_frac``/``zero_grad_frac`` are token-weighted
    (TRL counts sequences).
    """
    return sequence_clip(logp, old_logp, advantages, mask, eps_low, eps_high)
