"""The methods taken from the authors' code (issue 35) against that code's formula, restated here.

None of those repositories is a dependency: each ``authors_*`` function below re-derives, step by step and in
the authors' own order of operations, the formula of the function named in its comment (the commit is in each
method's module docstring). Our method must match its loss and its gradient on the same tensors, with tokens
inside and outside the trust region on both sides and both advantage signs.
"""

from __future__ import annotations

import math

import pytest
import torch

from pspo_repro.methods import get_method
from tests.methods.test_methods import random_batch


def batch(seed: int = 0, spread: float = 1.0):
    """A random batch with [B, T] advantages of both signs and ratios on both sides of every bound."""
    logp, old, adv, mask = random_batch(seed=seed, b=8, t=12, spread=spread)
    adv = adv[:, None].expand_as(logp).clone()
    adv[0] = 0.0  # a zero-advantage row
    return logp, old, adv, mask


def ours(name, logp, old, adv, mask, **params):
    x = logp.detach().clone().requires_grad_(True)
    out = get_method(name)(x, old, adv, mask, **params)
    out.per_token_loss.sum().backward()
    return out.per_token_loss.detach(), x.grad, out.metrics


def theirs(fn, logp, old, adv, mask, **params):
    x = logp.detach().clone().requires_grad_(True)
    loss = fn(old, x, adv, mask, **params) * mask
    loss.sum().backward()
    return loss.detach(), x.grad


def assert_same(a, b):
    torch.testing.assert_close(a, b, atol=1e-10, rtol=1e-9)


# ---------------------------------------------------------------- the authors' formulas, restated


def authors_gppo(old, logp, adv, mask, clip_low=0.2, clip_high=0.2, clip_c=3.0):
    # Kwai-Klear/CE-GPPO core_algos.py compute_gppo_loss, only_high=False (no log-ratio clamp)
    ratio = torch.exp(logp - old)
    l1 = -adv * ratio
    lo = (1 - clip_low) / ratio.detach() * ratio
    hi = (1 + clip_high) / ratio.detach() * ratio
    l2 = -adv * torch.clamp(ratio, lo, hi)
    clip1 = torch.maximum(l1, l2)
    clip2 = torch.min(-adv * clip_c, clip1)
    return torch.where(adv < 0, clip2, clip1)


def authors_ce_gppo(old, logp, adv, mask, clip_low=0.2, clip_high=0.2, clip_c=3.0, beta1=0.25, beta2=1.0):
    # Kwai-Klear/CE-GPPO core_algos.py compute_gppo_loss_general_beta
    ratio = torch.exp(logp - old)
    rd = ratio.detach()
    low = (ratio < 1 - clip_low) & (adv < 0)
    high = (ratio > 1 + clip_high) & (adv > 0)
    other = ~(low | high)
    clip1 = torch.zeros_like(adv)
    clip1[low] = -beta1 * (1 - clip_low) / rd[low] * ratio[low] * adv[low]
    clip1[high] = -beta2 * (1 + clip_high) / rd[high] * ratio[high] * adv[high]
    clip1[other] = -ratio[other] * adv[other]
    clip2 = torch.min(-adv * clip_c, clip1)
    return torch.where(adv < 0, clip2, clip1)


def authors_dcpo(old, logp, adv, mask, clip_low=0.2, clip_high=0.28, clip_c=10.0):
    # lime-RL/DCPO core_algos.py get_clip_low_high + compute_policy_loss_dcpo, clip_type="dynamic"
    q = torch.exp(old)
    low_c = 1 - torch.where(q != 0, 4 * clip_low / q, 0)
    low_c = low_c * (low_c >= 0)
    high_c = torch.where(q != 0, 1 + 4 * clip_high / q, float("inf"))
    low = (1 + torch.sqrt(low_c)) / 2
    high = torch.clamp((1 + torch.sqrt(high_c)) / 2, 0, max(clip_c, 10))
    ratio = torch.exp(logp - old)
    l1 = -adv * ratio
    l2 = -adv * torch.clamp(ratio, low, high)
    clip1 = torch.maximum(l1, l2)
    clip2 = torch.min(-adv * clip_c, clip1)
    return torch.where(adv < 0, clip2, clip1)


