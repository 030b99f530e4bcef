"""Our methods and aggregation modes against verl's formulas, recomputed here as verl writes them.

verl is not a dependency: each ``verl_*`` function below re-derives, step by step, the formula of one function
of verl's ``verl/trainer/ppo/core_algos.py`` at commit 1dda039 (read in ``../shared/reference/peer-code/verl``),
named in its comment, with verl's defaults. Our method + ``aggregate`` must match it to float tolerance on the
same tensors; where we differ on purpose (the log-ratio clamp, CISPO's lower bound) the difference is tested.
"""

from __future__ import annotations

import math

import pytest
import torch

from pspo_repro.methods import aggregate, get_method

# ---------------------------------------------------------------- verl, recomputed


def masked_mean(x, m):
    # verl.utils.torch_functional.masked_mean: masked sum / (mask sum + 1e-8)
    return (x * m).sum() / (m.sum() + 1e-8)


def verl_agg_loss(loss_mat, mask, mode):
    # core_algos.py agg_loss, dp_size=1, no global batch info (the counts come from this batch)
    if mode == "token-mean":
        return (loss_mat * mask).sum() / mask.sum()
    if mode == "token-sum":
        return (loss_mat * mask).sum()
    if mode in ("seq-mean-token-sum", "seq-mean-token-sum-norm"):
        seq = (loss_mat * mask).sum(-1)
        seq_mask = (mask.sum(-1) > 0).float().to(loss_mat.dtype)
        loss = (seq * seq_mask).sum() / seq_mask.sum()
        return loss / mask.shape[-1] if mode == "seq-mean-token-sum-norm" else loss
    if mode == "seq-mean-token-mean":
        count = mask.sum(-1)
        seq = (loss_mat * mask).sum(-1) / (count + 1e-8)
        seq_mask = (count > 0).to(loss_mat.dtype)
        return (seq * seq_mask).sum() / seq_mask.sum()
    raise AssertionError(mode)


def verl_vanilla(old, logp, adv, mask, clip_low=0.2, clip_high=0.2, clip_c=3.0):
    # core_algos.py compute_policy_loss_vanilla (dual-clip PPO, clip_ratio_c default 3.0)
    nkl = (logp - old).clamp(-20.0, 20.0)
    ratio = torch.exp(nkl)
    l1 = -adv * ratio
    l2 = -adv * ratio.clamp(1 - clip_low, 1 + clip_high)
    clip1 = torch.maximum(l1, l2)
    clip2 = torch.min(-adv * clip_c, clip1)
    return torch.where(adv < 0, clip2, clip1)


def verl_gpg(old, logp, adv, mask):
    # core_algos.py compute_policy_loss_gpg
    return -logp * adv


def verl_dro(old, logp, adv, mask, beta):
    # core_algos.py compute_policy_loss_dro
    lr = logp - old
    return -(logp * adv - 0.5 * beta * lr.square())


def verl_clip_cov(old, logp, adv, mask, clip_low=0.2, clip_high=0.2, ratio_=2e-4, lb=1.0, ub=5.0):
    # core_algos.py compute_policy_loss_clip_cov (no log-ratio clamp in verl)
    ratio = torch.exp(logp - old)
    l1 = -adv * ratio
    corr = torch.ones_like(adv)
    l2 = -adv * torch.clamp(ratio, 1 - clip_low, 1 + clip_high)
    clip_by_origin = (l2 > l1) & (mask > 0)
    cov = (adv - masked_mean(adv, mask)) * (logp - masked_mean(logp.detach(), mask))
    cov = cov.detach().clone()
    cov[mask == 0] = -torch.inf
    cov[clip_by_origin] = -torch.inf
    clip_num = max(int(ratio_ * mask.sum().item()), 1)
    idx = torch.nonzero((cov < ub) & (cov > lb) & (mask > 0))
    if len(idx) > 0:
        idx = idx[torch.randperm(len(idx))[: min(clip_num, len(idx))]]
    corr[idx[:, 0], idx[:, 1]] = 0
    return torch.maximum(l1, l2) * corr


