"""ERC, entropy-ratio clipping (arXiv 2512.05591): dual-clip PPO whose gradient is cut where the entropy moved.

Read from Kwai-Klear/ERC (README at f1885c5, code at b19f800): ``compute_policy_loss_grpo_erc`` (the DAPO
variant, ``policy_loss.loss_mode="grpo_erc"``), and ``verl/workers/actor/dp_actor.py`` for its inputs. Per
token, verl's dual-clip PPO ``max(-A r, -A clip(r, 1 - eps_low, 1 + eps_high))``, capped at ``-A clip_c`` for
``A < 0``; then with the entropy ratio ``rho_H = (H_theta + 1e-8) / (H_old + 1e-8)`` of the position's full
next-token distribution, a token with ``rho_H`` outside the open band ``(entropy_ratio_low,
entropy_ratio_high)`` keeps its loss value but loses its gradient (``torch.where(band, loss, loss.detach())``).

Inputs: ``entropies`` (the current policy's per-position entropy at the sampling temperature, which the
trainer's forward computes anyway) and ``old_entropies`` (the same for the policy that sampled, which the
authors compute in their rollout-time log-prob pass, ``compute_log_prob(calculate_entropy=True)``); the trainer
stores it at rollout beside the old log-probs (``training.trainer``). Both optional inputs of the registry,
required by this method. The authors' actor also adds ``postive_loss_coeff`` (0.1 in their scripts) times the
NLL of the responses with reward 1, a term outside the policy loss that is not part of this method.
"""

from __future__ import annotations

import math

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

_ENTROPY_EPS = 1e-8  # the authors' (entropy + 1e-8) / (old_entropy + 1e-8)


def entropy_band(
    entropies: torch.Tensor, old_entropies: torch.Tensor, low: float, high: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(rho_H, inside)``: the entropy ratio (in at least float32) and whether it lies in ``(low, high)``."""
    with torch.no_grad():
        wide = torch.promote_types(entropies.dtype, torch.float32)
        rho = (entropies.detach().to(wide) + _ENTROPY_EPS) / (old_entropies.detach().to(wide) + _ENTROPY_EPS)
    return rho, (rho > low) & (rho < high)


def _needs(name: str, value: torch.Tensor | None) -> torch.Tensor:
    if value is None:
        raise ValueError(
            f"method 'erc' needs the per-token {name} (the trainer passes entropies= and old_entropies=)"
        )
    return value


@register_method("erc")
def erc(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    eps_low: float = 0.2,
    eps_high: float = 0.28,
    clip_c: float = 10.0,
    entropy_ratio_low: float = 0.95,
    entropy_ratio_high: float = 1.05,
    entropies: torch.Tensor | None = None,
    old_entropies: torch.Tensor | None = None,
) -> MethodOutput:
    """Dual-clip PPO (``-A min(r, 1 + eps_high)`` for ``A > 0``, ``-A min(max(r, 1 - eps_low), clip_c)`` for
    ``A < 0``) whose gradient is detached where ``H_theta / H_old`` leaves ``(entropy_ratio_low,
    entropy_ratio_high)``."""
    rho_h, inside = entropy_band(
        _needs("entropies", entropies),
        _needs("old_entropies", old_entropies),
        entropy_ratio_low,
        entropy_ratio_high,
    )
    adv = token_advantages(advantages)
    lr, raw = log_ratio(logp, old_logp)
    ratio = torch.exp(lr)
    inf = constant(math.inf, ratio.dtype, ratio.device)
    lo = torch.where(adv < 0, constant(1 - eps_low, ratio.dtype, ratio.device), -inf)
    hi = torch.where(
        adv > 0,
        constant(1 + eps_high, ratio.dtype, ratio.device),
        torch.where(adv < 0, constant(clip_c, ratio.dtype, ratio.device), inf),
    )
    loss = -adv * torch.clamp(ratio, lo, hi)
    loss = torch.where(inside, loss, loss.detach())

    m = Masked(mask)
    with torch.no_grad():
        r = ratio.detach()
        low = r < lo
        high = (adv > 0) & (r > hi)
        dual = (adv < 0) & (r > hi)
        low_frac, high_frac = m.frac(low), m.frac(high)
        metrics = {
            **m.stats("ratio", r),
            **m.stats("entropy_ratio", rho_h),
            "entropy_clip_frac": m.frac(~inside),
            "clip_frac": low_frac + high_frac,
            "clip_low_frac": low_frac,
            "clip_high_frac": high_frac,
            "dual_clip_frac": m.frac(dual),
            "zero_grad_frac": zero_grad_frac(m, ~inside | low | high | dual | saturated(lr, raw), adv),
        }
    return MethodOutput(m.select(loss), metrics)
