"""The rollout correction in the trainer: stored at rollout, applied in the loss, refused where it cannot work.

On CPU the sampler is the trainer's own model, so its log-probs equal the trainer's; these tests make the
sampler's log-probs differ (a made-up mismatch on tensors, or in the slow test a perturbed copy of the policy
through ``MethodGRPOTrainer.sampler_logps_hook``).
"""

from __future__ import annotations

import copy
import json
from collections import defaultdict
from types import SimpleNamespace

import pytest
import torch
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from trl.trainer.utils import add_fused_lm_head

from pspo_repro.common.cli import UsageError
from pspo_repro.common.paths import CONF_DIR
from pspo_repro.methods import aggregate, get_method, method_optional_inputs, validate_params
from pspo_repro.methods import rollout_correction as rc
from pspo_repro.training import grpo as train
from pspo_repro.training.trainer import MethodGRPOTrainer


class _PadAccelerator:
    """One process: gathers, reductions and padding across processes are the identity."""

    num_processes = 1

    def gather(self, x):
        return x

    def reduce(self, x, reduction="sum"):
        return x

    def pad_across_processes(self, x, dim=0):
        return x


def _batch(seed=0, B=6, T=8, spread=0.5):
    g = torch.Generator().manual_seed(seed)
    old = -torch.rand(B, T, generator=g) * 2
    sampler = old + spread * torch.randn(B, T, generator=g)
    logp = old + 0.1 * torch.randn(B, T, generator=g)
    lengths = torch.randint(2, T + 1, (B,), generator=g)
    mask = (torch.arange(T) < lengths.unsqueeze(1)).long()
    adv = torch.randn(B, generator=g)
    return logp, old, sampler, adv, mask


def _bare(name: str, correction: rc.RolloutCorrection) -> MethodGRPOTrainer:
    trainer = MethodGRPOTrainer.__new__(MethodGRPOTrainer)
    trainer.rollout_correction = correction
    trainer.model = SimpleNamespace(training=True)
    trainer.accelerator = _PadAccelerator()
    trainer._metrics = {"train": defaultdict(list), "eval": defaultdict(list)}
    trainer.method_name = name
    return trainer


@pytest.mark.parametrize(
    ("name", "modes", "thresholds"),
    [
        ("clip", ["token_tis", "seq_max_k2"], [1.5, 0.3]),
        ("vespo", ["token_icepop"], ["0.7_1.4"]),
        ("pspo", ["seq_mis", "token_k1"], ["0.5_2", "0.5_2"]),
    ],
)
def test_rollout_stores_the_correction_and_the_loss_applies_it(compute_loss_bare, name, modes, thresholds):
    logp, old, sampler, adv, mask = _batch()
    spec = rc.parse_rollout_correction(modes, thresholds)
    trainer = _bare(name, spec)
    batch = {"old_per_token_logps": old, "sampling_per_token_logps": sampler, "completion_mask": mask}
    trainer._rollout_correct(batch)

    # what the rollout stored: the module's correction of trainer-vs-sampler log-probs
    lr = rc.rollout_log_ratio(old, sampler, mask)
    want = rc.apply_correction(spec, lr, mask)
    assert ("rollout_is_weights" in batch) == (want.weights is not None)
    assert ("rollout_keep" in batch) == (want.keep is not None)
    metrics = trainer._metrics["train"]
    assert metrics["rollout_corr/k3"] == [pytest.approx(rc.mismatch_metrics(lr, mask)["k3"].item())]
    assert metrics["rollout_corr/k3"][0] > 0
    assert metrics["rollout_corr/masked_frac"] == [pytest.approx(want.metrics["masked_frac"].item())]
    assert 0 < metrics["rollout_corr/masked_frac"][0] < 1  # the case cuts some tokens, not all

    # the loss: rejected tokens leave the mask, the method's per-token loss times the weight
    # (vespo folds the weight into its own sequence weight instead)
    num_items = mask.sum()
    extra = {k: batch[k] for k in ("rollout_is_weights", "rollout_keep") if k in batch}
    loss, grad, _, _ = compute_loss_bare(
        MethodGRPOTrainer, logp, old, adv, mask, num_items=num_items,
        method_name=name, _method=get_method(name), _method_params=validate_params(name, {}),
        loss_agg="dapo", _topk=None, current_gradient_accumulation_steps=1, max_completion_length=8,
        _method_takes_is="importance_sampling_ratio" in method_optional_inputs(name),
        args=SimpleNamespace(steps_per_generation=1, gradient_accumulation_steps=1, use_bias_correction_kl=False),
        inputs_extra=extra,
    )  # fmt: skip
    leaf = logp.detach().clone().requires_grad_(True)
    keep = mask * batch.get("rollout_keep", torch.ones_like(mask))
    w = batch.get("rollout_is_weights")
    if w is not None and "importance_sampling_ratio" in method_optional_inputs(name):
        per_token = get_method(name)(leaf, old, adv, keep, importance_sampling_ratio=w).per_token_loss
    else:
        per_token = get_method(name)(leaf, old, adv, keep).per_token_loss * (1.0 if w is None else w)
    ref = aggregate(per_token, keep, "dapo", num_items=num_items)
    ref.backward()
    torch.testing.assert_close(loss, ref.detach())
    torch.testing.assert_close(grad, leaf.grad)
    without = get_method(name)(logp, old, adv, mask).per_token_loss
    assert not torch.allclose(
        aggregate(without, mask, "dapo", num_items=num_items), loss
    )  # it changed the loss


