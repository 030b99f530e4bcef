"""M2PO (Second-Moment Trust Policy Optimization, arXiv 2510.01161): no epsilon clip; drop outlier tokens.

Per batch, the tokens with the largest ``M2 = (log pi_theta - log pi_old)^2`` are dropped, largest first,
until the mean M2 of the rest is below ``m2_threshold``; the loss is ``-M r A`` on the rest. Read from
inclusionAI/AReaL (commit 4aef98d) ``areal/trainer/ppo/actor.py``: ``_apply_m2po_masking`` and
``_get_m2po_loss_mask`` (sort descending, suffix means, the first suffix whose mean is below the threshold;
if none is, all but the smallest token are dropped). AReaL computes M2 between its behaviour and proximal
policies (3 policies); with two, as here, the proximal policy is the current one, detached, which is the
formula of AReaL's M2PO page (``log r_i = log pi_theta / pi_behav``). The mask is computed on the tokens of
one call (one micro-batch), as AReaL applies it per micro-batch.
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


def m2po_keep(m2: torch.Tensor, mask: torch.Tensor, threshold: float) -> torch.Tensor:
    """Boolean keep-mask: drop the largest ``m2`` among unmasked tokens until the rest's mean is < threshold.

    No host sync: unmasked values sort first (masked ones are set to -1 < 0 <= m2), suffix sums over the sorted
    unmasked values give every candidate mean at once.
    """
    with torch.no_grad():
        valid = mask.bool().reshape(-1)
        vals = torch.where(valid, m2.reshape(-1).float(), -1.0)
        sorted_vals, order = torch.sort(vals, descending=True, stable=True)
        n = valid.sum()
        pos = torch.arange(vals.numel(), device=vals.device)
        in_set = pos < n
        kept_vals = torch.where(in_set, sorted_vals, 0.0)
        suffix = kept_vals.flip(0).cumsum(0).flip(0)  # sum of sorted[i:] over unmasked tokens
        mean_rest = suffix / (n - pos).clamp(min=1)
        ok = in_set & (mean_rest < threshold)
        # the first i whose rest is below the threshold; none: keep only the smallest (AReaL: mask n - 1)
        first = torch.where(ok.any(), ok.to(torch.int64).argmax(), n - 1)
        keep_sorted = in_set & (pos >= first)
        keep = torch.zeros_like(valid)
        keep[order] = keep_sorted
    return keep.reshape(mask.shape)


@register_method("m2po")
def m2po(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    m2_threshold: float = 0.04,
) -> MethodOutput:
    """``-M r A``, ``M`` the second-moment mask (``m2po_keep``); gradient ``-r A grad(logp)`` on kept tokens,
    zero on dropped ones. No epsilon clip."""
    adv = token_advantages(advantages)
    lr, raw = log_ratio(logp, old_logp)
    ratio = torch.exp(lr)
    keep = m2po_keep(raw.float().square(), mask, m2_threshold)
    loss = -adv * ratio * keep

    m = Masked(mask)
    with torch.no_grad():
        dropped = ~keep
        m2 = raw.float().square()
        metrics = {
            **m.stats("ratio", ratio.detach()),
            "m2_mean": m.mean(m2),
            "m2_kept_mean": Masked(mask.bool() & keep).mean(m2),
            "mask_frac": m.frac(dropped),
            "zero_grad_frac": zero_grad_frac(m, dropped | saturated(lr, raw), adv),
        }
    return MethodOutput(m.select(loss), metrics)
