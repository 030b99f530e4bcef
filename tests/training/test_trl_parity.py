"""Our methods + aggregation equal the loss TRL 1.16's own ``GRPOTrainer._compute_loss`` computes.

TRL's code is driven directly: a bare ``GRPOTrainer`` object (``__new__``, no ``__init__``) gets exactly the
attributes ``_compute_loss`` reads, and ``_get_per_token_logps_and_entropies`` is replaced by a stub that
returns prepared log-probs (a leaf tensor, so gradients can be compared too).
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
import trl
from trl import GRPOTrainer

from pspo_repro.methods import aggregate, get_method, method_optional_inputs

GA, STEPS_PER_GEN, MAX_LEN = 2, 4, 12


def test_trl_version_is_the_one_mirrored():
    assert trl.__version__ == "1.16.0"


def trl_loss(
    compute_loss_bare,
    loss_type,
    logp,
    old,
    adv,
    mask,
    *,
    eps_low=0.2,
    eps_high=0.2,
    delta=None,
    level="token",
    is_ratio=None,
    **args,
):
    """Loss, d loss / d logp and logged metrics from TRL's own ``_compute_loss``.

    ``is_ratio``: vLLM's token-level importance-sampling ratio; given, TRL runs with ``use_vllm`` and its
    correction on (TRL multiplies the loss by it, or, for vespo, folds it into the gamma weight).
    """
    loss, grad, metrics, inputs = compute_loss_bare(
        GRPOTrainer,
        logp,
        old,
        adv,
        mask,
        is_ratio=is_ratio,
        num_items=mask.sum() * 3,  # spans the generation batch, as in TRL
        loss_type=loss_type,
        epsilon_low=eps_low,
        epsilon_high=eps_high,
        importance_sampling_level=level,
        _entropy_bonus_enabled=False,
        current_gradient_accumulation_steps=GA,
        max_completion_length=MAX_LEN,
        args=SimpleNamespace(
            delta=delta,
            steps_per_generation=STEPS_PER_GEN,
            sapo_temperature_pos=args.get("tau_pos", 1.0),
            sapo_temperature_neg=args.get("tau_neg", 1.05),
            vespo_k_pos=args.get("k_pos", 2.0),
            vespo_lambda_pos=args.get("lambda_pos", 3.0),
            vespo_k_neg=args.get("k_neg", 3.0),
            vespo_lambda_neg=args.get("lambda_neg", 2.0),
            use_bias_correction_kl=False,
        ),
    )
    return loss, grad, metrics, inputs["num_items_in_batch"]


def ours(name, mode, logp, old, adv, mask, num_items_in_batch, **params):
    leaf = logp.detach().clone().requires_grad_(True)
    out = get_method(name)(leaf, old, adv, mask, **params)
    # the normaliser the trainer passes for dapo: num_items / num_processes * GA / steps_per_generation
    num_items = num_items_in_batch / 1 * GA / STEPS_PER_GEN
    loss = aggregate(
        out.per_token_loss,
        mask,
        mode,
        num_items=num_items,
        max_completion_length=MAX_LEN,
        accumulation_steps=GA,
    )
    loss.backward()
    return loss.detach(), leaf.grad, out.metrics


def batch(seed, b=6, t=10, spread=0.4):
    g = torch.Generator().manual_seed(seed)
    old = -torch.rand(b, t, generator=g) * 4 - 0.01
    logp = old + spread * torch.randn(b, t, generator=g)
    adv = torch.randn(b, generator=g)
    mask = (torch.rand(b, t, generator=g) > 0.25).float()
    mask[:, 0] = 1.0
    return logp, old, adv, mask


# delta just above 1 + eps_high: a negative-advantage sequence of each test batch has s > delta (checked below)
LUSPO_DELTA = {"eps_low": 1e-2, "eps_high": 1e-2, "delta": 1.02}
LUSPO_DELTA_TRAINER = {"eps_low": 1e-3, "eps_high": 1e-3, "delta": 1.005}

CASES = [
    # (our method, our params, our mode, TRL loss_type, TRL kwargs)
    ("clip", {"eps_low": 0.2, "eps_high": 0.28}, "dapo", "dapo", {"eps_low": 0.2, "eps_high": 0.28}),
    (
        "clip",
        {"eps_low": 0.1, "eps_high": 0.1, "delta": 1.4},
        "dapo",
        "dapo",
        {"eps_low": 0.1, "eps_high": 0.1, "delta": 1.4},
    ),
    ("clip", {}, "grpo", "grpo", {}),
    ("clip", {}, "bnpo", "bnpo", {}),
    ("clip", {}, "dr_grpo", "dr_grpo", {}),
    ("sapo", {"tau_pos": 1.0, "tau_neg": 1.05}, "grpo", "sapo", {}),
    ("sapo", {"tau_pos": 0.5, "tau_neg": 2.0}, "grpo", "sapo", {"tau_pos": 0.5, "tau_neg": 2.0}),
    ("cispo", {"eps_high": 1.3}, "dapo", "cispo", {"eps_high": 1.3}),
    ("cispo", {"eps_high": 5.0}, "dapo", "cispo", {"eps_high": 5.0}),
    (
        "gspo",
        {"eps_low": 3e-2, "eps_high": 4e-2},
        "dapo",
        "dapo",
        {"eps_low": 3e-2, "eps_high": 4e-2, "level": "sequence"},
    ),
    # LUSPO: TRL's luspo loss_type with the sequence-level ratio, as TRL asks for it
    (
        "luspo",
        {"eps_low": 3e-2, "eps_high": 4e-2},
        "luspo",
        "luspo",
        {"eps_low": 3e-2, "eps_high": 4e-2, "level": "sequence"},
    ),
    (
        "luspo",
        {"eps_low": 3e-4, "eps_high": 4e-4},
        "luspo",
        "luspo",
        {"eps_low": 3e-4, "eps_high": 4e-4, "level": "sequence"},
    ),
    # TRL 1.16 applies its dual clip (GRPOConfig.delta) to loss_type="luspo" too
    (
        "luspo",
        LUSPO_DELTA,
        "luspo",
        "luspo",
        {**LUSPO_DELTA, "level": "sequence"},
    ),
    ("vespo", {}, "dapo", "vespo", {}),
    (
        "vespo",
        {"k_pos": 1.0, "lambda_pos": 0.5, "k_neg": 4.0, "lambda_neg": 5.0},
        "dapo",
        "vespo",
        {"k_pos": 1.0, "lambda_pos": 0.5, "k_neg": 4.0, "lambda_neg": 5.0},
    ),
]


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize(("name", "params", "mode", "loss_type", "trl_kwargs"), CASES)
def test_loss_and_gradient_match_trl(compute_loss_bare, seed, name, params, mode, loss_type, trl_kwargs):
    logp, old, adv, mask = batch(seed)
    ref_loss, ref_grad, ref_metrics, num_items = trl_loss(
        compute_loss_bare, loss_type, logp, old, adv, mask, **trl_kwargs
    )
    loss, grad, metrics = ours(name, mode, logp, old, adv, mask, num_items, **params)
    torch.testing.assert_close(loss, ref_loss, rtol=1e-5, atol=1e-7)
    torch.testing.assert_close(grad, ref_grad, rtol=1e-5, atol=1e-7)
    assert grad.abs().sum() > 0
    if loss_type in ("dapo", "grpo", "bnpo", "dr_grpo") and name == "clip":
        # our clip_frac is TRL's clip_ratio/region_mean, low/high likewise
        assert metrics["clip_frac"].item() == pytest.approx(ref_metrics["clip_ratio/region_mean"][0])
        assert metrics["clip_low_frac"].item() == pytest.approx(ref_metrics["clip_ratio/low_mean"][0])
        assert metrics["clip_high_frac"].item() == pytest.approx(ref_metrics["clip_ratio/high_mean"][0])
    if name == "cispo":
        assert metrics["clip_frac"].item() == pytest.approx(ref_metrics["cispo_clip_ratio"][0])
    if name == "vespo":
        assert metrics["phi_mean"].item() == pytest.approx(ref_metrics["vespo/phi_seq_mean"][0], rel=1e-6)
    if name == "luspo":
        # TRL logs sequence-level clipping per sequence (x.shape[1] == 1); ours is token-weighted: same when
        # no sequence or every sequence clips, so only the "some clip" guard is compared
        assert (metrics["clip_frac"].item() > 0) == (ref_metrics["clip_ratio/region_mean"][0] > 0)


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("name", ["vespo", "clip"])
def test_vllm_importance_sampling_correction_matches_trl(compute_loss_bare, seed, name):
    # TRL multiplies every loss by vLLM's token IS ratio except vespo, which folds it into w; the trainer must
    # pass it to the method (method_optional_inputs) or multiply, exactly as TRL does
    logp, old, adv, mask = batch(seed, spread=0.1)
    g = torch.Generator().manual_seed(seed + 100)
    is_ratio = torch.exp(0.1 * torch.randn(mask.shape, generator=g)) * mask + (1 - mask)  # 1 on padding (TRL)
    loss_type = "vespo" if name == "vespo" else "dapo"
    ref_loss, ref_grad, _, num_items = trl_loss(
        compute_loss_bare, loss_type, logp, old, adv, mask, is_ratio=is_ratio
    )
    leaf = logp.detach().clone().requires_grad_(True)
    fn = get_method(name)
    if "importance_sampling_ratio" in method_optional_inputs(name):
        per_token = fn(leaf, old, adv, mask, importance_sampling_ratio=is_ratio).per_token_loss
    else:
        per_token = fn(leaf, old, adv, mask).per_token_loss * is_ratio
    loss = aggregate(per_token, mask, "dapo", num_items=num_items * GA / STEPS_PER_GEN)
    loss.backward()
    torch.testing.assert_close(loss.detach(), ref_loss, rtol=1e-5, atol=1e-7)
    torch.testing.assert_close(leaf.grad, ref_grad, rtol=1e-5, atol=1e-7)


def test_parity_case_exercises_clipping():
    # guard against a vacuous parity test: the random batches do clip some tokens
    logp, old, adv, mask = batch(0)
    out = get_method("clip")(logp, old, adv, mask, eps_low=0.2, eps_high=0.28)
    assert 0.05 < out.metrics["clip_frac"].item() < 0.95


@pytest.mark.parametrize(("seed", "spread", "params"), [(0, 0.4, LUSPO_DELTA), (1, 0.4, LUSPO_DELTA),
                                                      (2, 0.1, LUSPO_DELTA_TRAINER)])  # fmt: skip
def test_luspo_delta_cases_cap_a_sequence(seed, spread, params):
    # guard against a vacuous delta case: the cap changes the loss of the batches the parity tests use
    logp, old, adv, mask = batch(seed, spread=spread)
    with_cap = get_method("luspo")(logp, old, adv, mask, **params).per_token_loss
    without = get_method("luspo")(logp, old, adv, mask, **{**params, "delta": None}).per_token_loss
    assert not torch.equal(with_cap, without)


def trl_gmpo_loss(compute_loss_bare, logp, old, adv, mask, eps_low, eps_high):
    """Loss, gradient and metrics from TRL 1.16's experimental ``GMPOTrainer._compute_loss`` (GMPO = geo_mean)."""
    from trl.experimental.gmpo import GMPOTrainer

    loss, grad, metrics, _ = compute_loss_bare(
        GMPOTrainer,
        logp,
        old,
        adv,
        mask,
        epsilon_low=eps_low,
        epsilon_high=eps_high,
        current_gradient_accumulation_steps=GA,
    )
    return loss, grad, metrics


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("eps", [(0.4, 0.4), (0.05, 0.1)])
def test_geo_mean_matches_trl_experimental_gmpo(compute_loss_bare, seed, eps):
    logp, old, adv, mask = batch(seed)
    ref_loss, ref_grad, ref_metrics = trl_gmpo_loss(compute_loss_bare, logp, old, adv, mask, *eps)
    leaf = logp.detach().clone().requires_grad_(True)
    out = get_method("geo_mean")(leaf, old, adv, mask, eps_low=eps[0], eps_high=eps[1])
    loss = aggregate(out.per_token_loss, mask, "grpo", accumulation_steps=GA)  # mean over sequences / GA
    loss.backward()
    torch.testing.assert_close(loss.detach(), ref_loss, rtol=1e-5, atol=1e-7)
    torch.testing.assert_close(leaf.grad, ref_grad, rtol=1e-5, atol=1e-7)
    assert leaf.grad.abs().sum() > 0
    assert out.metrics["clip_frac"].item() == pytest.approx(ref_metrics["clip_ratio/region_mean"][0])
    assert out.metrics["clip_low_frac"].item() == pytest.approx(ref_metrics["clip_ratio/low_mean"][0])
    assert out.metrics["clip_high_frac"].item() == pytest.approx(ref_metrics["clip_ratio/high_mean"][0])