def test_equal_log_probs_log_zero_mismatch_and_store_nothing_without_a_correction():
    logp, old, _, _, mask = _batch()
    trainer = _bare("clip", rc.NONE)
    batch = {"old_per_token_logps": old, "sampling_per_token_logps": old.clone(), "completion_mask": mask}
    trainer._rollout_correct(batch)
    assert set(batch) == {"old_per_token_logps", "sampling_per_token_logps", "completion_mask"}
    m = trainer._metrics["train"]
    assert (
        m["rollout_corr/k1"] == [0.0]
        and m["rollout_corr/k3"] == [0.0]
        and m["rollout_corr/ratio_q99"] == [1.0]
    )


def test_no_sampler_log_probs_logs_nothing_or_fails_loudly_with_a_correction():
    _, old, _, _, mask = _batch()
    trainer = _bare("clip", rc.NONE)
    batch = {"old_per_token_logps": old, "completion_mask": mask}
    trainer._rollout_correct(batch)
    assert not trainer._metrics["train"]
    trainer = _bare("clip", rc.parse_rollout_correction("token_tis"))
    with pytest.raises(RuntimeError, match="sampler returned no log-probs"):
        trainer._rollout_correct(batch)


# ------------------------------------------------------------------ validation (no model)


def _compose(overrides):
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        return compose("train", overrides=["model=tiny", "logger=none", *overrides])


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["method.rollout_correction=token_tis"], "needs the sampler's log-probs, which only vLLM"),
        (["trainer.use_vllm=true"], "TRL's default correction"),  # the default top_p 0.9
        (
            ["trainer.use_vllm=true", "method.rollout_correction=seq_veto"],
            "trainer.top_p=0.9: vLLM's log-probs",
        ),
        (["trainer.use_vllm=true", "trainer.top_p=1.0", "method=vespo"], "seq_mis is sequence-level"),
        (["method.rollout_correction=token_k3"], "no source gives a default"),
    ],
)
def test_refused_in_one_line(overrides, message):
    with pytest.raises(UsageError, match=message) as info:
        train.validate(_compose(overrides))
    assert "\n" not in str(info.value)