def prime_default(old, logp, adv, mask, dppo_mask_low=0.2, dppo_mask_high=0.2, kl_tau=1e-3):
    # PrimeIntellect-ai/prime-rl loss.py default_loss_fn (adv_tau = 1)
    lr = logp - old
    ratio = torch.exp(lr)
    diff = torch.exp(logp) - torch.exp(old)
    invalid = torch.where(adv > 0, diff > dppo_mask_high, diff < -dppo_mask_low)
    keep = mask.bool() & ~invalid
    return -(keep * adv * ratio) + kl_tau * (mask * lr**2)


def prime_ipo(old, logp, adv, mask, ipo_threshold=0.1, kl_tau=1e-3):
    # PrimeIntellect-ai/prime-rl loss.py ipo_loss_fn (adv_tau = 1)
    lr = logp - old
    ratio = torch.exp(lr)
    keep = mask.bool() & ~(torch.abs(torch.exp(logp) - torch.exp(old)) > ipo_threshold)
    return -(keep * adv * ratio) + kl_tau * (mask * lr**2)


def areal_decoupled(old, logp, adv, mask, upper=5.0, eps_clip=0.4, eps_clip_higher=None, c_clip=None):
    # inclusionAI/AReaL functional.py ppo_actor_loss_fn + apply_rejection_sampling (level token, metric ratio,
    # action mask), with proximal_logprobs = the current log-probs, detached (AReaL recomputes pi_prox with
    # the weights of this optimizer step). Per-token pg_loss, masked, before AReaL's sum / count. AReaL's
    # ``.float()`` upcasts bf16 log-probs before subtracting; these float64 tensors keep their precision.
    prox = logp.detach()
    loss_mask = mask
    if upper is not None:  # upper None: rejection_sampling null, no filtering and no behaviour weight
        log_ratio = prox - old.detach()
        log_ratio = torch.where(torch.isfinite(log_ratio), log_ratio, 0.0)
        behave_imp_weight = torch.exp(log_ratio)
        in_bounds = behave_imp_weight <= upper
        loss_mask = (mask.bool() & in_bounds).to(mask.dtype)
        behave_imp_weight = torch.where(loss_mask.bool(), behave_imp_weight, 0.0)
    ratio = torch.where(loss_mask.bool(), torch.exp(logp - prox), 0)
    clipped = torch.clamp(
        ratio, 1.0 - eps_clip, 1.0 + (eps_clip if eps_clip_higher is None else eps_clip_higher)
    )
    pg_loss = torch.max(-adv * ratio, -adv * clipped)
    if c_clip is not None:
        pg_loss = torch.min(pg_loss, torch.sign(adv) * c_clip * adv)
    if upper is not None:
        pg_loss = pg_loss * behave_imp_weight
    return torch.where(loss_mask.bool(), pg_loss, 0)


def bapo_effective(ratio, adv, mask, lo, hi, eps=1e-8):
    # WooooDyy/BAPO recipe/bapo/policy_loss.py _compute_effective_advantage (one process)
    eff = torch.where(
        adv >= 0, torch.minimum(ratio, ratio.new_tensor(hi)), torch.maximum(ratio, ratio.new_tensor(lo))
    )
    c = eff * adv * mask
    pos, neg = c.clamp(min=0).sum(), (-c.clamp(max=0)).sum()
    return ratio.new_tensor(float("inf")) if torch.all(neg <= 0) else pos / (neg + ratio.new_tensor(eps))


def authors_bapo_bounds(old, logp, adv, mask, target=1.0, lo=0.6, lo_max=0.9, lo_step=0.05, hi=1.2, hi_max=3.0,
                        hi_step=0.05):  # fmt: skip
    # compute_policy_loss_bapo's two loops, as written there (a host sync per candidate)
    ratio = torch.exp(torch.clamp(logp - old, min=-20.0, max=20.0))
    rho = bapo_effective(ratio, adv, mask, lo, hi)
    while rho.item() < target and lo < lo_max and lo_step > 0:
        lo = min(lo + lo_step, lo_max)
        rho = bapo_effective(ratio, adv, mask, lo, hi)
        if rho.item() >= target:
            break
    while rho.item() < target and hi < hi_max and hi_step > 0:
        hi = min(hi + hi_step, hi_max)
        rho = bapo_effective(ratio, adv, mask, lo, hi)
        if rho.item() >= target:
            break
    return lo, hi


