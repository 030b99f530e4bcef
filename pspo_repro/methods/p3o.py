"""P3O's SCOPIC objective (Chen et al., AAAI-23): one-temperature sigmoid gate, optional KL(pi_old || pi_theta)."""

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
from pspo_repro.methods.sapo import gate_metrics, soft_gate


@register_method("p3o")
def p3o(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    tau: float = 4.0,
    kl_coef: float = 0.0,
) -> MethodOutput:
    """``-(4 / tau) sigmoid(tau (r - 1)) A + kl_coef * KL``.

    KL(pi_old || pi_theta) per token uses the k3 estimator ``(r - 1) - log r``: the tokens were sampled from
    pi_old, so it is unbiased (E_old[r] = 1) and never negative. Skipped entirely when ``kl_coef == 0``.
    """
    adv = token_advantages(advantages)
    lr, raw = log_ratio(logp, old_logp)
    ratio = torch.exp(lr)
    soft, s = soft_gate(ratio, tau)
    loss = -soft * adv
    kl = None
    if kl_coef != 0.0:
        kl = (ratio - 1.0) - lr
        loss = loss + kl_coef * kl
    m = Masked(mask)
    with torch.no_grad():
        metrics = {**m.stats("ratio", ratio.detach()), **gate_metrics(m, s.detach(), saturated(lr, raw), adv)}
        if kl is not None:
            metrics["kl_mean"] = m.mean(kl.detach())
            # the KL term keeps a gradient where the gate saturates; only the clamp still zeroes it
            metrics["zero_grad_frac"] = zero_grad_frac(m, saturated(lr, raw), adv)
    return MethodOutput(m.select(loss), metrics)
