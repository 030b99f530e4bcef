"""BAPO (arXiv 2510.18927): dual-clip PPO whose clip bounds are searched per batch to balance the advantages.

Read from WooooDyy/BAPO (commit 3b8389c) ``recipe/bapo/policy_loss.py``: ``compute_policy_loss_bapo`` and
``_compute_effective_advantage``. The bounds are explicit ratios ``[c_low, c_high]`` (not ``1 -+ eps``). With
``e = min(r, c_high)`` for ``A >= 0`` and ``e = max(r, c_low)`` for ``A < 0`` (detached), the positive sum
``P = sum e A`` over ``A > 0`` tokens and the negative one ``N = sum |e A|`` over ``A < 0`` tokens give
``rho = P / (N + 1e-8)`` (``inf`` when ``N <= 0``). Starting from the start bounds, ``c_low`` is raised by its
step up to its maximum while ``rho < adv_ratio_target``, then ``c_high`` likewise; the first pair reaching
the target is kept, else the last. The loss is verl's dual clip with those bounds: ``-A min(r, c_high)`` for
``A > 0`` and ``-A min(max(r, c_low), clip_c)`` for ``A < 0``.

How it fits the registry's contract (a pure function of one call's tensors): the search is a batch-level
decision, and the batch is the call's tokens, one micro-batch, as in the authors' code (verl calls the policy
loss once per micro-batch; each micro-batch of a gradient-accumulation window gets its own bounds). Under
several processes the two sums are all-reduced over the default process group when ``torch.distributed`` is
initialised, as the authors do, so every process keeps the same bounds: each process calls the method once
per micro-batch in lockstep, which the collective needs. The authors' loop syncs the host once per candidate
(``.item()``); here every candidate pair is evaluated at once and the first one meeting the target is picked
on the device (one all-reduce of a [K, 2] tensor, no host sync). The candidates are the authors' sequence of
Python floats (``min(c + step, max)`` repeated), so the chosen bounds are theirs bit for bit.

The target. ``adv_ratio_target`` is the code's ``P / N`` (``BAPOPolicyLossConfig``: "ratio between positive and
negative advantage contributions (positive / negative)", default 1.0). The paper's rho_0 (arXiv 2510.18927,
Eq. 8 and Algorithm 1) is the positive tokens' *share* of the loss, their sum over the sum over all tokens,
``P / (P + N)``; the README's "rho_0 = 0.5, target contribution of positive signals to the policy gradient
loss" is therefore ``P / N = rho_0 / (1 - rho_0) = 1.0``, the value of the recipe's ``bapo_trainer.yaml`` and of
the config's default, and that is the default here. (The example script passes its ``target_pos_ratio=0.5``
into ``adv_ratio_target``, a ``P / N`` of 0.5, a positive share of 1/3; the paper's own runs use rho_0 = 0.4,
``P / N = 2/3``.)

Note on the code's search: it sums the clamped values, so a negative token below ``c_low`` counts at
``c_low``; raising ``c_low`` therefore raises ``N`` and lowers ``rho``, and when the target is not met at the
start the search runs ``c_low`` to its maximum before ``c_high`` moves. That is the authors' code, followed here.
"""

from __future__ import annotations

import functools
import math

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

_EPS = 1e-8  # the authors' ``eps`` in rho = P / (N + eps) (BAPOPolicyLossConfig default)


def bapo_candidates(
    lower_start: float,
    lower_max: float,
    lower_step: float,
    upper_start: float,
    upper_max: float,
    upper_step: float,
) -> tuple[tuple[float, float], ...]:
    """The (c_low, c_high) pairs the authors' loops visit, in order: the start, then c_low raised step by step
    to its maximum, then c_high likewise (a step <= 0 moves nothing, as their ``max(step, 0) > 0``)."""
    pairs = [(lower_start, upper_start)]
    lo, hi = lower_start, upper_start
    while lower_step > 0 and lo < lower_max:
        lo = min(lo + lower_step, lower_max)
        pairs.append((lo, hi))
    while upper_step > 0 and hi < upper_max:
        hi = min(hi + upper_step, upper_max)
        pairs.append((lo, hi))
    return tuple(pairs)


@functools.lru_cache(maxsize=32)
def _candidate_tensor(pairs: tuple[tuple[float, float], ...], dtype: torch.dtype, device: torch.device):
    # built once per (settings, dtype, device): a host-to-device copy per call would sync
    return torch.tensor(pairs, dtype=dtype, device=device)  # [K, 2]


