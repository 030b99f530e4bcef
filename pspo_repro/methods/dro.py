"""DRO as registered in verl (``loss_mode="dro"``): policy gradient with a quadratic log-ratio penalty.

"Direct Reward Optimization" (Richemond et al. 2024, "Offline Regularised Reinforcement Learning for Large
Language Models Alignment", arXiv 2405.19107) regularises with a squared log-ratio; verl's policy loss keeps
that penalty towards pi_old: ``-(A logp - beta/2 (logp - old_logp)^2)``.
"""

from __future__ import annotations

import torch

from pspo_repro.methods.base import Masked, MethodOutput, token_advantages
from pspo_repro.methods.registry import register_method


@register_method("dro")
def dro(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    dro_beta: float = 0.1,
) -> MethodOutput:
    """``-(A logp - (dro_beta / 2) (logp - old_logp)^2)``; gradient ``-(A - dro_beta log r) grad(logp)``.

    No ``exp`` is taken, so the log-ratio is *not* clamped (as verl): the quadratic pull-back keeps acting on
    the tokens that moved furthest, which a clamp would switch off. The penalty also acts where ``A == 0``.
    """
    adv = token_advantages(advantages)
    lr = logp - old_logp
    loss = -(adv * logp - (0.5 * dro_beta) * lr.square())
    m = Masked(mask)
    with torch.no_grad():
        lrd = lr.detach()
        metrics = {
            **m.stats("log_ratio", lrd),
            "penalty_mean": m.mean(0.5 * dro_beta * lrd.square()),
            # where the pull-back outweighs the advantage: the token moves back towards pi_old
            "pullback_frac": m.frac(dro_beta * lrd * torch.sign(adv) > adv.abs()),
        }
    return MethodOutput(m.select(loss), metrics)
