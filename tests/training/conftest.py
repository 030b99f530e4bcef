"""Set-up shared by the training tests: TRL's ``_compute_loss`` driven on a bare trainer object."""

from __future__ import annotations

from collections import defaultdict
from types import SimpleNamespace

import pytest
import torch


class _Accelerator:
    """One process: gathers and reductions are the identity."""

    num_processes = 1
    sync_gradients = True

    def gather(self, x):
        return x

    gather_for_metrics = gather

    def reduce(self, x, reduction="sum"):
        return x


@pytest.fixture
def compute_loss_bare():
    """``compute_loss_bare(cls, logp, old, adv, mask, *, is_ratio=None, num_items=None, inputs_extra=None,
    **attrs)`` builds
    ``cls`` with ``__new__`` (no ``__init__``), gives it the attributes every ``_compute_loss`` reads (beta 0,
    one process, the prepared log-probs as a leaf tensor in place of the model's) plus ``attrs``, runs
    ``_compute_loss`` and backward, and returns ``(loss, d loss / d logp, logged train metrics, inputs)``.

    ``is_ratio``: a token importance-sampling weight, as TRL's vLLM ratio (turns TRL's ``use_vllm`` and its
    correction on) and as this trainer's rollout-correction weight (``rollout_is_weights``);
    ``num_items``: the ``num_items_in_batch`` input, left out when None; ``inputs_extra``: more inputs (the
    rollout correction's ``rollout_is_weights`` / ``rollout_keep``).
    """

    def run(cls, logp, old, adv, mask, *, is_ratio=None, num_items=None, inputs_extra=None, **attrs):
        trainer = cls.__new__(cls)
        trainer.beta = 0.0
        trainer.top_entropy_quantile = 1.0
        trainer.off_policy_mask_threshold = None
        trainer.use_vllm = trainer.vllm_importance_sampling_correction = is_ratio is not None
        trainer.aux_loss_enabled = False
        trainer.accelerator = _Accelerator()
        trainer.model = SimpleNamespace(training=True)
        trainer._metrics = {"train": defaultdict(list), "eval": defaultdict(list)}
        # TRL's micro-step counter and data reuse: micro-step 0 is the first pass over a fresh rollout
        trainer._step, trainer.num_iterations = 0, 1
        for key, value in attrs.items():
            setattr(trainer, key, value)
        leaf = logp.detach().clone().requires_grad_(True)

        def prepared_logps(model, input_ids, attention_mask, logits_to_keep, **kwargs):
            assert logits_to_keep == leaf.shape[1]
            return leaf, torch.zeros_like(leaf), None

        trainer._get_per_token_logps_and_entropies = prepared_logps
        b, t = logp.shape
        inputs = {
            "prompt_ids": torch.zeros(b, 2, dtype=torch.long),
            "prompt_mask": torch.ones(b, 2, dtype=torch.long),
            "completion_ids": torch.zeros(b, t, dtype=torch.long),
            "completion_mask": mask.long(),
            "advantages": adv,
            "old_per_token_logps": old,
        }
        if num_items is not None:
            inputs["num_items_in_batch"] = num_items
        if is_ratio is not None:  # TRL reads its vLLM ratio; this trainer, the rollout correction's weights
            inputs["importance_sampling_ratio"] = inputs["rollout_is_weights"] = is_ratio
        inputs.update(inputs_extra or {})
        loss = trainer._compute_loss(None, inputs)
        loss.backward()
        return loss.detach(), leaf.grad, trainer._metrics["train"], inputs

    return run
