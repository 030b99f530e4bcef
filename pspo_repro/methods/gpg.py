"""GPG (Chu et al. 2025, "GPG: A Simple and Strong Reinforcement Learning Baseline for Model Reasoning",
arXiv 2504.02546): the plain policy gradient, no ratio, no trust region (verl ``loss_mode="gpg"``)."""

from __future__ import annotations

import torch

from pspo_repro.methods.base import Masked, MethodOutput, log_ratio, token_advantages
from pspo_repro.methods.registry import register_method


@register_method("gpg")
def gpg(
    logp: torch.Tensor, old_logp: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor
) -> MethodOutput:
    """``-A logp`` (verl: ``pg_losses = -log_prob * advantages``).

    On-policy (r = 1) its gradient equals noclip's; off-policy it ignores the ratio altogether (no importance
    weight). GPG's advantage correction (its ``alpha = B / (B - M)`` rescaling in verl's
    ``compute_gpg_outcome_advantage``) belongs to the advantage estimator, which stays TRL's here.
    """
    adv = token_advantages(advantages)
    loss = -adv * logp
    m = Masked(mask)
    with torch.no_grad():
        lr, _ = log_ratio(logp.detach(), old_logp)
        metrics = m.stats("ratio", torch.exp(lr))  # not used by the loss: how far the data is off-policy
    return MethodOutput(m.select(loss), metrics)
