"""M2PO two ways: ``m2po`` against the paper's authors' code, ``m2po_areal`` against AReaL's port.

Neither repository is a dependency. Each ``authors_*`` / ``areal_*`` function below restates, step by step and in
that code's own order of operations (host syncs, early returns and float32 ``torch.tensor`` included), the
function named in its comment; the commits are in the method modules' docstrings (Infini-AI-Lab/M2PO af54a3e,
inclusionAI/AReaL 4aef98d). Ours must match loss and gradient on the same tensors: random batches in float64 and
float32, rows with every token masked, length-1 sequences, ratios up to e^+-15, a budget that does not bind.
"""

from __future__ import annotations

import math

import pytest
import torch

from pspo_repro.methods import aggregate, get_method
from pspo_repro.methods.m2po import m2po_fit
from pspo_repro.methods.m2po_areal import m2po_keep
from tests.methods.test_authors_parity import assert_same, batch, ours, theirs

# ---------------------------------------------------------------- Infini-AI-Lab/M2PO core_algos.py, restated


def authors_harmful_delta_sq(old, logp, adv, mask):
    # _get_trust_region_tokens_delta_sq: the rows' sign from the first column, then r > 1 / r < 1 per token
    m = mask.bool()
    first = adv[:, 0]
    pos_rows, neg_rows = first > 1e-12, first < -1e-12
    delta = old - logp
    ratio = torch.exp(-delta)
    sq = delta.pow(2)
    pos = sq[pos_rows][(ratio[pos_rows] > 1.0 + 1e-12) & m[pos_rows]]
    neg = sq[neg_rows][(ratio[neg_rows] < 1.0 - 1e-12) & m[neg_rows]]
    return torch.cat([pos, neg])


def authors_solve_tau(sorted_sq, target):
    # _solve_tau_from_sorted_delta2, its early returns kept (two of them return one value where two are unpacked)
    if sorted_sq.numel() == 0:
        return 100000
    total = float(sorted_sq.sum().item())
    if target >= total - 1e-12:
        return 100000
    if target <= 1e-12:
        return 0.0
    csum = torch.cumsum(sorted_sq, dim=0)
    n = sorted_sq.numel()
    for k in range(n):
        left = float(csum[k].item())
        rest = n - k - 1
        m2 = sorted_sq[k].item() - 1e-12
        if m2 * rest + left >= target - 1e-12:
            if k == 0:
                return 0.0, csum[-1].item() / n
            after = (sorted_sq[k - 1].item() * (rest + 1) + float(csum[k - 1].item())) / n
            return float(sorted_sq[k - 1].item() - 1e-12) ** 0.5, after
    return 100000


def authors_bounds(old, logp, adv, mask, budget):
    # kpo_clip_harmful_tokens: (clip_low, clip_high) as ratios; (0, 100000) when nothing needs clipping
    sq = authors_harmful_delta_sq(old, logp, adv, mask)
    n = sq.numel()
    if n == 0:
        return 0.0, 100000
    target = budget * float(n)
    m2_now = float(sq.sum().detach().item() / n)
    if m2_now <= budget + 1e-12:
        return 0.0, 100000
    sorted_sq, _ = torch.sort(sq)
    tau, _ = authors_solve_tau(sorted_sq, target)
    return float(torch.exp(torch.tensor(-tau)).item()), float(torch.exp(torch.tensor(+tau)).item())


def authors_m2po(old, logp, adv, mask, M2_budget=0.04, miniclip_low=None, miniclip_high=None):
    # compute_m2po_policy_loss (the actor passes miniclip_* = config.get(..., None)): clip_pg_losses1 before agg_loss
    clip_low, clip_high = authors_bounds(old, logp.detach(), adv, mask, M2_budget)
    clip_low = 1 - clip_low
    clip_high = clip_high - 1
    if miniclip_low is not None and clip_low < miniclip_low:
        clip_low = miniclip_low
    if miniclip_high is not None and clip_high < miniclip_high:
        clip_high = miniclip_high
    ratio = torch.exp(logp - old)
    pg_losses1 = -adv * ratio
    pg_losses2 = -adv * torch.clamp(ratio, 1 - clip_low, 1 + clip_high)
    return torch.maximum(pg_losses1, pg_losses2)


# ---------------------------------------------------------------- inclusionAI/AReaL, restated


