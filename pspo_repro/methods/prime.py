"""prime-rl's two policy losses: a probability-difference mask on ``-r A`` plus Kimi K2.5's ``tau (log r)^2``.

Read from PrimeIntellect-ai/prime-rl (commit 559b447) ``src/prime_rl/trainer/rl/loss.py`` (``default_loss_fn``,
``ipo_loss_fn``) and ``packages/prime-rl-configs/src/prime_rl/configs/trainer.py`` (the defaults). Both are
``-keep A r + kl_tau (log r)^2`` with ``r = pi_theta / mu``; the squared log-ratio term is Kimi K2.5's
(arXiv 2602.02276) and acts on every unmasked token, kept or not. They differ in ``keep``:
- ``dppo_k25`` (prime-rl's default): DPPO's binary-TV mask (arXiv 2602.04879), drop ``p - q > delta_high``
  when ``A > 0`` and ``p - q < -delta_low`` when ``A < 0``;
- ``ipo`` ("INTELLECT Policy Optimization"): drop ``|p - q| > ipo_threshold`` whatever the advantage's sign.
prime-rl's ``adv_tau`` (a factor on A, default 1.0) is left out: at its default it is the identity.
"""

from __future__ import annotations

import torch

from pspo_repro.methods.base import Masked, MethodOutput, log_ratio, token_advantages
from pspo_repro.methods.registry import register_method


def _masked_pg_with_sq_log_ratio(logp, old_logp, adv, mask, drop, kl_tau) -> MethodOutput:
    lr, raw = log_ratio(logp, old_logp)
    ratio = torch.exp(lr)
    loss = -adv * ratio * ~drop + kl_tau * lr.square()
    m = Masked(mask)
    with torch.no_grad():
        r = ratio.detach()
        metrics = {
            **m.stats("ratio", r),
            "mask_frac": m.frac(drop),
            "kl_term_mean": m.mean(kl_tau * lr.detach().square()),
            # prime-rl's mismatch_kl (k3 estimator r - log r - 1) on the kept tokens
            "kept_k3_mean": Masked(mask.bool() & ~drop).mean(r - lr.detach() - 1.0),
        }
    return MethodOutput(m.select(loss), metrics)


@register_method("dppo_k25")
def dppo_k25(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    delta_low: float = 0.2,
    delta_high: float = 0.2,
    kl_tau: float = 0.001,
) -> MethodOutput:
    """``-keep A r + kl_tau (log r)^2`` with DPPO's binary-TV mask; gradient ``-(keep A r - 2 kl_tau log r)
    grad(logp)``: a dropped token is only pulled back towards mu by the squared log-ratio."""
    adv = token_advantages(advantages)
    with torch.no_grad():
        diff = logp.detach().exp() - old_logp.exp()
        drop = torch.where(adv > 0, diff > delta_high, diff < -delta_low)  # A == 0: the low test, as prime-rl
    return _masked_pg_with_sq_log_ratio(logp, old_logp, adv, mask, drop, kl_tau)


@register_method("ipo")
def ipo(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    ipo_threshold: float = 0.1,
    kl_tau: float = 0.001,
) -> MethodOutput:
    """``-keep A r + kl_tau (log r)^2`` with the symmetric mask ``keep = |p - q| <= ipo_threshold``."""
    adv = token_advantages(advantages)
    with torch.no_grad():
        drop = (logp.detach().exp() - old_logp.exp()).abs() > ipo_threshold
    return _masked_pg_with_sq_log_ratio(logp, old_logp, adv, mask, drop, kl_tau)