def ours_through_trainer(compute_loss_bare, name, mode, logp, old, adv, mask, is_ratio=None, **params):
    """Loss and gradient from our ``MethodGRPOTrainer._compute_loss`` itself (bare object, as ``trl_loss``)."""
    from pspo_repro.methods import validate_params
    from pspo_repro.training.trainer import MethodGRPOTrainer

    loss, grad, metrics, _ = compute_loss_bare(
        MethodGRPOTrainer,
        logp,
        old,
        adv,
        mask,
        is_ratio=is_ratio,
        num_items=mask.sum() * 3,
        method_name=name,
        _method=get_method(name),
        _method_params=validate_params(name, params),
        loss_agg=mode,
        _topk=None,
        _method_takes_is="importance_sampling_ratio" in method_optional_inputs(name),
        current_gradient_accumulation_steps=GA,
        max_completion_length=MAX_LEN,
        args=SimpleNamespace(
            steps_per_generation=STEPS_PER_GEN, gradient_accumulation_steps=GA, use_bias_correction_kl=False
        ),
    )
    return loss, grad, metrics


@pytest.mark.parametrize(
    ("name", "params", "mode", "loss_type", "trl_kwargs"),
    [
        ("vespo", {}, "dapo", "vespo", {}),
        ("clip", {"eps_high": 0.28}, "dapo", "dapo", {"eps_high": 0.28}),
        (
            "luspo",
            {"eps_low": 3e-2, "eps_high": 4e-2},
            "luspo",
            "luspo",
            {"eps_low": 3e-2, "eps_high": 4e-2, "level": "sequence"},
        ),
        ("luspo", LUSPO_DELTA_TRAINER, "luspo", "luspo", {**LUSPO_DELTA_TRAINER, "level": "sequence"}),
    ],
)
@pytest.mark.parametrize("vllm", [False, True])
def test_our_trainer_loss_equals_trls(compute_loss_bare, name, params, mode, loss_type, trl_kwargs, vllm):
    # the whole _compute_loss of our trainer, including the vLLM importance-sampling branch (GPU-only in real
    # runs: rehearsed here with a given ratio), against TRL's own on the same tensors
    logp, old, adv, mask = batch(2, spread=0.1)
    is_ratio = None
    if vllm:
        g = torch.Generator().manual_seed(7)
        is_ratio = torch.exp(0.1 * torch.randn(mask.shape, generator=g)) * mask + (1 - mask)
    ref_loss, ref_grad, _, _ = trl_loss(
        compute_loss_bare, loss_type, logp, old, adv, mask, is_ratio=is_ratio, **trl_kwargs
    )
    loss, grad, metrics = ours_through_trainer(
        compute_loss_bare, name, mode, logp, old, adv, mask, is_ratio=is_ratio, **params
    )
    torch.testing.assert_close(loss, ref_loss, rtol=1e-5, atol=1e-7)
    torch.testing.assert_close(grad, ref_grad, rtol=1e-5, atol=1e-7)
    assert any(k.startswith("method/") for k in metrics)
