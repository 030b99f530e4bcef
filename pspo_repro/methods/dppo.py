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

from pspo_repro.methods.base import Masked, MethodOutput, log_ratio, token_advantages
from pspo_repro.methods.registry import register_method

_MIN_MASS = 1e-12
_MIN_LOG_MASS = math.log(_MIN_MASS)


def binary_tv(logp: torch.Tensor, logq: torch.Tensor) -> torch.Tensor:
    """TV between Bernoulli(p) and Bernoulli(q): |p - q|."""
    return (logp.exp() - logq.exp()).abs()


def binary_kl(logp: torch.Tensor, logq: torch.Tensor) -> torch.Tensor:
    """KL(Bernoulli(q) || Bernoulli(p)) = q log(q/p) + (1-q) log((1-q)/(1-p)).

    ``expm1(log x) = -(1 - x)`` is exact near x = 1 and clamped so that 1 - x >= 1e-12; the second term is
    ``log(expm1(lq) / expm1(lp))`` (two negatives), and q = 1 + expm1(lq) (absolute error < 1e-7). Three
    transcendental passes instead of five: this runs on every token of every step.
    """
    lp, lq = logp.clamp(min=_MIN_LOG_MASS), logq.clamp(min=_MIN_LOG_MASS)
    em_q = torch.expm1(lq).clamp_(max=-_MIN_MASS)  # -(1 - q)
    em_p = torch.expm1(lp).clamp_(max=-_MIN_MASS)  # -(1 - p)
    log_ratio_rest = em_q.div(em_p).log_()  # log((1 - q) / (1 - p))
    q = em_q + 1.0
    return q.mul_(lq.sub_(lp)).addcmul_(em_q, log_ratio_rest, value=-1.0)


def _rest(mass: torch.Tensor) -> torch.Tensor:
    """Probability left outside the K ids (clamped: the K masses may round to a sum >= 1)."""
    return (1.0 - mass.sum(-1)).clamp(min=_MIN_MASS)


def topk_tv(topk_logps: torch.Tensor, topk_old_logps: torch.Tensor) -> torch.Tensor:
    """TV over mu's top-K ids plus the rest bucket: (sum_k |p_k - q_k| + |p_rest - q_rest|) / 2."""
    p, q = topk_logps.exp(), topk_old_logps.exp()  # each exp computed once: [B, T, K] passes dominate
    return ((p - q).abs().sum(-1) + (_rest(p) - _rest(q)).abs()) / 2


def topk_kl(topk_logps: torch.Tensor, topk_old_logps: torch.Tensor) -> torch.Tensor:
    """KL(mu || pi_theta) over mu's top-K ids plus the rest bucket."""
    lp, lq = topk_logps.clamp(min=_MIN_LOG_MASS), topk_old_logps.clamp(min=_MIN_LOG_MASS)
    q = lq.exp()
    p_rest, q_rest = _rest(lp.exp()), _rest(q)
    return (q * (lq - lp)).sum(-1) + q_rest * (q_rest.log() - p_rest.log())


def _dppo(logp, old_logp, advantages, mask, divergence, delta_low, delta_high, ratio_cap) -> MethodOutput:
    adv = token_advantages(advantages)
    m = Masked(mask)
    with torch.no_grad():
        lr, _ = log_ratio(logp.detach(), old_logp)
        ratio = torch.exp(lr)
        pos = (divergence > delta_high) & (lr > 0) & (adv > 0)  # lr > 0 <=> p > q
        neg = (divergence > delta_low) & (lr < 0) & (adv < 0)
        weight = ratio.clamp(max=ratio_cap).masked_fill_(pos | neg, 0.0)
        pos_frac, neg_frac = m.frac(pos), m.frac(neg)
        metrics = {
            **m.stats("ratio", ratio),
            "mask_frac": pos_frac + neg_frac,  # disjoint: opposite advantage signs
            "mask_pos_frac": pos_frac,
            "mask_neg_frac": neg_frac,
            "divergence_mean": m.mean(divergence),
            "divergence_max": m.max(divergence),
            "ratio_capped_frac": m.frac(ratio > ratio_cap),
            # the weight is detached, so a token's gradient is zero exactly when it is masked out
            "zero_grad_frac": pos_frac + neg_frac,
        }
    loss = (weight * -adv) * logp
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