def _all_reduce_sum(x: torch.Tensor) -> torch.Tensor:
    """Sum ``x`` over the default process group when ``torch.distributed`` is initialised (the authors' reduce)."""
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        torch.distributed.all_reduce(x, op=torch.distributed.ReduceOp.SUM)
    return x


def bapo_search(
    ratio: torch.Tensor,
    adv: torch.Tensor,
    mask: torch.Tensor,
    pairs: tuple[tuple[float, float], ...],
    target: float,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(bounds, sums)``: ``[c_low, c_high]``, the first candidate pair whose ``P / (N + eps)`` reaches
    ``target`` (else the last), and ``sums = [P, N]`` at that pair, summed over processes; both in at least
    float32. No host sync."""
    with torch.no_grad():
        wide = torch.promote_types(ratio.dtype, torch.float32)
        cand = _candidate_tensor(pairs, wide, ratio.device)
        r = ratio.detach().to(wide).reshape(1, -1)
        a = adv.expand_as(ratio).to(wide).reshape(1, -1)
        valid = mask.bool().reshape(1, -1)
        eff = torch.where(a >= 0, torch.minimum(r, cand[:, 1:]), torch.maximum(r, cand[:, :1]))  # [K, N]
        contrib = torch.where(valid, eff * a, 0.0)
        sums = torch.stack([contrib.clamp(min=0).sum(-1), (-contrib.clamp(max=0)).sum(-1)], dim=-1)  # [K, 2]
        sums = _all_reduce_sum(sums)
        pos, neg = sums[:, 0], sums[:, 1]
        met = (neg <= 0) | (pos / (neg + _EPS) >= max(target, 0.0))
        k = torch.where(met.any(), met.to(torch.int64).argmax(), len(pairs) - 1)
    return cand[k], sums[k]


@register_method("bapo")
def bapo(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    adv_ratio_target: float = 1.0,
    ratio_lower_start: float = 0.6,
    ratio_lower_max: float = 0.9,
    ratio_lower_step: float = 0.05,
    ratio_upper_start: float = 1.2,
    ratio_upper_max: float = 3.0,
    ratio_upper_step: float = 0.05,
    clip_c: float = 3.0,
) -> MethodOutput:
    """``-A min(r, c_high)`` for ``A > 0`` and ``-A min(max(r, c_low), clip_c)`` for ``A < 0``, the bounds from
    ``bapo_search`` over this call's tokens (all processes'). Gradient ``-r A grad(logp)`` inside, zero past a
    bound (as PPO-clip)."""
    adv = token_advantages(advantages)
    lr, raw = log_ratio(logp, old_logp)
    ratio = torch.exp(lr)
    pairs = bapo_candidates(
        ratio_lower_start,
        ratio_lower_max,
        ratio_lower_step,
        ratio_upper_start,
        ratio_upper_max,
        ratio_upper_step,
    )
    bounds, sums = bapo_search(ratio, adv, mask, pairs, adv_ratio_target)
    c_low, c_high = bounds.to(ratio.dtype)  # rounded once to the ratio's dtype, as every method's bounds
    inf = torch.full((), math.inf, dtype=ratio.dtype, device=ratio.device)
    cap = torch.full((), clip_c, dtype=ratio.dtype, device=ratio.device)
    lo = torch.where(adv < 0, c_low, -inf)
    hi = torch.where(adv > 0, c_high, torch.where(adv < 0, cap, inf))
    loss = -adv * torch.clamp(ratio, lo, hi)

    m = Masked(mask)
    with torch.no_grad():
        r = ratio.detach()
        low = r < lo
        high = (adv > 0) & (r > hi)
        dual = (adv < 0) & (r > hi)
        low_frac, high_frac = m.frac(low), m.frac(high)
        total = sums.sum()
        metrics = {
            **m.stats("ratio", r),
            # raised above the start bounds (0 when the start already balances, and on an empty batch)
            "bound_low_raise": (bounds[0] - pairs[0][0]).float(),
            "bound_high_raise": (bounds[1] - pairs[0][1]).float(),
            # P / (P + N) at the chosen bounds, over all processes (0 when both are 0)
            "pos_share": torch.where(total > 0, sums[0] / total.clamp(min=_EPS), 0.0).float(),
            "target_missed": (
                (sums[1] > 0) & (sums[0] / (sums[1] + _EPS) < max(adv_ratio_target, 0.0))
            ).float(),
            "clip_frac": low_frac + high_frac,
            "clip_low_frac": low_frac,
            "clip_high_frac": high_frac,
            "dual_clip_frac": m.frac(dual),
            "zero_grad_frac": zero_grad_frac(m, low | high | dual | saturated(lr, raw), adv),
        }
    return MethodOutput(m.select(loss), metrics)