def areal_m2po_mask(old, prox, mask, threshold):
    # actor.py _apply_m2po_masking + _get_m2po_loss_mask
    m2 = (old - prox) * (old - prox)
    flat = mask.bool().view(-1)
    sel = m2.view(-1)[flat]
    if sel.numel() == 0:
        return mask.bool()
    sorted_m2, idx = torch.sort(sel, descending=True)
    n = sorted_m2.numel()
    avg = sorted_m2.flip(0).cumsum(0).flip(0) / torch.arange(n, 0, -1, dtype=sorted_m2.dtype)
    below = torch.where(avg < threshold)[0]
    k = below[0].item() if len(below) > 0 else n - 1
    keep_sorted = torch.ones(n, dtype=torch.bool)
    keep_sorted[:k] = False
    full = torch.zeros_like(flat)
    full[flat] = keep_sorted[torch.argsort(idx)]
    return full.view_as(mask)


def areal_m2po(old, logp, adv, mask, threshold=0.04, upper=5.0, eps_clip=0.0, count="kept"):
    # actor.py grpo_loss_fn (M2PO mask on loss_mask first), then functional.py ppo_actor_loss_fn with
    # gsm8k_m2po.yaml's rejection sampling (token level, ratio metric, action mask; upper None: rejection off) and
    # eps_clip 0.0, c_clip None; proximal_logprobs = the current log-probs, detached. The scalar loss: the sum
    # over the kept tokens divided by loss_mask.count_nonzero() after the M2PO mask, before the rejection. AReaL's
    # ``.float()`` upcasts bf16 log-probs; these float64 tensors keep their precision. ``count="all"`` divides by
    # the unmasked count instead (not AReaL: our kept_token_norm=false under a token mean).
    prox = logp.detach()
    loss_mask = areal_m2po_mask(old, prox, mask, threshold)
    loss_mask_count = loss_mask.count_nonzero() or 1
    if count == "all":
        loss_mask_count = mask.count_nonzero() or 1
    behave_imp_weight = None
    if upper is not None:
        log_ratio = prox.detach() - old.detach()
        log_ratio = torch.where(torch.isfinite(log_ratio), log_ratio, 0.0)
        weight = torch.exp(log_ratio)
        loss_mask = loss_mask & (weight <= upper)
        behave_imp_weight = torch.where(loss_mask, weight, 0.0)
    ratio = torch.where(loss_mask, torch.exp(logp - prox), 0)
    clipped = torch.clamp(ratio, 1.0 - eps_clip, 1.0 + eps_clip)
    pg_loss = torch.max(-adv * ratio, -adv * clipped)
    if behave_imp_weight is not None:
        pg_loss = pg_loss * behave_imp_weight
    return torch.where(loss_mask, pg_loss, 0).sum() / loss_mask_count


# ---------------------------------------------------------------- batches


def extreme_batch(seed):
    """``batch`` with some log-ratios at +-15 and +-9 on tokens of both advantage signs (inside the +-20 clamp)."""
    logp, old, adv, mask = batch(seed, spread=1.0)
    g = torch.Generator().manual_seed(seed + 100)
    pick = torch.rand(logp.shape, generator=g, dtype=logp.dtype) < 0.15
    sign = torch.where(torch.rand(logp.shape, generator=g) < 0.5, -1.0, 1.0).to(logp.dtype)
    size = torch.where(torch.rand(logp.shape, generator=g) < 0.5, 15.0, 9.0).to(logp.dtype)
    return torch.where(pick, old + sign * size, logp), old, adv, mask


def masked_rows_batch(seed):
    logp, old, adv, mask = batch(seed)
    mask[2] = 0.0
    mask[5] = 0.0
    return logp, old, adv, mask


def length_one_batch(seed):
    logp, old, adv, mask = batch(seed, spread=0.7)
    return logp[:, :1].clone(), old[:, :1].clone(), adv[:, :1].clone(), torch.ones_like(mask[:, :1])


def float32_batch(seed):
    return tuple(t.float() for t in batch(seed))


BATCHES = {
    "random": batch,
    "extreme": extreme_batch,
    "masked_rows": masked_rows_batch,
    "length_one": length_one_batch,
    "float32": float32_batch,
}


def close(a, b):
    if a.dtype == torch.float32:
        torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-5)
    else:
        assert_same(a, b)


# ---------------------------------------------------------------- m2po: the authors' algorithm


M2PO_CASES = [
    ({}, {}),  # the authors' scripts: M2_budget=0.04, miniclip unset
    ({"m2_budget": 0.3}, {"M2_budget": 0.3}),
    ({"m2_budget": 50.0}, {"M2_budget": 50.0}),  # does not bind: bounds [0, 1e5]
    (
        {"miniclip_low": 0.3, "miniclip_high": 0.5},  # compute_m2po_policy_loss's own keyword defaults
        {"miniclip_low": 0.3, "miniclip_high": 0.5},
    ),
    ({"m2_budget": 0.01, "miniclip_high": 0.05}, {"M2_budget": 0.01, "miniclip_high": 0.05}),
]


