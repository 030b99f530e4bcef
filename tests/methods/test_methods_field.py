"""The methods added from verl's and TRL's registries: golden values and hand-derived gradients.

Golden values use the shared example of tests/methods/test_methods.py: q = 0.5, p = (0.75, 0.25, 0.55), so
r = (1.5, 0.5, 1.1), log r = (0.4054651, -0.6931472, 0.0953102), log p = (-0.2876821, -1.3862944, -0.5978370);
row 0 has A = +1, row 1 A = -2 and its last token masked. Gradients are derived by hand in the comments and
compared with autograd on random batches.
"""

from __future__ import annotations

import math

import pytest
import torch

from pspo_repro.methods import (
    aggregate,
    get_method,
    list_methods,
    method_optional_inputs,
)
from pspo_repro.methods.cov import token_covariance
from tests.methods.test_methods import (
    assert_close,
    example,
    grad_of,
    method_inputs,
    random_batch,
)

LOG_R = (0.4054651, -0.6931472, 0.0953102)


@pytest.mark.parametrize(
    ("name", "params", "expected"),
    [
        # gpg: -A log p; row 1: 2 log p
        ("gpg", {}, [[0.2876821, 1.3862944, 0.5978370], [-0.5753641, -2.7725887, 0.0]]),
        # dro beta 0.1: -A log p + 0.05 (log r)^2, penalties 0.0082201, 0.0240227, 0.0004542
        ("dro", {}, [[0.2959022, 1.4103170, 0.5982912], [-0.5671440, -2.7485661, 0.0]]),
        # geo_mean eps 0.4: row 0 (A > 0) l = (min(0.405, 0.4), -0.693, 0.095) -> S = exp(-0.1978370/3) = 0.9361817
        #   loss -S on each token; row 1 (A < 0) l = (0.405, max(-0.693, -0.4)) -> S = exp(0.0054651/2)
        #   = 1.0027363, loss -(-2) S = 2.0054726
        ("geo_mean", {}, [[-0.9361817] * 3, [2.0054726, 2.0054726, 0.0]]),
        # vespo: row 0 w = 1.5*0.5*1.1 = 0.825, phi = w^2 e^(3 (1 - w)) = 1.1505686; loss -phi log p
        #        row 1 w = 0.75 (2 tokens), phi = w^3 e^(2 (1 - w)) = 0.6955543; loss 2 phi log p
        ("vespo", {}, [[0.3309979, 1.5950267, 0.6878525], [-0.4001970, -1.9284860, 0.0]]),
        # luspo = gspo's per-token loss (eps 0.05 as in tests/methods/test_methods.py's gspo case)
        ("luspo", {"eps_low": 0.05, "eps_high": 0.05}, [[-0.9378887] * 3, [1.9, 1.9, 0.0]]),
        # kl_cov: k = max(1, int(5 * 2e-4)) = 1 token, the largest covariance: row 1 t1 (test below); loss -r A
        #   everywhere, plus |log r| = 0.6931472 there: -(-2)(0.5) + 0.6931472 = 1.6931472
        ("kl_cov", {}, [[-1.5, -0.5, -1.1], [3.0, 1.6931472, 0.0]]),
    ],
)
def test_golden(name, params, expected):
    logp, old, adv, mask = example()
    out = get_method(name)(logp, old, adv, mask, **params)
    assert_close(out.per_token_loss, expected)


def test_kl_cov_golden_selection_by_hand():
    # unmasked tokens: A = (1, 1, 1, -2, -2), mean -0.2; log p = (-0.288, -1.386, -0.598, -0.288, -1.386),
    # mean -0.7891578; cov = (1.2)(0.501), (1.2)(-0.597), (1.2)(0.191), (-1.8)(0.501), (-1.8)(-0.597): the largest
    # is the last, 1.8 * 0.5971366 = 1.0748459: row 1 token 1
    logp, old, adv, mask = example()
    cov = token_covariance(logp, adv[:, None], mask.bool())
    assert cov.argmax().item() == 4  # flat index of row 1, token 1
    assert cov[1, 1].item() == pytest.approx(1.8 * (1.3862944 - 0.7891578), rel=1e-6)


# ---------------------------------------------------------------- hand-derived gradients, random batches


@pytest.mark.parametrize("seed", [0, 1])
def test_gpg_gradient_is_minus_advantage(seed):
    logp, old, adv, mask = random_batch(seed=seed, spread=2.0)
    g, _ = grad_of("gpg", logp, old, adv, mask)
    # d(-A logp)/d logp = -A: the ratio never enters
    torch.testing.assert_close(g, -adv[:, None] * mask)


@pytest.mark.parametrize("beta", [0.05, 0.1, 1.0])
def test_dro_gradient(beta):
    logp, old, adv, mask = random_batch(seed=2, spread=30.0)  # log-ratios far beyond the +-20 clamp
    g, out = grad_of("dro", logp, old, adv, mask, dro_beta=beta)
    # d/dlogp [-(A logp - beta/2 (logp - old)^2)] = -A + beta (logp - old); no clamp: the pull-back never stops
    torch.testing.assert_close(g, (-adv[:, None] + beta * (logp - old)) * mask)
    assert ((logp - old).abs()[mask > 0] > 20).any()
    lr = logp - old
    pull = (beta * lr * adv.sign()[:, None] > adv.abs()[:, None]) & (mask > 0)
    assert out.metrics["pullback_frac"].item() == pytest.approx((pull.sum() / mask.sum()).item())


