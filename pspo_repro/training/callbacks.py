"""Trainer callbacks: the token budget, metrics.jsonl, and a fault-injection stop for the resume test."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from transformers import TrainerCallback


class TokenBudgetCallback(TrainerCallback):
    """Stop once ``state.num_input_tokens_seen`` (prompt + completion tokens, counted by GRPOTrainer at each
    generation) reaches ``budget``; the last step is validated and saved like a max_steps ending."""

    def __init__(self, budget: int, evaluate: bool):
        self.budget = int(budget)
        self.evaluate = evaluate
        self.reached = False

    def on_step_end(self, args, state, control, **kwargs):
        """Stop (validating and saving) once the token count reaches the budget."""
        if state.num_input_tokens_seen >= self.budget and not control.should_training_stop:
            self.reached = True
            control.should_training_stop = True
            control.should_save = True
            control.should_evaluate = self.evaluate
        return control


class StopAfterStepCallback(TrainerCallback):
    """Save and stop after global step ``step``, leaving the run 'running' (a kill, for the resume test)."""

    def __init__(self, step: int):
        self.step = int(step)
        self.fired = False

    def on_step_end(self, args, state, control, **kwargs):
        """Save and stop at the configured step."""
        if state.global_step >= self.step:
            self.fired = True
            control.should_training_stop = True
            control.should_save = True
        return control


def _rename(key: str) -> str:
    """TRL/HF log keys -> metrics.jsonl names: eval_x -> eval/x, method/x kept, others train/x."""
    if key.startswith("eval_"):
        return "eval/" + key[len("eval_") :]
    if key.startswith("method/"):
        return key
    if key.startswith("eval/method/"):
        return key
    return "train/" + key


class MetricsJsonlCallback(TrainerCallback):
    """One JSON object per logged step in ``metrics.jsonl``: step, num_tokens, train/..., method/..., eval/...

    Training and validation logs of the same step are merged into one line; a line is written when the
    next step's log arrives, before a checkpoint is saved, and at the end of training.
    """

    def __init__(self, path: Path):
        self.path = Path(path)
        self.pending: dict[str, Any] | None = None

    def _flush(self) -> None:
        if self.pending is None:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path, "a", encoding="utf-8") as fh:
            fh.write(json.dumps(self.pending, sort_keys=True) + "\n")
        self.pending = None

    def on_log(self, args, state, control, logs=None, **kwargs):
        """Merge a log into the pending line of its step (a new step writes the previous line)."""
        if not state.is_world_process_zero or not logs or "train_runtime" in logs:
            return  # the end-of-training summary (runtime, mean loss) is in trainer_state.json already
        if self.pending is not None and self.pending["step"] != state.global_step:
            self._flush()
        if self.pending is None:
            self.pending = {"step": state.global_step}
        self.pending["num_tokens"] = int(state.num_input_tokens_seen)
        for key, value in logs.items():
            if key == "num_tokens":
                continue
            if isinstance(value, float) and not math.isfinite(value):
                value = None
            if key.startswith("eval_method/"):
                key = "eval/method/" + key[len("eval_method/") :]
            self.pending[_rename(key)] = value

    def on_save(self, args, state, control, **kwargs):
        """Write the pending line before a checkpoint is saved."""
        if state.is_world_process_zero:
            self._flush()

    def on_train_end(self, args, state, control, **kwargs):
        """Write the last pending line."""
        if state.is_world_process_zero:
            self._flush()


class CheckpointMarkerCallback(TrainerCallback):
    """Mark a checkpoint complete once the Trainer has written all of it (``run_dir.COMPLETE_MARKER``).

    Listed after ``MetricsJsonlCallback``, so a marked checkpoint's step is also in metrics.jsonl: a kill
    anywhere in between leaves an unmarked folder, and the run resumes from the previous one.
    """

    def on_save(self, args, state, control, **kwargs):
        """Mark the checkpoint just saved as complete."""
        if state.is_world_process_zero:
            from pspo_repro.common.run_dir import write_checkpoint_marker

            ckpt = Path(args.output_dir) / f"checkpoint-{state.global_step}"
            if ckpt.is_dir():
                write_checkpoint_marker(ckpt, state.global_step)


class NonFiniteError(RuntimeError):
    """A non-finite loss or gradient; the message names the step and the last good checkpoint."""


class NonFiniteCallback(TrainerCallback):
    """Check the (clipped) gradients before each optimizer step: a NaN/inf loss makes them non-finite too.

    Default: raise ``NonFiniteError`` (the update is never applied, so the last checkpoint is good).
    ``skip=True`` (``trainer.skip_nonfinite``): drop the gradients so the optimizer skips the batch, and
    count it (logged as ``nonfinite_skipped``; run.json records the total and the steps).
    One device sync per optimizer step.
    """

    def __init__(self, folder: Path, skip: bool):
        self.folder = Path(folder)
        self.skip = skip
        self.skipped_steps: list[int] = []

    def on_pre_optimizer_step(self, args, state, control, model=None, **kwargs):
        """Raise, or drop the gradients and count the step, when a gradient is non-finite."""
        import torch

        grads = [p.grad for p in model.parameters() if p.grad is not None]
        if not grads or all(torch.isfinite(torch.stack(torch._foreach_norm(grads))).tolist()):
            return control
        step = state.global_step + 1  # the step whose update this would be
        if not self.skip:
            from pspo_repro.common.run_dir import last_checkpoint

            good = last_checkpoint(self.folder)
            raise NonFiniteError(
                f"non-finite loss or gradient at step {step}; last good checkpoint: "
                f"{good or 'none (no checkpoint saved yet)'}; rerun to resume from it, or set "
                "trainer.skip_nonfinite=true to skip such batches"
            )
        self.skipped_steps.append(step)
        for p in model.parameters():
            p.grad = None  # torch optimizers leave parameters without a gradient untouched
        return control

    def on_log(self, args, state, control, logs=None, **kwargs):
        """Add ``nonfinite_skipped`` (the running count) to each training log."""
        if self.skip and logs is not None and "train_runtime" not in logs:
            logs["nonfinite_skipped"] = len(self.skipped_steps)


class UpdateNormCallback(TrainerCallback):
    """Log ``update_norm``: the L2 norm of the parameter change made by each optimizer step.

    Under Adam the update is invariant to a constant scale of the gradient, so two methods whose gradients
    differ by a constant factor (GR-PSPO and GRPO-noclip) take the same steps; the logged update norm (beside
    TRL's pre-clip ``grad_norm``) shows where they do not. It costs one copy of the trainable parameters per
    step (``trainer.log_update_norm``; off in the paper-scale configs, where that copy is gigabytes).

    Beside it ``param_sum``, a per-step checksum of the parameters (their float64 sum after the step): two runs
    from one start log the same sum up to the step where their parameters part (issue 55: where GR-PSPO and
    GRPO-noclip part under bf16 autocast).
    """

    def __init__(self, norm: bool = True, checksum: bool = False) -> None:
        self.before: list[Any] | None = None
        self.last: float | None = None
        self.checksum: float | None = None
        self.log_norm, self.log_checksum = norm, checksum

    def _params(self, model) -> list[Any]:
        return [p for p in model.parameters() if p.requires_grad]

    def on_pre_optimizer_step(self, args, state, control, model=None, **kwargs):
        """Keep a copy of the trainable parameters (after gradient clipping, before the update)."""
        import torch

        with torch.no_grad():
            self.before = [p.detach().clone() for p in self._params(model)]
        return control

    def on_optimizer_step(self, args, state, control, model=None, **kwargs):
        """The norm of (parameters now - the copy), accumulated in float32."""
        import torch

        if self.before is None:
            return control
        with torch.no_grad():
            total = torch.zeros((), dtype=torch.float32)
            checksum = torch.zeros((), dtype=torch.float64)
            for p, b in zip(self._params(model), self.before, strict=True):
                total += (p.detach().float() - b.float()).pow(2).sum().cpu()
                checksum += p.detach().double().sum().cpu()
        self.last, self.checksum, self.before = float(total.sqrt()), float(checksum), None
        return control

    def on_log(self, args, state, control, logs=None, **kwargs):
        """Add the last step's ``update_norm`` (and ``param_sum``) to each training log (metrics.jsonl:
        ``train/update_norm``, ``train/param_sum``)."""
        if logs is not None and "train_runtime" not in logs and self.last is not None and "loss" in logs:
            if self.log_norm:
                logs["update_norm"] = self.last
            if self.log_checksum:
                logs["param_sum"] = self.checksum
