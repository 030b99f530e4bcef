"""verl's bypass_mode rejection masks (bypass_token_rs, bypass_seq_mean_rs, bypass_seq_max_rs) against verl.

verl is not a dependency: ``verl_bypass_ppo_clip`` restates ``compute_policy_loss_bypass_mode`` with
``loss_type="ppo_clip"`` (verl/trainer/ppo/core_algos.py @1dda039): the rejection mask of
``rollout_corr_helper.compute_rollout_rejection_mask`` between the current log-probs and the rollout (= old)
ones, then ``compute_policy_loss_vanilla`` (dual clip, c = 3) aggregated over the shrunken mask by ``agg_loss``
("token-mean" with verl's ``batch_num_tokens``, the original mask's count). Loss and gradient must match ours.
"""

from __future__ import annotations

import math

import pytest
import torch

from pspo_repro.methods import aggregate, get_method, validate_params
from pspo_repro.methods.rollout_correction import Step, rejection_keep, rollout_log_ratio

NAMES = ("bypass_token_rs", "bypass_seq_mean_rs", "bypass_seq_max_rs")
LEVEL = {"bypass_token_rs": "token", "bypass_seq_mean_rs": "seq_mean", "bypass_seq_max_rs": "seq_max"}

# ---------------------------------------------------------------- verl, recomputed


def verl_rejection_mask(log_ratio, mask, options):
    """rollout_corr_helper.compute_rollout_rejection_mask: ``options`` is [(mode, lower, upper)], chained by AND."""
    lr = log_ratio.clamp(-20.0, 20.0)  # SAFETY_BOUND
    stats = {"k1": -lr, "k2": 0.5 * lr**2, "k3": torch.exp(lr) - 1.0 - lr}
    combined = torch.ones_like(mask)
    for mode, lower, upper in options:
        level, k = mode.rsplit("_", 1)
        stat = stats[k]
        if level == "seq_mean":  # verl_F.masked_mean(values, mask, axis=-1)
            stat = ((stat * mask).sum(-1) / (mask.sum(-1) + 1e-8))[:, None]
        elif level == "seq_max":
            vals = stat.masked_fill(~mask.bool(), float("-inf")).max(-1).values
            stat = torch.where(vals == float("-inf"), torch.zeros_like(vals), vals)[:, None]
        if k == "k1":
            keep = (stat >= math.log(lower)) & (stat <= math.log(upper))
        else:
            keep = stat <= upper
        combined = combined * keep.expand_as(mask).to(mask.dtype)
    return mask * combined


def verl_vanilla(old, logp, adv, clip_low=0.2, clip_high=0.2, clip_c=3.0):
    # core_algos.py compute_policy_loss_vanilla (dual-clip PPO)
    ratio = torch.exp((logp - old).clamp(-20.0, 20.0))
    l1 = -adv * ratio
    l2 = -adv * ratio.clamp(1 - clip_low, 1 + clip_high)
    clip1 = torch.maximum(l1, l2)
    clip2 = torch.min(-adv * clip_c, clip1)
    return torch.where(adv < 0, clip2, clip1)


def verl_bypass_ppo_clip(old, logp, adv, mask, options, **clip):
    """compute_policy_loss_bypass_mode(loss_type="ppo_clip"): mask from (log_prob, rollout_log_prob) under
    no_grad, then vanilla PPO with old_log_prob = rollout_log_prob, token-mean over the original token count."""
    with torch.no_grad():
        effective = verl_rejection_mask(logp.detach() - old, mask, options)
    losses = verl_vanilla(old, logp, adv, **clip)
    return (losses * effective).sum() / mask.sum(), effective  # agg_loss token-mean, batch_num_tokens


# ---------------------------------------------------------------- helpers