@pytest.mark.parametrize("seed", [0, 3])
def test_vespo_gradient_is_gamma_weighted_reinforce(seed):
    logp, old, adv, mask = random_batch(seed=seed, spread=0.2)
    kp, lp_, kn, ln = 2.0, 3.0, 3.0, 2.0
    g, out = grad_of("vespo", logp, old, adv, mask, k_pos=kp, lambda_pos=lp_, k_neg=kn, lambda_neg=ln)
    w = ((logp - old) * mask).sum(-1).exp()
    k = torch.where(adv >= 0, kp, kn)
    lam = torch.where(adv >= 0, lp_, ln)
    phi = w**k * torch.exp(lam * (1 - w))  # e^lambda w^k e^(-lambda w)
    # the weight is detached: d(-sg(phi) A logp)/d logp = -phi A
    torch.testing.assert_close(g, (-phi * adv)[:, None] * mask)
    assert out.metrics["phi_mean"].item() == pytest.approx(phi.mean().item(), rel=1e-6)
    # phi(1) = 1: on-policy VESPO is REINFORCE
    g1, _ = grad_of("vespo", logp, logp.detach(), adv, mask)
    torch.testing.assert_close(g1, -adv[:, None] * mask)


def test_vespo_takes_the_sampling_ratio_into_w():
    assert method_optional_inputs("vespo") == ("importance_sampling_ratio",)
    logp, old, adv, mask = random_batch(seed=4, spread=0.1)
    is_ratio = torch.exp(0.05 * torch.randn_like(logp)) * mask + (1 - mask)  # TRL: exactly 1 on padding
    fn = get_method("vespo")
    a = fn(logp, old, adv, mask, importance_sampling_ratio=is_ratio)
    b = fn(logp, old - is_ratio.log(), adv, mask)  # log w gains sum_t log IS_t
    torch.testing.assert_close(a.per_token_loss, b.per_token_loss)


@pytest.mark.parametrize("seed", [0, 1])
def test_geo_mean_gradient(seed):
    logp, old, adv, mask = random_batch(seed=seed, spread=0.5)
    el, eh = 0.3, 0.2
    leaf = logp.detach().clone().requires_grad_(True)
    out = get_method("geo_mean")(leaf, old, adv, mask, eps_low=el, eps_high=eh)
    aggregate(out.per_token_loss, mask, "grpo").backward()
    lr = logp - old
    a = adv[:, None]
    clipped = ((a > 0) & (lr > eh)) | ((a < 0) & (lr < -el))
    lmin = torch.where(a > 0, lr.clamp(max=eh), lr.clamp(min=-el))
    n = mask.sum(-1, keepdim=True)
    s = torch.exp((lmin * mask).sum(-1, keepdim=True) / n)
    # L = mean_b(-A_b S_b), S_b = exp(mean_t l_t): dL/dlogp_t = -(1/B) A_b S_b / n_b on unclipped tokens
    expected = torch.where(clipped, 0.0, -a * s / n / logp.shape[0]) * mask
    torch.testing.assert_close(leaf.grad, expected)
    assert clipped[mask > 0].any() and (~clipped[mask > 0]).any()
    assert out.metrics["zero_grad_frac"].item() == pytest.approx(
        ((leaf.grad == 0) & (mask > 0)).sum().item() / mask.sum().item()
    )


def test_luspo_aggregation_gives_each_token_a_length_free_gradient():
    logp, old, adv, mask = random_batch(seed=6, spread=0.05)
    leaf = logp.detach().clone().requires_grad_(True)
    out = get_method("luspo")(leaf, old, adv, mask, eps_low=10.0, eps_high=10.0)  # the clip never binds
    aggregate(out.per_token_loss, mask, "luspo").backward()
    s = (((logp - old) * mask).sum(-1) / mask.sum(-1)).exp()
    # L = mean_b(n_b * (-A_b s_b)), ds_b/dlogp_t = s_b / n_b  =>  dL/dlogp_t = -A_b s_b / B: no 1/n_b (GSPO's bias)
    torch.testing.assert_close(leaf.grad, (-adv * s)[:, None] * mask / logp.shape[0])
    gspo = get_method("gspo")(logp, old, adv, mask, eps_low=10.0, eps_high=10.0)
    torch.testing.assert_close(out.per_token_loss, gspo.per_token_loss)