def verl_kl_cov(old, logp, adv, mask, ratio_=2e-4, coef=1.0):
    # core_algos.py compute_policy_loss_kl_cov (no log-ratio clamp in verl)
    nkl = logp - old
    ratio = torch.exp(nkl)
    losses = -adv * ratio
    losses_kl = -adv * ratio + coef * nkl.abs()
    valid = mask > 0
    valid_idx = torch.nonzero(valid.reshape(-1), as_tuple=True)[0]
    a = adv[valid].detach().reshape(-1)
    lp = logp[valid].detach().reshape(-1)
    cov = (a - a.mean()) * (lp - lp.mean())
    k = max(1, int(len(cov) * ratio_))
    top = valid_idx[torch.topk(cov, k, largest=True).indices]
    rows, cols = top // adv.shape[1], top % adv.shape[1]
    out = losses.clone()
    out[rows, cols] = losses_kl[rows, cols]
    return out


def verl_geo_mean(old, logp, adv, mask, clip_low=0.4, clip_high=0.4):
    # core_algos.py compute_policy_loss_geo_mean: returns the scalar (mean over sequences), no clamp
    nkl = logp - old
    sgn = torch.sign(adv)
    nkl_clamp = torch.clamp(nkl, -clip_low, clip_high)
    nkl_min = sgn * torch.min(sgn * nkl, sgn * nkl_clamp)
    n = mask.sum(-1)
    ratio = torch.exp((nkl_min * mask).sum(-1) / (n + 1e-8))
    seq_adv = (adv * mask).sum(-1) / (n + 1e-8)
    return torch.mean(-seq_adv * ratio)


def verl_dppo_tv(old, logp, adv, mask, d_low=0.15, d_high=0.15, c=20.0):
    # core_algos.py compute_policy_loss_dppo_tv (clip_ratio is the TV threshold; clip_ratio_c default 20)
    ratio = torch.exp((logp - old).clamp(-20.0, 20.0))
    trunc = ratio.clamp(max=c).detach()
    diff = torch.exp(logp) - torch.exp(old)
    valid = torch.where(adv > 0, diff <= d_high, diff >= -d_low).detach().float().to(logp.dtype)
    return -adv * trunc * logp * valid


def verl_dppo_kl(old, logp, adv, mask, d_low=0.05, d_high=0.05, c=20.0):
    # core_algos.py compute_policy_loss_dppo_kl (binary KL with verl's +1e-8 inside the log)
    ratio = torch.exp((logp - old).clamp(-20.0, 20.0))
    trunc = ratio.clamp(max=c).detach()
    p, q = torch.exp(logp), torch.exp(old)
    kl = q * (old - logp) + (1 - q) * torch.log((1.0 - q + 1e-8) / (1.0 - p + 1e-8))
    valid_pos = (kl <= d_high) | (p <= q)
    valid_neg = (kl <= d_low) | (p >= q)
    valid = torch.where(adv > 0, valid_pos, valid_neg).detach().float().to(logp.dtype)
    return -adv * trunc * logp * valid


def verl_sapo(old, logp, adv, mask, tau_pos=1.0, tau_neg=1.05):
    # core_algos.py compute_policy_loss_sapo (per-token loss; verl aggregates it as seq-mean-token-mean)
    ratio = torch.exp((logp - old).clamp(-20.0, 20.0))
    taus = torch.where(adv > 0, tau_pos, tau_neg)
    return -torch.sigmoid(taus * (ratio - 1.0)) * (4.0 / taus) * adv


def verl_gspo(old, logp, adv, mask, clip_low, clip_high):
    # core_algos.py compute_policy_loss_gspo (per-token loss; verl aggregates it as seq-mean-token-mean)
    nkl = logp - old
    seq = (nkl * mask).sum(-1) / mask.sum(-1).clamp(min=1)
    log_s = (logp - logp.detach() + seq.detach().unsqueeze(-1)).clamp(max=10.0)
    s = torch.exp(log_s)
    return torch.maximum(-adv * s, -adv * torch.clamp(s, 1 - clip_low, 1 + clip_high))


def verl_cispo(old, logp, adv, mask, clip_low, clip_high):
    # core_algos.py compute_policy_loss_cispo: the detached ratio clamped on both sides
    ratio = torch.exp((logp - old).clamp(-20.0, 20.0))
    return -ratio.clamp(1 - clip_low, 1 + clip_high).detach() * adv * logp


# ---------------------------------------------------------------- helpers


