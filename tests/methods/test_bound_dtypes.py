"""Clip bounds and gate temperatures are exact in the ratio's dtype, as TRL's ``torch.clamp`` bounds are.

Built from Python floats inside ``torch.where`` they were float32, so with float64 inputs ``1 + 0.2`` was
1.2000000477 and a ratio of 1.2000000001 escaped the clip. TRL clamps at ``1 + eps`` rounded once to the
input's dtype; every method whose threshold meets a ratio must do the same (and float32/bf16 are unchanged).
"""

from __future__ import annotations

import math

import pytest
import torch

from pspo_repro.methods import get_method

DTYPES = [torch.float64, torch.float32, torch.bfloat16]
DTYPE_IDS = {"ids": lambda d: str(d).removeprefix("torch.")}
CLIPPED = ["clip", "clip_cov", "gspo", "luspo"]


def log_of(r: float, dtype: torch.dtype) -> torch.Tensor:
    """A 0-dim log-ratio of ``dtype`` whose ``exp`` is exactly ``r`` rounded to ``dtype`` (``exp(log(r))`` alone
    is often one ulp off, and a test must put a ratio exactly on a bound)."""
    target = torch.tensor(r, dtype=torch.float64).to(dtype)
    lr = torch.tensor(math.log(target.item()), dtype=torch.float64).to(dtype)
    for _ in range(64):
        got = torch.exp(lr)
        if got == target:
            return lr
        lr = torch.nextafter(lr, lr + (1 if got < target else -1))
    raise AssertionError(f"no log-ratio of {dtype} has exp exactly {r}")


def ulp_neighbours(value: float, dtype: torch.dtype) -> list[float]:
    """``value`` in ``dtype`` and the next representable numbers below and above it."""
    v = torch.tensor(value, dtype=torch.float64).to(dtype)
    return [torch.nextafter(v, v - 1).item(), v.item(), torch.nextafter(v, v + 1).item()]


def ratio_batch(ratios: list[float], adv_sign: float, dtype: torch.dtype):
    """One token per row (so a sequence ratio equals the token ratio), ratios exactly as listed in ``dtype``:
    ``old = 0``, so ``logp - old`` is the chosen log-ratio. Equal advantages: Clip-Cov's covariance is 0."""
    logp = torch.stack([log_of(r, dtype) for r in ratios]).unsqueeze(1)
    old = torch.zeros_like(logp)
    adv = torch.full((len(ratios),), adv_sign, dtype=dtype)
    return logp, old, adv, torch.ones_like(logp)


def trl_clip_loss(logp, old, adv, eps_low, eps_high, delta=None):
    """TRL 1.16's ``_compute_loss`` formula (loss types grpo/dapo/luspo...), per token, as written there."""
    coef_1 = torch.exp(logp - old)
    coef_2 = torch.clamp(coef_1, 1 - eps_low, 1 + eps_high)
    if delta is not None:
        coef_1 = torch.clamp(coef_1, max=delta)
    a = adv.unsqueeze(1)
    return -torch.min(coef_1 * a, coef_2 * a)


def loss_and_grad(fn, logp, old, adv, mask, **params):
    leaf = logp.detach().clone().requires_grad_(True)
    out = fn(leaf, old, adv, mask)
    out_loss = out if isinstance(out, torch.Tensor) else out.per_token_loss
    out_loss.sum().backward()
    return out_loss.detach(), leaf.grad, (None if isinstance(out, torch.Tensor) else out.metrics)


def probes(eps_low: float, eps_high: float, dtype: torch.dtype, sign: float) -> list[float]:
    """Ratios at, just inside and just outside the bound of advantage sign ``sign``."""
    bound = 1.0 + eps_high if sign > 0 else 1.0 - eps_low
    return [*ulp_neighbours(bound, dtype), 1.0]


@pytest.mark.parametrize("dtype", DTYPES, **DTYPE_IDS)
@pytest.mark.parametrize("sign", [1.0, -1.0])
@pytest.mark.parametrize("name", CLIPPED)
def test_clipped_methods_equal_trls_formula_at_the_bounds(name, sign, dtype):
    eps_low, eps_high = 0.2, 0.28
    logp, old, adv, mask = ratio_batch(probes(eps_low, eps_high, dtype, sign), sign, dtype)
    ref_loss, ref_grad, _ = loss_and_grad(lambda lp, o, a, m: trl_clip_loss(lp, o, a, eps_low, eps_high),
                                          logp, old, adv, mask)  # fmt: skip
    fn = get_method(name)
    loss, grad, metrics = loss_and_grad(
        lambda lp, o, a, m: fn(lp, o, a, m, eps_low=eps_low, eps_high=eps_high), logp, old, adv, mask
    )
    assert torch.equal(loss, ref_loss), (loss.flatten().tolist(), ref_loss.flatten().tolist())
    assert torch.equal(grad, ref_grad), (grad.flatten().tolist(), ref_grad.flatten().tolist())
    # rows: [bound - ulp, bound, bound + ulp, 1]: only the one beyond the bound is clipped (zero gradient)
    outside = 0 if sign < 0 else 2
    assert [bool(g == 0) for g in grad.flatten()] == [i == outside for i in range(4)]
    assert metrics["clip_frac"].item() == pytest.approx(0.25)


