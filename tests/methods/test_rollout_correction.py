"""Rollout correction (pspo_repro.methods.rollout_correction) against restatements of its sources.

The references below restate, on plain torch, verl 1dda039's ``verl/trainer/ppo/rollout_corr_helper.py``
(``compute_rollout_correction_weights`` and ``compute_rollout_rejection_mask``: the weights and masks, not the
logging), TRL 1.16's vLLM ``sequence_mask`` ratio (``GRPOTrainer._generate_and_score_completions``) and slime
624b824's ``calculate_veto_mask`` (``examples/train_infer_mismatch_helper/mis.py``). The batch has a made-up
mismatch between the trainer's and the sampler's log-probs, wide enough that every bound cuts somewhere.
"""

from __future__ import annotations

import math

import pytest
import torch

from pspo_repro.methods import parse_method_config
from pspo_repro.methods import rollout_correction as rc

SAFETY = 20.0


# ------------------------------------------------------------------ restatements of the sources


def _masked_sum(x, m, axis=None):
    return (x * m).sum() if axis is None else (x * m).sum(axis)


def _masked_mean(x, m, axis=None):
    return _masked_sum(x, m, axis) / (m.sum() if axis is None else m.sum(axis)).clamp(min=1e-8)


def verl_is_weights(log_ratio, mask, level, threshold, batch_normalize=False):
    """verl ``compute_rollout_correction_weights``: the returned weights."""
    if isinstance(threshold, str) and "_" in threshold:
        lower, upper = (float(x) for x in threshold.split("_"))
    else:
        lower, upper = None, float(threshold)
    if level == "token":
        raw = torch.exp(log_ratio.clamp(-SAFETY, SAFETY))
    else:
        raw = torch.exp(_masked_sum(log_ratio, mask, -1).unsqueeze(-1).clamp(-SAFETY, SAFETY)).expand_as(
            log_ratio
        )
    raw = raw * mask
    if lower is None:
        w = raw.clamp(max=upper)
    else:
        w = torch.where((raw >= lower) & (raw <= upper), raw, torch.zeros_like(raw))
    if batch_normalize:
        if level == "token":
            mean = _masked_mean(w, mask)
        else:
            seq_w = _masked_mean(w, mask, -1)
            seq_m = (mask.sum(-1) > 0).float()
            mean = (seq_w * seq_m).sum() / seq_m.sum().clamp_min(1e-8)
        if mean > 1e-8:
            w = w / mean
    return w


def verl_rejection_mask(log_ratio, mask, option, threshold):
    """verl ``compute_rollout_rejection_mask`` for one option: the modified response mask."""
    lr = log_ratio.clamp(-SAFETY, SAFETY)
    k = {"k1": -lr, "k2": 0.5 * lr**2, "k3": torch.exp(lr) - 1.0 - lr}[option[-2:]]
    if option.endswith("k1"):
        spec = str(threshold)
        if "_" in spec:
            lo, hi = (float(x) for x in spec.split("_"))
        else:
            hi = float(spec)
            lo = float(str(1.0 / hi))
        lo_log, hi_log = math.log(lo), math.log(hi)

        def keep(s):
            return (s >= lo_log) & (s <= hi_log)
    else:

        def keep(s):
            return s <= float(threshold)

    if option.startswith("token"):
        kept = keep(k)
    else:
        if option.startswith("seq_sum"):
            s = _masked_sum(k, mask, -1)
        elif option.startswith("seq_mean"):
            s = _masked_mean(k, mask, -1)
        else:
            vals = k.masked_fill(~mask.bool(), float("-inf")).max(-1).values
            s = torch.where(vals == float("-inf"), torch.zeros_like(vals), vals)
        kept = keep(s).unsqueeze(-1).expand_as(mask.bool())
    return mask * kept.float()


def trl_sequence_mask_ratio(trainer_logps, sampler_logps, mask, clip_max=3.0):
    """TRL 1.16 vLLM ``sequence_mask``: exp(sum_t diff), 0 above ``clip_max`` (no lower bound by default)."""
    diff = ((trainer_logps - sampler_logps) * mask).nan_to_num(nan=0.0)
    ratio = torch.exp(diff.sum(-1, keepdim=True))
    return ratio.masked_fill(ratio > clip_max, 0.0)


