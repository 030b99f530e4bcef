"""verl's ``bypass_mode`` with rejection sampling (``rollout_rs``): dual-clip PPO inside a k1/k2/k3 trust region.

Read from verl (``verl/trainer/ppo/core_algos.py`` @1dda039, ``compute_policy_loss_bypass_mode``; the helper
``verl/trainer/ppo/rollout_corr_helper.py`` ``compute_rollout_rejection_mask`` and the presets of
``RolloutCorrectionConfig`` in ``verl/trainer/config/algorithm.py``, read at volcengine/verl b178a3c). In bypass
mode verl skips the old-log-prob recompute and sets ``old_log_prob = rollout_log_prob``; at every update the
loss computes, under ``no_grad``, the rejection mask of ``rollout_rs`` between the *current* policy and the
rollout policy, shrinks the response mask by it, and applies ``compute_policy_loss_vanilla`` (dual-clip PPO,
``clip_ratio_c = 3``) to the kept tokens, with no IS weight (``loss_type="ppo_clip"``, verl's default: "the PPO
ratio already incorporates the IS correction"). The masks are those of Trust Region Masking (arXiv
2512.23075) at the token, sequence-mean and sequence-max level. Here ``old_logp`` plays the rollout policy, so
the masks compare ``logp`` with ``old_logp``; they are the rollout-correction axis's own functions
(``rollout_correction.rejection_keep`` through ``apply_correction``), applied to ``log r = logp - old_logp``.

How the mode is expressed with numeric parameters: one registered name per level (``bypass_token_rs``,
``bypass_seq_mean_rs``, ``bypass_seq_max_rs``), and per estimator a threshold that is ``null`` when that
estimator is off; several non-null estimators are verl's comma chain at that level (all must keep a token).
``rs_k1_low`` / ``rs_k1_high`` bound the ratio ``pi_old / pi_theta`` (verl's k1 "lower_upper" threshold; the
statistic is ``k1 = -log r``, per token or its sequence mean); a null side is unbounded there (verl always
gives both). ``rs_k2`` / ``rs_k3`` bound ``k2 = (log r)^2 / 2`` and ``k3 = r - 1 - log r`` from above. verl has
no ``seq_max_k1``, so ``bypass_seq_max_rs`` has no k1 bounds. All thresholds null is verl's
``bypass_ppo_clip()`` preset, i.e. ``clip`` with ``delta = 3``. Each level's defaults are a configuration that
verl documents for ``bypass_mode=true, loss_type=ppo_clip`` (the sources are in ``conf/method/<name>.yaml``).
"""

from __future__ import annotations

import math

import torch

from pspo_repro.methods.base import (
    LOG_RATIO_CLAMP,
    Masked,
    MethodOutput,
    log_ratio,
    saturated,
    token_advantages,
    zero_grad_frac,
)
from pspo_repro.methods.clip import ppo_clip_bounds
from pspo_repro.methods.registry import register_method
from pspo_repro.methods.rollout_correction import (
    RolloutCorrection,
    Step,
    apply_correction,
    rollout_log_ratio,
)

# k1 statistics are clamped to [-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP] before the test, so a bound one past the
# clamp can never bind: it stands for "no bound on this side" within Step's finite-bounds contract.
_K1_OFF_LOW = math.exp(-(LOG_RATIO_CLAMP + 1.0))
_K1_OFF_HIGH = math.exp(LOG_RATIO_CLAMP + 1.0)


def bypass_steps(
    level: str,
    rs_k1_low: float | None = None,
    rs_k1_high: float | None = None,
    rs_k2: float | None = None,
    rs_k3: float | None = None,
) -> tuple[Step, ...]:
    """The rejection steps (rollout-correction modes ``<level>_k1/_k2/_k3``) of the non-null thresholds."""
    steps = []
    if rs_k1_low is not None or rs_k1_high is not None:
        low = _K1_OFF_LOW if rs_k1_low is None else rs_k1_low
        high = _K1_OFF_HIGH if rs_k1_high is None else rs_k1_high
        steps.append(Step(f"{level}_k1", low, high))
    if rs_k2 is not None:
        steps.append(Step(f"{level}_k2", None, rs_k2))
    if rs_k3 is not None:
        steps.append(Step(f"{level}_k3", None, rs_k3))
    return tuple(steps)