def batch(seed, b=10, t=12, spread=0.3):
    """A current policy that moved from the old one by a per-sequence drift plus noise, so each mask keeps some
    tokens or sequences and drops others."""
    g = torch.Generator().manual_seed(seed)
    old = -torch.rand(b, t, generator=g, dtype=torch.float64) * 4 - 0.01
    drift = torch.linspace(-0.5, 0.5, b, dtype=torch.float64)[:, None]
    noise = torch.full((b, 1), spread, dtype=torch.float64)
    drift[0], noise[0] = 0.0, 1e-4  # one sequence barely moved: kept by verl's tight geo preset (0.999_1.001)
    logp = (old + drift + noise * torch.randn(b, t, generator=g, dtype=torch.float64)).clamp(max=-1e-3)
    adv = torch.randn(b, generator=g, dtype=torch.float64)
    mask = (torch.rand(b, t, generator=g) > 0.2).to(torch.float64)
    logp[1, 3] = old[1, 3] - 3.0  # one token spike, k2 = 4.5: past the seq_max_k2 default 2.5
    mask[:, 0] = mask[1, 3] = 1.0
    mask[-1] = 0.0
    return logp, old, adv, mask


def verl_options(name, params):
    """verl's rollout_rs chain (mode, lower, upper) for our parameters (both k1 bounds given, as verl needs)."""
    level, opts = LEVEL[name], []
    if params.get("rs_k1_low") is not None:
        opts.append((f"{level}_k1", params["rs_k1_low"], params["rs_k1_high"]))
    for k in ("k2", "k3"):
        if params.get(f"rs_{k}") is not None:
            opts.append((f"{level}_{k}", None, params[f"rs_{k}"]))
    return opts


CASES = [
    # each level at its defaults, then each estimator alone, then a chain (verl's comma list)
    ("bypass_token_rs", {}),
    ("bypass_token_rs", {"rs_k1_low": None, "rs_k1_high": None, "rs_k2": 0.05}),
    ("bypass_token_rs", {"rs_k1_low": None, "rs_k1_high": None, "rs_k3": 0.05}),
    ("bypass_token_rs", {"rs_k1_low": 0.8, "rs_k1_high": 1.3, "rs_k3": 0.03}),
    ("bypass_seq_mean_rs", {}),
    ("bypass_seq_mean_rs", {"rs_k1_low": 0.85, "rs_k1_high": 1.15}),
    ("bypass_seq_mean_rs", {"rs_k1_low": None, "rs_k1_high": None, "rs_k2": 0.06}),
    (
        "bypass_seq_mean_rs",
        {"rs_k1_low": None, "rs_k1_high": None, "rs_k3": 0.01},
    ),  # verl bypass_ppo_clip_k3_rs
    ("bypass_seq_mean_rs", {"rs_k1_low": 0.8, "rs_k1_high": 1.2, "rs_k3": 0.08}),
    ("bypass_seq_max_rs", {}),
    ("bypass_seq_max_rs", {"rs_k2": 0.3}),
    ("bypass_seq_max_rs", {"rs_k2": None, "rs_k3": 0.3}),
    ("bypass_seq_max_rs", {"rs_k2": 0.4, "rs_k3": 0.3}),
]


