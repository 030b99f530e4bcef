"""M2PO (Second-Moment Trust Policy Optimization, arXiv 2510.01161), the paper's authors' algorithm.

Read from Infini-AI-Lab/M2PO (commit af54a3e) ``verl/trainer/ppo/core_algos.py``: ``compute_m2po_policy_loss``,
``kpo_clip_harmful_tokens``, ``_get_trust_region_tokens_delta_sq`` and ``_solve_tau_from_sorted_delta2``, with the
settings ``verl/workers/actor/dp_actor.py`` passes (``M2_budget``; ``miniclip_low`` / ``miniclip_high`` from the
actor config, unset in every script of the repository, so None). Per call (one micro-batch, as the authors' actor
calls it once per micro-batch, without a reduction over processes):

1. Only "harmful" tokens count: ``A > 0`` with ``r > 1`` and ``A < 0`` with ``r < 1`` (both with the authors'
   ``1e-12`` margins), ``r = pi_theta / pi_old`` and ``v = (log r)^2``.
2. If there is none, or their mean ``v`` is at most the budget (+1e-12), nothing is constrained: the authors
   return the bounds ``[0, 1e5]`` (their "no clipping" sentinel, ``clip_high = 100000``).
3. Otherwise ``tau`` is fitted to the budget: with the harmful ``v`` sorted ascending and ``S = budget x n``, the
   first ``k`` whose cap at ``v_k`` reaches the budget (``(v_k - 1e-12)(n - k - 1) + sum_{i <= k} v_i >= S - 1e-12``)
   gives ``tau^2 = v_{k-1} - 1e-12`` (``0`` when ``k = 0``): the largest breakpoint whose cap stays below the
   budget. The bounds are ``[e^-tau, e^tau]``, computed as the authors compute them (``torch.tensor(tau)`` is
   float32, so ``exp`` is taken in float32).
4. ``miniclip_low`` / ``miniclip_high`` (when set) keep the band at least ``[1 - miniclip_low, 1 + miniclip_high]``.
5. The loss is PPO's clip with those bounds, ``max(-A r, -A clip(r, lo, hi))``: only the harmful quadrants can
   clip (``A > 0, r > hi``; ``A < 0, r < lo``), so the budget acts on exactly the tokens it was fitted on.

Where this differs from the authors' code, and why:
- the log-ratio is clamped to +-20 before ``exp`` (every method here does, ``base.py``); the authors take no clamp,
  so a token past it that is not clipped (``A < 0`` with ``log r > 20``) has the gradient ``-A r`` there and zero
  here. The fit uses the unclamped ``(log r)^2``, as theirs.
- "harmful" uses each token's advantage; the authors read ``advantages[:, 0]``, the row's first. The two agree
  wherever the advantage is constant along a sequence, as GRPO's is and as every advantage the trainer passes.
- where ``v_{k-1} < 1e-12`` their ``(v - 1e-12) ** 0.5`` is a complex number and the call raises; here
  ``tau^2`` is clamped at 0 (bounds ``[1, 1]``). A budget at or below ``1e-12 / n`` also raises there (their
  solver returns one value where two are unpacked); here the same fit runs as for any budget.
- the fit is computed on the device, for every ``k`` at once (their loop syncs the host once per token); the
  decisions are the same comparisons in float64, on the same float32 (or float64) sums. bf16 log-ratios are
  widened to float32 first (theirs would stay bf16).
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

_MARGIN = 1e-12  # the authors' tolerance in every comparison of the fit
_NO_CLIP_HIGH = 100000.0  # the authors' "no clipping needed" return: clip_high = 100000, clip_low = 0


def harmful_tokens(raw: torch.Tensor, adv: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """``A > 1e-12`` with ``r > 1 + 1e-12``, or ``A < -1e-12`` with ``r < 1 - 1e-12``, among unmasked tokens
    (``raw`` the unclamped log-ratio, widened to at least float32; the comparisons in its dtype, as theirs)."""
    r = torch.exp(raw)
    pos = (adv > constant(_MARGIN, adv.dtype, adv.device)) & (r > constant(1 + _MARGIN, r.dtype, r.device))
    neg = (adv < constant(-_MARGIN, adv.dtype, adv.device)) & (r < constant(1 - _MARGIN, r.dtype, r.device))
    return mask.bool() & (pos | neg)


def m2po_fit(
    raw: torch.Tensor, adv: torch.Tensor, mask: torch.Tensor, budget: float
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(lower, upper, tau, binds)``: the authors' ratio bounds (float64 0-dim tensors, before miniclip), the
    fitted ``tau`` (0 when the budget does not bind) and whether it binds. No host sync."""
    with torch.no_grad():
        wide = torch.promote_types(raw.dtype, torch.float32)
        d = raw.detach().to(wide)
        harm = harmful_tokens(d, adv, mask).reshape(-1)
        v = d.square().reshape(-1)
        n = harm.sum()
        nd = n.to(torch.float64)
        m2_now = torch.where(harm, v, 0.0).sum().to(torch.float64) / nd.clamp(min=1)
        free = (n == 0) | (m2_now <= budget + _MARGIN)
        # the harmful values ascending, then +inf; prefix sums over the harmful ones in their dtype, as theirs
        sorted_v = torch.sort(torch.where(harm, v, torch.inf)).values
        pos = torch.arange(v.numel(), device=v.device)
        inside = pos < n
        csum = torch.where(inside, sorted_v, 0.0).cumsum(0)
        rest = (nd - pos.to(torch.float64) - 1).clamp(min=0)
        capped = (torch.where(inside, sorted_v, 0.0).to(torch.float64) - _MARGIN) * rest + csum.to(
            torch.float64
        )
        reach = inside & (capped >= budget * nd - _MARGIN)
        k = reach.to(torch.int64).argmax()
        prev = sorted_v[(k - 1).clamp(min=0)].to(torch.float64)
        tau2 = torch.where(k > 0, prev - _MARGIN, 0.0).clamp(min=0.0)
        binds = ~free & reach.any()
        tau32 = torch.sqrt(tau2).to(torch.float32)  # torch.tensor(tau): float32, as the authors' bound
        lower = torch.where(binds, torch.exp(-tau32).to(torch.float64), 0.0)
        upper = torch.where(binds, torch.exp(tau32).to(torch.float64), _NO_CLIP_HIGH)
        tau = torch.where(binds, tau32.to(torch.float64), 0.0)
    return lower, upper, tau, binds


