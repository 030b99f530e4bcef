"""Shared pieces of every trust-region method: the output type, the log-ratio clamp, masked metrics.

Numerics contract (every method follows it):
- the log-ratio ``logp - old_logp`` is clamped to ``[-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP]`` *before* ``exp``.
  20 is the bound verl and OpenRLHF use: ``exp(20) ~ 4.9e8`` is far beyond any ratio a trust region keeps,
  yet ``exp(20) * |A|`` stays finite in fp32/bf16, so no branch of a ``min``/``where`` can hold an ``inf``
  (an ``inf`` in the unselected branch still produces ``0 * inf = NaN`` gradients). Beyond the bound the
  clamp's own gradient is zero: methods whose loss goes through the ratio give such tokens zero gradient
  and count them in ``zero_grad_frac``; topr, cispo and the DPPO variants multiply ``logp`` by a detached
  weight, so their gradient survives the clamp (only the weight's value is bounded).
- per-token losses are selected with ``torch.where(mask, loss, 0)``, so padding never leaks values.
- metrics are 0-dim tensors computed under ``no_grad`` (no ``.item()``: no device sync in the hot path);
  every masked statistic of an empty selection is 0.0, never NaN.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

LOG_RATIO_CLAMP = 20.0


class MethodOutput(NamedTuple):
    """What a method returns: the unreduced loss and its diagnostics."""

    per_token_loss: torch.Tensor  # [B, T], zero where mask == 0
    metrics: dict[str, torch.Tensor]  # name -> 0-dim tensor


def token_advantages(advantages: torch.Tensor) -> torch.Tensor:
    """[B] -> [B, 1] so it broadcasts over tokens; [B, T] is returned unchanged."""
    return advantages.unsqueeze(-1) if advantages.dim() == 1 else advantages


def constant(value: float, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """``value`` as a 0-dim tensor of ``dtype`` on ``device``: the Python float rounded once to ``dtype``, as
    ``torch.clamp(x, max=value)`` and ``x > value`` round it for an ``x`` of that dtype (``torch.where`` with
    Python floats would round through float32 instead). ``torch.full`` fills on the device: no copy, no sync.
    """
    return torch.full((), value, dtype=dtype, device=device)


def log_ratio(logp: torch.Tensor, old_logp: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Return ``(clamped log-ratio, raw log-ratio)``; the raw one (detached) only feeds metrics."""
    raw = logp - old_logp
    return raw.clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP), raw.detach()


class Masked:
    """Masked statistics over the unmasked tokens of one batch (built once, reused by all metrics)."""

    def __init__(self, mask: torch.Tensor):
        self.bool = mask.bool()
        self.count = self.bool.sum().to(torch.float32)
        self._denom = self.count.clamp(min=1.0)
        self._nonempty = self.count > 0
        self._mask_f32: torch.Tensor | None = None

    def select(self, loss: torch.Tensor) -> torch.Tensor:
        """The per-token loss with masked positions set to exactly zero (broadcasts [B, 1] to [B, T])."""
        return torch.where(self.bool, loss, 0.0)

    def mean(self, x: torch.Tensor) -> torch.Tensor:
        """Mean of ``x`` over unmasked tokens (0.0 when none)."""
        if x.shape == self.bool.shape and x.dtype == torch.float32:
            # one fused pass, no temporary (metrics must stay cheap next to the loss itself)
            return torch.dot(x.reshape(-1), self._float().reshape(-1)) / self._denom
        return torch.where(self.bool, x, 0.0).sum(dtype=torch.float32) / self._denom

    def _float(self) -> torch.Tensor:
        if self._mask_f32 is None:
            self._mask_f32 = self.bool.to(torch.float32)
        return self._mask_f32

    def frac(self, flag: torch.Tensor) -> torch.Tensor:
        """Fraction of unmasked tokens where ``flag`` holds."""
        return (flag & self.bool).sum(dtype=torch.float32) / self._denom

    def min(self, x: torch.Tensor) -> torch.Tensor:
        """Minimum of ``x`` over unmasked tokens (0.0 when none)."""
        value = torch.where(self.bool, x, float("inf")).amin().float()
        return torch.where(self._nonempty, value, 0.0)

    def max(self, x: torch.Tensor) -> torch.Tensor:
        """Maximum of ``x`` over unmasked tokens (0.0 when none)."""
        value = torch.where(self.bool, x, float("-inf")).amax().float()
        return torch.where(self._nonempty, value, 0.0)

    def stats(self, prefix: str, x: torch.Tensor) -> dict[str, torch.Tensor]:
        """``{prefix}_mean``, ``{prefix}_min``, ``{prefix}_max`` of ``x`` over unmasked tokens."""
        return {f"{prefix}_mean": self.mean(x), f"{prefix}_min": self.min(x), f"{prefix}_max": self.max(x)}


def saturated(clamped: torch.Tensor, raw: torch.Tensor) -> torch.Tensor:
    """Tokens whose log-ratio hit the clamp (its value changed): the clamp's gradient is zero there."""
    return clamped.detach() != raw


def zero_grad_frac(m: Masked, zero: torch.Tensor, adv: torch.Tensor) -> torch.Tensor:
    """Fraction of unmasked tokens whose gradient the method sets to exactly zero.

    Tokens with ``A == 0`` are excluded from the numerator: their gradient is zero under every method,
    so counting them would measure the reward distribution, not the trust region.
    """
    return m.frac(zero & (adv != 0))