@pytest.mark.parametrize("name", CLIPPED)
def test_float64_ratio_just_past_one_plus_eps_is_clipped(name):
    # the example: 1.2000000001 > 1 + 0.2 in float64 (the float32 bound 1.2000000477 let it through)
    logp, old, adv, mask = ratio_batch([1.2000000001, 0.7999999999], 1.0, torch.float64)
    adv = torch.tensor([1.0, -1.0], dtype=torch.float64)
    loss, grad, _ = loss_and_grad(
        lambda lp, o, a, m: get_method(name)(lp, o, a, m, eps_low=0.2, eps_high=0.2), logp, old, adv, mask
    )
    assert grad.abs().max().item() == 0.0
    assert loss.flatten().tolist() == [-(1 + 0.2), (1 - 0.2)]


@pytest.mark.parametrize("dtype", DTYPES, **DTYPE_IDS)
def test_clip_dual_bound_is_exact(dtype):
    delta = 1.37
    logp, old, _, mask = ratio_batch(ulp_neighbours(delta, dtype), -1.0, dtype)
    adv = torch.full((3,), -1.0, dtype=dtype)
    ref_loss, ref_grad, _ = loss_and_grad(lambda lp, o, a, m: trl_clip_loss(lp, o, a, 0.2, 0.2, delta),
                                          logp, old, adv, mask)  # fmt: skip
    loss, grad, _ = loss_and_grad(
        lambda lp, o, a, m: get_method("clip")(lp, o, a, m, delta=delta), logp, old, adv, mask
    )
    assert torch.equal(loss, ref_loss) and torch.equal(grad, ref_grad)
    assert [bool(g == 0) for g in grad.flatten()] == [False, False, True]


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], **DTYPE_IDS)
def test_sapo_temperature_is_exact_in_the_ratio_dtype(dtype):
    # tau = 1.05 is not a float32 number: in float64 the gate must use 1.05, not 1.0499999523
    g = torch.Generator().manual_seed(0)
    old = -torch.rand(5, 7, generator=g, dtype=torch.float64) - 0.1
    logp = (old + 0.5 * torch.randn(5, 7, generator=g, dtype=torch.float64)).to(dtype)
    old = old.to(dtype)
    adv = torch.tensor([1.0, -1.0, 0.5, -2.0, 0.0], dtype=dtype)
    mask = torch.ones_like(logp)
    tau = torch.where(adv > 0, torch.tensor(1.0, dtype=dtype), torch.tensor(1.05, dtype=dtype)).unsqueeze(1)

    def reference(lp, o, a, m):  # TRL's sapo line, with the temperatures in the input's dtype
        return -(torch.sigmoid(tau * (torch.exp(lp - o) - 1)) * 4 / tau) * a.unsqueeze(1)

    ref_loss, ref_grad, _ = loss_and_grad(reference, logp, old, adv, mask)
    loss, grad, _ = loss_and_grad(
        lambda lp, o, a, m: get_method("sapo")(lp, o, a, m, tau_pos=1.0, tau_neg=1.05), logp, old, adv, mask
    )
    torch.testing.assert_close(loss, ref_loss, rtol=4 * torch.finfo(dtype).eps, atol=0.0)
    torch.testing.assert_close(grad, ref_grad, rtol=4 * torch.finfo(dtype).eps, atol=0.0)


def test_sapo_bf16_unchanged():
    # bf16 ratios: tau rounded once to bf16 equals the float32-then-bf16 temperature used before
    g = torch.Generator().manual_seed(1)
    old = (-torch.rand(4, 6, generator=g) - 0.1).to(torch.bfloat16)
    logp = (old.float() + 0.3 * torch.randn(4, 6, generator=g)).to(torch.bfloat16)
    adv = torch.tensor([1.0, -1.0, 2.0, -0.5], dtype=torch.bfloat16)
    tau = torch.where(adv > 0, 1.0, 1.05).to(torch.bfloat16).unsqueeze(1)
    ratio = torch.exp(logp - old)
    expected = -(torch.sigmoid((ratio - 1.0) * tau) * (4.0 / tau)) * adv.unsqueeze(1)
    out = get_method("sapo")(logp, old, adv, torch.ones_like(logp), tau_pos=1.0, tau_neg=1.05)
    assert out.per_token_loss.dtype == torch.bfloat16 and torch.equal(out.per_token_loss, expected)