@register_method("m2po")
def m2po(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    m2_budget: float = 0.04,
    miniclip_low: float | None = None,
    miniclip_high: float | None = None,
) -> MethodOutput:
    """``max(-A r, -A clip(r, lo, hi))`` with ``[lo, hi] = [e^-tau, e^tau]`` fitted to ``m2_budget`` on the harmful
    tokens (``m2po_fit``), widened to ``[1 - miniclip_low, 1 + miniclip_high]`` where those are set. Gradient
    ``-r A grad(logp)``, zero on a harmful token past its bound."""
    adv = token_advantages(advantages)
    lr, raw = log_ratio(logp, old_logp)
    ratio = torch.exp(lr)
    lower, upper, tau, binds = m2po_fit(raw, adv, mask, m2_budget)
    # the authors' arithmetic: clip_low = 1 - lower, raised to miniclip_low, back to 1 - clip_low (and likewise up)
    clip_low, clip_high = 1.0 - lower, upper - 1.0
    if miniclip_low is not None:
        clip_low = torch.where(clip_low < miniclip_low, miniclip_low, clip_low)
    if miniclip_high is not None:
        clip_high = torch.where(clip_high < miniclip_high, miniclip_high, clip_high)
    lo_b, hi_b = (1.0 - clip_low).to(ratio.dtype), (1.0 + clip_high).to(ratio.dtype)
    inf = constant(torch.inf, ratio.dtype, ratio.device)
    # PPO's max(-A r, -A clip(r, lo, hi)) as one clamp (clip.ppo_clip_bounds): A min(r, hi) for A > 0, A max(r, lo)
    # for A < 0; the gradient is the same at the bounds (torch.maximum splits a tie, clamp passes it)
    lo = torch.where(adv < 0, lo_b, -inf)
    hi = torch.where(adv > 0, hi_b, inf)
    loss = -adv * ratio.clamp(lo, hi)

    m = Masked(mask)
    with torch.no_grad():
        r = ratio.detach()
        low, high = r < lo, r > hi
        low_frac, high_frac = m.frac(low), m.frac(high)
        wide = torch.promote_types(raw.dtype, torch.float32)
        harm = harmful_tokens(raw.to(wide), adv, mask)
        metrics = {
            **m.stats("ratio", r),
            "harmful_frac": m.frac(harm),
            "m2_harmful": Masked(harm).mean(
                raw.to(wide).square()
            ),  # the authors' M2 (0 with no harmful token)
            "budget_binds": binds.float(),
            "tau": tau.float(),
            "clip_frac": low_frac + high_frac,  # the authors' pg_clipfrac: -A clip(r) > -A r
            "clip_low_frac": low_frac,
            "clip_high_frac": high_frac,
            "zero_grad_frac": zero_grad_frac(m, low | high | saturated(lr, raw), adv),
        }
    return MethodOutput(m.select(loss), metrics)