@pytest.mark.parametrize("kind", BATCHES)
@pytest.mark.parametrize(("params", "ref_params"), M2PO_CASES)
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_m2po_loss_and_gradient_match_the_authors(kind, params, ref_params, seed):
    logp, old, adv, mask = BATCHES[kind](seed)
    loss, grad, _ = ours("m2po", logp, old, adv, mask, **params)
    ref_loss, ref_grad = theirs(authors_m2po, logp, old, adv, mask, **ref_params)
    close(loss, ref_loss)
    close(grad, ref_grad)
    # and the loss the authors back-propagate (agg_loss "token-mean", our bnpo)
    close(aggregate(loss, mask, "bnpo"), aggregate(ref_loss, mask, "bnpo"))


@pytest.mark.parametrize("kind", BATCHES)
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_m2po_bounds_are_the_authors_bit_for_bit(kind, seed):
    logp, old, adv, mask = BATCHES[kind](seed)
    for budget in (0.01, 0.04, 0.3, 50.0):
        lower, upper, _, _ = m2po_fit(logp - old, adv, mask, budget)
        assert (lower.item(), upper.item()) == authors_bounds(old, logp, adv, mask, budget), budget


def test_m2po_parity_batches_reach_every_region():
    """Guard against a vacuous parity: the budget binds and does not, harmful tokens are clipped on both sides and
    kept, the other quadrants are present, and the fitted band is neither empty nor everything."""
    seen = dict.fromkeys(["binds", "free", "clip_pos", "clip_neg", "kept_harmful", "other", "wide"], False)
    for kind in BATCHES:
        for seed in (0, 1, 2):
            logp, old, adv, mask = BATCHES[kind](seed)
            for budget in (0.04, 50.0):
                lower, upper, tau, binds = m2po_fit(logp - old, adv, mask, budget)
                r, on = torch.exp(logp - old), mask.bool()
                seen["binds" if binds else "free"] = True
                seen["clip_pos"] |= bool((on & (adv > 0) & (r > upper)).any())
                seen["clip_neg"] |= bool((on & (adv < 0) & (r < lower)).any())
                seen["kept_harmful"] |= bool((on & (adv > 0) & (r > 1) & (r <= upper)).any())
                seen["other"] |= bool((on & (adv < 0) & (r > 1)).any())
                seen["wide"] |= bool(binds and 0.05 < tau.item() < 1.0)
    assert all(seen.values()), seen


def test_m2po_fit_by_hand():
    # harmful: A > 0 at log r = 0.1, 0.2, 0.3, 0.6 (v = 0.01, 0.04, 0.09, 0.36), mean 0.125. A < 0 at log r = +0.5
    # (not harmful) and A > 0 at log r = -0.4 (not harmful). Budget 0.05: S = 4 x 0.05 = 0.2. The cap at v_k
    # reaches S first at k = 2 (0.01 + 0.04 + 0.09 + 1 x 0.09 = 0.23 >= 0.2; k = 1 gives 0.01 + 0.04 + 2 x 0.04 =
    # 0.13), so tau^2 = v_1 - 1e-12 = 0.04: tau = 0.2, bounds [e^-0.2, e^0.2] = [0.8187, 1.2214]: the tokens at 0.3
    # and 0.6 are clipped, 0.1 and 0.2 (and the non-harmful ones) keep -r A.
    lr = torch.tensor([[0.1, 0.2, 0.3, 0.6, -0.4], [0.5, 0.0, 0.0, 0.0, 0.0]], dtype=torch.float64)
    adv = torch.tensor([1.0, -1.0], dtype=torch.float64)
    mask = torch.tensor([[1, 1, 1, 1, 1], [1, 0, 0, 0, 0]], dtype=torch.float64)
    old = torch.zeros_like(lr)
    logp = lr.clone().requires_grad_(True)
    out = get_method("m2po")(logp, old, adv, mask, m2_budget=0.05)
    out.per_token_loss.sum().backward()
    assert out.metrics["tau"].item() == pytest.approx(0.2, rel=1e-6)
    assert out.metrics["budget_binds"].item() == 1.0
    assert out.metrics["m2_harmful"].item() == pytest.approx(0.125)
    r = lr.exp()
    want_grad = torch.tensor(
        [[-r[0, 0], -r[0, 1], 0.0, 0.0, -r[0, 4]], [r[1, 0], 0, 0, 0, 0]], dtype=torch.float64
    )
    torch.testing.assert_close(logp.grad, want_grad)
    hi = math.exp(0.2)
    torch.testing.assert_close(out.per_token_loss[0, 2:4], torch.full((2,), -hi, dtype=torch.float64))
    assert out.metrics["clip_frac"].item() == pytest.approx(2 / 6)
    # (the token at 0.2 sits on the bound: the authors' float32 e^tau = 1.22140276432 is just above e^0.2 =
    # 1.22140275816, so it keeps its gradient.) With miniclip_high 0.5 the band is at least [., 1.5]: the token at
    # 0.3 (r = 1.35) keeps its gradient
    logp.grad = None
    out = get_method("m2po")(logp, old, adv, mask, m2_budget=0.05, miniclip_high=0.5)
    out.per_token_loss.sum().backward()
    assert logp.grad[0, 2].item() == pytest.approx(-math.exp(0.3)) and logp.grad[0, 3].item() == 0.0