def authors_bapo(old, logp, adv, mask, clip_ratio_c=3.0, **search):
    # compute_policy_loss_bapo: verl's dual clip with the searched bounds (pg_losses before agg_loss)
    lo, hi = authors_bapo_bounds(old, logp, adv, mask, **search)
    ratio = torch.exp(torch.clamp(logp - old, min=-20.0, max=20.0))
    pg_losses1 = -adv * ratio
    pg_losses2 = -adv * torch.clamp(ratio, lo, hi)
    clip_pg_losses1 = torch.maximum(pg_losses1, pg_losses2)
    clip_pg_losses2 = torch.min(-adv * clip_ratio_c, clip_pg_losses1)
    return torch.where(adv < 0, clip_pg_losses2, clip_pg_losses1)


def roll_kimi15(old, logp, adv, mask, tau=0.1):
    # alibaba/ROLL rlvr/actor_pg_worker.py _compute_kimi15_loss
    return -adv * logp + tau * 0.5 * (logp - old).pow(2)


# ---------------------------------------------------------------- parity


CASES = [
    ("gppo", authors_gppo, {}, {}),
    (
        "gppo",
        authors_gppo,
        {"eps_low": 0.1, "eps_high": 0.3, "clip_c": 1.5},
        {"clip_low": 0.1, "clip_high": 0.3, "clip_c": 1.5},
    ),
    ("ce_gppo", authors_ce_gppo, {}, {}),
    (
        "ce_gppo",
        authors_ce_gppo,
        {"beta_low": 0.75, "beta_high": 0.5, "eps_high": 0.28, "clip_c": 10.0},
        {"beta1": 0.75, "beta2": 0.5, "clip_high": 0.28, "clip_c": 10.0},
    ),
    ("dcpo", authors_dcpo, {}, {}),
    (
        "dcpo",
        authors_dcpo,
        {"eps_low": 0.1, "eps_high": 0.2, "clip_c": 3.0},
        {"clip_low": 0.1, "clip_high": 0.2, "clip_c": 3.0},
    ),
    ("dppo_k25", prime_default, {}, {}),
    (
        "dppo_k25",
        prime_default,
        {"delta_low": 0.05, "delta_high": 0.3, "kl_tau": 0.1},
        {"dppo_mask_low": 0.05, "dppo_mask_high": 0.3, "kl_tau": 0.1},
    ),
    ("ipo", prime_ipo, {}, {}),
    ("ipo", prime_ipo, {"ipo_threshold": 0.3, "kl_tau": 0.05}, {"ipo_threshold": 0.3, "kl_tau": 0.05}),
    # Kimi k1.5 (ROLL pg_variant="kimi15", kimi15_tau 0.1) is verl's dro with dro_beta = tau
    ("dro", roll_kimi15, {}, {}),
    ("dro", roll_kimi15, {"dro_beta": 0.5}, {"tau": 0.5}),
    # AReaL's decoupled PPO at its example's settings; its clip and dual clip are inert (u = pi / pi_prox == 1)
    ("decoupled_ppo", areal_decoupled, {}, {}),
    ("decoupled_ppo", areal_decoupled, {}, {"eps_clip": 0.1, "c_clip": 1.5}),
    ("decoupled_ppo", areal_decoupled, {"behav_imp_weight_cap": 1.3}, {"upper": 1.3}),
    ("decoupled_ppo", areal_decoupled, {"behav_imp_weight_cap": None}, {"upper": None}),
    # BAPO at the paper's values (the authors' README: rho_0 = 0.5 as a share is P / N = 1) and at their recipe's
    # bapo_trainer.yaml / example script (which passes 0.5 as P / N)
    ("bapo", authors_bapo, {}, {}),
    ("bapo", authors_bapo, {"adv_ratio_target": 0.5}, {"target": 0.5}),
    (
        "bapo",
        authors_bapo,
        {"adv_ratio_target": 1.0, "ratio_lower_max": 0.8, "ratio_upper_max": 2.0},
        {"target": 1.0, "lo_max": 0.8, "hi_max": 2.0},
    ),
    (
        "bapo",
        authors_bapo,
        {
            "adv_ratio_target": 0.5,
            "ratio_lower_start": 0.8,
            "ratio_lower_max": 0.95,
            "ratio_upper_step": 0.1,
            "ratio_upper_max": 2.0,
        },
        {"target": 0.5, "lo": 0.8, "lo_max": 0.95, "hi_step": 0.1, "hi_max": 2.0},
    ),
    ("bapo", authors_bapo, {"adv_ratio_target": 3.0, "clip_c": 1.5}, {"target": 3.0, "clip_ratio_c": 1.5}),
]


