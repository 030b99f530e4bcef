"""LUSPO (arXiv 2602.05261, "Length-Unbiased Sequence Policy Optimization"): GSPO's loss, length-scaled.

TRL 1.16 (``loss_type="luspo"`` with ``importance_sampling_level="sequence"``) computes GSPO's per-token loss
and aggregates it as ``(per_token_loss * mask).sum(-1).mean()``: each sequence's loss is multiplied by its
length, which removes GSPO's bias towards short (A > 0) / long (A < 0) responses. The method is that per-token
loss; the length scaling is the ``luspo`` aggregation mode, the default of ``conf/method/luspo.yaml``.
"""

from __future__ import annotations

import torch

from pspo_repro.methods.base import MethodOutput
from pspo_repro.methods.gspo import sequence_clip
from pspo_repro.methods.registry import register_method


@register_method("luspo")
def luspo(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    eps_low: float = 3e-4,
    eps_high: float = 4e-4,
    delta: float | None = None,
) -> MethodOutput:
    """``-min(s A, clip(s, 1 - eps_low, 1 + eps_high) A)`` per token, ``s = exp(masked mean of log r)``.

    With ``loss_agg=luspo`` the scalar is ``mean_b(|y_b| * loss_b)``, TRL's LUSPO; with any other mode this
    is GSPO's loss under that mode. ``delta`` caps ``s`` in the unclipped branch, as TRL 1.16 applies its
    ``GRPOConfig.delta`` to ``loss_type="luspo"`` (null: off, TRL's default).
    """
    return sequence_clip(logp, old_logp, advantages, mask, eps_low, eps_high, delta)