def slime_veto(log_ratio, mask, threshold):
    """slime ``calculate_veto_mask``, applied to each sequence (slime loops over sequences)."""
    rows = []
    for lr, m in zip(log_ratio, mask, strict=True):
        bad = (lr < math.log(threshold)) & m.bool()
        rows.append((~bad.any()).float().expand_as(lr))
    return torch.stack(rows)


# ------------------------------------------------------------------ the batch


def mismatch_batch(seed=0, spread=0.6, B=16, T=12):
    """Trainer and sampler log-probs of the same tokens with a made-up mismatch, and a ragged mask."""
    g = torch.Generator().manual_seed(seed)
    trainer = -torch.rand(B, T, generator=g) * 3.0
    sampler = trainer + spread * torch.randn(B, T, generator=g)
    lengths = torch.randint(1, T + 1, (B,), generator=g)
    lengths[0] = T
    mask = (torch.arange(T) < lengths.unsqueeze(1)).float()
    return trainer, sampler, mask


def _log_ratio(seed=0, spread=0.6):
    trainer, sampler, mask = mismatch_batch(seed, spread)
    return rc.rollout_log_ratio(trainer, sampler, mask), mask


# (our mode, verl rollout_is level, verl threshold, our threshold)
IS_CASES = [
    ("token_tis", "token", 2.0, None),
    ("token_tis", "token", 1.3, 1.3),
    ("seq_tis", "sequence", 2.0, None),
    ("token_icepop", "token", "0.5_5.0", None),
    ("token_icepop", "token", "0.8_1.25", "0.8_1.25"),
    ("seq_mis", "sequence", "0.5_2.0", "0.5_2.0"),
]


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("normalize", [False, True])
@pytest.mark.parametrize(("mode", "level", "verl_threshold", "ours"), IS_CASES)
def test_is_weights_match_verl(mode, level, verl_threshold, ours, normalize, seed):
    lr, mask = _log_ratio(seed)
    spec = rc.parse_rollout_correction(mode, ours, normalize)
    out = rc.apply_correction(spec, lr, mask)
    ref = verl_is_weights(lr, mask, level, verl_threshold, normalize)
    torch.testing.assert_close(out.weights, ref)
    assert out.keep is None
    # the case exercises the bound: some valid tokens are cut, some are not
    cut = out.metrics["is_truncated_frac"] + out.metrics["is_masked_frac"]
    assert 0 < cut.item() < 1


REJECTION_CASES = [
    ("token_k1", "0.6_1.5"),
    ("token_k1", 1.5),
    ("token_k2", 0.1),
    ("token_k3", 0.1),
    ("seq_sum_k1", None),
    ("seq_sum_k2", 1.0),
    ("seq_sum_k3", 1.0),
    ("seq_mean_k1", "0.8_1.25"),
    ("seq_mean_k2", 0.15),
    ("seq_mean_k3", 0.15),
    ("seq_max_k2", 0.5),
    ("seq_max_k3", 0.5),
]


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize(("mode", "threshold"), REJECTION_CASES)
def test_rejection_masks_match_verl(mode, threshold, seed):
    lr, mask = _log_ratio(seed)
    out = rc.apply_correction(rc.parse_rollout_correction(mode, threshold), lr, mask)
    verl_threshold = rc.DEFAULT_THRESHOLDS[mode] if threshold is None else threshold
    ref = verl_rejection_mask(lr, mask, mode, verl_threshold)
    torch.testing.assert_close((mask * out.keep.float()), ref)
    assert out.weights is None
    frac = out.metrics["rs_masked_frac"].item()
    assert 0 < frac < 1  # the threshold cuts this batch somewhere, not everywhere
    assert frac == pytest.approx(((mask - ref).sum() / mask.sum()).item())


def test_chained_rejections_are_all_required_as_verl():
    # verl's comma-chained rollout_rs: a token is kept only if every option keeps it
    lr, mask = _log_ratio(0)
    spec = rc.parse_rollout_correction(["token_k3", "seq_max_k2"], [0.2, 0.5])
    out = rc.apply_correction(spec, lr, mask)
    ref = verl_rejection_mask(lr, mask, "token_k3", 0.2) * verl_rejection_mask(lr, mask, "seq_max_k2", 0.5)
    torch.testing.assert_close(mask * out.keep.float(), ref)
    assert out.metrics["rs_masked_frac"] >= out.metrics["rs_token_k3_masked_frac"]