# ---------------------------------------------------------------- parity


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize(("name", "given"), CASES)
def test_loss_and_gradient_match_verl_bypass_mode(name, given, seed):
    params = validate_params(name, given)
    logp, old, adv, mask = batch(seed)
    ours = logp.clone().requires_grad_(True)
    out = get_method(name)(ours, old, adv, mask, **params)
    loss = aggregate(out.per_token_loss, mask, "bnpo")  # verl's token-mean = bnpo
    loss.backward()

    theirs = logp.clone().requires_grad_(True)
    clip = {"clip_low": params["eps_low"], "clip_high": params["eps_high"], "clip_c": params["clip_c"]}
    ref, effective = verl_bypass_ppo_clip(old, theirs, adv[:, None].expand_as(logp), mask,
                                          verl_options(name, params), **clip)  # fmt: skip
    ref.backward()

    torch.testing.assert_close(loss, ref, rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(ours.grad, theirs.grad, rtol=1e-10, atol=1e-12)
    # the case is informative: some valid tokens kept (with gradient), some rejected (without)
    kept, valid = effective.bool(), mask.bool()
    assert kept.any() and (valid & ~kept).any(), (name, given)
    assert (ours.grad[kept] != 0).any() and (ours.grad[valid & ~kept] == 0).all()
    frac = 1.0 - effective.sum() / mask.sum()
    torch.testing.assert_close(out.metrics["rs_masked_frac"].double(), frac, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize(("name", "given"), CASES)
def test_mask_is_the_rollout_correction_mask_on_current_vs_old(name, given):
    """The kept tokens are rollout_correction.rejection_keep's for the same modes on log r = logp - old_logp."""
    params = validate_params(name, given)
    logp, old, adv, mask = batch(3)
    out = get_method(name)(logp, old, adv, mask, **params)
    lr = rollout_log_ratio(logp, old, mask)
    keep = mask.bool()
    for mode, lower, upper in verl_options(name, params):
        keep &= rejection_keep(lr, mask, Step(mode, lower, upper))
    assert keep.any() and (mask.bool() & ~keep).any(), (name, given)
    clip = get_method("clip")(logp, old, adv, mask, eps_low=0.2, eps_high=0.2, delta=3.0).per_token_loss
    torch.testing.assert_close(out.per_token_loss, torch.where(keep, clip, 0.0))


def test_one_sided_k1_and_all_off():
    """A null k1 side is unbounded there; every threshold null is verl's bypass_ppo_clip(): clip with delta=3."""
    logp, old, adv, mask = batch(4)
    clip = get_method("clip")(logp, old, adv, mask, eps_low=0.2, eps_high=0.2, delta=3.0).per_token_loss
    off = validate_params("bypass_token_rs", {"rs_k1_low": None, "rs_k1_high": None})
    torch.testing.assert_close(
        get_method("bypass_token_rs")(logp, old, adv, mask, **off).per_token_loss, clip
    )
    off = validate_params("bypass_seq_max_rs", {"rs_k2": None})
    torch.testing.assert_close(
        get_method("bypass_seq_max_rs")(logp, old, adv, mask, **off).per_token_loss, clip
    )

    lr = (logp - old) * mask
    upper_only = validate_params("bypass_token_rs", {"rs_k1_low": None, "rs_k1_high": 1.2})
    out = get_method("bypass_token_rs")(logp, old, adv, mask, **upper_only).per_token_loss
    keep = mask.bool() & (-lr <= math.log(1.2))  # pi_old / pi_theta <= 1.2; any ratio above is fine
    assert (mask.bool() & (-lr < math.log(0.5))).any()  # a token that a lower bound would have dropped
    torch.testing.assert_close(out, torch.where(keep, clip, 0.0))


def test_on_policy_keeps_everything():
    """With logp == old_logp (the first update of each batch) no estimator rejects anything."""
    _, old, adv, mask = batch(5)
    for name in NAMES:
        out = get_method(name)(old.clone(), old, adv, mask, **validate_params(name, {}))
        assert out.metrics["rs_masked_frac"] == 0


@pytest.mark.parametrize(
    ("name", "key", "value"),
    [
        ("bypass_token_rs", "rs_k1_low", 1.5),
        ("bypass_token_rs", "rs_k1_low", 0.0),
        ("bypass_token_rs", "rs_k1_high", 0.9),
        ("bypass_seq_mean_rs", "rs_k2", 0.0),
        ("bypass_seq_max_rs", "rs_k3", -1.0),
        ("bypass_seq_max_rs", "rs_k2", "0.5_2.0"),
        ("bypass_seq_max_rs", "clip_c", 1.0),
    ],
)
def test_bad_thresholds_are_refused_in_one_line(name, key, value):
    with pytest.raises(ValueError, match=rf"method '{name}': parameter {key}=.* is invalid; allowed") as e:
        validate_params(name, {key: value})
    assert "\n" not in str(e.value)


def test_seq_max_has_no_k1():
    with pytest.raises(ValueError, match="unknown parameter.*rs_k1_low"):
        validate_params("bypass_seq_max_rs", {"rs_k1_low": 0.9})
