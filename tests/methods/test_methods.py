"""Golden values and properties of every trust-region method.

Golden numbers are computed by hand in the comments. The shared example: behaviour probabilities q = 0.5,
current probabilities p = (0.75, 0.25, 0.55), so r = (1.5, 0.5, 1.1) and
log p = (-0.2876821, -1.3862944, -0.5978370); row 0 has A = +1, row 1 has A = -2 and its last token masked.
"""

from __future__ import annotations

import math

import pytest
import torch

from pspo_repro.methods import (
    LOG_RATIO_CLAMP,
    MethodOutput,
    aggregate,
    get_method,
    get_spec,
    list_methods,
    method_extra_inputs,
    method_optional_inputs,
    register_method,
)
from pspo_repro.methods.dppo import binary_kl, binary_tv, topk_kl, topk_tv
from pspo_repro.methods.pspo import smoothed_ratio

ALL = list_methods()
# methods whose zero_grad_frac metric is checked against autograd
# (dppo_k25 and ipo: the squared log-ratio term gives a dropped token a gradient unless r == 1 exactly)
ZERO_GRAD_METHODS = [n for n in ALL if n not in ("topr", "cispo", "gpg", "dro", "dppo_k25", "ipo")]


def example(requires_grad: bool = True):
    p = torch.tensor([[0.75, 0.25, 0.55], [0.75, 0.25, 0.55]], dtype=torch.float64)
    logp = p.log().requires_grad_(requires_grad)
    old = torch.full_like(p, 0.5).log()
    adv = torch.tensor([1.0, -2.0], dtype=torch.float64)
    mask = torch.tensor([[1, 1, 1], [1, 1, 0]], dtype=torch.float64)
    return logp, old, adv, mask


def topk_inputs(logp: torch.Tensor, k: int = 20, seed: int = 0) -> dict[str, torch.Tensor]:
    """Plausible top-K log-probs: K masses that sum to < 1 (a rest bucket remains)."""
    g = torch.Generator().manual_seed(seed)
    shape = (*logp.shape, k)
    old = torch.log_softmax(torch.randn(*shape, k and 1, generator=g).squeeze(-1) * 2, -1) + math.log(0.9)
    new = old + 0.3 * torch.randn(*shape, generator=g)
    return {"topk_old_logps": old.to(logp.dtype), "topk_logps": new.to(logp.dtype)}


def method_inputs(name: str, logp: torch.Tensor, seed: int = 0) -> dict[str, torch.Tensor]:
    """The tensors ``name`` takes besides the four: top-K log-probs (top-K DPPO), per-token entropies in
    [0, 3) (ASPO, Archer, ERC: varied, so the per-response quantile splits the tokens), and old entropies
    within a few percent of them (ERC: some tokens inside its entropy-ratio band, some outside)."""
    extra = topk_inputs(logp.detach()) if method_extra_inputs(name) else {}
    optional = method_optional_inputs(name)
    if "entropies" in optional:
        g = torch.Generator().manual_seed(seed)
        ent = 3 * torch.rand(logp.shape, generator=g, dtype=torch.float64)
        extra["entropies"] = ent.to(logp.dtype)
        if "old_entropies" in optional:
            moved = torch.exp(0.05 * torch.randn(logp.shape, generator=g, dtype=torch.float64))
            extra["old_entropies"] = (ent * moved).to(logp.dtype)
    return extra


def run(name: str, logp, old, adv, mask, **params) -> MethodOutput:
    return get_method(name)(logp, old, adv, mask, **method_inputs(name, logp), **params)


def grad_of(name: str, logp, old, adv, mask, **params) -> tuple[torch.Tensor, MethodOutput]:
    logp = logp.detach().clone().requires_grad_(True)
    out = run(name, logp, old, adv, mask, **params)
    out.per_token_loss.sum().backward()
    return logp.grad, out