def test_what_validation_settles():
    method = train.validate(_compose([]))
    assert method.rollout_correction == rc.NONE
    cfg = _compose(["trainer.use_vllm=true", "trainer.top_p=1.0"])
    assert train.validate(cfg).rollout_correction.steps == (rc.Step("seq_mis", None, 3.0),)  # TRL's default
    cfg = _compose(
        ["trainer.use_vllm=true", "trainer.top_p=1.0", "trainer.vllm_importance_sampling_correction=false"]
    )
    assert train.validate(cfg).rollout_correction == rc.NONE
    cfg = _compose(
        ["trainer.use_vllm=true", "trainer.top_p=1.0", "method.rollout_correction=[token_tis,seq_veto]"]
    )
    assert train.validate(cfg).rollout_correction.steps == (
        rc.Step("token_tis", None, 2.0),
        rc.Step("seq_veto", None, 1e-4),
    )
    assert (
        train._grpo_config(
            cfg, CONF_DIR, train.validate(cfg), use_cuda=False
        ).vllm_importance_sampling_correction
        is False
    )


# ------------------------------------------------------------------ a tiny training run (slow)


def _perturbed_copy_hook(scale: float):
    """Sampler log-probs from a copy of the policy with Gaussian noise on its weights (made once)."""
    state: dict = {}

    def hook(trainer, batch):
        if "model" not in state:
            g = torch.Generator().manual_seed(0)
            state["model"] = copy.deepcopy(trainer.model).eval()
            # TRL's fused head patches model.forward with a closure over the *original* model's forward, which
            # a deepcopy keeps: re-patch the copy so both heads (fused and plain) run the perturbed weights.
            del state["model"].forward
            add_fused_lm_head(
                state["model"], temperature=trainer.temperature, outputs=("log_probs", "entropy")
            )
            with torch.no_grad():
                for p in state["model"].parameters():
                    p.add_(scale * torch.randn(p.shape, generator=g, dtype=p.dtype))
        input_ids = torch.cat([batch["prompt_ids"], batch["completion_ids"]], dim=1)
        attention_mask = torch.cat([batch["prompt_mask"], batch["completion_mask"]], dim=1)
        with torch.no_grad():
            logps, _, _ = trainer._get_per_token_logps_and_entropies(
                state["model"], input_ids, attention_mask, batch["completion_ids"].size(1)
            )
        return logps

    return hook


FAST = [
    "model=tiny",
    "logger=none",
    "reward=smoke_length",
    "trainer.max_steps=3",
    "trainer.max_completion_length=12",
    "trainer.eval_steps=null",
    "trainer.save_steps=2",
    "trainer.disable_tqdm=true",
    "method=clip",
]


@pytest.mark.slow
def test_tiny_run_with_a_perturbed_sampler_logs_and_applies_the_correction(results_root, monkeypatch):
    monkeypatch.setattr(MethodGRPOTrainer, "sampler_logps_hook", staticmethod(_perturbed_copy_hook(0.01)))
    rows = {}
    for correction in ("none", "[token_icepop,seq_max_k3]"):
        ov = [*FAST, f"method.rollout_correction={correction}"]
        if correction != "none":
            ov.append("method.rollout_correction_threshold=[0.8_1.25,0.1]")
        folder = train.run(_compose(ov), ov)
        run = json.loads((folder / "run.json").read_text())
        assert run["status"] == "finished" and run["final_step"] == 3
        rows[correction] = [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines()]
    plain, corrected = rows["none"], rows["[token_icepop,seq_max_k3]"]
    # the mismatch is measured in both runs (both log-probs exist) on every fresh rollout (num_iterations 2: steps 1 and 3); the correction only
    # in one, where it cuts some tokens but not all
    for rs in (plain, corrected):
        logged = [r for r in rs if "train/rollout_corr/k3" in r]
        assert [r["step"] for r in logged] == [1, 3]
        assert all(r["train/rollout_corr/k3"] > 0 and r["train/rollout_corr/ratio_q01"] < 1 < r["train/rollout_corr/ratio_q99"]
                   for r in logged)  # fmt: skip
    assert not any("train/rollout_corr/masked_frac" in r for r in plain)
    assert all(0 < r["train/rollout_corr/masked_frac"] < 1 for r in corrected if "train/rollout_corr/k3" in r)
    # same seed, same samples at step 1: the correction alone changes the first update
    assert plain[0]["train/rollout_corr/k3"] == pytest.approx(corrected[0]["train/rollout_corr/k3"])
    assert plain[0]["train/loss"] != pytest.approx(corrected[0]["train/loss"])
