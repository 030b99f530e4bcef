"""AReaL's port of M2PO (arXiv 2510.01161): drop the largest (log r)^2 until the rest's mean is below a threshold.

Not the M2PO authors' algorithm (that is ``m2po``, from Infini-AI-Lab/M2PO): this one masks tokens of either
direction, keeps no clip, and is what AReaL ships. Read from inclusionAI/AReaL (commit 4aef98d):
``areal/trainer/ppo/actor.py`` ``grpo_loss_fn``, ``_apply_m2po_masking`` and ``_get_m2po_loss_mask`` (sort
descending, suffix means, the first suffix whose mean is below ``m2_threshold``; if none is, all but the smallest
token are dropped), then ``areal/utils/functional/functional.py`` ``ppo_actor_loss_fn`` with the rejection
sampling of its ``examples/math/gsm8k_m2po.yaml`` (``rejection_sampling: {metric: ratio, upper: 5.0}``: token level,
action "mask"), ``use_decoupled_loss: true`` and ``eps_clip: 0.0``.

Per call (one micro-batch, as AReaL applies the mask per micro-batch), with pi_prox the policy before this
optimizer step, which in TRL's trainer is the training forward's own log-probs, detached (``decoupled.py``):

- ``M`` keeps the unmasked tokens that survive the second-moment mask on ``(log pi_prox - log pi_behav)^2``;
- ``w = pi_prox / pi_behav`` (detached); a token with ``w > behav_imp_weight_cap`` is rejected. ``None`` is AReaL's
  ``rejection_sampling: null``, which also drops the weight (AReaL multiplies by it only when rejection sampling
  is configured): the loss is then ``-M A u``;
- the loss is ``-A w u`` with ``u = pi_theta / pi_prox`` (1 in value, carrying ``grad(logp)``): AReaL's clip on
  ``u`` never binds (``u == 1``; its example's ``eps_clip`` is 0), so the gradient is ``-A w grad(logp)`` on kept
  tokens and zero on dropped or rejected ones;
- AReaL divides the micro-batch's sum by the count of ``M`` (the kept tokens, rejected ones included), and weights
  micro-batches by their unmasked count. Here aggregation is a separate axis, so ``kept_token_norm`` multiplies
  each token's loss by ``n / k`` (unmasked over kept, per call): under a token mean (``dapo``, ``bnpo``) that is
  AReaL's normaliser exactly. ``kept_token_norm=false`` leaves the aggregation's own normaliser.
"""

from __future__ import annotations

import torch

from pspo_repro.methods.base import Masked, MethodOutput, token_advantages, zero_grad_frac
from pspo_repro.methods.decoupled import behaviour_weight
from pspo_repro.methods.registry import register_method


def m2po_keep(m2: torch.Tensor, mask: torch.Tensor, threshold: float) -> torch.Tensor:
    """Boolean keep-mask: drop the largest ``m2`` among unmasked tokens until the rest's mean is < threshold.

    No host sync: unmasked values sort first (masked ones are set to -1 < 0 <= m2), suffix sums over the sorted
    unmasked values give every candidate mean at once. In ``m2``'s dtype, at least float32.
    """
    with torch.no_grad():
        wide = torch.promote_types(m2.dtype, torch.float32)
        valid = mask.bool().reshape(-1)
        vals = torch.where(valid, m2.reshape(-1).to(wide), -1.0)
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


@register_method("m2po_areal")
def m2po_areal(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    m2_threshold: float = 0.04,
    kept_token_norm: bool = True,
    behav_imp_weight_cap: float | None = 5.0,
) -> MethodOutput:
    """``-M A w u`` (``M`` the second-moment mask, ``w`` the behaviour weight with its rejection), times ``n / k``
    with ``kept_token_norm``. Gradient ``-A w grad(logp)`` (times ``n / k``) on kept tokens, zero elsewhere."""
    adv = token_advantages(advantages)
    prox = logp.detach()
    u = torch.exp(logp - prox)  # 1 in value; carries grad(logp)
    w, weight = behaviour_weight(prox, old_logp, behav_imp_weight_cap)
    delta = old_logp.detach() - prox  # AReaL: old_logp - prox_logp, squared
    keep = m2po_keep(delta * delta, mask, m2_threshold)
    m = Masked(mask)
    kept = Masked(mask.bool() & keep)
    weight = torch.where(keep, weight, 0.0)
    if kept_token_norm:  # n / k in the weight's dtype (the counts are exact integers in float32)
        weight = weight * (m.count.to(weight.dtype) / kept.count.to(weight.dtype).clamp(min=1))
    loss = -adv * weight.to(logp.dtype) * u

    with torch.no_grad():
        m2 = (delta * delta).float()
        dropped = ~keep
        rejected = keep & (weight == 0)
        metrics = {
            **m.stats("behav_weight", w.float()),
            "m2_mean": m.mean(m2),
            "m2_kept_mean": kept.mean(m2),
            "mask_frac": m.frac(dropped),
            "rejected_frac": m.frac(rejected),
            "norm_scale": m.count / kept.count.clamp(min=1) if kept_token_norm else m.count.clamp(max=1),
            "zero_grad_frac": zero_grad_frac(m, dropped | rejected, adv),
        }
    return MethodOutput(m.select(loss), metrics)