def assert_close(actual: torch.Tensor, expected: list, atol: float = 1e-6) -> None:
    torch.testing.assert_close(actual.detach(), torch.tensor(expected, dtype=actual.dtype), atol=atol, rtol=0)


# ---------------------------------------------------------------- golden values


@pytest.mark.parametrize(
    ("name", "params", "expected"),
    [
        # clip eps 0.2: A=+1: min(1.5, 1.2)=1.2, min(0.5, 0.8)=0.5, 1.1 -> -1.2, -0.5, -1.1
        #               A=-2: min(-3, -2.4)=-3, min(-1, -1.6)=-1.6 -> 3.0, 1.6, (masked) 0
        ("clip", {}, [[-1.2, -0.5, -1.1], [3.0, 1.6, 0.0]]),
        # asymmetric eps_low 0.4, eps_high 0.1: A=+1: min(1.5, 1.1)=1.1, min(0.5, 0.6)=0.5, min(1.1, 1.1)
        #               A=-2: min(-3, -2.2)=-3, min(-1, -1.2)=-1.2
        ("clip", {"eps_low": 0.4, "eps_high": 0.1}, [[-1.1, -0.5, -1.1], [3.0, 1.2, 0.0]]),
        # dual clip delta 1.3: A=-2, r=1.5: min(-2*1.3, -2*1.2) = -2.6 -> 2.6 (A=+1 row unchanged)
        ("clip", {"delta": 1.3}, [[-1.2, -0.5, -1.1], [2.6, 1.6, 0.0]]),
        # noclip: -r A
        ("noclip", {}, [[-1.5, -0.5, -1.1], [3.0, 1.0, 0.0]]),
        # pspo alpha 0.1: r~ = 0.9 r + 0.1 = 1.45, 0.55, 1.09; -r~ A
        ("pspo", {}, [[-1.45, -0.55, -1.09], [2.9, 1.1, 0.0]]),
        # alpha 0.5: r~ = 1.25, 0.75, 1.05
        ("pspo", {"alpha": 0.5}, [[-1.25, -0.75, -1.05], [2.5, 1.5, 0.0]]),
        # sapo A=+1, tau 1: -4 sigmoid(r - 1): sigmoid(0.5)=0.6224593 -> -2.4898373; sigmoid(-0.5)=0.3775407
        #   -> -1.5101627; sigmoid(0.1)=0.5249792 -> -2.0999167
        # A=-2, tau 1.05: (4/1.05)*2*sigmoid(1.05(r-1)): sigmoid(0.525)=0.6283185 -> 4.7871710;
        #   sigmoid(-0.525)=0.3716815 -> 2.8318767
        ("sapo", {}, [[-2.4898373, -1.5101627, -2.0999167], [4.7871710, 2.8318767, 0.0]]),
        # p3o tau 4: -(4/4) sigmoid(4(r-1)) A: sigmoid(2)=0.8807971, sigmoid(-2)=0.1192029, sigmoid(0.4)=0.5986877
        ("p3o", {}, [[-0.8807971, -0.1192029, -0.5986877], [1.7615942, 0.2384058, 0.0]]),
        # p3o + 0.5 * k3 KL, k3 = r - 1 - log r = 0.0945349, 0.1931472, 0.0046898
        (
            "p3o",
            {"kl_coef": 0.5},
            [
                [-0.8807971 + 0.0472674, -0.1192029 + 0.0965736, -0.5986877 + 0.0023449],
                [1.7615942 + 0.0472674, 0.2384058 + 0.0965736, 0.0],
            ],
        ),
        # topr: -w A log p; A=+1: w=1 -> 0.2876821, 1.3862944, 0.5978370
        #        A=-2: w=min(r,1)=(1, 0.5): 2*1*(-0.2876821)=-0.5753641, 2*0.5*(-1.3862944)=-1.3862944
        ("topr", {}, [[0.2876821, 1.3862944, 0.5978370], [-0.5753641, -1.3862944, 0.0]]),
        # cispo eps_high 1.2: w=min(r, 1.2)=(1.2, 0.5, 1.1); A=+1: -w log p = 0.3452185, 0.6931472, 0.6576207
        #        A=-2: 2 w log p = 2*1.2*(-0.2876821) = -0.6904370, 2*0.5*(-1.3862944) = -1.3862944
        ("cispo", {"eps_high": 1.2}, [[0.3452185, 0.6931472, 0.6576207], [-0.6904370, -1.3862944, 0.0]]),
        # cispo default cap 5 does not bind: w = r; A=-2: 2*1.5*(-0.2876821) = -0.8630462
        ("cispo", {}, [[0.4315231, 0.6931472, 0.6576207], [-0.8630462, -1.3862944, 0.0]]),
        # gspo eps 0.05: row 0 s = (1.5*0.5*1.1)^(1/3) = 0.8250^(1/3) = 0.9378887 > 0.95? no: 0.9379 < 0.95,
        #   A=+1: min(s, 0.95) = s -> -0.9378887 on every token
        # row 1 (2 unmasked tokens): s = (1.5*0.5)^(1/2) = 0.8660254; A=-2: min(-1.7320508, -1.9) = -1.9 -> 1.9
        ("gspo", {"eps_low": 0.05, "eps_high": 0.05}, [[-0.9378887] * 3, [1.9, 1.9, 0.0]]),
        # dppo binary TV: D=|p-q|=(0.25, 0.25, 0.05) vs delta 0.15. Row 0 (A>0) drops token 0 (p>q);
        # row 1 (A<0) drops token 1 (p<q). Kept: -min(r, 20) A log p:
        #   row0 t1: -0.5*(-1.3862944)=0.6931472, t2: -1.1*(-0.5978370)=0.6576207; row1 t0: 3*(-0.2876821)
        ("dppo_binary_tv", {}, [[0.0, 0.6931472, 0.6576207], [-0.8630462, 0.0, 0.0]]),
        # ratio cap 1.2: row1 t0 weight min(1.5, 1.2): 2*1.2*(-0.2876821) = -0.6904370
        ("dppo_binary_tv", {"ratio_cap": 1.2}, [[0.0, 0.6931472, 0.6576207], [-0.6904370, 0.0, 0.0]]),
        # dppo binary KL: D = 0.1438410, 0.1438410, 0.0050252 (see test_binary_kl_values) vs delta 0.05:
        # the same tokens are dropped
        ("dppo_binary_kl", {}, [[0.0, 0.6931472, 0.6576207], [-0.8630462, 0.0, 0.0]]),
    ],
)
def test_golden(name, params, expected):
    logp, old, adv, mask = example()
    out = get_method(name)(logp, old, adv, mask, **params)
    assert_close(out.per_token_loss, expected)