def bypass_rs_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    steps: tuple[Step, ...],
    eps_low: float,
    eps_high: float,
    clip_c: float,
) -> MethodOutput:
    """verl's vanilla dual-clip PPO loss on the tokens every step keeps, 0 (value and gradient) on the rest."""
    adv = token_advantages(advantages)
    lr, raw = log_ratio(logp, old_logp)
    ratio = torch.exp(lr)
    lo, hi = ppo_clip_bounds(adv, eps_low, eps_high, clip_c, ratio.dtype)
    loss = -adv * ratio.clamp(lo, hi)
    # the mask is recomputed from the current policy at every call (verl: under no_grad, per micro-batch)
    correction = apply_correction(RolloutCorrection(steps), rollout_log_ratio(logp, old_logp, mask), mask)
    keep = mask.bool() if correction.keep is None else correction.keep
    loss = torch.where(keep, loss, 0.0)

    m = Masked(mask)
    with torch.no_grad():
        r = ratio.detach()
        low = r < lo
        high = (adv > 0) & (r > hi)
        dual = (adv < 0) & (r > hi)
        low_frac, high_frac = m.frac(low), m.frac(high)
        metrics = {
            **m.stats("ratio", r),
            "clip_frac": low_frac + high_frac,
            "clip_low_frac": low_frac,
            "clip_high_frac": high_frac,
            "dual_clip_frac": m.frac(dual),
            "rs_masked_frac": m.frac(~keep),
            **{k: v for k, v in correction.metrics.items() if k.startswith("rs_") and k != "rs_masked_frac"},
            "zero_grad_frac": zero_grad_frac(m, ~keep | low | high | dual | saturated(lr, raw), adv),
        }
    return MethodOutput(m.select(loss), metrics)


@register_method("bypass_token_rs")
def bypass_token_rs(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    eps_low: float = 0.2,
    eps_high: float = 0.2,
    clip_c: float = 3.0,
    rs_k1_low: float | None = 0.6,
    rs_k1_high: float | None = 1.6,
    rs_k2: float | None = None,
    rs_k3: float | None = None,
) -> MethodOutput:
    """Dual-clip PPO on the tokens whose own ``k1`` (ratio in ``[rs_k1_low, rs_k1_high]``), ``k2``, ``k3`` pass
    (verl ``rollout_rs=token_k*``); a rejected token has loss 0 and no gradient."""
    steps = bypass_steps("token", rs_k1_low, rs_k1_high, rs_k2, rs_k3)
    return bypass_rs_loss(logp, old_logp, advantages, mask, steps, eps_low, eps_high, clip_c)


@register_method("bypass_seq_mean_rs")
def bypass_seq_mean_rs(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    eps_low: float = 0.2,
    eps_high: float = 0.2,
    clip_c: float = 3.0,
    rs_k1_low: float | None = 0.999,
    rs_k1_high: float | None = 1.001,
    rs_k2: float | None = None,
    rs_k3: float | None = None,
) -> MethodOutput:
    """Dual-clip PPO on the sequences whose mean ``k1`` (geometric-mean ratio in ``[rs_k1_low, rs_k1_high]``),
    mean ``k2``, mean ``k3`` pass (verl ``rollout_rs=seq_mean_k*``); a rejected sequence has loss 0, no gradient."""
    steps = bypass_steps("seq_mean", rs_k1_low, rs_k1_high, rs_k2, rs_k3)
    return bypass_rs_loss(logp, old_logp, advantages, mask, steps, eps_low, eps_high, clip_c)


@register_method("bypass_seq_max_rs")
def bypass_seq_max_rs(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    eps_low: float = 0.2,
    eps_high: float = 0.2,
    clip_c: float = 3.0,
    rs_k2: float | None = 2.5,
    rs_k3: float | None = None,
) -> MethodOutput:
    """Dual-clip PPO on the sequences whose largest token ``k2`` / ``k3`` is at most ``rs_k2`` / ``rs_k3`` (Trust
    Region Masking; verl ``rollout_rs=seq_max_k*``); a rejected sequence has loss 0 and no gradient."""
    steps = bypass_steps("seq_max", rs_k2=rs_k2, rs_k3=rs_k3)
    return bypass_rs_loss(logp, old_logp, advantages, mask, steps, eps_low, eps_high, clip_c)