@pytest.mark.parametrize(("name", "ref", "params", "ref_params"), CASES)
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_loss_and_gradient_match_the_authors(name, ref, params, ref_params, seed):
    logp, old, adv, mask = batch(seed)
    loss, grad, _ = ours(name, logp, old, adv, mask, **params)
    ref_loss, ref_grad = theirs(ref, logp, old, adv, mask, **ref_params)
    assert_same(loss, ref_loss)
    assert_same(grad, ref_grad)


def test_the_batches_reach_every_region():
    """The parity batches hold clipped tokens on both sides, both advantage signs and dual-clipped ones."""
    logp, old, adv, mask = batch(0)
    r, on = torch.exp(logp - old), mask > 0
    assert ((r > 1.2) & (adv > 0) & on).any() and ((r < 0.8) & (adv < 0) & on).any()
    assert ((r < 0.8) & (adv > 0) & on).any() and ((r > 1.2) & (adv < 0) & on).any()
    assert ((r > 3.0) & (adv < 0) & on).any()


# ---------------------------------------------------------------- GPPO: same loss as clip, other gradient


def test_gppo_loss_equals_dual_clip_ppo_but_clipped_tokens_keep_b_times_the_gradient():
    logp, old, adv, mask = batch(3)
    loss, grad, metrics = ours("gppo", logp, old, adv, mask)
    clip_loss, clip_grad, _ = ours("clip", logp, old, adv, mask, delta=3.0)
    assert_same(loss, clip_loss)
    r = torch.exp(logp - old)
    on = mask > 0
    high = (adv > 0) & (r > 1.2) & on
    low = (adv < 0) & (r < 0.8) & on
    dual = (adv < 0) & (r > 3.0) & on
    inside = on & ~high & ~low & ~dual
    assert high.any() and low.any() and dual.any()
    assert (clip_grad[high | low] == 0).all()  # clip: flat, no gradient
    assert_same(grad[high], (-1.2 * adv)[high])  # GPPO: d loss / d logp = -b A
    assert_same(grad[low], (-0.8 * adv)[low])
    assert (grad[dual] == 0).all()  # past the dual clip both are flat
    assert_same(grad[inside], clip_grad[inside])
    expected_zero = (((grad == 0) & on & (adv != 0)).sum() / on.sum()).item()
    assert metrics["zero_grad_frac"].item() == pytest.approx(expected_zero)


def test_ce_gppo_scales_the_clipped_gradients_by_beta():
    logp, old, adv, mask = batch(4)
    _, grad, _ = ours("ce_gppo", logp, old, adv, mask, beta_low=0.5, beta_high=2.0)
    _, g_gppo, _ = ours("gppo", logp, old, adv, mask)
    r, on = torch.exp(logp - old), mask > 0
    high, low = (adv > 0) & (r > 1.2) & on, (adv < 0) & (r < 0.8) & on
    assert_same(grad[high], 2.0 * g_gppo[high])
    assert_same(grad[low], 0.5 * g_gppo[low])
    assert_same(grad[~high & ~low], g_gppo[~high & ~low])
    # beta = 1 on both sides is GPPO
    loss1, g1, _ = ours("ce_gppo", logp, old, adv, mask, beta_low=1.0, beta_high=1.0)
    loss2, g2, _ = ours("gppo", logp, old, adv, mask)
    assert_same(loss1, loss2)
    assert_same(g1, g2)