def test_clip_golden_metrics():
    logp, old, adv, mask = example()
    out = get_method("clip")(logp, old, adv, mask)
    # 5 unmasked tokens; row 0 t0 (r=1.5, A>0) is high-clipped, row 1 t1 (r=0.5, A<0) is low-clipped
    assert out.metrics["clip_frac"].item() == pytest.approx(2 / 5)
    assert out.metrics["clip_high_frac"].item() == pytest.approx(1 / 5)
    assert out.metrics["clip_low_frac"].item() == pytest.approx(1 / 5)
    assert out.metrics["zero_grad_frac"].item() == pytest.approx(2 / 5)
    # ratios over unmasked tokens: (1.5 + 0.5 + 1.1 + 1.5 + 0.5) / 5 = 1.02
    assert out.metrics["ratio_mean"].item() == pytest.approx(1.02)
    assert out.metrics["ratio_min"].item() == pytest.approx(0.5)
    assert out.metrics["ratio_max"].item() == pytest.approx(1.5)


def test_pspo_golden_metrics():
    logp, old, adv, mask = example()
    out = get_method("pspo")(logp, old, adv, mask, alpha=0.1)
    # r~ = 0.9 * 1.02 + 0.1 = 1.018 (mean); 0.9 * 0.5 + 0.1 = 0.55; 0.9 * 1.5 + 0.1 = 1.45
    assert out.metrics["smoothed_ratio_mean"].item() == pytest.approx(1.018)
    assert out.metrics["smoothed_ratio_min"].item() == pytest.approx(0.55)
    assert out.metrics["smoothed_ratio_max"].item() == pytest.approx(1.45)
    assert out.metrics["zero_grad_frac"].item() == 0.0


