"""SAPO (Gao et al. 2025): a sigmoid soft gate with separate temperatures for positive/negative advantages."""

from __future__ import annotations

import torch

from pspo_repro.methods.base import (
    Masked,
    MethodOutput,
    constant,
    log_ratio,
    saturated,
    token_advantages,
    zero_grad_frac,
)
from pspo_repro.methods.registry import register_method


def soft_gate(ratio: torch.Tensor, tau: torch.Tensor | float) -> tuple[torch.Tensor, torch.Tensor]:
    """Return ``((4 / tau) sigmoid(tau (r - 1)), sigmoid(tau (r - 1)))``.

    The factor 4/tau makes d/dr equal 4 s (1 - s), which is 1 at r = 1: on fresh data the gradient is
    noclip's, and it decays smoothly (instead of vanishing abruptly) as r leaves 1.
    """
    s = torch.sigmoid((ratio - 1.0) * tau)
    return s * (4.0 / tau), s


# A gate weight below this is a gradient "that vanishes": under a tenth of noclip's on that token (GR-PSPO's
# weight is the constant 1 - alpha = 0.9 at its default; claim 10 of conf/claims/study.yaml reads the share below it).
GATE_SMALL = 0.1


def gate_metrics(m: Masked, s: torch.Tensor, sat: torch.Tensor, adv: torch.Tensor) -> dict[str, torch.Tensor]:
    """Gate weight ``4 s (1 - s)`` (the gradient scale relative to noclip), the share of tokens (with a
    non-zero advantage) whose weight is below ``GATE_SMALL``, and the exact-zero fraction."""
    core = s.addcmul(s, s, value=-1.0)  # s (1 - s) in one pass; the factor 4 is applied to the scalars
    return {
        "gate_mean": 4.0 * m.mean(core),
        "gate_min": 4.0 * m.min(core),
        "gate_small_frac": zero_grad_frac(m, 4.0 * core < GATE_SMALL, adv),
        # sigmoid's backward is s (1 - s): exactly zero once s saturates to 0 or 1 in floating point
        "zero_grad_frac": zero_grad_frac(m, (core == 0) | sat, adv),
    }


@register_method("sapo")
def sapo(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    tau_pos: float = 1.0,
    tau_neg: float = 1.05,
) -> MethodOutput:
    """``-(4 / tau) sigmoid(tau (r - 1)) A`` with ``tau = tau_pos`` if ``A > 0`` else ``tau_neg`` (as TRL)."""
    adv = token_advantages(advantages)
    lr, raw = log_ratio(logp, old_logp)
    ratio = torch.exp(lr)
    # tau in the ratio's dtype, rounded once (Python floats in torch.where would round it through float32)
    tau = torch.where(
        adv > 0, constant(tau_pos, ratio.dtype, ratio.device), constant(tau_neg, ratio.dtype, ratio.device)
    )
    soft, s = soft_gate(ratio, tau)
    loss = -soft * adv
    m = Masked(mask)
    with torch.no_grad():
        metrics = {**m.stats("ratio", ratio.detach()), **gate_metrics(m, s.detach(), saturated(lr, raw), adv)}
    return MethodOutput(m.select(loss), metrics)
