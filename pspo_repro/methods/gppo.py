"""GPPO (Klear-Reasoner, arXiv 2508.07629) and CE-GPPO (arXiv 2509.20712): gradient-preserving PPO-clip.

PPO-clip with verl's dual clip, except that a clipped token keeps a gradient: the clamp bound ``b`` is
replaced by ``b r / sg(r)``, whose value is ``b`` and whose gradient is ``b grad(logp)``. GPPO's loss value
equals dual-clip PPO's (``method=clip method.delta=<clip_c>``); only the gradient differs. CE-GPPO scales the
clipped tokens' gradient by ``beta_low`` (``A < 0``, ``r < 1 - eps_low``) and ``beta_high`` (``A > 0``,
``r > 1 + eps_high``), which scales their loss value too. Read from Kwai-Klear/CE-GPPO (commit 10558fe)
``verl/trainer/ppo/core_algos.py``: ``compute_gppo_loss`` and ``compute_gppo_loss_general_beta``.
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


def _gradient_preserving_clip(
    logp, old_logp, advantages, mask, eps_low, eps_high, clip_c, beta_low, beta_high
) -> MethodOutput:
    adv = token_advantages(advantages)
    lr, raw = log_ratio(logp, old_logp)
    ratio = torch.exp(lr)
    r = ratio.detach()
    low = (adv < 0) & (r < 1.0 - eps_low)
    high = (adv > 0) & (r > 1.0 + eps_high)
    unit = ratio / r  # value 1, gradient grad(logp): carries b * grad(logp) through a clipped token
    surrogate = torch.where(
        low,
        (beta_low * (1.0 - eps_low)) * unit,
        torch.where(high, (beta_high * (1.0 + eps_high)) * unit, ratio),
    )
    # verl's dual clip, A < 0 only: min(-A c, -A s) = -A min(c, s); the cap is a constant (zero gradient)
    dual = (adv < 0) & (surrogate.detach() > clip_c)
    surrogate = torch.where(dual, torch.full_like(surrogate, clip_c), surrogate)
    loss = -adv * surrogate

    m = Masked(mask)
    with torch.no_grad():
        low_frac, high_frac = m.frac(low), m.frac(high)
        zero = dual | saturated(lr, raw)
        if beta_low == 0.0:
            zero = zero | low
        if beta_high == 0.0:
            zero = zero | high
        metrics = {
            **m.stats("ratio", r),
            "clip_frac": low_frac + high_frac,  # disjoint (opposite advantage signs)
            "clip_low_frac": low_frac,
            "clip_high_frac": high_frac,
            "dual_clip_frac": m.frac(dual),
            "zero_grad_frac": zero_grad_frac(m, zero, adv),
        }
    return MethodOutput(m.select(loss), metrics)


@register_method("gppo")
def gppo(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    eps_low: float = 0.2,
    eps_high: float = 0.2,
    clip_c: float = 3.0,
) -> MethodOutput:
    """Dual-clip PPO whose clipped tokens keep the gradient ``-b A grad(logp)`` (``b`` the bound they passed).

    Value: ``-A clip(r)`` as PPO; gradient ``-(1 - eps_low) A`` for ``A < 0, r < 1 - eps_low``,
    ``-(1 + eps_high) A`` for ``A > 0, r > 1 + eps_high``, ``-r A`` inside; zero only past the dual clip
    (``A < 0, r > clip_c``) and at the log-ratio clamp.
    """
    return _gradient_preserving_clip(logp, old_logp, advantages, mask, eps_low, eps_high, clip_c, 1.0, 1.0)


@register_method("ce_gppo")
def ce_gppo(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    eps_low: float = 0.2,
    eps_high: float = 0.2,
    clip_c: float = 3.0,
    beta_low: float = 0.25,
    beta_high: float = 1.0,
) -> MethodOutput:
    """GPPO with the clipped tokens' term scaled: ``-beta_low (1 - eps_low) A r / sg(r)`` (``A < 0``,
    ``r < 1 - eps_low``), ``-beta_high (1 + eps_high) A r / sg(r)`` (``A > 0``, ``r > 1 + eps_high``),
    ``-r A`` otherwise, then the dual clip at ``clip_c`` for ``A < 0``."""
    return _gradient_preserving_clip(
        logp, old_logp, advantages, mask, eps_low, eps_high, clip_c, beta_low, beta_high
    )