def test_dppo_golden_metrics():
    logp, old, adv, mask = example()
    out = get_method("dppo_binary_kl")(logp, old, adv, mask)
    assert out.metrics["mask_frac"].item() == pytest.approx(2 / 5)
    assert out.metrics["mask_pos_frac"].item() == pytest.approx(1 / 5)
    assert out.metrics["mask_neg_frac"].item() == pytest.approx(1 / 5)
    # (0.1438410 * 4 + 0.0050252) / 5 = 0.1160779
    assert out.metrics["divergence_mean"].item() == pytest.approx(0.1160779, abs=1e-6)


def test_binary_divergence_values():
    logp = torch.tensor([0.75, 0.25, 0.55]).log()
    logq = torch.tensor([0.5, 0.5, 0.5]).log()
    assert_close(binary_tv(logp, logq), [0.25, 0.25, 0.05])
    # q log(q/p) + (1-q) log((1-q)/(1-p)), q = 0.5:
    #   p=0.75: 0.5 log(2/3) + 0.5 log 2 = -0.2027326 + 0.3465736 = 0.1438410; p=0.25: symmetric, same
    #   p=0.55: 0.5 log(0.5/0.55) + 0.5 log(0.5/0.45) = -0.0476551 + 0.0526803 = 0.0050252
    assert_close(binary_kl(logp, logq), [0.1438410, 0.1438410, 0.0050252])


def test_topk_divergence_values():
    # mu's top-2 masses (0.5, 0.3), rest 0.2; pi's masses on the same ids (0.6, 0.2), rest 0.2
    q = torch.tensor([[0.5, 0.3]]).log()
    p = torch.tensor([[0.6, 0.2]]).log()
    # TV = (|0.6-0.5| + |0.2-0.3| + |0.2-0.2|) / 2 = 0.1
    assert_close(topk_tv(p, q), [0.1])
    # KL = 0.5 log(0.5/0.6) + 0.3 log(0.3/0.2) + 0.2 log(1) = -0.0911608 + 0.1216395 = 0.0304788
    assert_close(topk_kl(p, q), [0.0304788])
    # identical distributions: both zero; a rest bucket of 0 is clamped, not NaN
    full = torch.tensor([[0.5, 0.5]]).log()
    assert_close(topk_tv(full, full), [0.0])
    assert_close(topk_kl(full, full), [0.0])


