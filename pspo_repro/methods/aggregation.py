"""Loss aggregation, an axis of its own (TRL ties it to ``loss_type``; here any method meets any mode).

Normalisers follow TRL 1.16's ``GRPOTrainer._compute_loss`` so that a run aggregates exactly as TRL would:

| mode    | value                                                             |
|---------|-------------------------------------------------------------------|
| dapo    | sum(L*m) / num_items (num_items spans the accumulation window)     |
| grpo    | mean_b( sum_t(L*m) / max(sum_t m, 1) ) / accumulation_steps         |
| dr_grpo | sum(L*m) / (B * max_completion_length) / accumulation_steps         |
| bnpo    | sum(L*m) / max(sum m, 1) / accumulation_steps                       |

For ``dapo`` the trainer passes TRL's normaliser
``num_items_in_batch / num_processes * gradient_accumulation_steps / steps_per_generation``;
``accumulation_steps`` is not applied again (it is already inside that normaliser).
"""

from __future__ import annotations

from collections.abc import Callable

import torch


def _dapo(loss, mask, num_items, max_completion_length, accumulation_steps):
    denom = mask.sum().clamp(min=1.0) if num_items is None else num_items
    return (loss * mask).sum() / denom


def _grpo(loss, mask, num_items, max_completion_length, accumulation_steps):
    per_seq = (loss * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)
    return per_seq.mean() / accumulation_steps


def _dr_grpo(loss, mask, num_items, max_completion_length, accumulation_steps):
    if max_completion_length is None:
        raise ValueError("aggregate mode 'dr_grpo' needs max_completion_length (the configured maximum)")
    return (loss * mask).sum() / (loss.size(0) * max_completion_length) / accumulation_steps


def _bnpo(loss, mask, num_items, max_completion_length, accumulation_steps):
    return (loss * mask).sum() / mask.sum().clamp(min=1.0) / accumulation_steps


_MODES: dict[str, Callable[..., torch.Tensor]] = {
    "bnpo": _bnpo,
    "dapo": _dapo,
    "dr_grpo": _dr_grpo,
    "grpo": _grpo,
}
AGGREGATION_MODES: tuple[str, ...] = tuple(sorted(_MODES))


def aggregate(
    per_token_loss: torch.Tensor,
    mask: torch.Tensor,
    mode: str,
    *,
    num_items: torch.Tensor | float | None = None,
    max_completion_length: int | None = None,
    accumulation_steps: float = 1.0,
) -> torch.Tensor:
    """Reduce a [B, T] per-token loss to the scalar to back-propagate, with TRL 1.16's normaliser for ``mode``.

    ``num_items`` (dapo only) defaults to the number of unmasked tokens in ``mask``;
    ``max_completion_length`` is required by ``dr_grpo``; ``accumulation_steps`` divides grpo, dr_grpo and bnpo.
    """
    try:
        fn = _MODES[mode]
    except KeyError:
        raise ValueError(
            f"unknown loss aggregation {mode!r}; valid modes: {', '.join(AGGREGATION_MODES)}"
        ) from None
    mask = mask.to(per_token_loss.dtype)
    return fn(per_token_loss, mask, num_items, max_completion_length, accumulation_steps)