def batch(seed, b=8, t=12, spread=0.4):
    g = torch.Generator().manual_seed(seed)
    old = -torch.rand(b, t, generator=g, dtype=torch.float64) * 4 - 0.01
    logp = (old + spread * torch.randn(b, t, generator=g, dtype=torch.float64)).clamp(max=-1e-3)
    adv = torch.randn(b, generator=g, dtype=torch.float64)
    mask = (torch.rand(b, t, generator=g) > 0.25).to(torch.float64)
    mask[:, 0] = 1.0
    mask[-1] = 0.0  # a fully masked sequence: verl's seq-mean modes do not count it
    return logp, old, adv, mask


def both(name, params, mode, verl_fn, verl_kwargs, seed, verl_mode=None, verl_scalar=False, torch_seed=None):
    """(our loss, our grad), (verl's loss, verl's grad) on the same batch."""
    logp, old, adv, mask = batch(seed)
    ours = logp.detach().clone().requires_grad_(True)
    if torch_seed is not None:
        torch.manual_seed(torch_seed)
    out = get_method(name)(ours, old, adv, mask, **params)
    loss = aggregate(out.per_token_loss, mask, mode)
    loss.backward()
    theirs = logp.detach().clone().requires_grad_(True)
    if torch_seed is not None:
        torch.manual_seed(torch_seed)
    adv_tok = adv[:, None].expand_as(logp)  # verl's advantages are per token
    value = verl_fn(old, theirs, adv_tok, mask, **verl_kwargs)
    ref = value if verl_scalar else verl_agg_loss(value, mask, verl_mode or "token-mean")
    ref.backward()
    return (loss.detach(), ours.grad), (ref.detach(), theirs.grad)


def assert_same(a, b):
    torch.testing.assert_close(a[0], b[0], rtol=1e-6, atol=1e-9)
    torch.testing.assert_close(a[1], b[1], rtol=1e-6, atol=1e-9)
    assert a[1].abs().sum() > 0


# ---------------------------------------------------------------- parity


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize(
    ("name", "params", "mode", "verl_fn", "verl_kwargs", "verl_mode"),
    [
        # verl's default loss: dual-clip PPO, c = 3 == clip with delta = 3 (the documented preset)
        ("clip", {"delta": 3.0}, "bnpo", verl_vanilla, {}, "token-mean"),
        (
            "clip",
            {"eps_low": 0.2, "eps_high": 0.28, "delta": 3.0},
            "bnpo",
            verl_vanilla,
            {"clip_high": 0.28},
            None,
        ),
        ("gpg", {}, "bnpo", verl_gpg, {}, "token-mean"),
        ("gpg", {}, "token-sum", verl_gpg, {}, "token-sum"),
        ("dro", {"dro_beta": 0.1}, "bnpo", verl_dro, {"beta": 0.1}, "token-mean"),
        ("dro", {"dro_beta": 2.0}, "seq-mean-token-sum", verl_dro, {"beta": 2.0}, "seq-mean-token-sum"),
        ("kl_cov", {}, "bnpo", verl_kl_cov, {}, "token-mean"),
        (
            "kl_cov",
            {"kl_cov_ratio": 0.1, "kl_coef": 0.5},
            "bnpo",
            verl_kl_cov,
            {"ratio_": 0.1, "coef": 0.5},
            None,
        ),
        ("dppo_binary_tv", {}, "bnpo", verl_dppo_tv, {}, "token-mean"),
        ("dppo_binary_kl", {}, "bnpo", verl_dppo_kl, {}, "token-mean"),
        ("sapo", {}, "seq-mean-token-mean", verl_sapo, {}, "seq-mean-token-mean"),
        (
            "gspo",
            {"eps_low": 0.03, "eps_high": 0.04},
            "seq-mean-token-mean",
            verl_gspo,
            {"clip_low": 0.03, "clip_high": 0.04},
            "seq-mean-token-mean",
        ),
    ],
)
def test_matches_verl(seed, name, params, mode, verl_fn, verl_kwargs, verl_mode):
    ours, theirs = both(name, params, mode, verl_fn, verl_kwargs, seed, verl_mode)
    assert_same(ours, theirs)


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize(
    ("params", "verl_kwargs"),
    [
        ({}, {}),
        ({"clip_cov_ratio": 0.05, "cov_lb": -0.2, "cov_ub": 0.6}, {"ratio_": 0.05, "lb": -0.2, "ub": 0.6}),
    ],
)
def test_clip_cov_matches_verl_with_the_same_seed(seed, params, verl_kwargs):
    # the random pick is torch.randperm on the global generator in both: the same seed picks the same tokens
    ours, theirs = both("clip_cov", params, "bnpo", verl_clip_cov, verl_kwargs, seed, torch_seed=1234 + seed)
    assert_same(ours, theirs)