def test_dppo_topk_golden():
    # one token, K = 2. mu(a_t) = 0.5 is also mu's top-1 id; pi moved it to 0.6 (r = 1.2), TV = 0.1 as above.
    logp = torch.tensor([[math.log(0.6)]], requires_grad=True)
    old = torch.tensor([[math.log(0.5)]])
    topk = {
        "topk_old_logps": torch.tensor([[[0.5, 0.3]]]).log(),
        "topk_logps": torch.tensor([[[0.6, 0.2]]]).log(),
    }
    mask = torch.ones(1, 1)
    fn = get_method("dppo_topk_tv")
    # A = +1, delta_high 0.15 > TV 0.1: kept, loss = -1.2 * log 0.6 = -1.2 * -0.5108256 = 0.6129908
    out = fn(logp, old, torch.tensor([1.0]), mask, topk=2, **topk)
    assert_close(out.per_token_loss, [[0.6129908]])
    # delta_high 0.05 < 0.1 and p > q with A > 0: dropped
    out = fn(logp, old, torch.tensor([1.0]), mask, topk=2, delta_high=0.05, **topk)
    assert_close(out.per_token_loss, [[0.0]])
    # A < 0 moves p up, the safe direction: kept even with tiny delta_low: -1.2 * -1 * log 0.6 = -0.6129908
    out = fn(logp, old, torch.tensor([-1.0]), mask, topk=2, delta_low=0.0, **topk)
    assert_close(out.per_token_loss, [[-0.6129908]])
    # KL 0.0304788: kept at delta 0.05, dropped at delta 0.03
    kl = get_method("dppo_topk_kl")
    # kept: the same REINFORCE term as top-K TV, -min(r, C) A log p = 0.6129908
    assert_close(kl(logp, old, torch.tensor([1.0]), mask, topk=2, **topk).per_token_loss, [[0.6129908]])
    assert (
        kl(logp, old, torch.tensor([1.0]), mask, topk=2, delta_high=0.03, **topk).per_token_loss.item() == 0.0
    )
    with pytest.raises(ValueError, match="topk=20"):
        fn(logp, old, torch.tensor([1.0]), mask, **topk)


# ---------------------------------------------------------------- properties


