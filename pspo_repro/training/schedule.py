"""The learning-rate schedule of a token-budget run: linear warmup in steps, then linear decay to 0 at the budget.

HF's ``linear`` schedule decays over a step count fixed before training (``max_steps`` or
``num_train_epochs``). A run stopped by a token budget has no such count (completions vary in length),
so with HF's schedule the learning rate is still far from 0 when the budget stops the run (with the paper's
budgets and a 30-epoch horizon: ~29% of its peak for the base models, ~65% for Qwen2-Math). Here the
decay is measured in tokens: after ``warmup_steps`` optimizer steps (HF's linear warmup, unchanged) the
factor falls linearly from 1 at the tokens seen when warmup ended to 0 at ``budget`` tokens, the count
``TokenBudgetCallback`` stops at (``state.num_input_tokens_seen``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch.optim.lr_scheduler import LRScheduler


class TokenLinearLR(LRScheduler):
    """Linear warmup over ``warmup_steps`` optimizer steps, then linear decay to 0 at ``budget`` tokens.

    ``tokens_seen`` returns the run's token count so far (the trainer's ``state.num_input_tokens_seen``). The
    token count at the end of warmup is part of the scheduler's state, so a resumed run keeps its slope.
    """

    def __init__(
        self,
        optimizer: torch.optim.Optimizer,
        warmup_steps: int,
        budget: int,
        tokens_seen: Callable[[], int],
        last_epoch: int = -1,
    ):
        if budget < 1:
            raise ValueError(f"TokenLinearLR needs a token budget >= 1, got {budget}")
        self.warmup_steps = int(warmup_steps)
        self.budget = int(budget)
        self.decay_start_tokens: int | None = None  # tokens seen when warmup ended
        self._tokens_seen = tokens_seen
        super().__init__(optimizer, last_epoch)

    def factor(self, step: int, tokens: int) -> float:
        """The multiplier of the peak learning rate after ``step`` optimizer steps and ``tokens`` tokens."""
        if step < self.warmup_steps:
            return step / max(1, self.warmup_steps)
        if self.decay_start_tokens is None:
            self.decay_start_tokens = int(tokens)
        span = self.budget - self.decay_start_tokens
        if span <= 0:  # the budget was spent during warmup
            return 0.0
        return max(0.0, (self.budget - tokens) / span)

    def get_lr(self) -> list[float]:
        """Each parameter group's peak rate times ``factor`` at the current step and token count."""
        f = self.factor(self.last_epoch, int(self._tokens_seen()))
        return [base * f for base in self.base_lrs]

    def state_dict(self) -> dict[str, Any]:
        """LRScheduler's state without the token-count callback (a closure over the trainer: not saved)."""
        return {k: v for k, v in super().state_dict().items() if k != "_tokens_seen"}
