"""ERC in the trainer: the sampling policy's entropies stored at rollout, and passed to the loss as old_entropies.

The formula against the authors' code is in ``tests/methods/test_authors_parity.py``; the 3-step tiny run of
every method (``tests/training/test_train_slow.py``) trains ERC through the real rollout path.
"""

from __future__ import annotations

from collections import defaultdict
from types import SimpleNamespace

import pytest
import torch
import trl

from pspo_repro.methods import aggregate, get_method, validate_params
from pspo_repro.methods import rollout_correction as rc
from pspo_repro.training.trainer import MethodGRPOTrainer


def _batch(seed=0, B=4, T=5):
    g = torch.Generator().manual_seed(seed)
    old = -torch.rand(B, T, generator=g) * 2
    logp = old + 0.3 * torch.randn(B, T, generator=g)
    adv = torch.randn(B, generator=g)
    mask = torch.ones(B, T, dtype=torch.long)
    mask[0, -2:] = 0
    return logp, old, adv, mask


def _loss(compute_loss_bare, logp, old, adv, mask, extra):
    return compute_loss_bare(
        MethodGRPOTrainer, logp, old, adv, mask, num_items=mask.sum(),
        method_name="erc", _method=get_method("erc"), _method_params=validate_params("erc", {}),
        loss_agg="dapo", _topk=None, current_gradient_accumulation_steps=1, max_completion_length=5,
        _method_takes_is=False, _method_takes_entropy=True, _method_takes_old_entropy=True,
        args=SimpleNamespace(steps_per_generation=1, gradient_accumulation_steps=1, use_bias_correction_kl=False),
        inputs_extra=extra,
    )  # fmt: skip


def _reference(logp, old, adv, mask, entropies, old_entropies):
    leaf = logp.detach().clone().requires_grad_(True)
    per_token = get_method("erc")(leaf, old, adv, mask, entropies=entropies, old_entropies=old_entropies)
    ref = aggregate(per_token.per_token_loss, mask, "dapo", num_items=mask.sum())
    ref.backward()
    return ref.detach(), leaf.grad


def test_the_loss_passes_the_stored_old_entropies(compute_loss_bare):
    # the bare trainer's forward gives entropies 0; stored H_old 0 keeps every token (ratio 1), H_old 1 none
    logp, old, adv, mask = _batch()
    zero = torch.zeros_like(logp)
    kept_loss, kept_grad, metrics, _ = _loss(compute_loss_bare, logp, old, adv, mask, {"old_entropies": zero})
    ref_loss, ref_grad = _reference(logp, old, adv, mask, zero, zero)
    torch.testing.assert_close(kept_loss, ref_loss)
    torch.testing.assert_close(kept_grad, ref_grad)
    assert (kept_grad != 0).any() and metrics["method/entropy_clip_frac"] == [0.0]

    ones = torch.ones_like(logp)
    cut_loss, cut_grad, metrics, _ = _loss(compute_loss_bare, logp, old, adv, mask, {"old_entropies": ones})
    torch.testing.assert_close(cut_loss, kept_loss)  # the value stays
    assert (cut_grad == 0).all() and metrics["method/entropy_clip_frac"] == [1.0]


def test_without_stored_old_log_probs_the_current_entropies_are_the_old_ones(compute_loss_bare):
    logp, _, adv, mask = _batch(1)
    loss, grad, metrics, _ = _loss(compute_loss_bare, logp, None, adv, mask, {})
    zero = torch.zeros_like(logp)
    ref_loss, ref_grad = _reference(logp, logp.detach(), adv, mask, zero, zero)
    torch.testing.assert_close(loss, ref_loss)
    torch.testing.assert_close(grad, ref_grad)
    assert metrics["method/entropy_clip_frac"] == [0.0]


def test_old_log_probs_without_old_entropies_fail_loudly(compute_loss_bare):
    logp, old, adv, mask = _batch(2)
    with pytest.raises(RuntimeError, match="old entropies were not"):
        _loss(compute_loss_bare, logp, old, adv, mask, {})


@pytest.mark.parametrize("stored", [True, False])
def test_rollout_stores_the_sampling_policys_entropies_beside_the_old_log_probs(monkeypatch, stored):
    logp, old, _, mask = _batch(3)
    batch = {
        "prompt_ids": torch.zeros(4, 2, dtype=torch.long),
        "prompt_mask": torch.ones(4, 2, dtype=torch.long),
        "completion_ids": torch.zeros(4, 5, dtype=torch.long),
        "completion_mask": mask,
        "old_per_token_logps": old if stored else None,
    }
    monkeypatch.setattr(trl.GRPOTrainer, "_generate_and_score_completions", lambda self, inputs: dict(batch))
    trainer = MethodGRPOTrainer.__new__(MethodGRPOTrainer)
    trainer.rollout_correction, trainer._topk, trainer._method_takes_old_entropy = rc.NONE, None, True
    trainer.model = SimpleNamespace(training=True)
    trainer.args = SimpleNamespace(per_device_train_batch_size=2)
    trainer._metrics = {"train": defaultdict(list), "eval": defaultdict(list)}
    sampling_entropies = torch.rand(4, 5)
    calls = []

    def forward(model, input_ids, attention_mask, logits_to_keep, **kwargs):
        calls.append((input_ids.shape, logits_to_keep, kwargs["compute_entropy"], kwargs["batch_size"]))
        return logp, sampling_entropies, None

    trainer._get_per_token_logps_and_entropies = forward
    out = trainer._generate_and_score_completions(None)
    if stored:
        assert calls == [((4, 7), 5, True, 2)]
        assert out["old_entropies"] is sampling_entropies
    else:  # on-policy: no old log-probs, no extra forward; the loss uses the current entropies
        assert calls == [] and "old_entropies" not in out
