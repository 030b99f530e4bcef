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
        if state.is_world_process_zero:
            self._flush()

    def on_train_end(self, args, state, control, **kwargs):
        if state.is_world_process_zero:
            self._flush()