# ---------------------------------------------------------------- DCPO, prime-rl: defining properties


def test_dcpo_bounds_widen_for_rare_tokens_and_reach_ppo_at_q_one():
    from pspo_repro.methods.dcpo import dcpo_bounds

    old = torch.tensor([0.0, math.log(0.5), math.log(0.01), -1000.0], dtype=torch.float64)  # last: q == 0
    lo, hi = dcpo_bounds(old, 0.2, 0.28, 10.0)
    # q = 1: lo = (1 + sqrt(0.2)) / 2, hi = (1 + sqrt(2.12)) / 2
    assert lo[0].item() == pytest.approx((1 + math.sqrt(0.2)) / 2)
    assert hi[0].item() == pytest.approx((1 + math.sqrt(2.12)) / 2)
    assert lo[1].item() == 0.5 and lo[2].item() == 0.5  # 4 eps / q >= 1: the lower bound is 1/2
    assert hi[1] < hi[2] <= 10.0
    assert lo[3].item() == 1.0 and hi[3].item() == 10.0  # the authors' q == 0 branch


def test_prime_losses_pull_dropped_tokens_back_only_through_the_squared_log_ratio():
    p = torch.tensor([[0.9, 0.1, 0.55]], dtype=torch.float64)
    old = torch.full_like(p, 0.5).log()
    for name, adv, dropped in [
        ("dppo_k25", torch.tensor([1.0]), [True, False, False]),  # A > 0: only p - q > 0.2 is dropped
        ("dppo_k25", torch.tensor([-1.0]), [False, True, False]),  # A < 0: only p - q < -0.2
        ("ipo", torch.tensor([1.0]), [True, True, False]),  # |p - q| > 0.1 whatever A's sign
        ("ipo", torch.tensor([-1.0]), [True, True, False]),
    ]:
        _, grad, metrics = ours(name, p.log(), old, adv, torch.ones_like(p), kl_tau=0.1)
        lr = (p / 0.5).log()
        pg = -adv * (p / 0.5)
        expected = torch.where(torch.tensor([dropped]), 0.0, pg) + 2 * 0.1 * lr
        assert_same(grad, expected)
        assert metrics["mask_frac"].item() == pytest.approx(sum(dropped) / 3)


# ---------------------------------------------------------------- AReaL's decoupled PPO: defining property


def test_decoupled_ppo_is_a_behaviour_weighted_gradient_with_rejection():
    # pi_prox = the policy before this optimizer step = sg(pi_theta): the loss is -A w, its gradient -A w on
    # kept tokens (w = pi_theta / pi_behav <= cap) and exactly zero on rejected ones; the clip never binds
    logp, old, adv, mask = batch(6)
    loss, grad, metrics = ours("decoupled_ppo", logp, old, adv, mask)
    w = torch.exp(logp - old)
    on = mask > 0
    keep = (w <= 5.0) & on
    assert (keep & (adv != 0)).any() and (~keep & on & (adv != 0)).any()  # both kinds present
    assert_same(loss, torch.where(keep, -adv * w, 0.0))
    assert_same(grad, torch.where(keep, -adv * w, 0.0))
    assert metrics["mask_frac"].item() == pytest.approx(((~keep & on).sum() / on.sum()).item())
    # with no stale data (pi_behav == pi_theta) it is the on-policy gradient -A grad(logp), as every method
    _, g_fresh, _ = ours("decoupled_ppo", logp, logp.detach(), adv, mask)
    _, g_noclip, _ = ours("noclip", logp, logp.detach(), adv, mask)
    assert_same(g_fresh, g_noclip)


# ---------------------------------------------------------------- ASPO and Archer (they take the token entropies)


