"""Clip-Cov and KL-Cov (Cui et al. 2025, "The Entropy Mechanism of Reinforcement Learning for Reasoning
Language Models", arXiv 2505.22617), as in verl's ``loss_mode="clip_cov"`` / ``"kl_cov"``.

The paper traces entropy collapse to the few tokens with a large covariance between log-probability and
advantage, ``Cov(logp, A) ~ (A - mean A)(logp - mean logp)`` per token, and restrains only those:
Clip-Cov detaches a random ``clip_cov_ratio`` fraction of the tokens whose covariance lies in
``(cov_lb, cov_ub)``; KL-Cov adds ``kl_coef |log r|`` to the ``kl_cov_ratio`` fraction with the largest
covariance. The centring means run over the unmasked tokens of the tensors passed in (in the trainer: one
micro-batch, as in verl, which computes them inside the loss function), so no extra trainer input is needed.
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
from pspo_repro.methods.clip import ppo_clip_bounds
from pspo_repro.methods.registry import register_method


@torch.no_grad()
def token_covariance(logp: torch.Tensor, adv: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    """``(A - mean A)(logp - mean logp)`` per token, means over ``valid`` tokens (``[B, T]``; 0 elsewhere).

    At least float32 (a bf16 product would round the ranking); advantages broadcast to tokens first, so a
    sequence-level ``A`` is weighted by its length, as verl's token-level advantages are.
    """
    dtype = torch.promote_types(logp.dtype, torch.float32)
    a = adv.expand_as(logp).to(dtype)
    lp = logp.detach().to(dtype)
    w = valid.to(dtype)
    n = w.sum().clamp(min=1.0)
    cov = (a - (a * w).sum() / n) * (lp - (lp * w).sum() / n)
    return torch.where(valid, cov, 0.0)


@register_method("clip_cov")
def clip_cov(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    eps_low: float = 0.2,
    eps_high: float = 0.2,
    clip_cov_ratio: float = 2e-4,
    cov_lb: float = 1.0,
    cov_ub: float = 5.0,
) -> MethodOutput:
    """PPO's ``-min(r A, clip(r, 1 - eps_low, 1 + eps_high) A)``, times 0 on the Clip-Cov tokens.

    Clip-Cov tokens: ``max(int(clip_cov_ratio * n_tokens), 1)`` drawn uniformly (``torch.randperm`` on the
    global CPU generator, as verl; seeded by the trainer) among the unmasked, not PPO-clipped tokens with
    ``cov_lb < cov < cov_ub``. Their gradient is zero, like a clipped token's.
    """
    adv = token_advantages(advantages)
    lr, raw = log_ratio(logp, old_logp)
    ratio = torch.exp(lr)
    lo, hi = ppo_clip_bounds(adv, eps_low, eps_high, None, ratio.dtype)
    m = Masked(mask)
    with torch.no_grad():
        r = ratio.detach()
        clipped = (r < lo) | (r > hi)  # == verl's clip_by_origin (the clipped branch is the larger loss)
        cov = token_covariance(logp, adv, m.bool)
        candidates = m.bool & ~clipped & (cov > cov_lb) & (cov < cov_ub)
        idx = torch.nonzero(candidates)  # row-major, as verl's
        detach = torch.zeros(m.bool.shape, dtype=torch.bool, device=m.bool.device)
        if len(idx) > 0:
            n_clip = max(int(clip_cov_ratio * int(m.count.item())), 1)
            pick = idx[torch.randperm(len(idx))[:n_clip].to(idx.device)]
            detach[pick[:, 0], pick[:, 1]] = True
    loss = torch.where(detach, 0.0, -adv * ratio.clamp(lo, hi))
    with torch.no_grad():
        metrics = {
            **m.stats("ratio", r),
            "clip_frac": m.frac(clipped),
            "cov_clip_frac": m.frac(detach),  # verl's pg_clipfrac for clip_cov
            "cov_max": m.max(cov),
            "zero_grad_frac": zero_grad_frac(m, clipped | detach | saturated(lr, raw), adv),
        }
    return MethodOutput(m.select(loss), metrics)


@register_method("kl_cov")
def kl_cov(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    kl_cov_ratio: float = 2e-4,
    kl_coef: float = 1.0,
) -> MethodOutput:
    """``-r A``, plus ``kl_coef |log r|`` on the ``max(int(kl_cov_ratio * n_tokens), 1)`` unmasked tokens of
    largest covariance (``torch.topk``, deterministic). No clip: outside those tokens the gradient is noclip's.
    """
    adv = token_advantages(advantages)
    lr, raw = log_ratio(logp, old_logp)
    ratio = torch.exp(lr)
    m = Masked(mask)
    with torch.no_grad():
        penalised = torch.zeros(
            m.bool.shape, dtype=torch.bool, device=m.bool.device
        )  # contiguous: viewed flat
        valid_idx = torch.nonzero(m.bool.reshape(-1), as_tuple=True)[0]
        if len(valid_idx) > 0:
            flat = m.bool.reshape(-1)
            a = adv.expand_as(logp).reshape(-1)[flat]
            lp = logp.detach().reshape(-1)[flat]
            dtype = torch.promote_types(lp.dtype, torch.float32)
            a, lp = a.to(dtype), lp.to(dtype)
            cov = (a - a.mean()) * (lp - lp.mean())  # over the valid tokens, as verl
            k = max(1, int(len(cov) * kl_cov_ratio))
            top = valid_idx[torch.topk(cov, k, largest=True).indices]
            penalised.view(-1)[top] = True
    loss = -adv * ratio + torch.where(penalised, kl_coef * lr.abs(), 0.0)
    with torch.no_grad():
        metrics = {
            **m.stats("ratio", ratio.detach()),
            "kl_cov_frac": m.frac(penalised),
            "abs_log_ratio_mean": m.mean(raw.abs()),  # verl's actor/ppo_kl for kl_cov
            "zero_grad_frac": zero_grad_frac(m, saturated(lr, raw), adv),
        }
    return MethodOutput(m.select(loss), metrics)
