"""ASPO (arXiv 2510.06062) and Archer's dual-token constraint (arXiv 2507.15778): clip ranges by token entropy.

Both split each response's tokens at a quantile of the current policy's per-token entropy (the trainer's
``entropies``, at the sampling temperature): tokens at or below the quantile are "low-entropy" (knowledge) and
get the bounds ``eps_low`` / ``eps_high``; the others (reasoning forks) the wider ``eps_low_high_entropy`` /
``eps_high_high_entropy``. Read from wizard-III/Archer2.0 (commit b08d963): ``verl/trainer/ppo/core_algos.py``
``compute_policy_loss_archer`` (ASPO) and ``compute_policy_loss`` with ``use_token_entropy_separate`` (the
dual-token clip), and ``verl/workers/actor/dp_actor.py`` (the split: ``nanquantile(entropy, 0.8)`` per response;
its ``high_entropy_mask`` holds the *low*-entropy tokens, as its comment says). Defaults: the bounds the
Archer2.0 actor passes to ASPO and its training script sets (0.2 / 0.4, c = 3.0, quantile 0.8).
"""

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


def low_entropy_tokens(entropies: torch.Tensor, mask: torch.Tensor, quantile: float) -> torch.Tensor:
    """``[B, T]`` bool: valid tokens whose entropy is at most the ``quantile`` of their own response's valid
    tokens (Archer2.0's per-response ``nanquantile``, linear interpolation); False on padding."""
    valid = mask.bool()
    ent = torch.where(valid, entropies.detach().float(), float("nan"))
    q = torch.nanquantile(ent, quantile, dim=-1, keepdim=True)  # NaN for a response with no valid token
    return (ent <= q) & valid


def _needs(name: str, entropies: torch.Tensor | None) -> torch.Tensor:
    if entropies is None:
        raise ValueError(
            f"method {name!r} needs the per-token entropies (the trainer passes them as entropies=)"
        )
    return entropies


def _entropy_bounds(low, eps_low, eps_high, eps_low_high_entropy, eps_high_high_entropy, dtype, device):
    """``(e_lo, e_hi)`` per token: the low-entropy bounds where ``low``, the high-entropy ones elsewhere."""

    def pick(a: float, b: float) -> torch.Tensor:
        return torch.where(low, constant(a, dtype, device), constant(b, dtype, device))

    return pick(eps_low, eps_low_high_entropy), pick(eps_high, eps_high_high_entropy)


@register_method("aspo")
def aspo(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    entropies: torch.Tensor | None = None,
    eps_low: float = 0.2,
    eps_high: float = 0.2,
    eps_low_high_entropy: float = 0.4,
    eps_high_high_entropy: float = 0.4,
    clip_c: float = 3.0,
    entropy_quantile: float = 0.8,
) -> MethodOutput:
    """ASPO: for ``A < 0`` PPO's lower clip ``-A max(r, 1 - e_lo)`` with a dual clip; for ``A >= 0`` the ratio
    flipped, ``-A p / sg(p)^2`` with ``p = min(r, 1 + e_hi)`` (value ``-A / p``, gradient ``-A / r`` inside the
    bound, zero beyond it), with a soft dual clip.

    Dual clips (Archer2.0's, both at ``clip_c``): ``A < 0`` with ``max(r, 1 - e_lo) > c``, and ``A >= 0`` with
    ``1 / p > c``, give ``-A c logp`` (gradient ``-A c``). ``e_lo`` / ``e_hi`` are ``eps_low`` / ``eps_high`` on
    low-entropy tokens, ``eps_*_high_entropy`` on the others (``low_entropy_tokens``).
    """
    ent = _needs("aspo", entropies)
    adv = token_advantages(advantages)
    lr, raw = log_ratio(logp, old_logp)
    ratio = torch.exp(lr)
    low = low_entropy_tokens(ent, mask, entropy_quantile)
    e_lo, e_hi = _entropy_bounds(
        low, eps_low, eps_high, eps_low_high_entropy, eps_high_high_entropy, ratio.dtype, ratio.device
    )
    neg_ratio = torch.maximum(ratio, 1.0 - e_lo)
    pos_ratio = torch.minimum(ratio, 1.0 + e_hi)
    neg_dual = neg_ratio.detach() > clip_c
    neg_loss = torch.where(neg_dual, -adv * clip_c * logp, -adv * neg_ratio)
    p = pos_ratio.detach()
    pos_dual = 1.0 / p > clip_c
    pos_loss = torch.where(pos_dual, -adv * clip_c * logp, -adv * (pos_ratio / p) / p)
    negative = adv < 0
    loss = torch.where(negative, neg_loss, pos_loss)

    m = Masked(mask)
    with torch.no_grad():
        r = ratio.detach()
        clipped_low = negative & (r < 1.0 - e_lo)
        clipped_high = ~negative & (r > 1.0 + e_hi)
        dual = torch.where(negative, neg_dual, pos_dual)
        zero = clipped_low | clipped_high | (saturated(lr, raw) & ~dual)
        metrics = {
            **m.stats("ratio", r),
            "clip_frac": m.frac(clipped_low | clipped_high),
            "clip_low_frac": m.frac(clipped_low),
            "clip_high_frac": m.frac(clipped_high),
            "dual_clip_frac": m.frac(dual & (adv != 0)),
            "low_entropy_frac": m.frac(low),
            "zero_grad_frac": zero_grad_frac(m, zero, adv),
        }
    return MethodOutput(m.select(loss), metrics)


@register_method("archer")
def archer(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    entropies: torch.Tensor | None = None,
    eps_low: float = 0.2,
    eps_high: float = 0.2,
    eps_low_high_entropy: float = 0.4,
    eps_high_high_entropy: float = 0.4,
    clip_c: float = 3.0,
    entropy_quantile: float = 0.8,
) -> MethodOutput:
    """Archer's dual-token clip: PPO-clip with verl's dual clip (``A < 0``: at most ``-A clip_c``), the clip
    range ``[1 - e_lo, 1 + e_hi]`` per token by entropy (``eps_low`` / ``eps_high`` on low-entropy tokens,
    ``eps_*_high_entropy`` on the others). Archer's other half, a KL penalty on the low-entropy tokens only,
    is not a per-token policy loss and is not included (``docs/methods.md``)."""
    ent = _needs("archer", entropies)
    adv = token_advantages(advantages)
    lr, raw = log_ratio(logp, old_logp)
    ratio = torch.exp(lr)
    low = low_entropy_tokens(ent, mask, entropy_quantile)
    e_lo, e_hi = _entropy_bounds(
        low, eps_low, eps_high, eps_low_high_entropy, eps_high_high_entropy, ratio.dtype, ratio.device
    )
    clipped = torch.minimum(torch.maximum(ratio, 1.0 - e_lo), 1.0 + e_hi)
    pg1, pg2 = -adv * ratio, -adv * clipped
    clip1 = torch.maximum(pg1, pg2)
    pg3 = -adv * clip_c
    negative = adv < 0
    loss = torch.where(negative, torch.minimum(pg3, clip1), clip1)

    m = Masked(mask)
    with torch.no_grad():
        r = ratio.detach()
        took_clip = pg2.detach() > pg1.detach()
        dual = negative & (clip1.detach() > pg3)
        zero = took_clip | dual | saturated(lr, raw)
        metrics = {
            **m.stats("ratio", r),
            "clip_frac": m.frac(took_clip),
            "dual_clip_frac": m.frac(dual),
            "low_entropy_frac": m.frac(low),
            "zero_grad_frac": zero_grad_frac(m, zero, adv),
        }
    return MethodOutput(m.select(loss), metrics)