def archer_low_entropy_mask(entropy, mask, q=0.8):
    # wizard-III/Archer2.0 dp_actor.py: its "high_entropy_mask" holds the low-entropy tokens ("only low entropy
    # token is True"): at or below the per-response nanquantile of the valid tokens' entropy
    masked_entropy = torch.where(mask.bool(), entropy, torch.nan)
    q80 = torch.nanquantile(masked_entropy, q=q, dim=-1, keepdim=True)
    return (masked_entropy <= q80) & mask.bool()


def authors_aspo(old, logp, adv, hem, nl=0.2, nh=0.4, pl=0.2, ph=0.4, nc=3.0, pc=3.0):
    # Archer2.0 core_algos.py compute_policy_loss_archer: pg_losses before agg_loss
    ratio = torch.exp(torch.clamp(logp - old, min=-20.0, max=20.0))
    negative_clip_ratio = torch.where(
        hem, torch.clamp(ratio, min=1 - nl, max=None), torch.clamp(ratio, min=1 - nh, max=None)
    )
    positive_clip_ratio = torch.where(
        hem, torch.clamp(ratio, min=None, max=1 + pl), torch.clamp(ratio, min=None, max=1 + ph)
    )
    negative_pg_losses_clip = -adv * negative_clip_ratio
    positive_pg_losses_clip = (
        -adv * (positive_clip_ratio / positive_clip_ratio.detach()) / positive_clip_ratio.detach()
    )
    negative_dual_clip_ratio = torch.clamp(negative_clip_ratio, min=None, max=nc)
    negative_clipped_mask = torch.gt(negative_clip_ratio, negative_dual_clip_ratio)
    negative_pg_losses_dual = -adv * negative_dual_clip_ratio.detach() * logp
    negative_pg_losses = torch.where(negative_clipped_mask, negative_pg_losses_dual, negative_pg_losses_clip)
    positive_dual_clip_ratio = torch.clamp(1 / positive_clip_ratio, min=None, max=pc)
    positive_clipped_mask = torch.gt(1 / positive_clip_ratio, positive_dual_clip_ratio)
    positive_pg_losses_dual = -adv * positive_dual_clip_ratio.detach() * logp
    positive_pg_losses = torch.where(positive_clipped_mask, positive_pg_losses_dual, positive_pg_losses_clip)
    return torch.where(adv < 0, negative_pg_losses, positive_pg_losses)


def authors_archer(old, logp, adv, hem, ll=0.2, lh=0.2, hl=0.4, hh=0.4, clip_ratio_c=3.0):
    # Archer2.0 core_algos.py compute_policy_loss, use_token_entropy_separate=True: pg_losses before agg_loss
    ratio = torch.exp(torch.clamp(logp - old, min=-20.0, max=20.0))
    pg_losses1 = -adv * ratio
    clip_ratio = torch.where(
        hem.bool(), torch.clamp(ratio, 1 - ll, 1 + lh), torch.clamp(ratio, 1 - hl, 1 + hh)
    )
    pg_losses2 = -adv * clip_ratio
    clip_pg_losses1 = torch.maximum(pg_losses1, pg_losses2)
    pg_losses3 = -adv * clip_ratio_c
    clip_pg_losses2 = torch.min(pg_losses3, clip_pg_losses1)
    return torch.where(adv < 0, clip_pg_losses2, clip_pg_losses1)


def entropy_batch(seed):
    logp, old, adv, mask = batch(seed, spread=1.5)
    g = torch.Generator().manual_seed(seed + 50)
    ent = 3 * torch.rand(logp.shape, generator=g, dtype=logp.dtype)
    return logp, old, adv, mask, ent