def test_clip_cov_parity_case_detaches_tokens():
    # guard against a vacuous parity test: the second case does detach tokens beyond PPO's clip
    logp, old, adv, mask = batch(0)
    out = get_method("clip_cov")(logp, old, adv, mask, clip_cov_ratio=0.05, cov_lb=-0.2, cov_ub=0.6)
    assert out.metrics["cov_clip_frac"].item() > 0.02


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("eps", [(0.4, 0.4), (0.1, 0.3)])
def test_geo_mean_matches_verl(seed, eps):
    # verl's geo_mean ignores loss_agg_mode and returns mean over sequences: our grpo aggregation
    ours, theirs = both(
        "geo_mean",
        {"eps_low": eps[0], "eps_high": eps[1]},
        "grpo",
        verl_geo_mean,
        {"clip_low": eps[0], "clip_high": eps[1]},
        seed,
        verl_scalar=True,
    )
    assert_same(ours, theirs)


@pytest.mark.parametrize(
    "mode", ["token-sum", "seq-mean-token-sum", "seq-mean-token-sum-norm", "seq-mean-token-mean"]
)
def test_aggregation_modes_match_verl_agg_loss(mode):
    logp, old, adv, mask = batch(3)
    loss = torch.randn(logp.shape, dtype=torch.float64)
    torch.testing.assert_close(
        aggregate(loss, mask, mode), verl_agg_loss(loss, mask, mode), rtol=1e-7, atol=0
    )


def test_verl_token_mean_is_bnpo():
    logp, old, adv, mask = batch(4)
    loss = torch.randn(logp.shape, dtype=torch.float64)
    torch.testing.assert_close(aggregate(loss, mask, "bnpo"), verl_agg_loss(loss, mask, "token-mean"))


# ---------------------------------------------------------------- documented differences


def test_cispo_differs_from_verl_only_by_its_lower_bound():
    # verl clamps the detached ratio to [1 - eps_low, 1 + eps_high]; TRL (and ours) only caps it at eps_high
    # (an absolute cap). With our eps_high = 1 + verl's eps_high they agree wherever r >= 1 - eps_low.
    logp, old, adv, mask = batch(5, spread=1.0)
    adv_tok = adv[:, None].expand_as(logp)
    ours = get_method("cispo")(logp, old, adv, mask, eps_high=1.28).per_token_loss
    theirs = verl_cispo(old, logp, adv_tok, mask, 0.2, 0.28) * mask
    r = (logp - old).exp()
    above = (r >= 0.8) & (mask > 0)
    torch.testing.assert_close(ours[above], theirs[above])
    below = (r < 0.8) & (mask > 0)
    assert below.any() and not torch.allclose(ours[below], theirs[below])


def test_unclamped_verl_losses_overflow_where_ours_stay_finite():
    # verl's clip_cov, kl_cov and geo_mean take exp(log r) without the +-20 clamp every method of ours applies
    # (documented in docs/methods.md); within the clamp they match (tests above), beyond it verl's float32 loss
    # overflows while ours stays finite with zero gradient on the saturated ratio
    old = torch.full((2, 3), -3.0)
    logp = old + torch.tensor([[100.0, 0.1, -0.1], [0.2, -100.0, 0.0]])
    adv = torch.tensor([-1.0, 1.0])
    mask = torch.ones(2, 3)
    adv_tok = adv[:, None].expand_as(logp)
    assert not torch.isfinite(verl_kl_cov(old, logp, adv_tok, mask)).all()
    for name in ("kl_cov", "clip_cov", "geo_mean"):
        out = get_method(name)(logp, old, adv, mask)
        assert torch.isfinite(out.per_token_loss).all(), name


def test_verl_dual_clip_preset_caps_negative_advantage_loss_at_three():
    # the preset `method=clip method.delta=3.0`: for A < 0 the loss is bounded by -3 A whatever r
    old = torch.zeros(1, 3)
    logp = torch.tensor([[math.log(2.0), math.log(5.0), math.log(50.0)]])
    out = get_method("clip")(logp, old, torch.tensor([-1.0]), torch.ones(1, 3), delta=3.0)
    torch.testing.assert_close(out.per_token_loss, torch.tensor([[2.0, 3.0, 3.0]]))
