"""Loss aggregation, an axis of its own (TRL ties it to ``loss_type``; here any method meets any mode).

TRL 1.16's normalisers (``GRPOTrainer._compute_loss``), so that a run aggregates exactly as TRL would:

| mode    | value                                                             |
|---------|-------------------------------------------------------------------|
| dapo    | sum(L*m) / num_items (num_items spans the accumulation window)     |
| grpo    | mean_b( sum_t(L*m) / max(sum_t m, 1) ) / accumulation_steps         |
| dr_grpo | sum(L*m) / (B * max_completion_length) / accumulation_steps         |
| bnpo    | sum(L*m) / max(sum m, 1) / accumulation_steps                       |
| luspo   | mean_b( sum_t(L*m) ) / accumulation_steps   (TRL loss_type="luspo") |

verl's ``agg_loss`` modes (verl/trainer/ppo/core_algos.py @1dda039) that TRL lacks, per micro-batch
(B' = the number of sequences with at least one unmasked token, T = the padded length of the batch):

| mode                    | value                                                                 |
|-------------------------|-----------------------------------------------------------------------|
| token-sum               | sum(L*m) * num_processes                                              |
| seq-mean-token-sum      | sum_b( sum_t(L*m) ) / max(B', 1) / accumulation_steps                  |
| seq-mean-token-sum-norm | the same / T                                                          |
| seq-mean-token-mean     | sum_b( sum_t(L*m) / sum_t m ) / max(B', 1) / accumulation_steps        |

verl's ``token-mean`` is ``bnpo`` (one process) or ``dapo`` (its global token count); ``seq-mean-token-mean``
differs from ``grpo`` only in not counting fully masked sequences, and ``seq-mean-token-sum`` from ``luspo``
likewise. verl divides the sequence modes by the global number of sequences of the mini-batch; here, as TRL's
``grpo``, each micro-batch is normalised by its own count and divided by the accumulation steps (equal when
every micro-batch holds the same number of non-empty sequences). ``token-sum`` is multiplied by the number
of processes, as verl does, because DDP averages gradients over ranks: the update is the global token sum.

For ``dapo`` the trainer passes TRL's normaliser
``num_items_in_batch / num_processes * gradient_accumulation_steps / steps_per_generation``;
``accumulation_steps`` is not applied again (it is already inside that normaliser).
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from pspo_repro.common.names import did_you_mean


def _dapo(loss, mask, num_items, max_completion_length, accumulation_steps, num_processes):
    denom = mask.sum().clamp(min=1.0) if num_items is None else num_items
    return (loss * mask).sum() / denom


def _grpo(loss, mask, num_items, max_completion_length, accumulation_steps, num_processes):
    per_seq = (loss * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)
    return per_seq.mean() / accumulation_steps


def _dr_grpo(loss, mask, num_items, max_completion_length, accumulation_steps, num_processes):
    if max_completion_length is None:
        raise ValueError("aggregate mode 'dr_grpo' needs max_completion_length (the configured maximum)")
    return (loss * mask).sum() / (loss.size(0) * max_completion_length) / accumulation_steps


def _bnpo(loss, mask, num_items, max_completion_length, accumulation_steps, num_processes):
    return (loss * mask).sum() / mask.sum().clamp(min=1.0) / accumulation_steps


def _luspo(loss, mask, num_items, max_completion_length, accumulation_steps, num_processes):
    # LUSPO: each sequence's summed loss (its length scales it), averaged over all B rows as TRL's .mean()
    return (loss * mask).sum(-1).mean() / accumulation_steps


def _token_sum(loss, mask, num_items, max_completion_length, accumulation_steps, num_processes):
    return (loss * mask).sum() * num_processes


def _nonempty(mask):
    return (mask.sum(-1) > 0).sum().clamp(min=1).to(mask.dtype)


def _seq_mean_token_sum(loss, mask, num_items, max_completion_length, accumulation_steps, num_processes):
    return (loss * mask).sum() / _nonempty(mask) / accumulation_steps


def _seq_mean_token_sum_norm(loss, mask, num_items, max_completion_length, accumulation_steps, num_processes):
    # verl's default loss_scale_factor: the padded horizon of this batch (not the configured maximum)
    return _seq_mean_token_sum(loss, mask, None, None, accumulation_steps, 1) / mask.size(-1)


def _seq_mean_token_mean(loss, mask, num_items, max_completion_length, accumulation_steps, num_processes):
    per_seq = (loss * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)  # 0 for an empty row, not counted below
    return per_seq.sum() / _nonempty(mask) / accumulation_steps


_MODES: dict[str, Callable[..., torch.Tensor]] = {
    "bnpo": _bnpo,
    "dapo": _dapo,
    "dr_grpo": _dr_grpo,
    "grpo": _grpo,
    "luspo": _luspo,
    "seq-mean-token-mean": _seq_mean_token_mean,
    "seq-mean-token-sum": _seq_mean_token_sum,
    "seq-mean-token-sum-norm": _seq_mean_token_sum_norm,
    "token-sum": _token_sum,
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
    num_processes: int = 1,
) -> torch.Tensor:
    """Reduce a [B, T] per-token loss to the scalar to back-propagate, with the normaliser of ``mode``.

    ``num_items`` (dapo only) defaults to the number of unmasked tokens in ``mask``;
    ``max_completion_length`` is required by ``dr_grpo``; ``accumulation_steps`` divides every mode but dapo
    and token-sum; ``num_processes`` multiplies token-sum (verl's ``dp_size``).
    """
    try:
        fn = _MODES[mode]
    except KeyError:
        raise ValueError(
            f"unknown loss aggregation {mode!r}; {did_you_mean(mode, AGGREGATION_MODES)}"
            f"valid modes: {', '.join(AGGREGATION_MODES)}"
        ) from None
    mask = mask.to(per_token_loss.dtype)
    return fn(per_token_loss, mask, num_items, max_completion_length, accumulation_steps, num_processes)