@pytest.mark.parametrize(
    ("name", "ref", "params", "ref_params"),
    [
        ("aspo", authors_aspo, {}, {}),
        ("aspo", authors_aspo, {"eps_low": 0.1, "eps_high": 0.3, "eps_low_high_entropy": 0.5,
                                "eps_high_high_entropy": 0.6, "clip_c": 2.5},
         {"nl": 0.1, "pl": 0.3, "nh": 0.5, "ph": 0.6, "nc": 2.5, "pc": 2.5}),
        ("archer", authors_archer, {}, {}),
        ("archer", authors_archer, {"eps_low": 0.1, "eps_high": 0.3, "eps_low_high_entropy": 0.5,
                                    "eps_high_high_entropy": 0.6, "clip_c": 2.5},
         {"ll": 0.1, "lh": 0.3, "hl": 0.5, "hh": 0.6, "clip_ratio_c": 2.5}),
    ],
)  # fmt: skip
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_entropy_methods_match_archer2(name, ref, params, ref_params, seed):
    logp, old, adv, mask, ent = entropy_batch(seed)
    x = logp.detach().clone().requires_grad_(True)
    out = get_method(name)(x, old, adv, mask, entropies=ent, **params)
    out.per_token_loss.sum().backward()
    y = logp.detach().clone().requires_grad_(True)
    hem = archer_low_entropy_mask(ent, mask)
    want = ref(old, y, adv, hem, **ref_params) * mask
    want.sum().backward()
    assert_same(out.per_token_loss.detach(), want.detach())
    assert_same(x.grad, y.grad)
    zero = ((x.grad == 0) & (adv != 0) & mask.bool()).sum() / mask.sum()
    assert out.metrics["zero_grad_frac"].item() == pytest.approx(zero.item())


def test_entropy_batches_reach_every_region():
    # guard against a vacuous parity: low- and high-entropy tokens, clipped tokens of both signs, both dual clips
    seen = dict.fromkeys(["low", "high", "neg_clip", "pos_clip", "neg_dual", "pos_dual"], False)
    for seed in (0, 1, 2):
        logp, old, adv, mask, ent = entropy_batch(seed)
        low = archer_low_entropy_mask(ent, mask)
        r, valid = (logp - old).exp(), mask.bool() & (adv != 0)
        seen["low"] |= bool((low & valid).any())
        seen["high"] |= bool((~low & valid).any())
        seen["neg_clip"] |= bool(((adv < 0) & (r < 0.6) & valid).any())
        seen["pos_clip"] |= bool(((adv > 0) & (r > 1.4) & valid).any())
        seen["neg_dual"] |= bool(((adv < 0) & (r > 3.0) & valid).any())
        seen["pos_dual"] |= bool(((adv > 0) & (r < 1 / 3.0) & valid).any())
    assert all(seen.values()), seen


def test_aspo_flips_the_ratio_for_positive_advantages():
    # inside the bound the gradient weight of an A > 0 token is 1 / r (PPO's is r); beyond it, zero
    old = torch.zeros(1, 3, dtype=torch.float64)
    ratio = torch.tensor([[0.5, 1.1, 1.5]], dtype=torch.float64)
    logp = ratio.log().requires_grad_(True)
    out = get_method("aspo")(logp, old, torch.ones(1), torch.ones(1, 3, dtype=torch.float64),
                             entropies=torch.zeros(1, 3, dtype=torch.float64))  # fmt: skip
    out.per_token_loss.sum().backward()
    torch.testing.assert_close(logp.grad, torch.tensor([[-2.0, -1 / 1.1, 0.0]], dtype=torch.float64))


@pytest.mark.parametrize("name", ["aspo", "archer"])
def test_entropy_methods_refuse_to_run_without_entropies(name):
    logp, old, adv, mask, _ = entropy_batch(0)
    with pytest.raises(ValueError, match="needs the per-token entropies"):
        get_method(name)(logp, old, adv, mask)


# ---------------------------------------------------------------- ERC (it takes the current and the old entropies)


def authors_erc(
    old, logp, adv, mask, entropy, old_entropy, cl=0.2, ch=0.28, clip_ratio_c=10.0, lo=0.95, hi=1.05
):
    # Kwai-Klear/ERC README compute_policy_loss_grpo_erc (tis_imp_ratio_cap <= 0): pg_losses before agg_loss
    negative_approx_kl = torch.clamp(logp - old, min=-20.0, max=20.0)
    ratio = torch.exp(negative_approx_kl)
    pg_losses1 = -adv * ratio
    pg_losses2 = -adv * torch.clamp(ratio, 1 - cl, 1 + ch)
    clip_pg_losses1 = torch.maximum(pg_losses1, pg_losses2)
    pg_losses3 = -adv * clip_ratio_c
    clip_pg_losses2 = torch.min(pg_losses3, clip_pg_losses1)
    pg_losses = torch.where(adv < 0, clip_pg_losses2, clip_pg_losses1)
    entropy_ratio = (entropy + 1e-8) / (old_entropy + 1e-8)
    balanced_mask = ((entropy_ratio > lo) & (entropy_ratio < hi)) & mask.bool()
    return torch.where(balanced_mask.bool(), pg_losses, pg_losses.detach())