def test_m2po_budget_met_at_the_first_token_clips_every_harmful_token():
    # k = 0: the cap at the smallest harmful v already exceeds the budget, tau = 0, bounds [1, 1]
    lr = torch.tensor([[0.5, 0.5, -0.3]], dtype=torch.float64)
    logp, old = lr.clone().requires_grad_(True), torch.zeros_like(lr)
    adv, mask = torch.tensor([1.0], dtype=torch.float64), torch.ones_like(lr)
    out = get_method("m2po")(logp, old, adv, mask)
    out.per_token_loss.sum().backward()
    ref_loss, ref_grad = theirs(authors_m2po, lr, old, adv[:, None].expand_as(lr), mask)
    assert_same(out.per_token_loss.detach(), ref_loss)
    assert_same(logp.grad, ref_grad)
    assert out.metrics["tau"].item() == 0.0 and out.metrics["budget_binds"].item() == 1.0
    assert logp.grad[0, :2].tolist() == [0.0, 0.0] and logp.grad[0, 2] != 0


def test_m2po_where_the_authors_code_raises():
    # 100 harmful tokens at log r = 1e-7 (v = 1e-14 < the 1e-12 margin) and one at log r = 3.2: the first k reaching
    # the budget has v_{k-1} - 1e-12 < 0, whose ** 0.5 is complex in Python: their call raises. Ours clamps tau^2
    # at 0 (the band [1, 1]: every harmful token clipped).
    lr = torch.cat([torch.full((1, 100), 1e-7), torch.full((1, 1), 3.2)], dim=1).double()
    old, adv, mask = torch.zeros_like(lr), torch.ones(1, 101, dtype=torch.float64), torch.ones_like(lr)
    with pytest.raises(TypeError):
        authors_m2po(old, lr, adv, mask)
    logp = lr.clone().requires_grad_(True)
    out = get_method("m2po")(logp, old, adv[:, 0], mask)
    out.per_token_loss.sum().backward()
    assert out.metrics["budget_binds"].item() == 1.0 and out.metrics["tau"].item() == 0.0
    assert (logp.grad == 0).all()


def test_m2po_past_the_log_ratio_clamp_is_the_one_difference():
    # A < 0 at log r = 25 is not harmful and never clipped: the authors' gradient is -A r = e^25, ours 0 (every
    # method clamps log r at 20; the clamp's gradient is zero past it). Every other token agrees.
    lr = torch.tensor([[25.0, 0.3, -0.2]], dtype=torch.float64)
    old, adv, mask = torch.zeros_like(lr), torch.tensor([-1.0], dtype=torch.float64), torch.ones_like(lr)
    loss, grad, metrics = ours("m2po", lr, old, adv, mask)
    ref_loss, ref_grad = theirs(authors_m2po, lr, old, adv[:, None].expand_as(lr), mask)
    assert grad[0, 0].item() == 0.0 and ref_grad[0, 0].item() == pytest.approx(math.exp(25.0))
    assert_same(grad[0, 1:], ref_grad[0, 1:])
    assert_same(loss[0, 1:], ref_loss[0, 1:])
    assert metrics["zero_grad_frac"].item() == pytest.approx(1 / 3)


def test_m2po_metrics_with_no_harmful_token():
    # every token moved the way its advantage does not push: nothing is constrained
    lr = torch.tensor([[-0.5, -0.2], [0.4, 0.9]], dtype=torch.float64)
    adv = torch.tensor([1.0, -1.0], dtype=torch.float64)
    out = get_method("m2po")(lr, torch.zeros_like(lr), adv, torch.ones_like(lr))
    assert out.metrics["harmful_frac"].item() == 0.0 and out.metrics["budget_binds"].item() == 0.0
    torch.testing.assert_close(out.per_token_loss, -adv[:, None] * lr.exp())


