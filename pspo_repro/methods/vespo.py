"""VESPO (arXiv 2602.10693, "Variational Sequence-Level Soft Policy Optimization"), TRL ``loss_type="vespo"``.

Instead of clipping, each sequence's REINFORCE term is weighted by a smooth, asymmetric gamma function of its
*sequence* importance ratio ``w = prod_t r_t`` (a product: TRL sums the token log-ratios, it does not average):
``phi(w) = e^lambda w^k e^(-lambda w)``, normalised so that ``phi(1) = 1``; ``k`` sets how fast ``phi`` falls for
``w < 1``, ``lambda`` for ``w > 1``, with ``(k, lambda)`` chosen by the advantage's sign.
"""

from __future__ import annotations

import math

import torch

from pspo_repro.methods.base import LOG_RATIO_CLAMP, Masked, MethodOutput, token_advantages
from pspo_repro.methods.registry import register_method

# TRL clamps log w below at log(1e-8) (matching the VESPO authors' code) and above at 20.
_LOG_W_MIN = math.log(1e-8)


@torch.no_grad()
def gamma_weight(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    adv: torch.Tensor,
    mask: torch.Tensor,
    importance_sampling_ratio: torch.Tensor | None,
    k_pos: float,
    lambda_pos: float,
    k_neg: float,
    lambda_neg: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(phi, log w)``, as TRL 1.16's ``GRPOTrainer.get_gamma_weights``: [B, 1] (or [B, T] when ``adv`` is).

    ``log w = sum_t clamp(log r_t, +-20)`` (+ ``sum_t clamp(log IS_t, log 1e-8, 20)`` for vLLM's sampling
    correction), clamped to ``[log 1e-8, 20]``; ``log phi = lambda + k log w - lambda w``; a non-finite phi is 0.
    (k, lambda) are the positive pair for ``A >= 0``, as in TRL (per token when the advantages are per token).
    """
    maskf = mask.to(logp.dtype)
    lr = (logp.detach() - old_logp).clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
    log_w = (lr * maskf).sum(-1, keepdim=True)
    if importance_sampling_ratio is not None:
        log_is = torch.log(importance_sampling_ratio).clamp(_LOG_W_MIN, 20.0)
        log_w = log_w + (log_is * maskf).sum(-1, keepdim=True)  # TRL's ratio is exactly 1 on padding
    log_w = log_w.clamp(_LOG_W_MIN, 20.0)
    nonneg = adv >= 0
    k = torch.where(nonneg, k_pos, k_neg).to(log_w.dtype)
    lam = torch.where(nonneg, lambda_pos, lambda_neg).to(log_w.dtype).clamp(min=1e-4)
    phi = torch.exp(lam + k * log_w - lam * torch.exp(log_w)).nan_to_num(nan=0.0, posinf=0.0, neginf=0.0)
    return phi, log_w


@register_method("vespo")
def vespo(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    importance_sampling_ratio: torch.Tensor | None = None,
    k_pos: float = 2.0,
    lambda_pos: float = 3.0,
    k_neg: float = 3.0,
    lambda_neg: float = 2.0,
) -> MethodOutput:
    """``-sg(phi(w)) A logp`` with ``phi(w) = e^lambda w^k e^(-lambda w)``, ``w`` the sequence ratio.

    The weight is detached (REINFORCE form), so the gradient ``-phi A grad(logp)`` is zero only where phi
    underflows. ``importance_sampling_ratio`` (vLLM's token-level correction, when the trainer has it) enters
    ``w`` instead of multiplying the loss, as in TRL.
    """
    adv = token_advantages(advantages)
    phi, log_w = gamma_weight(
        logp, old_logp, adv, mask, importance_sampling_ratio, k_pos, lambda_pos, k_neg, lambda_neg
    )
    loss = (phi * -adv) * logp
    m = Masked(mask)
    with torch.no_grad():
        seq = Masked(mask.sum(-1) > 0)
        # phi_mean over sequences == TRL's vespo/phi_seq_mean (per-token advantages: the first token's phi)
        metrics = {
            **seq.stats("phi", phi[:, 0]),
            **seq.stats("seq_log_ratio", log_w.squeeze(-1)),
            "zero_grad_frac": m.frac((phi == 0).expand_as(logp) & (adv != 0)),
        }
    return MethodOutput(m.select(loss), metrics)