def erc_batch(seed):
    """entropy_batch plus old entropies within ~10% of the current ones (both sides of the 0.95-1.05 band) and
    a few exact zeros (the authors' 1e-8 guard)."""
    logp, old, adv, mask, ent = entropy_batch(seed)
    g = torch.Generator().manual_seed(seed + 70)
    old_ent = ent * torch.exp(0.1 * torch.randn(ent.shape, generator=g, dtype=ent.dtype))
    old_ent[1, :2] = 0.0
    ent[2, :2] = 0.0
    return logp, old, adv, mask, ent, old_ent


@pytest.mark.parametrize(
    ("params", "ref_params"),
    [
        ({}, {}),
        ({"eps_low": 0.1, "eps_high": 0.3, "clip_c": 3.0, "entropy_ratio_low": 0.8, "entropy_ratio_high": 1.2},
         {"cl": 0.1, "ch": 0.3, "clip_ratio_c": 3.0, "lo": 0.8, "hi": 1.2}),
    ],
)  # fmt: skip
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_erc_matches_the_authors(params, ref_params, seed):
    logp, old, adv, mask, ent, old_ent = erc_batch(seed)
    x = logp.detach().clone().requires_grad_(True)
    out = get_method("erc")(x, old, adv, mask, entropies=ent, old_entropies=old_ent, **params)
    out.per_token_loss.sum().backward()
    y = logp.detach().clone().requires_grad_(True)
    want = authors_erc(old, y, adv, mask, ent, old_ent, **ref_params) * mask
    want.sum().backward()
    assert_same(out.per_token_loss.detach(), want.detach())
    assert_same(x.grad, y.grad)
    zero = ((x.grad == 0) & (adv != 0) & mask.bool()).sum() / mask.sum()
    assert out.metrics["zero_grad_frac"].item() == pytest.approx(zero.item())


def test_erc_detaches_exactly_the_tokens_outside_the_entropy_band():
    logp, old, adv, mask, ent, old_ent = erc_batch(0)
    x = logp.detach().clone().requires_grad_(True)
    out = get_method("erc")(x, old, adv, mask, entropies=ent, old_entropies=old_ent)
    out.per_token_loss.sum().backward()
    _, g_dual, _ = ours("clip", logp, old, adv, mask, eps_low=0.2, eps_high=0.28, delta=10.0)
    rho = (ent + 1e-8) / (old_ent + 1e-8)
    inside = (rho > 0.95) & (rho < 1.05)
    on = mask.bool() & (adv != 0) & (g_dual != 0)
    assert (inside & on).any() and (~inside & on).any()  # both kinds, with a gradient to lose
    assert (x.grad[~inside] == 0).all()
    assert_same(x.grad[inside], g_dual[inside])  # inside the band: verl's dual-clip PPO (here clip + delta)
    # the value is never changed, only the gradient
    loss_dual, _, _ = ours("clip", logp, old, adv, mask, eps_low=0.2, eps_high=0.28, delta=10.0)
    assert_same(out.per_token_loss.detach(), loss_dual)
    assert out.metrics["entropy_clip_frac"].item() == pytest.approx(
        ((~inside) & mask.bool()).sum().item() / mask.sum().item()
    )


@pytest.mark.parametrize("missing", ["entropies", "old_entropies"])
def test_erc_refuses_to_run_without_both_entropies(missing):
    logp, old, adv, mask, ent, old_ent = erc_batch(0)
    given = {"entropies": ent, "old_entropies": old_ent}
    del given[missing]
    with pytest.raises(ValueError, match=f"needs the per-token {missing}"):
        get_method("erc")(logp, old, adv, mask, **given)