# ---------------------------------------------------------------- m2po_areal: AReaL's port


AREAL_CASES = [
    ({}, {}),  # gsm8k_m2po.yaml: m2_threshold 0.04, rejection upper 5.0, AReaL's kept-count normaliser
    ({"m2_threshold": 0.5}, {"threshold": 0.5}),
    ({"behav_imp_weight_cap": 1.3}, {"upper": 1.3}),
    ({"behav_imp_weight_cap": None}, {"upper": None}),  # rejection_sampling: null
    ({"kept_token_norm": False}, {"count": "all"}),
    ({"m2_threshold": 100.0}, {"threshold": 100.0}),  # the mask drops nothing
]


@pytest.mark.parametrize("kind", [k for k in BATCHES if k != "float32"])
@pytest.mark.parametrize(("params", "ref_params"), AREAL_CASES)
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_m2po_areal_loss_and_gradient_match_areal(kind, params, ref_params, seed):
    logp, old, adv, mask = BATCHES[kind](seed)
    x = logp.detach().clone().requires_grad_(True)
    out = get_method("m2po_areal")(x, old, adv, mask, **params)
    loss = aggregate(
        out.per_token_loss, mask, "bnpo"
    )  # a token mean: AReaL's count comes from kept_token_norm
    loss.backward()
    y = logp.detach().clone().requires_grad_(True)
    ref = areal_m2po(old, y, adv, mask, **ref_params)
    ref.backward()
    assert_same(loss.detach(), ref.detach())
    assert_same(x.grad, y.grad)


def test_m2po_areal_normaliser_and_cap_are_areals():
    logp, old, adv, mask = batch(1)
    out = get_method("m2po_areal")(logp, old, adv, mask)
    keep = areal_m2po_mask(old, logp, mask, 0.04)
    n, k = mask.sum().item(), keep.sum().item()
    assert (n, k) == (
        77,
        24,
    )  # at threshold 0.04 most of this batch goes: AReaL's normaliser is 77 / 24 = 3.2x
    assert out.metrics["norm_scale"].item() == pytest.approx(n / k)
    w = torch.exp(logp - old)
    assert out.metrics["rejected_frac"].item() == pytest.approx(((w > 5.0) & keep).sum().item() / n)
    plain = get_method("m2po_areal")(logp, old, adv, mask, kept_token_norm=False)
    assert_same(out.per_token_loss, plain.per_token_loss * (n / k))


def test_m2po_mask_matches_areal_and_its_edge_cases():
    logp, old, _, mask = batch(5, spread=0.5)
    for threshold in (0.01, 0.04, 0.2, 10.0):
        ours_keep = m2po_keep((logp - old).square(), mask, threshold)
        assert torch.equal(ours_keep, areal_m2po_mask(old, logp, mask, threshold))
    # every suffix mean >= threshold: AReaL keeps only the smallest token
    m2 = torch.tensor([[4.0, 9.0, 1.0, 7.0]])
    keep = m2po_keep(m2, torch.ones(1, 4), 0.5)
    assert keep.tolist() == [[False, False, True, False]]
    # the kept tokens' mean is below the threshold, and nothing is dropped when it already is
    # sorted 9, 7, 4, 1: the rest's means are 5.25, 4, 2.5, 1
    assert m2po_keep(m2, torch.ones(1, 4), 4.5).tolist() == [[True, False, True, True]]  # drop 9
    assert m2po_keep(m2, torch.ones(1, 4), 3.0).tolist() == [[True, False, True, False]]  # drop 9 and 7
    assert m2po_keep(m2, torch.ones(1, 4), 100.0).all()


def test_the_two_m2po_are_different_algorithms():
    # on the same batch they zero different tokens: AReaL's mask drops the largest (log r)^2 of either direction,
    # the authors' clip only harmful tokens past the fitted band
    logp, old, adv, mask = batch(0)
    _, g_authors, _ = ours("m2po", logp, old, adv, mask)
    _, g_areal, _ = ours("m2po_areal", logp, old, adv, mask, kept_token_norm=False)
    on = mask.bool() & (adv != 0)
    zero_authors, zero_areal = (g_authors == 0) & on, (g_areal == 0) & on
    assert (zero_authors & ~zero_areal).any() and (zero_areal & ~zero_authors).any()