@pytest.mark.parametrize("seed", [0, 1])
def test_kl_cov_gradient(seed):
    logp, old, adv, mask = random_batch(seed=seed, b=8, t=16, spread=0.5)
    ratio, coef = 0.05, 0.7
    g, out = grad_of("kl_cov", logp, old, adv, mask, kl_cov_ratio=ratio, kl_coef=coef)
    valid = mask > 0
    a = adv[:, None].expand_as(logp)
    cov = (a - a[valid].mean()) * (logp - logp[valid].mean())
    k = max(1, int(valid.sum().item() * ratio))
    threshold = cov[valid].sort(descending=True).values[k - 1]
    sel = valid & (cov >= threshold)
    assert sel.sum() == k
    lr = logp - old
    # d/dlogp [-r A + coef |log r| 1_sel] = -r A + coef sign(log r) 1_sel
    torch.testing.assert_close(g, (-lr.exp() * a + coef * lr.sign() * sel) * mask)
    assert out.metrics["kl_cov_frac"].item() == pytest.approx(k / valid.sum().item())


def test_clip_cov_detaches_all_candidates_when_the_ratio_is_one():
    # clip_cov_ratio = 1 picks every candidate, so the outcome is deterministic and derivable by hand
    logp, old, adv, mask = random_batch(seed=8, b=8, t=16, spread=0.5)
    lb, ub, eps = -0.05, 0.5, 0.2
    g, out = grad_of("clip_cov", logp, old, adv, mask, clip_cov_ratio=1.0, cov_lb=lb, cov_ub=ub)
    valid = mask > 0
    a = adv[:, None].expand_as(logp)
    r = (logp - old).exp()
    cov = (a - a[valid].mean()) * (logp - logp[valid].mean())
    clipped = ((a > 0) & (r > 1 + eps)) | ((a < 0) & (r < 1 - eps))
    cand = valid & ~clipped & (cov > lb) & (cov < ub)
    assert cand.sum() > 3 and (valid & ~clipped & ~cand).sum() > 3
    # PPO's gradient -r A inside the region, 0 where clipped, 0 on the Clip-Cov tokens
    torch.testing.assert_close(g, torch.where(clipped | cand, 0.0, -r * a) * mask)
    assert out.metrics["cov_clip_frac"].item() == pytest.approx(cand.sum().item() / valid.sum().item())


def test_clip_cov_picks_its_count_among_candidates_reproducibly():
    logp, old, adv, mask = random_batch(seed=9, b=8, t=16, spread=0.5)
    kw = {"clip_cov_ratio": 0.05, "cov_lb": -0.05, "cov_ub": 0.5}
    torch.manual_seed(0)
    g1, out1 = grad_of("clip_cov", logp, old, adv, mask, **kw)
    torch.manual_seed(0)
    g2, _ = grad_of("clip_cov", logp, old, adv, mask, **kw)
    torch.testing.assert_close(g1, g2)  # the draw follows torch's global seed (the trainer seeds it)
    g_full, _ = grad_of("clip_cov", logp, old, adv, mask, **{**kw, "clip_cov_ratio": 1.0})
    g_none, _ = grad_of("clip", logp, old, adv, mask)
    detached = (g1 == 0) & (g_none != 0)
    n = int(0.05 * mask.sum().item())
    assert detached.sum().item() == max(n, 1)
    assert (g_full[detached] == 0).all()  # only candidates are ever detached


@pytest.mark.parametrize("name", ["gpg", "dro", "vespo", "kl_cov"])
def test_no_trust_region_methods_equal_reinforce_on_policy(name):
    # at r = 1 (fresh data) noclip's gradient is -A; gpg, dro, vespo (phi(1) = 1) and kl_cov (|log r| = 0,
    # whose derivative torch takes as 0 at 0) all reduce to it
    logp, _, adv, mask = random_batch(seed=10)
    g, _ = grad_of(name, logp, logp.detach(), adv, mask)
    torch.testing.assert_close(g, -adv[:, None] * mask)


def test_geo_mean_band_is_in_log_space():
    # one token, A > 0: gradient zero exactly beyond r = e^0.4 (not 1.4)
    old = torch.full((2, 1), math.log(0.2), dtype=torch.float64)
    r = torch.tensor([[math.exp(0.4) - 1e-6], [math.exp(0.4) + 1e-6]], dtype=torch.float64)
    g, _ = grad_of("geo_mean", old + r.log(), old, torch.ones(2, dtype=torch.float64), torch.ones_like(old))
    assert g[0, 0] != 0 and g[1, 0] == 0


@pytest.mark.parametrize("name", list_methods())
def test_non_contiguous_inputs_give_the_same_loss(name):
    # the explorer's testbed passes transposed (non-contiguous) [B, T] tensors; a .view() on them once failed
    logp, old, adv, mask = random_batch(seed=12, b=5, t=7)
    t = {k: v.T.contiguous().T for k, v in {"logp": logp, "old": old, "mask": mask}.items()}
    assert not t["logp"].is_contiguous()
    extra = method_inputs(name, logp)
    torch.manual_seed(0)
    a = get_method(name)(logp, old, adv, mask, **extra).per_token_loss
    torch.manual_seed(0)
    b = get_method(name)(t["logp"], t["old"], adv, t["mask"], **extra).per_token_loss
    torch.testing.assert_close(a, b)
