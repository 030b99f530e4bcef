"""DCPO (arXiv 2509.02333): dual-clip PPO whose clip bounds depend on the old token probability q.

Read from lime-RL/DCPO (commit 01787b0) ``verl/trainer/ppo/core_algos.py``: ``get_clip_low_high`` and
``compute_policy_loss_dcpo`` with ``clip_type="dynamic"`` (the setting of ``recipe/dcpo/run_dcpo.sh``):
``lo(q) = (1 + sqrt(max(0, 1 - 4 eps_low / q))) / 2`` and ``hi(q) = min((1 + sqrt(1 + 4 eps_high / q)) / 2,
max(clip_c, 10))``; rare tokens (small q) get a wider range. ``q == 0`` gives ``lo = 1`` and the capped
``hi``, as the authors' ``where(q != 0, ...)``. The paper's other parts (smooth advantage standardisation,
the "only-token-mean" aggregation) are outside the per-token loss and not part of this method.
"""

from __future__ import annotations

import math

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


def dcpo_bounds(
    old_logp: torch.Tensor, eps_low: float, eps_high: float, clip_c: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-token ``(lo(q), hi(q))`` of DCPO from the old log-probabilities (no gradient)."""
    with torch.no_grad():
        q = old_logp.exp()
        zero = q == 0
        low_arg = (1.0 - torch.where(zero, 0.0, 4.0 * eps_low / q)).clamp(min=0.0)
        high_arg = torch.where(zero, math.inf, 1.0 + 4.0 * eps_high / q)
        lo = (1.0 + low_arg.sqrt()) / 2
        hi = ((1.0 + high_arg.sqrt()) / 2).clamp(max=max(clip_c, 10.0))
    return lo, hi


@register_method("dcpo")
def dcpo(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    eps_low: float = 0.2,
    eps_high: float = 0.28,
    clip_c: float = 10.0,
) -> MethodOutput:
    """``-A min(r, hi(q))`` for ``A > 0`` and ``-A min(max(r, lo(q)), clip_c)`` for ``A < 0``.

    The gradient is ``-r A grad(logp)`` inside and exactly zero past a bound (as PPO-clip), with the
    bounds per token from q = pi_old(token).
    """
    adv = token_advantages(advantages)
    lr, raw = log_ratio(logp, old_logp)
    ratio = torch.exp(lr)
    lo_q, hi_q = dcpo_bounds(old_logp.detach(), eps_low, eps_high, clip_c)
    lo_q, hi_q = lo_q.to(ratio.dtype), hi_q.to(ratio.dtype)
    inf = torch.full((), math.inf, dtype=ratio.dtype, device=ratio.device)
    cap = torch.full((), clip_c, dtype=ratio.dtype, device=ratio.device)
    lo = torch.where(adv < 0, lo_q, -inf)
    hi = torch.where(adv > 0, hi_q, torch.where(adv < 0, cap, inf))
    loss = -adv * torch.clamp(ratio, lo, hi)

    m = Masked(mask)
    with torch.no_grad():
        r = ratio.detach()
        low = r < lo
        high = (adv > 0) & (r > hi)
        dual = (adv < 0) & (r > hi)
        low_frac, high_frac = m.frac(low), m.frac(high)
        metrics = {
            **m.stats("ratio", r),
            **m.stats("bound_low", lo_q),
            **m.stats("bound_high", hi_q),
            "clip_frac": low_frac + high_frac,
            "clip_low_frac": low_frac,
            "clip_high_frac": high_frac,
            "dual_clip_frac": m.frac(dual),
            "zero_grad_frac": zero_grad_frac(m, low | high | dual | saturated(lr, raw), adv),
        }
    return MethodOutput(m.select(loss), metrics)
