"""DPPO (arXiv 2602.04879): REINFORCE with a divergence-based token mask instead of ratio clipping.

``old_logp`` is the sampling policy mu. A token is dropped when it has already moved too far (divergence D
between pi_theta and mu at that position) *in the direction its advantage pushes*:
invalid = (A > 0 and D > delta_high and p > q) or (A < 0 and D > delta_low and p < q),
with p = pi_theta(a_t), q = mu(a_t). The loss is ``-sg(min(r, ratio_cap) * M) A logp``.

Four divergences: binary (sampled token vs. everything else) TV / KL, and top-K (mu's K most likely ids plus
one "rest" bucket) TV / KL. The top-K variants need two extra [B, T, K] tensors: ``topk_old_logps`` (mu's
log-probs on its top-K ids, collected at rollout) and ``topk_logps`` (pi_theta on the same ids). Divergences
are computed in fp32 under no_grad with masses clamped at 1e-12.
"""

from __future__ import annotations

import math

import torch

from pspo_repro.methods.base import Masked, MethodOutput, log_ratio, token_advantages, zero_grad_frac
from pspo_repro.methods.registry import register_method

_MIN_MASS = 1e-12
_MIN_LOG_MASS = math.log(_MIN_MASS)


def _log1m_exp(logx: torch.Tensor) -> torch.Tensor:
    """log(1 - exp(logx)), with 1 - x clamped at 1e-12 (expm1 keeps precision for x near 1)."""
    return torch.log((-torch.expm1(logx)).clamp(min=_MIN_MASS))


def binary_tv(logp: torch.Tensor, logq: torch.Tensor) -> torch.Tensor:
    """TV between Bernoulli(p) and Bernoulli(q): |p - q|."""
    return (logp.exp() - logq.exp()).abs()


def binary_kl(logp: torch.Tensor, logq: torch.Tensor) -> torch.Tensor:
    """KL(Bernoulli(q) || Bernoulli(p)) = q log(q/p) + (1-q) log((1-q)/(1-p))."""
    logp, logq = logp.clamp(min=_MIN_LOG_MASS), logq.clamp(min=_MIN_LOG_MASS)
    return logq.exp() * (logq - logp) + (-torch.expm1(logq)) * (_log1m_exp(logq) - _log1m_exp(logp))


def _rest(logps: torch.Tensor) -> torch.Tensor:
    return (1.0 - logps.exp().sum(-1)).clamp(min=_MIN_MASS)


def topk_tv(topk_logps: torch.Tensor, topk_old_logps: torch.Tensor) -> torch.Tensor:
    """TV over mu's top-K ids plus the rest bucket: (sum_k |p_k - q_k| + |p_rest - q_rest|) / 2."""
    p, q = topk_logps.exp(), topk_old_logps.exp()
    rest = (_rest(topk_logps) - _rest(topk_old_logps)).abs()
    return ((p - q).abs().sum(-1) + rest) / 2


def topk_kl(topk_logps: torch.Tensor, topk_old_logps: torch.Tensor) -> torch.Tensor:
    """KL(mu || pi_theta) over mu's top-K ids plus the rest bucket."""
    lp, lq = topk_logps.clamp(min=_MIN_LOG_MASS), topk_old_logps.clamp(min=_MIN_LOG_MASS)
    p_rest, q_rest = _rest(lp), _rest(lq)
    return (lq.exp() * (lq - lp)).sum(-1) + q_rest * (q_rest.log() - p_rest.log())


def _dppo(logp, old_logp, advantages, mask, divergence, delta_low, delta_high, ratio_cap) -> MethodOutput:
    adv = token_advantages(advantages)
    m = Masked(mask)
    with torch.no_grad():
        lr, _ = log_ratio(logp, old_logp)
        ratio = torch.exp(lr)
        up = logp.detach() > old_logp
        pos = (adv > 0) & (divergence > delta_high) & up
        neg = (adv < 0) & (divergence > delta_low) & (logp.detach() < old_logp)
        invalid = pos | neg
        weight = torch.where(invalid, 0.0, ratio.clamp(max=ratio_cap))
        metrics = {
            **m.stats("ratio", ratio),
            "mask_frac": m.frac(invalid),
            "mask_pos_frac": m.frac(pos),
            "mask_neg_frac": m.frac(neg),
            "divergence_mean": m.mean(divergence),
            "divergence_max": m.max(divergence),
            "ratio_capped_frac": m.frac(ratio > ratio_cap),
            "zero_grad_frac": zero_grad_frac(m, invalid, adv),
        }
    loss = -(weight * adv) * logp
    return MethodOutput(m.select(loss), metrics)


def _check_topk(topk: int, *tensors: torch.Tensor) -> None:
    for t in tensors:
        if t.shape[-1] != topk:
            raise ValueError(
                f"top-K inputs have K={t.shape[-1]} but the method was configured with topk={topk}"
            )


@register_method("dppo_binary_tv")
def dppo_binary_tv(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    delta_low: float = 0.15,
    delta_high: float = 0.15,
    ratio_cap: float = 20.0,
) -> MethodOutput:
    """DPPO with D = |pi_theta(a_t) - mu(a_t)|."""
    with torch.no_grad():
        div = binary_tv(logp.detach().float(), old_logp.float())
    return _dppo(logp, old_logp, advantages, mask, div, delta_low, delta_high, ratio_cap)


@register_method("dppo_binary_kl")
def dppo_binary_kl(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    delta_low: float = 0.05,
    delta_high: float = 0.05,
    ratio_cap: float = 20.0,
) -> MethodOutput:
    """DPPO with D = KL(Bernoulli(mu(a_t)) || Bernoulli(pi_theta(a_t)))."""
    with torch.no_grad():
        div = binary_kl(logp.detach().float(), old_logp.float())
    return _dppo(logp, old_logp, advantages, mask, div, delta_low, delta_high, ratio_cap)


@register_method("dppo_topk_tv")
def dppo_topk_tv(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    topk_old_logps: torch.Tensor,
    topk_logps: torch.Tensor,
    delta_low: float = 0.15,
    delta_high: float = 0.15,
    ratio_cap: float = 20.0,
    topk: int = 20,
) -> MethodOutput:
    """DPPO with top-K TV; ``topk`` must equal the last dim of the top-K tensors (the trainer collects K)."""
    _check_topk(topk, topk_old_logps, topk_logps)
    with torch.no_grad():
        div = topk_tv(topk_logps.detach().float(), topk_old_logps.float())
    return _dppo(logp, old_logp, advantages, mask, div, delta_low, delta_high, ratio_cap)


@register_method("dppo_topk_kl")
def dppo_topk_kl(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    topk_old_logps: torch.Tensor,
    topk_logps: torch.Tensor,
    delta_low: float = 0.05,
    delta_high: float = 0.05,
    ratio_cap: float = 20.0,
    topk: int = 20,
) -> MethodOutput:
    """DPPO with top-K KL(mu || pi_theta); ``topk`` must equal the last dim of the top-K tensors."""
    _check_topk(topk, topk_old_logps, topk_logps)
    with torch.no_grad():
        div = topk_kl(topk_logps.detach().float(), topk_old_logps.float())
    return _dppo(logp, old_logp, advantages, mask, div, delta_low, delta_high, ratio_cap)