def random_batch(seed: int = 0, b: int = 6, t: int = 9, spread: float = 1.0, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    old = -torch.rand(b, t, generator=g, dtype=dtype) * 3 - 0.05
    logp = (old + spread * torch.randn(b, t, generator=g, dtype=dtype)).clamp(max=0.0)
    adv = torch.randn(b, generator=g, dtype=dtype)
    mask = (torch.rand(b, t, generator=g) > 0.2).to(dtype)
    mask[:, 0] = 1.0
    return logp, old, adv, mask


@pytest.mark.parametrize("alpha", [0.0, 0.1, 0.4, 1.0])
def test_pspo_gradient_is_scaled_noclip(alpha):
    logp, old, adv, mask = random_batch(spread=2.0)
    g_pspo, _ = grad_of("pspo", logp, old, adv, mask, alpha=alpha)
    g_noclip, _ = grad_of("noclip", logp, old, adv, mask)
    torch.testing.assert_close(g_pspo, (1 - alpha) * g_noclip)


def test_pspo_contraction():
    r = torch.tensor([0.0, 0.3, 1.0, 1.7, 40.0])
    for alpha in (0.1, 0.4):
        torch.testing.assert_close(smoothed_ratio(r, alpha) - 1, (1 - alpha) * (r - 1))
    logp, old, adv, mask = random_batch(spread=1.5)
    out = run("pspo", logp, old, adv, mask, alpha=0.3)
    for stat in ("mean", "min", "max"):
        torch.testing.assert_close(
            out.metrics[f"smoothed_ratio_{stat}"] - 1, 0.7 * (out.metrics[f"ratio_{stat}"] - 1).float()
        )


def test_clip_gradient_vanishes_outside_region_but_pspo_does_not():
    # r = 0.5, 1.0, 1.5 for A > 0 and A < 0
    logp = torch.tensor([[0.5, 1.0, 1.5], [0.5, 1.0, 1.5]]).mul(0.4).log()
    old = torch.full((2, 3), 0.4).log()
    adv = torch.tensor([1.0, -1.0])
    mask = torch.ones(2, 3)
    g_clip, _ = grad_of("clip", logp, old, adv, mask)
    g_pspo, _ = grad_of("pspo", logp, old, adv, mask)
    # d(-r A)/d logp = -r A inside the region; zero where r left it in the advantage's direction
    assert_close(g_clip, [[-0.5, -1.0, 0.0], [0.0, 1.0, 1.5]])
    assert (g_pspo != 0).all()
    assert_close(g_pspo, [[-0.45, -0.9, -1.35], [0.45, 0.9, 1.35]])


def test_sapo_gradient_equals_noclip_at_ratio_one():
    logp, _, adv, mask = random_batch()
    g_sapo, _ = grad_of("sapo", logp, logp.detach(), adv, mask, tau_pos=0.7, tau_neg=3.0)
    g_noclip, _ = grad_of("noclip", logp, logp.detach(), adv, mask)
    torch.testing.assert_close(g_sapo, g_noclip)
    g_p3o, _ = grad_of("p3o", logp, logp.detach(), adv, mask, tau=2.5)
    torch.testing.assert_close(g_p3o, g_noclip)
    # away from r = 1 the gate shrinks the gradient: |g_sapo| < |g_noclip|
    logp2, old2, adv2, mask2 = random_batch(spread=1.0)
    g_s, _ = grad_of("sapo", logp2, old2, adv2, mask2)
    g_n, _ = grad_of("noclip", logp2, old2, adv2, mask2)
    moved = (logp2 - old2).abs() > 0.1
    assert (g_s.abs()[moved & (mask2 > 0)] < g_n.abs()[moved & (mask2 > 0)]).all()


def test_topr_weights():
    logp, old, adv, mask = random_batch(spread=1.0)
    adv[0] = 0.0  # A == 0 has weight 1
    g, _ = grad_of("topr", logp, old, adv, mask)
    r = (logp - old).exp()
    a = adv[:, None].expand_as(r)
    w = torch.where(a >= 0, torch.ones_like(r), r.clamp(0, 1))
    # gradient of -sg(w) A logp is -w A (masked)
    torch.testing.assert_close(g, -w * a * mask)


def test_gspo_sequence_ratio_is_exp_masked_mean():
    logp, old, adv, mask = random_batch(spread=0.3)
    g, out = grad_of("gspo", logp, old, adv, mask, eps_low=10.0, eps_high=10.0)  # region never binds
    s = (((logp - old) * mask).sum(-1) / mask.sum(-1)).exp()
    torch.testing.assert_close(out.metrics["seq_ratio_mean"], s.mean().float())
    torch.testing.assert_close(out.metrics["seq_ratio_max"], s.max().float())
    # loss per token is -s A; gradient wrt each unmasked logp_t sums over the row's L tokens: -L * s A * m_t / L
    torch.testing.assert_close(out.per_token_loss, (-s * adv)[:, None] * mask)
    torch.testing.assert_close(g, (-s * adv)[:, None] * mask)


def test_cispo_weight_is_capped_ratio():
    logp, old, adv, mask = random_batch(spread=2.0)
    g, _ = grad_of("cispo", logp, old, adv, mask, eps_high=1.5)
    w = (logp - old).exp().clamp(max=1.5)
    torch.testing.assert_close(g, -w * adv[:, None] * mask)


@pytest.mark.parametrize("name", ["dppo_binary_tv", "dppo_binary_kl"])
def test_dppo_mask_truth_table(name):
    # columns: (p, q, A, mask) -> kept?
    d = 0.15 if name.endswith("tv") else 0.05
    cases = [
        (0.52, 0.50, 1.0, 1, True),  # within threshold, moved with A: kept
        (0.90, 0.50, 1.0, 1, False),  # A > 0, moved up too far: dropped
        (0.10, 0.50, 1.0, 1, True),  # A > 0, moved down far (against A): kept
        (0.10, 0.50, -1.0, 1, False),  # A < 0, moved down too far: dropped
        (0.90, 0.50, -1.0, 1, True),  # A < 0, moved up far (against A): kept
        (0.48, 0.50, -1.0, 1, True),  # A < 0 within threshold: kept
        (0.90, 0.50, 1.0, 0, False),  # masked token: no loss, no gradient
    ]
    p = torch.tensor([[c[0] for c in cases]], dtype=torch.float64)
    q = torch.tensor([[c[1] for c in cases]], dtype=torch.float64)
    adv = torch.tensor([[c[2] for c in cases]], dtype=torch.float64)
    mask = torch.tensor([[c[3] for c in cases]], dtype=torch.float64)
    kept = torch.tensor([[c[4] for c in cases]])
    g, out = grad_of(name, p.log(), q.log(), adv, mask, delta_low=d, delta_high=d)
    expected = torch.where(kept, -(p / q) * adv, torch.zeros_like(p))
    torch.testing.assert_close(g, expected)
    # 2 dropped among 6 unmasked tokens
    assert out.metrics["mask_frac"].item() == pytest.approx(2 / 6)
    assert out.metrics["zero_grad_frac"].item() == pytest.approx(2 / 6)


def test_dppo_thresholds_are_not_swapped():
    # D = |p - q| = 0.2 with delta_high = 0.1 < 0.2 < delta_low = 0.3
    p = torch.tensor([[0.7, 0.3]], dtype=torch.float64)
    q = torch.full_like(p, 0.5)
    adv = torch.tensor([[1.0, -1.0]], dtype=torch.float64)
    g, _ = grad_of("dppo_binary_tv", p.log(), q.log(), adv, torch.ones_like(p), delta_low=0.3, delta_high=0.1)
    assert g[0, 0] == 0.0  # A > 0, up by 0.2 > delta_high
    assert g[0, 1] != 0.0  # A < 0, down by 0.2 < delta_low


@pytest.mark.parametrize("name", ALL)
def test_masked_tokens_get_zero_loss_and_gradient(name):
    logp, old, adv, mask = random_batch(seed=3, spread=1.0)
    logp = torch.where(mask > 0, logp, torch.full_like(logp, -80.0))  # garbage in padding
    g, out = grad_of(name, logp, old, adv, mask)
    assert (out.per_token_loss[mask == 0] == 0).all()
    assert (g[mask == 0] == 0).all()
    assert torch.isfinite(g).all()


@pytest.mark.parametrize("name", ALL)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_finite_at_extreme_log_ratios_and_empty_rows(name, dtype):
    old = torch.full((4, 4), -3.0, dtype=dtype)
    lr = torch.tensor([[50.0, -50.0, 19.0, -19.0]] * 4, dtype=dtype)
    logp = old + lr  # includes log p = +47: absurd, but must not produce NaN
    adv = torch.tensor([1.0, -1.0, 2.0, -3.0], dtype=dtype)
    mask = torch.ones(4, 4, dtype=dtype)
    mask[2] = 0  # a fully masked row
    g, out = grad_of(name, logp, old, adv, mask)
    loss = aggregate(out.per_token_loss, mask, "grpo")
    assert torch.isfinite(out.per_token_loss).all() and torch.isfinite(loss)
    assert torch.isfinite(g).all()
    assert (g[2] == 0).all()
    for key, value in out.metrics.items():
        assert value.dim() == 0 and torch.isfinite(value), key


@pytest.mark.parametrize("name", ALL)
def test_all_masked_batch(name):
    logp, old, adv, _ = random_batch()
    mask = torch.zeros_like(logp)
    g, out = grad_of(name, logp, old, adv, mask)
    assert (out.per_token_loss == 0).all() and (g == 0).all()
    for mode in ("dapo", "grpo", "bnpo"):
        assert aggregate(out.per_token_loss, mask, mode).item() == 0.0
    for key, value in out.metrics.items():
        assert value.item() == 0.0, key


def test_log_ratio_clamp_is_shared():
    assert LOG_RATIO_CLAMP == 20.0
    old = torch.zeros(1, 2)
    logp = torch.tensor([[25.0, -25.0]])
    out = get_method("noclip")(logp, old, torch.tensor([-1.0]), torch.ones(1, 2))
    assert_close(out.per_token_loss, [[math.exp(20.0), math.exp(-20.0)]], atol=1e-3)
    assert out.metrics["zero_grad_frac"].item() == 1.0  # both saturated: clamp gradient is zero


@pytest.mark.parametrize("name", ZERO_GRAD_METHODS)
def test_zero_grad_frac_matches_autograd(name):
    logp, old, adv, mask = random_batch(seed=5, b=8, t=16, spread=1.5)
    old[0, :3] = logp[0, :3] - 30.0  # saturated log-ratios
    mask[0, :3] = 1.0
    params = {"eps_low": 0.05, "eps_high": 0.05} if name == "gspo" else {}
    if name == "clip":
        params = {"delta": 1.8}
    g, out = grad_of(name, logp, old, adv, mask, **params)
    expected = ((g == 0) & (mask > 0)).sum() / mask.sum()
    assert out.metrics["zero_grad_frac"].item() == pytest.approx(expected.item())
    saturated_only = 3 / mask.sum()
    # ratio-form methods lose the 3 saturated tokens' gradient at the clamp; DPPO's detached weight keeps it
    # (its mask drops them only when they moved in their advantage's direction): the bound holds all the same
    assert expected >= saturated_only
    if name in ("clip", "gspo") or name.startswith("dppo"):
        assert expected > saturated_only + 0.05  # and the trust region zeroes more


@pytest.mark.parametrize("delta", [0.9, 1.1, 1.25, 3.0])
def test_clip_dual_zero_grad_frac_for_any_delta(delta):
    logp, old, adv, mask = random_batch(seed=11, b=8, t=16, spread=1.0)
    g, out = grad_of("clip", logp, old, adv, mask, delta=delta)
    expected = ((g == 0) & (mask > 0)).sum() / mask.sum()
    assert out.metrics["zero_grad_frac"].item() == pytest.approx(expected.item())


@pytest.mark.parametrize("name", ALL)
def test_token_advantages_match_broadcast(name):
    logp, old, adv, mask = random_batch(seed=7)
    extra = method_inputs(name, logp)
    fn = get_method(name)
    a = fn(logp, old, adv, mask, **extra).per_token_loss
    b = fn(logp, old, adv[:, None].expand_as(logp).clone(), mask, **extra).per_token_loss
    torch.testing.assert_close(a, b)


# ---------------------------------------------------------------- registry


def test_registry_names():
    """The registry is discovered from the package: every module of pspo_repro/methods/ but the shared ones
    registers at least one method (a method file that forgot ``@register_method`` fails here), and the names
    are conf/method/'s (tests/methods/test_method_configs.py)."""
    import pkgutil

    import pspo_repro.methods as package

    modules = {m.name for m in pkgutil.iter_modules(package.__path__)}
    defining = {get_spec(n).fn.__module__.rsplit(".", 1)[1] for n in ALL}
    assert defining <= modules
    assert modules - defining == {"aggregation", "base", "params", "registry", "rollout_correction"}
    assert method_extra_inputs("dppo_topk_kl") == ("topk_old_logps", "topk_logps")
    assert all(method_extra_inputs(n) == () for n in ALL if not n.startswith("dppo_topk"))


def test_registry_rejects_duplicates_and_unknown_names():
    with pytest.raises(ValueError, match="already registered"):

        @register_method("pspo")
        def again(logp, old_logp, advantages, mask, *, alpha=0.1):  # pragma: no cover
            raise AssertionError

    with pytest.raises(
        ValueError, match="unknown method 'ppo'.*clip, cispo|unknown method 'ppo'.*cispo, clip"
    ):
        get_method("ppo")
    assert get_spec("pspo").defaults == {"alpha": 0.1}
    with pytest.raises(ValueError, match="'kimi15' is an alias of 'dro'"):

        @register_method("kimi15")
        def shadow(logp, old_logp, advantages, mask):  # pragma: no cover
            raise AssertionError

    assert "kimi15" not in list_methods()


def test_registry_rejects_hyperparameters_without_rules():
    with pytest.raises(TypeError, match="no rule"):

        @register_method("test_only_bad")
        def bad(logp, old_logp, advantages, mask, *, mystery=1.0):  # pragma: no cover
            raise AssertionError

    assert "test_only_bad" not in list_methods()
