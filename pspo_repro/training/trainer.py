"""GRPOTrainer with a pluggable trust-region method: the only module that touches TRL internals.

Mirrors TRL 1.16.0's ``GRPOTrainer._compute_loss`` (trl/trainer/grpo_trainer.py); ``tests/training/test_train.py``
asserts ``trl.__version__ == "1.16.0"``, so a TRL upgrade fails loudly until this file is re-checked.

TRL inlines its loss formula and aggregation in ``_compute_loss`` (there is no narrower hook), so we
override that method and keep, in TRL's order, everything it does around the formula: current log-probs
and entropies, ``old = logps.detach()`` when no old log-probs were stored, the off-policy sequence mask,
the entropy mask, ``+ beta * KL`` when ``beta != 0``, and the logged metrics.
The formula is ``get_method(name)`` and the reduction ``aggregate(..., loss_agg)``.

Rollout correction (``methods.rollout_correction``) replaces TRL's vLLM importance-sampling correction (TRL's
own is off in ``GRPOConfig``): at rollout, where the sampler's log-probs exist (vLLM's
``sampling_per_token_logps``, or ``sampler_logps_hook`` in tests), the trainer's log-probs of the same tokens
are computed if TRL did not store them (not stored: the loss path stays TRL's), the mismatch is logged
(``rollout_corr/*``) and the correction's weights and kept tokens are stored with the batch. In the loss,
rejected tokens leave the mask (as verl's ``response_mask``) and the per-token loss is multiplied by the
detached IS weight (passed to the method instead when it takes ``importance_sampling_ratio``: VESPO, as TRL
does with vLLM's ratio).
Generation, rewards, advantages, batching, vLLM and accelerate/DeepSpeed stay TRL's.

Top-K DPPO: TRL's generate path does not return scores, so the sampling policy's top-K log-probs are
recomputed at rollout time from a no-grad forward of the policy that just sampled (after TRL computes
its old log-probs), at the sampling temperature; if the sampled token is not among the K ids it replaces
the K-th. The training forward then evaluates the current policy on those ids. With vLLM the same
recomputation is used (vLLM's ``logprobs=K`` is not wired through TRL's generation).

ERC's old entropies follow the same path: where TRL stores old log-probs, a no-grad forward at rollout (the
same ``_get_per_token_logps_and_entropies`` at the sampling temperature) stores the sampling policy's
per-position entropy as ``old_entropies``; where it stores none, the loss uses the current entropies, as it
uses ``old = logps.detach()``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from trl import GRPOTrainer

from pspo_repro.common.names import did_you_mean_after
from pspo_repro.methods import aggregate, get_method, method_extra_inputs, method_optional_inputs
from pspo_repro.methods import rollout_correction as rc
from pspo_repro.training.sampling import TOKEN_DRAWS, cpu_sampling
from pspo_repro.training.trainer_checks import (
    LOGPROB_HEADS,
    OLD_LOGPS,
    check_rollout_correction,
    first_pass_problem,
)
from pspo_repro.training.trainer_metrics import LossMetricsMixin

MIRRORS_TRL = "1.16.0"

# Multimodal keys TRL's forward accepts; passed through unchanged (text-only here, kept for fidelity).
_MM_KEYS = (
    "pixel_values",
    "image_grid_thw",
    "num_images",
    "pixel_attention_mask",
    "spatial_shapes",
    "num_tiles",
    "image_sizes",
    "token_type_ids",
    "mm_token_type_ids",
    "image_position_ids",
)


class MethodGRPOTrainer(LossMetricsMixin, GRPOTrainer):
    """``GRPOTrainer`` whose loss is a registered method (``pspo_repro.methods``) plus a chosen aggregation.

    ``method_params`` must already be validated (``validate_params``); TRL's ``loss_type`` is ignored.
    """

    # The run's largest first-pass |r - 1| (``FIRST_PASS_DEV``) since this process started; None: never measured.
    first_pass_max_abs_ratio_dev: float | None = None
    # Tests only: ``hook(trainer, batch) -> [B, T]`` sampler log-probs for a batch whose generation returned
    # none (transformers' generate on CPU), e.g. from a perturbed copy of the policy; None: vLLM's or nothing.
    sampler_logps_hook: Callable[[Any, dict], torch.Tensor] | None = None
    _method_takes_entropy: bool = False  # set in __init__: the method takes ``entropies`` (ASPO, Archer, ERC)
    _method_takes_old_entropy: bool = False  # set in __init__: the method takes ``old_entropies`` (ERC)
    token_draw: str = (
        "multinomial"  # set in __init__: how transformers' generate draws tokens (training.sampling)
    )
    old_logps: str = "recompute"  # set in __init__: "recompute" (TRL's pass at rollout) or "first_pass"
    _first_pass_stores_old: bool = False  # set in __init__: the loss keeps the first pass's log-probs as old
    _skip_rollout_old_logps: bool = (
        False  # set while TRL's rollout would compute the old log-probs (first_pass)
    )

    def __init__(
        self,
        *args: Any,
        method_name: str,
        method_params: dict,
        loss_agg: str,
        lr_token_budget: int | None = None,
        rollout_correction: rc.RolloutCorrection = rc.NONE,
        logprob_head: str = "fused",
        old_logps: str = "recompute",
        token_draw: str = "multinomial",
        validation_loss: bool = True,
        **kwargs: Any,
    ):
        grpo_args = kwargs.get("args")
        if grpo_args is not None:
            if grpo_args.entropy_coef != 0.0 or grpo_args.use_adaptive_entropy:
                raise ValueError(
                    "the entropy bonus (entropy_coef/use_adaptive_entropy) is not supported here"
                )
            if grpo_args.importance_sampling_level != "token":
                raise ValueError("importance_sampling_level='sequence' is method=gspo here; keep it 'token'")
            if grpo_args.use_vllm and grpo_args.vllm_importance_sampling_correction:
                raise ValueError(
                    "TRL's vLLM importance-sampling correction is replaced by rollout_correction: pass"
                    " vllm_importance_sampling_correction=False in GRPOConfig"
                )
        check_rollout_correction(method_name, rollout_correction)
        if logprob_head not in LOGPROB_HEADS:
            raise ValueError(
                f"logprob_head must be one of {', '.join(LOGPROB_HEADS)}, got {logprob_head!r}"
                f"{did_you_mean_after(logprob_head, LOGPROB_HEADS)}"
            )
        self.logprob_head = logprob_head
        if token_draw not in TOKEN_DRAWS:
            raise ValueError(
                f"token_draw must be one of {', '.join(TOKEN_DRAWS)}, got {token_draw!r}"
                f"{did_you_mean_after(token_draw, TOKEN_DRAWS)}"
            )
        self.token_draw = token_draw
        self.validation_loss = validation_loss
        if old_logps not in OLD_LOGPS:
            raise ValueError(
                f"old_logps must be one of {', '.join(OLD_LOGPS)}, got {old_logps!r}"
                f"{did_you_mean_after(old_logps, OLD_LOGPS)}"
            )
        # Set before super().__init__: nothing there builds the scheduler, but keep the attribute defined early.
        self._lr_token_budget = lr_token_budget
        super().__init__(*args, **kwargs)
        self.method_name = method_name
        self._method = get_method(method_name)
        self._method_params = dict(method_params)
        self.loss_agg = loss_agg
        needs = method_extra_inputs(method_name)
        self._topk = int(self._method_params["topk"]) if "topk_logps" in needs else None
        # VESPO folds the rollout correction's IS weight into its sequence weight instead of multiplying the loss
        self._method_takes_is = "importance_sampling_ratio" in method_optional_inputs(method_name)
        # ASPO / Archer split tokens by the current policy's entropy, which the forward pass computes anyway
        self._method_takes_entropy = "entropies" in method_optional_inputs(method_name)
        # ERC compares it with the sampling policy's, computed at rollout (``_rollout_entropies``)
        self._method_takes_old_entropy = "old_entropies" in method_optional_inputs(method_name)
        self.rollout_correction = rollout_correction
        why = self.first_pass_old_logps_problem()
        if old_logps == "first_pass" and why:
            raise ValueError(f"old_logps=first_pass: {why}; use recompute")
        if old_logps == "auto":
            old_logps = "first_pass" if self.accelerator.device.type == "cpu" and not why else "recompute"
        self.old_logps = old_logps
        spg, ga = self.args.steps_per_generation, self.args.gradient_accumulation_steps
        # TRL stores old log-probs exactly when a batch serves more than one optimizer step (its condition)
        self._first_pass_stores_old = old_logps == "first_pass" and ga % (spg * self.num_iterations) != 0

    def first_pass_old_logps_problem(self) -> str | None:
        """Why this trainer's first pass over a batch cannot supply its old log-probs (``first_pass_problem``)."""
        return first_pass_problem(
            use_vllm=self.use_vllm,
            rollout_correction_active=self.rollout_correction.active,
            method_name=self.method_name,
            beta=self.beta,
            gradient_accumulation_steps=self.args.gradient_accumulation_steps,
            steps_per_generation=self.args.steps_per_generation,
        )

    def create_scheduler(self, num_training_steps: int, optimizer: torch.optim.Optimizer | None = None):
        """HF's scheduler, or with ``lr_token_budget`` the linear decay to 0 at that many tokens
        (``training.schedule.TokenLinearLR``): a budget-limited run's horizon is its budget, not an epoch
        count the budget stops first."""
        if self._lr_token_budget is None:
            return super().create_scheduler(num_training_steps, optimizer)
        if self.lr_scheduler is None:
            from pspo_repro.training.schedule import TokenLinearLR

            self.lr_scheduler = TokenLinearLR(
                optimizer if optimizer is not None else self.optimizer,
                warmup_steps=self.args.get_warmup_steps(num_training_steps),
                budget=self._lr_token_budget,
                tokens_seen=lambda: self.state.num_input_tokens_seen,
            )
            self._created_lr_scheduler = True
        return self.lr_scheduler

    # ------------------------------------------------------------------ completion logits; rollout (top-K DPPO only)

    def _completion_logits(self, model, input_ids, attention_mask, logits_to_keep: int) -> torch.Tensor:
        """[B, T, V] fp32 logits of the completion tokens at the sampling temperature, the projection in the
        autocast dtype (as TRL's fused head): the model is asked for the last ``T + 1`` positions only."""
        with self.accelerator.autocast():
            out = model(input_ids=input_ids, attention_mask=attention_mask, logits_to_keep=logits_to_keep + 1)
        return out.logits[:, :-1, :].float() / self.temperature

    def _full_logps(self, model, input_ids, attention_mask, logits_to_keep: int) -> torch.Tensor:
        """[B, T, V] log-softmax of the completion logits at the sampling temperature (as TRL's fused head)."""
        return self._completion_logits(model, input_ids, attention_mask, logits_to_keep).log_softmax(-1)

    @torch.no_grad()
    def _rollout_topk(self, batch: dict[str, Any]) -> dict[str, torch.Tensor]:
        input_ids = torch.cat([batch["prompt_ids"], batch["completion_ids"]], dim=1)
        attention_mask = torch.cat([batch["prompt_mask"], batch["completion_mask"]], dim=1)
        T = batch["completion_ids"].size(1)
        chunk = (
            self.args.per_device_train_batch_size
            if self.model.training
            else self.args.per_device_eval_batch_size
        )
        ids_out, logps_out, sampled_out = [], [], []
        for s in range(0, input_ids.size(0), chunk):
            logps = self._full_logps(self.model, input_ids[s : s + chunk], attention_mask[s : s + chunk], T)
            sampled = batch["completion_ids"][s : s + chunk]
            ids = logps.topk(self._topk, dim=-1).indices
            in_top = (ids == sampled.unsqueeze(-1)).any(-1)
            ids[..., -1] = torch.where(in_top, ids[..., -1], sampled)
            ids_out.append(ids)
            logps_out.append(logps.gather(-1, ids))
            sampled_out.append(logps.gather(-1, sampled.unsqueeze(-1)).squeeze(-1))
        out = {"topk_ids": torch.cat(ids_out), "topk_old_logps": torch.cat(logps_out)}
        if "old_per_token_logps" in batch:  # mu from the same (full-logits) computation as its top-K
            out["old_per_token_logps"] = torch.cat(sampled_out)
        return out

    @torch.no_grad()
    def _rollout_entropies(self, batch: dict[str, Any]) -> torch.Tensor:
        """The sampling policy's per-position entropy [B, T] at the sampling temperature (ERC's ``H_old``), by
        the same forward TRL uses for its old log-probs, before any optimizer step on this batch."""
        input_ids = torch.cat([batch["prompt_ids"], batch["completion_ids"]], dim=1)
        attention_mask = torch.cat([batch["prompt_mask"], batch["completion_mask"]], dim=1)
        size = (
            self.args.per_device_train_batch_size
            if self.model.training
            else self.args.per_device_eval_batch_size
        )
        _, entropies, _ = self._get_per_token_logps_and_entropies(
            self.model, input_ids, attention_mask, batch["completion_ids"].size(1), batch_size=size,
            compute_entropy=True, **{k: batch.get(k) for k in _MM_KEYS},
        )  # fmt: skip
        return entropies

    def _generate_single_turn(self, *args: Any, **kwargs: Any):
        # transformers' top-p filter and token draw cost more than a tiny model's forward on CPU: the same mask
        # and the same distribution, cheaper (training.sampling, ``token_draw``)
        with cpu_sampling(self.token_draw):
            return super()._generate_single_turn(*args, **kwargs)

    def prediction_step(self, model, inputs, prediction_loss_only, ignore_keys=None):
        """TRL's validation step (generation, rewards: ``eval/reward``, which selects the best checkpoint), with
        ``validation_loss=False`` without its loss pass: one forward over the validation batch for ``eval/loss``
        and the loss's statistics (``eval/entropy``, ``eval/method/*``: with no update, r == 1 there)."""
        if self.validation_loss:
            return super().prediction_step(model, inputs, prediction_loss_only, ignore_keys)
        self._prepare_inputs(inputs)
        return None, None, None

    def _generate_and_score_completions(self, inputs):
        # first_pass: TRL's no-grad pass for the old log-probs is skipped (``_get_per_token_logps_and_entropies``)
        self._skip_rollout_old_logps = self.old_logps == "first_pass"
        try:
            batch = super()._generate_and_score_completions(inputs)
        finally:
            self._skip_rollout_old_logps = False
        # the correction first: top-K then replaces any stored old log-probs by its full-logits ones (its mu)
        self._rollout_correct(batch)
        if self._topk is not None:
            batch.update(self._rollout_topk(batch))
        # ERC's H_old, stored beside the old log-probs; where TRL stores none, the batch is trained by the policy
        # that sampled it and the loss's current entropies are H_old (as its old = logps.detach())
        if self._method_takes_old_entropy and batch.get("old_per_token_logps") is not None:
            batch["old_entropies"] = self._rollout_entropies(batch)
        return batch

    # ------------------------------------------------------------------ rollout correction

    def _sampler_logps(self, batch: dict[str, Any]) -> torch.Tensor | None:
        """The sampling policy's log-probs of the completion tokens: vLLM's, else the test hook's, else None."""
        if batch.get("sampling_per_token_logps") is not None:
            return batch["sampling_per_token_logps"]
        hook = type(self).sampler_logps_hook
        return None if hook is None else hook(self, batch)

    @torch.no_grad()
    def _trainer_logps(self, batch: dict[str, Any]) -> torch.Tensor:
        """The trainer's log-probs of the completion tokens at rollout: TRL's ``old_per_token_logps`` when it
        stored them, else computed here as TRL computes them. Not stored: TRL stores none only when each batch
        serves one optimizer step of the policy that sampled it, where the loss's ``old = logps.detach()`` is
        the same policy, so the loss path stays TRL's."""
        if batch.get("old_per_token_logps") is not None:
            return batch["old_per_token_logps"]
        input_ids = torch.cat([batch["prompt_ids"], batch["completion_ids"]], dim=1)
        attention_mask = torch.cat([batch["prompt_mask"], batch["completion_mask"]], dim=1)
        size = (
            self.args.per_device_train_batch_size
            if self.model.training
            else self.args.per_device_eval_batch_size
        )
        logps, _, _ = self._get_per_token_logps_and_entropies(
            self.model, input_ids, attention_mask, batch["completion_ids"].size(1), batch_size=size,
            **{k: batch.get(k) for k in _MM_KEYS},
        )  # fmt: skip
        return logps

    def _rollout_correct(self, batch: dict[str, Any]) -> None:
        """Log the sampler-vs-trainer mismatch and store the correction's weights and kept tokens
        (``rollout_is_weights``, ``rollout_keep``) with the batch, where the sampler's log-probs exist."""
        sampler = self._sampler_logps(batch)
        if sampler is None:
            if self.rollout_correction.active:  # validation refuses this; a plugin generation path could not
                raise RuntimeError(
                    f"rollout_correction={self.rollout_correction.describe()} but the sampler returned no log-probs"
                )
            return
        mask = batch["completion_mask"]
        if "tool_mask" in batch:
            mask = mask * batch["tool_mask"]
        log_ratio = rc.rollout_log_ratio(self._trainer_logps(batch), sampler, mask)
        mode = "train" if self.model.training else "eval"
        # quantiles need every process's tokens: pad to a common length, gather once per rollout
        padded = self.accelerator.pad_across_processes(torch.stack([log_ratio, mask.float()]), dim=2)
        gathered = self.accelerator.gather(padded.unsqueeze(0))  # [processes, 2, B, T]
        metrics = rc.mismatch_metrics(gathered[:, 0].flatten(0, 1), gathered[:, 1].flatten(0, 1))
        if self.rollout_correction.active:

            def reduce_sum(x: torch.Tensor) -> torch.Tensor:
                return self.accelerator.reduce(x, reduction="sum")

            out = rc.apply_correction(self.rollout_correction, log_ratio, mask, reduce_sum)
            if out.weights is not None:
                batch["rollout_is_weights"] = out.weights
            if out.keep is not None:
                batch["rollout_keep"] = out.keep.to(mask.dtype)
            names = sorted(out.metrics)
            # fractions and means averaged over processes (each process's batch is the same size)
            values = self.accelerator.gather(
                torch.stack([out.metrics[k].float() for k in names]).unsqueeze(0)
            )
            metrics.update(zip(names, values.mean(0), strict=True))
        for key, value in zip(metrics, torch.stack(list(metrics.values())).tolist(), strict=True):
            self._metrics[mode][f"rollout_corr/{key}"].append(value)

    # ------------------------------------------------------------------ log-probs

    def _get_per_token_logps_and_entropies(
        self,
        model,
        input_ids,
        attention_mask,
        logits_to_keep,
        batch_size=None,
        compute_entropy=False,
        compute_aux_loss=False,
        **multimodal,
    ):
        """TRL's per-token log-probs and entropies; with ``logprob_head="plain"`` (text models) the same
        quantities from the model's own logits on the completion positions only, by TRL's
        ``selective_log_softmax``. On devices without Triton TRL's fused head projects every position
        (prompt and padding too) and runs its tiles as ~20 elementwise torch passes: on CPU that is 60-70% of
        a small model's forward + backward (docs/benchmarks.md "The RL step across model sizes"). Entropies
        come without a gradient: here they are metrics and masks only (an entropy bonus is refused above).

        With ``old_logps="first_pass"`` the first call at rollout, TRL's pass for the old log-probs (its only call
        there: no reference model, ``first_pass_old_logps_problem``), returns None: TRL then stores none and the
        loss takes the first pass's own (``_compute_loss``)."""
        if self._skip_rollout_old_logps and model is self.model:
            self._skip_rollout_old_logps = False
            return None, None, None
        if (
            self.logprob_head == "fused"
            or compute_aux_loss
            or any(v is not None for v in multimodal.values())
        ):
            return super()._get_per_token_logps_and_entropies(
                model,
                input_ids,
                attention_mask,
                logits_to_keep,
                batch_size=batch_size,
                compute_entropy=compute_entropy,
                compute_aux_loss=compute_aux_loss,
                **multimodal,
            )
        from trl.trainer.utils import entropy_from_logits, selective_log_softmax

        batch_size = batch_size or input_ids.size(0)
        all_logps, all_entropies = [], []
        for start in range(0, input_ids.size(0), batch_size):
            ids, am = input_ids[start : start + batch_size], attention_mask[start : start + batch_size]
            logits = self._completion_logits(model, ids, am, logits_to_keep)
            padded = am[:, -logits_to_keep:] == 0  # TRL's head returns 0 where the label is padding
            all_logps.append(selective_log_softmax(logits, ids[:, -logits_to_keep:]).masked_fill(padded, 0.0))
            if compute_entropy:
                with torch.no_grad():
                    all_entropies.append(entropy_from_logits(logits).masked_fill(padded, 0.0))
        entropies = torch.cat(all_entropies) if compute_entropy else None
        return torch.cat(all_logps), entropies, None

    # ------------------------------------------------------------------ loss

    def _logps_entropies_topk(self, model, input_ids, attention_mask, logits_to_keep, topk_ids):
        """Current log-probs, entropies and log-probs on the rollout's top-K ids, from one forward pass."""
        completion_ids = input_ids[:, -logits_to_keep:]
        chunk = (
            self.args.per_device_train_batch_size
            if self.model.training
            else self.args.per_device_eval_batch_size
        )
        logps, ents, topk = [], [], []
        for s in range(0, input_ids.size(0), chunk):
            full = self._full_logps(
                model, input_ids[s : s + chunk], attention_mask[s : s + chunk], logits_to_keep
            )
            logps.append(full.gather(-1, completion_ids[s : s + chunk].unsqueeze(-1)).squeeze(-1))
            with torch.no_grad():  # entropy is a metric/mask only; the DPPO mask needs no gradient
                ents.append(-(full.exp() * full).sum(-1))
                topk.append(full.gather(-1, topk_ids[s : s + chunk]))
        return torch.cat(logps), torch.cat(ents), torch.cat(topk)

    def _compute_loss(self, model, inputs):
        # TRL 1.16's _compute_loss, step for step, with the method's loss in place of TRL's loss types; the
        # helpers below hold what differs (the rollout correction's mask, top-K DPPO's log-probs, the stored
        # first-pass old log-probs, the method's optional inputs, the loss_agg axis).
        mask = self._loss_mask(inputs)
        logps, entropies, aux_loss, extra = self._model_logps(model, inputs)

        entropy_mask = None
        if self.top_entropy_quantile < 1.0:
            entropy_mask = self.get_high_entropy_mask(entropies, mask, 1 - self.top_entropy_quantile)

        advantages = inputs["advantages"]
        if advantages.dim() == 1:
            advantages = advantages.unsqueeze(1)
        old_logps = self._old_logps(inputs, logps)

        if self.off_policy_mask_threshold is not None:
            off_policy_mask = self.get_off_policy_mask(
                advantages=advantages,
                per_token_logps=logps,
                sampling_per_token_logps=inputs.get("sampling_per_token_logps", old_logps),
                mask=mask,
                off_policy_threshold=self.off_policy_mask_threshold,
            )

        is_weights = inputs.get("rollout_is_weights")
        extra.update(self._method_inputs(inputs, entropies, is_weights))
        out = self._method(logps, old_logps, advantages, mask, **extra, **self._method_params)
        per_token_loss = out.per_token_loss
        per_token_kl = self._per_token_kl(inputs, logps, old_logps) if self.beta != 0.0 else None

        if self.off_policy_mask_threshold is not None:
            per_token_loss = per_token_loss * off_policy_mask
        if entropy_mask is not None:
            per_token_loss = per_token_loss * entropy_mask
        if is_weights is not None and not self._method_takes_is:
            per_token_loss = per_token_loss * is_weights
        if per_token_kl is not None:
            per_token_loss = per_token_loss + self.beta * per_token_kl

        mode = "train" if self.model.training else "eval"
        num_items, accumulation = self._micro_batch_scale(inputs, mode)
        loss = aggregate(
            per_token_loss,
            mask,
            self.loss_agg,
            num_items=num_items,
            max_completion_length=self.max_completion_length,
            accumulation_steps=accumulation,
            num_processes=self.accelerator.num_processes,
        )
        if aux_loss is not None:
            loss = loss + self.router_aux_loss_coef * aux_loss / accumulation
            self._metrics[mode]["aux_loss"].append(
                self.accelerator.gather_for_metrics(aux_loss).mean().item()
            )

        # Only measured where old log-probs were stored at generation time (without them r == 1 exactly).
        first_pass = (
            mode == "train" and inputs.get("old_per_token_logps") is not None and self._is_first_pass()
        )
        self._log_loss_metrics(
            mode, mask, entropies, per_token_kl, out.metrics, logps - old_logps, first_pass=first_pass
        )
        return loss

    @staticmethod
    def _loss_mask(inputs: dict[str, Any]) -> torch.Tensor:
        """The completion tokens in the loss: TRL's mask (tool tokens out), and the rollout correction's
        rejections out (as verl's mask)."""
        completion_mask = inputs["completion_mask"]
        mask = completion_mask if "tool_mask" not in inputs else completion_mask * inputs["tool_mask"]
        if "rollout_keep" in inputs:
            mask = mask * inputs["rollout_keep"]
        return mask

    def _model_inputs(self, inputs: dict[str, Any]) -> tuple[torch.Tensor, torch.Tensor, int]:
        """The model's inputs as TRL builds them: prompt and completion ids and masks joined, and the number of
        completion positions whose logits are kept."""
        input_ids = torch.cat([inputs["prompt_ids"], inputs["completion_ids"]], dim=1)
        attention_mask = torch.cat([inputs["prompt_mask"], inputs["completion_mask"]], dim=1)
        return input_ids, attention_mask, inputs["completion_ids"].size(1)

    def _model_logps(self, model, inputs: dict[str, Any]):
        """The current policy's per-token log-probs and entropies (TRL's pass, or top-K DPPO's with its top-K
        log-probs), the router's aux loss (None without) and the method's top-K inputs."""
        input_ids, attention_mask, logits_to_keep = self._model_inputs(inputs)
        if self._topk is not None:
            logps, entropies, topk_logps = self._logps_entropies_topk(
                model, input_ids, attention_mask, logits_to_keep, inputs["topk_ids"]
            )
            return (
                logps,
                entropies,
                None,
                {"topk_logps": topk_logps, "topk_old_logps": inputs["topk_old_logps"]},
            )
        logps, entropies, aux_loss = self._get_per_token_logps_and_entropies(
            model,
            input_ids,
            attention_mask,
            logits_to_keep,
            compute_entropy=True,
            compute_aux_loss=self.aux_loss_enabled,
            **{k: inputs.get(k) for k in _MM_KEYS},
        )
        return logps, entropies, aux_loss, {}

    def _old_logps(self, inputs: dict[str, Any], logps: torch.Tensor) -> torch.Tensor:
        """The batch's old log-probs. TRL stores none when the batch is used once on-policy: then old == current
        (r == 1). Under ``old_logps=first_pass`` this pass runs the sampling policy, and its log-probs, detached,
        are stored for the batch's later passes."""
        old_logps = inputs.get("old_per_token_logps")
        if old_logps is None and self._first_pass_stores_old and self.model.training:
            inputs["old_per_token_logps"] = logps.detach()
        return logps.detach() if old_logps is None else old_logps

    def _method_inputs(
        self, inputs: dict[str, Any], entropies: torch.Tensor, is_weights: torch.Tensor | None
    ) -> dict[str, torch.Tensor]:
        """The optional tensors the method takes (``method_optional_inputs``): the rollout correction's
        importance weights, the current entropies, ERC's old entropies."""
        extra = {}
        if self._method_takes_is and is_weights is not None:
            extra["importance_sampling_ratio"] = is_weights
        if self._method_takes_entropy:
            extra["entropies"] = entropies.detach()
        if self._method_takes_old_entropy:
            extra["old_entropies"] = self._old_entropies(inputs, entropies)
        return extra

    def _per_token_kl(
        self, inputs: dict[str, Any], logps: torch.Tensor, old_logps: torch.Tensor
    ) -> torch.Tensor:
        """TRL's K3 estimator of the KL to the reference model, bias-corrected by the ratio when asked."""
        ref = inputs["ref_per_token_logps"]
        per_token_kl = torch.exp(ref - logps) - (ref - logps) - 1
        if self.args.use_bias_correction_kl:
            per_token_kl = per_token_kl * torch.exp(logps - old_logps)
        return per_token_kl

    def _micro_batch_scale(self, inputs: dict[str, Any], mode: str) -> tuple[torch.Tensor | None, float]:
        """The loss normaliser's scale for one micro-batch: the dapo normaliser (TRL's: the generation batch's
        tokens, rescaled to one accumulation window; None for the other aggregations) and the accumulation
        steps the loss is divided over (1 in validation)."""
        accumulation = self.current_gradient_accumulation_steps if mode == "train" else 1.0
        if self.loss_agg != "dapo":
            return None, accumulation
        num_items = inputs["num_items_in_batch"].clamp(min=1.0) / self.accelerator.num_processes
        if mode == "train":
            num_items = num_items * self.current_gradient_accumulation_steps / self.args.steps_per_generation
        return num_items, accumulation

    @staticmethod
    def _old_entropies(inputs: dict[str, Any], entropies: torch.Tensor) -> torch.Tensor:
        """ERC's ``H_old``: stored at rollout with the old log-probs; without stored old log-probs the batch is
        on-policy and the current entropies are the sampling policy's."""
        stored = inputs.get("old_entropies")
        if stored is not None:
            return stored
        if inputs.get("old_per_token_logps") is not None:  # _generate_and_score_completions stores both
            raise RuntimeError("old log-probs were stored at rollout but the old entropies were not")
        return entropies.detach()
