"""Rollout correction: an axis of its own (like ``loss_agg``), stacked on any method.

The sampler (vLLM) and the trainer compute different log-probs for the same tokens (bf16 kernels, batch
layout, a stale engine). With ``log rho_t = log pi_train(y_t) - log pi_sampler(y_t)`` on each completion token,
a correction either weights each token's loss by a detached importance weight (one IS mode) or removes tokens
or whole sequences from the loss mask (any number of rejection modes, all of which must pass), or both.
The vocabulary and the defaults are verl's (``verl/trainer/ppo/rollout_corr_helper.py`` and the presets of
``RolloutCorrectionConfig`` in ``verl/trainer/config/algorithm.py``, verl 1dda039), plus TRL's sequence mask and
slime's veto (``examples/train_infer_mismatch_helper/mis.py``, slime 624b824):

| mode                         | kind | per token / sequence                                          | default threshold      |
|------------------------------|------|---------------------------------------------------------------|------------------------|
| token_tis                    | IS   | w_t = min(rho_t, C)                                           | C = 2.0 (verl)         |
| seq_tis                      | IS   | w = min(prod_t rho_t, C)                                      | C = 2.0 (verl)         |
| token_icepop                 | IS   | w_t = rho_t if lo <= rho_t <= hi else 0                       | 0.5_5.0 (verl IcePop)  |
| seq_mis                      | IS   | w = prod_t rho_t if lo <= it <= hi else 0 (a number: lo = 0)  | 3.0 (TRL sequence_mask)|
| token_k1                     | mask | keep lo <= pi_s / pi_t <= hi                                  | none: give one         |
| token_k2, token_k3           | mask | keep k2_t = (log rho_t)^2 / 2, k3_t = rho_t - 1 - log rho_t <= u | none: give one      |
| seq_{sum,mean}_k1            | mask | keep lo <= exp(sum/mean_t log(pi_s / pi_t)) <= hi             | sum 0.5_2.0, mean 0.999_1.001 (verl) |
| seq_{sum,mean}_k{2,3}        | mask | keep sum/mean_t k_t <= u                                      | seq_mean_k3 0.01 (verl), others none |
| seq_max_k{2,3}               | mask | keep max_t k_t <= u (Trust Region Masking, arXiv 2512.23075)  | none: give one         |
| seq_veto                     | mask | drop the sequence if any rho_t < tau                          | tau = 1e-4 (slime)     |

``batch_normalize`` (verl ``rollout_is_batch_normalize``, slime ``tis_batch_normalize``) divides the IS weights by
their mean over the batch's valid tokens (token modes) or sequences (sequence modes), after truncation/masking.
Log-ratios are clamped to [-20, 20] before ``exp`` (verl's ``SAFETY_BOUND``, this package's ``LOG_RATIO_CLAMP``).
Every function here is pure (tensors in, tensors and 0-dim metric tensors out, no ``.item()``); the trainer
(``training/trainer.py``) supplies the log-probs and applies the result.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple

import torch

from pspo_repro.common.names import did_you_mean
from pspo_repro.methods.base import LOG_RATIO_CLAMP

IS_MODES = ("seq_mis", "seq_tis", "token_icepop", "token_tis")
_K_MODES = tuple(
    f"{level}_k{k}"
    for level in ("token", "seq_sum", "seq_mean", "seq_max")
    for k in (1, 2, 3)
    if (level, k) != ("seq_max", 1)
)
REJECTION_MODES = tuple(sorted((*_K_MODES, "seq_veto")))
MODES = tuple(sorted((*IS_MODES, *REJECTION_MODES)))
SEQUENCE_IS_MODES = ("seq_mis", "seq_tis")

# The source's default threshold of each mode; a mode absent here has none and needs one given.
DEFAULT_THRESHOLDS: dict[str, float | str] = {
    "token_tis": 2.0,  # verl RolloutCorrectionConfig.rollout_is_threshold / decoupled_token_is
    "seq_tis": 2.0,  # verl decoupled_seq_is
    "token_icepop": "0.5_5.0",  # verl decoupled_token_icepop (threshold_lower 0.5, threshold 5.0)
    "seq_mis": 3.0,  # TRL GRPOConfig: vllm_importance_sampling_mode="sequence_mask", clip_max 3.0, clip_min None
    "seq_sum_k1": "0.5_2.0",  # verl decoupled_seq_is_rs rs_threshold
    "seq_mean_k1": "0.999_1.001",  # verl decoupled_geo_rs rs_threshold
    "seq_mean_k3": 0.01,  # verl decoupled_k3_rs rs_threshold
    "seq_veto": 1e-4,  # slime mis.yaml rs_veto_threshold
}
# Where each mode comes from (docs/methods.md "Rollout correction").
SOURCES: dict[str, str] = {
    "token_tis": "verl rollout_is=token (TIS, Yao et al. 2025); TRL token_truncate",
    "seq_tis": "verl rollout_is=sequence; TRL sequence_truncate",
    "token_icepop": "verl rollout_is=token with lower_upper (IcePop, Ling team 2025); TRL token_mask",
    "seq_mis": "verl rollout_is=sequence with lower_upper; TRL sequence_mask (its vLLM default)",
    "seq_veto": "slime examples/train_infer_mismatch_helper/mis.py calculate_veto_mask",
    **{m: f"verl rollout_rs={m}" for m in _K_MODES},
}
SOURCES["seq_max_k2"] = SOURCES["seq_max_k3"] = (
    "verl rollout_rs=seq_max_k* (Trust Region Masking, arXiv 2512.23075)"
)


class Step(NamedTuple):
    """One mode with its bounds: ``lower`` is None where the mode has only an upper bound."""

    mode: str
    lower: float | None
    upper: float


@dataclass(frozen=True)
class RolloutCorrection:
    """A parsed correction: at most one IS step, any number of rejection steps (all must pass)."""

    steps: tuple[Step, ...] = ()
    batch_normalize: bool = False

    @property
    def active(self) -> bool:
        """Whether anything is corrected (``none`` is not)."""
        return bool(self.steps)

    @property
    def is_step(self) -> Step | None:
        """The importance-weighting step, if any."""
        return next((s for s in self.steps if s.mode in IS_MODES), None)

    @property
    def rejection_steps(self) -> tuple[Step, ...]:
        """The masking steps, in the order given."""
        return tuple(s for s in self.steps if s.mode in REJECTION_MODES)

    def describe(self) -> str:
        """``none`` or ``mode(bounds)+...``, for logs and errors."""
        if not self.steps:
            return "none"
        parts = [f"{s.mode}({'' if s.lower is None else f'{s.lower:g}_'}{s.upper:g})" for s in self.steps]
        return "+".join(parts) + ("+batch_normalize" if self.batch_normalize else "")


NONE = RolloutCorrection()


def _bounds(mode: str, spec: Any) -> Step:
    """Parse one threshold (a number or a ``"lower_upper"`` string, verl's notation) for ``mode``."""
    where = f"method.rollout_correction_threshold for {mode}"
    if spec is None:
        if mode not in DEFAULT_THRESHOLDS:
            raise ValueError(f"{where}: no source gives a default; give one (a number > 0)")
        spec = DEFAULT_THRESHOLDS[mode]
    if isinstance(spec, bool):
        raise ValueError(f"{where}: {spec!r} is invalid; allowed: a number > 0 or a 'lower_upper' string")
    lower: float | None = None
    try:
        if isinstance(spec, str) and "_" in spec:
            lo, hi = spec.split("_", 1)
            lower, upper = float(lo), float(hi)
        else:
            upper = float(spec)
    except (TypeError, ValueError):
        raise ValueError(
            f"{where}: {spec!r} is invalid; allowed: a number > 0 or a 'lower_upper' string"
        ) from None
    two_sided = mode in ("token_icepop", "seq_mis") or mode.endswith("k1")
    if lower is not None and not two_sided:
        raise ValueError(f"{where}: {spec!r} is invalid; {mode} takes one upper bound (a number > 0)")
    if mode.endswith("k1") and lower is None and math.isfinite(upper) and upper > 0:
        lower = 1.0 / upper  # verl: a single k1 bound u means [1/u, u] (so u >= 1)
    if not (math.isfinite(upper) and upper > 0) or (
        lower is not None and not (math.isfinite(lower) and 0 < lower <= upper)
    ):
        raise ValueError(f"{where}: {spec!r} is invalid; allowed: 0 < lower <= upper, both finite")
    return Step(mode, lower, upper)


def parse_rollout_correction(
    mode: Any, threshold: Any = None, batch_normalize: Any = False
) -> RolloutCorrection:
    """The correction named by ``method.rollout_correction`` (``none``, a mode, or a list of modes), its
    ``..._threshold`` (null: each mode's default; a number or ``"lower_upper"``; a list, one per mode) and
    ``..._batch_normalize``; a bad entry raises a one-line ValueError naming it and what is allowed."""
    if not isinstance(mode, str | list | tuple) and mode is not None:
        shown = repr(mode).replace("\n", " ")[:80]
        raise ValueError(
            f"method.rollout_correction={shown} is invalid; allowed: none, a mode or a list of modes "
            f"({', '.join(MODES)})"
        )
    modes = [mode] if isinstance(mode, str) or mode is None else list(mode)
    if modes in ([None], ["none"], []):
        if threshold is not None or batch_normalize:
            raise ValueError("method.rollout_correction=none takes no threshold and no batch_normalize")
        return NONE
    for m in modes:
        if m not in MODES:
            raise ValueError(
                f"method.rollout_correction: unknown mode {m!r}; {did_you_mean(m, ['none', *MODES])}"
                f"allowed: none, {', '.join(MODES)}"
            )
    if len(set(modes)) != len(modes):
        raise ValueError(f"method.rollout_correction: {modes} names a mode twice")
    is_modes = [m for m in modes if m in IS_MODES]
    if len(is_modes) > 1:
        raise ValueError(
            f"method.rollout_correction: at most one IS mode ({', '.join(IS_MODES)}), got {is_modes}"
        )
    if not isinstance(batch_normalize, bool):
        raise ValueError(
            f"method.rollout_correction_batch_normalize must be true or false, got {batch_normalize!r}"
        )
    if batch_normalize and not is_modes:
        raise ValueError(
            "method.rollout_correction_batch_normalize=true normalises IS weights: name an IS mode"
        )
    if isinstance(threshold, list | tuple):
        if len(threshold) != len(modes):
            raise ValueError(
                f"method.rollout_correction_threshold has {len(threshold)} entries for {len(modes)} modes"
            )
        specs = list(threshold)
    else:
        if threshold is not None and len(modes) > 1:
            raise ValueError(
                "method.rollout_correction_threshold: give a list, one entry per mode (null: default)"
            )
        specs = [threshold] * len(modes)
    return RolloutCorrection(tuple(_bounds(m, s) for m, s in zip(modes, specs, strict=True)), batch_normalize)


# ---------------------------------------------------------------- tensors


def rollout_log_ratio(
    trainer_logps: torch.Tensor, sampler_logps: torch.Tensor, mask: torch.Tensor
) -> torch.Tensor:
    """``log pi_train - log pi_sampler`` on valid tokens, 0 elsewhere; a NaN sampler log-prob (a token vLLM
    could not score) gives 0, i.e. ratio 1, as TRL does."""
    diff = (trainer_logps.detach().float() - sampler_logps.detach().float()).nan_to_num(nan=0.0)
    return torch.where(mask.bool(), diff, 0.0)


def _seq_sum(x: torch.Tensor, m: torch.Tensor) -> torch.Tensor:
    return (x * m).sum(-1, keepdim=True)


def _frac(flag: torch.Tensor, m: torch.Tensor) -> torch.Tensor:
    return (flag.float() * m).sum() / m.sum().clamp(min=1.0)


def _seq_frac(flag: torch.Tensor, m: torch.Tensor) -> torch.Tensor:
    """Fraction of non-empty sequences with ``flag`` ([B, 1] or [B, T]: any valid token) set."""
    valid = m.sum(-1) > 0
    hit = ((flag.float() * m).sum(-1) > 0) & valid
    return hit.float().sum() / valid.float().sum().clamp(min=1.0)


def importance_weights(
    log_ratio: torch.Tensor, mask: torch.Tensor, step: Step
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """``(w [B, T], metrics)``: the detached IS weight of ``step`` on every valid token (0 on padding)."""
    m = mask.float()
    with torch.no_grad():
        if step.mode in SEQUENCE_IS_MODES:
            lr = _seq_sum(log_ratio, m).expand_as(log_ratio)
        else:
            lr = log_ratio
        raw = torch.exp(lr.clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)) * m
        if step.mode in ("token_tis", "seq_tis"):
            w = raw.clamp(max=step.upper)
            cut = raw > step.upper
            zeroed = torch.zeros_like(cut)
        else:
            lower = 0.0 if step.lower is None else step.lower
            keep = (raw >= lower) & (raw <= step.upper)
            w = torch.where(keep, raw, 0.0)
            cut = zeroed = ~keep
        metrics = {
            "is_mean": (w * m).sum() / m.sum().clamp(min=1.0),
            "is_max": torch.where(m.bool(), w, 0.0).amax() if w.numel() else w.new_zeros(()),
            "is_truncated_frac": _frac(cut & ~zeroed, m),
            "is_masked_frac": _frac(zeroed, m),
            "is_seq_masked_frac": _seq_frac(zeroed, m),
        }
    return w, metrics


def normalize_weights(
    w: torch.Tensor,
    mask: torch.Tensor,
    sequence_level: bool,
    reduce_sum: Callable[[torch.Tensor], torch.Tensor] | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(w / mean, mean)``: the mean over valid tokens (token modes) or non-empty sequences (sequence modes),
    summed across processes by ``reduce_sum`` (verl's ``distributed_masked_mean``); a mean <= 1e-8 leaves
    ``w`` unchanged (factor 1), as verl."""
    m = mask.float()
    with torch.no_grad():
        if sequence_level:
            valid = (m.sum(-1) > 0).float()
            per_seq = (w * m).sum(-1) / m.sum(-1).clamp(min=1.0)
            totals = torch.stack([(per_seq * valid).sum(), valid.sum()])
        else:
            totals = torch.stack([(w * m).sum(), m.sum()])
        if reduce_sum is not None:
            totals = reduce_sum(totals)
        mean = totals[0] / totals[1].clamp(min=1e-8)
        ok = mean > 1e-8
        factor = torch.where(ok, mean, torch.ones_like(mean))
    return w / factor, factor


def _k_stats(log_ratio: torch.Tensor) -> dict[int, torch.Tensor]:
    lr = log_ratio.clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
    return {1: -lr, 2: 0.5 * lr * lr, 3: torch.exp(lr) - 1.0 - lr}  # verl's k1 is log(pi_sampler / pi_train)


def rejection_keep(log_ratio: torch.Tensor, mask: torch.Tensor, step: Step) -> torch.Tensor:
    """``[B, T]`` bool: the tokens ``step`` keeps (a sequence mode keeps or drops all tokens of a sequence)."""
    m = mask.float()
    with torch.no_grad():
        if step.mode == "seq_veto":
            bad = (log_ratio < math.log(step.upper)) & mask.bool()
            return (~bad.any(-1, keepdim=True)).expand_as(log_ratio)
        level, k = step.mode.rsplit("_k", 1)
        stat = _k_stats(log_ratio)[int(k)]
        if level == "token":
            pass
        elif level == "seq_sum":
            stat = _seq_sum(stat, m)
        elif level == "seq_mean":
            stat = _seq_sum(stat, m) / m.sum(-1, keepdim=True).clamp(min=1.0)
        else:  # seq_max; a sequence with no valid token has statistic 0, as verl
            stat = torch.where(mask.bool(), stat, float("-inf")).amax(-1, keepdim=True)
            stat = torch.where(torch.isinf(stat), 0.0, stat)
        if k == "1":
            keep = (stat >= math.log(step.lower)) & (stat <= math.log(step.upper))
        else:
            keep = stat <= step.upper
        return keep.expand_as(log_ratio)


class Correction(NamedTuple):
    """What a correction does to one batch: weights (None: no IS step), the kept tokens (None: no rejection
    step; else the mask to train on, ``mask & kept``), and metrics (0-dim tensors)."""

    weights: torch.Tensor | None
    keep: torch.Tensor | None
    metrics: dict[str, torch.Tensor]


def apply_correction(
    spec: RolloutCorrection,
    log_ratio: torch.Tensor,
    mask: torch.Tensor,
    reduce_sum: Callable[[torch.Tensor], torch.Tensor] | None = None,
) -> Correction:
    """Weights and kept tokens of ``spec`` for one batch (``log_ratio`` from ``rollout_log_ratio``).

    As verl, the IS weight is computed on the original mask and rejection only shrinks the mask; a token's
    update is then ``keep * w * grad(loss)``. ``masked_frac`` counts the valid tokens that end up with no
    gradient from either (weight 0 or rejected)."""
    m = mask.bool()
    metrics: dict[str, torch.Tensor] = {}
    weights = keep = None
    step = spec.is_step
    if step is not None:
        weights, metrics = importance_weights(log_ratio, mask, step)
        if spec.batch_normalize:
            weights, metrics["is_batch_norm_factor"] = normalize_weights(
                weights, mask, step.mode in SEQUENCE_IS_MODES, reduce_sum
            )
    if spec.rejection_steps:
        keep = m.clone()
        for s in spec.rejection_steps:
            kept = rejection_keep(log_ratio, mask, s)
            metrics[f"rs_{s.mode}_masked_frac"] = _frac(~kept, mask.float())
            keep &= kept
        metrics["rs_masked_frac"] = _frac(~keep, mask.float())
        metrics["rs_seq_masked_frac"] = _seq_frac(~keep, mask.float())
    dead = torch.zeros_like(m)
    if weights is not None:
        dead |= weights == 0
    if keep is not None:
        dead |= ~keep
    metrics["masked_frac"] = _frac(dead, mask.float())
    return Correction(weights, keep, metrics)


MISMATCH_QUANTILES = (0.01, 0.1, 0.5, 0.9, 0.99)


def mismatch_metrics(log_ratio: torch.Tensor, mask: torch.Tensor) -> dict[str, torch.Tensor]:
    """The sampler-vs-trainer mismatch per valid token: ``k1`` = mean log(pi_sampler / pi_train) (verl's
    ``kl``), ``k3`` = mean (rho - 1 - log rho) (verl's ``k3_kl``), ``abs_log_ratio_max``, and the token IS
    ratio's quantiles ``ratio_q01 ... ratio_q99``, ``ratio_min``, ``ratio_max`` (0 for an empty batch)."""
    m = mask.bool()
    with torch.no_grad():
        lr = log_ratio.float()[m]
        if lr.numel() == 0:
            zero = log_ratio.new_zeros((), dtype=torch.float32)
            keys = ["k1", "k3", "abs_log_ratio_max", "ratio_min", "ratio_max"]
            keys += [f"ratio_q{round(q * 100):02d}" for q in MISMATCH_QUANTILES]
            return dict.fromkeys(keys, zero)
        rho = torch.exp(lr.clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP))
        qs = torch.quantile(rho, torch.tensor(MISMATCH_QUANTILES, device=rho.device))
        out = {
            "k1": (-lr).mean(),
            "k3": (rho - 1.0 - lr.clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)).mean(),
            "abs_log_ratio_max": lr.abs().amax(),
            "ratio_min": rho.amin(),
            "ratio_max": rho.amax(),
        }
        out.update({f"ratio_q{round(q * 100):02d}": v for q, v in zip(MISMATCH_QUANTILES, qs, strict=True)})
    return out