def test_is_and_rejection_together_as_verl_decoupled_geo_rs_token_tis():
    # verl preset decoupled_geo_rs_token_tis: token TIS 2.0 and seq_mean_k1; the weights are computed on the
    # original mask and the rejection shrinks the mask
    lr, mask = _log_ratio(1, spread=0.05)
    spec = rc.parse_rollout_correction(["token_tis", "seq_mean_k1"], [None, "0.99_1.01"])
    out = rc.apply_correction(spec, lr, mask)
    torch.testing.assert_close(out.weights, verl_is_weights(lr, mask, "token", 2.0))
    torch.testing.assert_close(
        mask * out.keep.float(), verl_rejection_mask(lr, mask, "seq_mean_k1", "0.99_1.01")
    )
    assert 0 < out.metrics["rs_masked_frac"].item() < 1


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_seq_mis_default_is_trls_vllm_sequence_mask(seed):
    trainer, sampler, mask = mismatch_batch(seed, spread=0.5)
    sampler[3, 0] = float("nan")  # a token vLLM could not score: ratio 1 there, as TRL
    out = rc.apply_correction(
        rc.parse_rollout_correction("seq_mis"), rc.rollout_log_ratio(trainer, sampler, mask), mask
    )
    ref = trl_sequence_mask_ratio(trainer, sampler, mask).expand_as(mask) * mask
    torch.testing.assert_close(out.weights, ref)
    assert 0 < out.metrics["is_seq_masked_frac"].item() < 1


@pytest.mark.parametrize("seed", [0, 1])
def test_seq_veto_is_slimes(seed):
    lr, mask = _log_ratio(seed, spread=2.0)
    out = rc.apply_correction(rc.parse_rollout_correction("seq_veto", 0.05), lr, mask)
    ref = slime_veto(lr, mask, 0.05)
    torch.testing.assert_close(mask * out.keep.float(), mask * ref)
    assert 0 < out.metrics["rs_seq_masked_frac"].item() < 1


def test_batch_normalize_sums_across_processes():
    # two processes' halves, normalised with a summing reduce, equal the whole batch normalised at once
    lr, mask = _log_ratio(0)
    spec = rc.parse_rollout_correction("token_tis", None, True)
    whole = rc.apply_correction(spec, lr, mask).weights
    halves = [(lr[:8], mask[:8]), (lr[8:], mask[8:])]
    totals = sum(
        torch.stack([(rc.importance_weights(x, m, spec.is_step)[0] * m).sum(), m.sum()]) for x, m in halves
    )
    parts = [rc.apply_correction(spec, x, m, reduce_sum=lambda _t: totals).weights for x, m in halves]
    torch.testing.assert_close(torch.cat(parts), whole)


def test_mismatch_metrics_by_hand():
    trainer = torch.tensor([[-1.0, -2.0, -0.5], [-1.0, -1.0, 0.0]])
    sampler = torch.tensor([[-1.2, -1.5, -0.5], [-0.7, -1.0, 0.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 0.0, 0.0]])
    lr = rc.rollout_log_ratio(trainer, sampler, mask)
    torch.testing.assert_close(lr, torch.tensor([[0.2, -0.5, 0.0], [-0.3, 0.0, 0.0]]))
    out = rc.mismatch_metrics(lr, mask)
    x = torch.tensor([0.2, -0.5, 0.0, -0.3])
    assert out["k1"].item() == pytest.approx((-x).mean().item())
    assert out["k3"].item() == pytest.approx((x.exp() - 1 - x).mean().item())
    assert out["ratio_q50"].item() == pytest.approx(torch.quantile(x.exp(), 0.5).item())
    assert out["ratio_min"].item() == pytest.approx(math.exp(-0.5))
    assert out["abs_log_ratio_max"].item() == pytest.approx(0.5)
    empty = rc.mismatch_metrics(lr, torch.zeros_like(mask))
    assert all(v.item() == 0.0 for v in empty.values())


def test_no_mismatch_changes_nothing():
    # equal log-probs: every weight 1, nothing rejected, whatever the mode
    trainer, _, mask = mismatch_batch(0)
    lr = rc.rollout_log_ratio(trainer, trainer, mask)
    for mode in rc.MODES:
        threshold = rc.DEFAULT_THRESHOLDS.get(mode, 2.0)
        out = rc.apply_correction(rc.parse_rollout_correction(mode, threshold), lr, mask)
        if out.weights is not None:
            torch.testing.assert_close(out.weights, mask)
        if out.keep is not None:
            assert torch.equal(out.keep, mask.bool())
        assert out.metrics["masked_frac"].item() == 0.0


@pytest.mark.parametrize(
    ("mode", "threshold", "batch_normalize", "message"),
    [
        ("bogus", None, False, "unknown mode 'bogus'"),
        (["token_tis", "seq_tis"], None, False, "at most one IS mode"),
        (["token_k2", "token_k2"], [1.0, 1.0], False, "names a mode twice"),
        ("token_k2", None, False, "no source gives a default"),
        ("token_tis", "0.5_2", False, "takes one upper bound"),
        ("token_tis", -1.0, False, "0 < lower <= upper"),
        ("token_icepop", "2_0.5", False, "0 < lower <= upper"),
        ("token_k1", 0.5, False, "0 < lower <= upper"),  # verl: a single k1 bound u is [1/u, u]
        ("token_tis", "abc", False, "'abc' is invalid"),
        ("token_tis", True, False, "True is invalid"),
        (["token_tis", "seq_veto"], 2.0, False, "one entry per mode"),
        (["token_tis", "seq_veto"], [2.0], False, "1 entries for 2 modes"),
        ("seq_veto", None, True, "name an IS mode"),
        ("token_tis", None, "yes", "true or false"),
        ("none", 2.0, False, "takes no threshold"),
        (5, None, False, "rollout_correction=5 is invalid; allowed: none, a mode or a list of modes"),
        (2.5, None, False, "rollout_correction=2.5 is invalid"),
        ({"mode": "token_tis"}, None, False, "rollout_correction={'mode': 'token_tis'} is invalid"),
        ([5], None, False, "unknown mode 5"),
    ],
)
def test_bad_settings_are_refused_in_one_line(mode, threshold, batch_normalize, message):
    with pytest.raises(ValueError, match=message) as info:
        rc.parse_rollout_correction(mode, threshold, batch_normalize)
    assert "\n" not in str(info.value)


def test_method_config_carries_the_axis_and_defaults_to_none():
    base = {"name": "clip", "loss_agg": "dapo", "num_iterations": 2}
    assert parse_method_config(base).rollout_correction == rc.NONE
    cfg = parse_method_config({**base, "rollout_correction": ["token_tis", "seq_max_k2"],
                               "rollout_correction_threshold": [None, 0.01]})  # fmt: skip
    assert cfg.rollout_correction.steps == (
        rc.Step("token_tis", None, 2.0),
        rc.Step("seq_max_k2", None, 0.01),
    )
    assert cfg.params == parse_method_config(base).params  # not a hyperparameter of the method


def test_train_yaml_and_run_identity_use_the_registry_defaults():
    from omegaconf import OmegaConf

    from pspo_repro.common.paths import CONF_DIR
    from pspo_repro.common.run_dir import DEFAULT_METHOD_AXES, identity_config
    from pspo_repro.methods import ROLLOUT_KEYS

    train = OmegaConf.to_container(OmegaConf.load(CONF_DIR / "train.yaml"))
    assert train["method"] == ROLLOUT_KEYS == DEFAULT_METHOD_AXES
    # a run recorded before the axis existed has the same identity as one with the axis at its defaults
    old = {"method": {"name": "clip", "eps_low": 0.2}, "trainer": {}}
    assert identity_config({**old, "method": {**old["method"], **ROLLOUT_KEYS}}) == identity_config(old)
    moved = {**old, "method": {**old["method"], **ROLLOUT_KEYS, "rollout_correction": "token_tis"}}
    assert identity_config(moved) != identity_config(old)
