"""A training run's statistics over its optimizer steps, from its metrics.jsonl: what the trust region did
(tokens without gradient, ratio spread, KL from the behaviour policy), how the reward moved, whether
gradient-norm clipping acted and how far each update moved the weights.

The regime table, the claims' measurements and the leaderboard all read a run through these functions, so
the three define a statistic the same way. A step is a metrics row with ``train/loss``; a reuse step is one
whose ratio can differ from 1 (``method/ratio_max`` not 1, or a non-zero ``train/behaviour_kl``), the only
steps where a trust region can act.

``train/grad_norm`` is the pre-clip global gradient norm (what ``torch.nn.utils.clip_grad_norm_`` returns,
which the HF Trainer logs); clipping acted on the step when it exceeded the run's ``trainer.max_grad_norm``
(run.json; None or <= 0: clipping off). A step whose grad norm is missing or not finite is neither clipped
nor unclipped: ``StepNorms`` leaves it out of the share and counts it. ``train/update_norm`` is the norm of
the step's parameter update, logged by newer runs only.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pspo_repro.analysis.result_files import ResultsError
from pspo_repro.analysis.run_records import info_problem, max_grad_norm, read_metrics
from pspo_repro.common.run_folder import run_json

# A collapse: a value below this share of where it started (the last quarter's training reward against the
# first steps'; in the regime table also a run's test accuracy against its base model's).
COLLAPSE_RATIO = 0.5


@dataclass
class StepNorms:
    """Counts over the optimizer steps of one or more runs (``+`` pools them)."""

    steps: int = 0
    clipped: int = 0  # steps whose pre-clip grad norm exceeded max_grad_norm
    no_norm: int = 0  # steps with a missing or non-finite grad norm: in neither count
    clipping_off: int = 0  # steps of runs that had norm clipping off (max_grad_norm None or <= 0)
    update_sum: float = 0.0
    update_steps: int = 0  # steps with a finite train/update_norm

    @property
    def clipped_share(self) -> float:
        """Clipped steps over the steps with a finite grad norm and clipping on; NaN when there are none."""
        judged = self.steps - self.no_norm - self.clipping_off
        return self.clipped / judged if judged > 0 else math.nan

    @property
    def update_norm(self) -> float:
        """Mean ``train/update_norm`` over the steps that logged it; NaN when none did ("not logged")."""
        return self.update_sum / self.update_steps if self.update_steps else math.nan

    def __add__(self, other: StepNorms) -> StepNorms:
        """The pooled counts of two sets of steps."""
        return StepNorms(*(getattr(self, f) + getattr(other, f) for f in self.__dataclass_fields__))


def _finite(x: Any) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x)


def step_norms(rows: list[dict[str, Any]], max_grad_norm: float | None) -> StepNorms:
    """The counts over the optimizer steps among ``rows`` (metrics.jsonl rows) of a run with this
    ``max_grad_norm``."""
    out = StepNorms()
    clipping = max_grad_norm is not None and max_grad_norm > 0
    for r in rows:
        if "train/loss" not in r:
            continue
        out.steps += 1
        norm = r.get("train/grad_norm")
        if not clipping:
            out.clipping_off += 1
        elif not _finite(norm):
            out.no_norm += 1
        elif norm > max_grad_norm:
            out.clipped += 1
        update = r.get("train/update_norm")
        if _finite(update):
            out.update_sum += float(update)
            out.update_steps += 1
    return out


def run_step_norms(folder: Path, info: dict[str, Any]) -> StepNorms:
    """``step_norms`` of the run in ``folder`` whose run.json is ``info``, its metrics.jsonl read and both
    checked by the one reader of run records (``run_records``: ResultsError naming the file and field)."""
    limit = max_grad_norm(info)
    return step_norms(_checked_rows(folder, info), None if math.isinf(limit) else limit)


def mean_finite(xs: list[float]) -> float:
    """Mean of the finite values (None and NaN left out); NaN when there are none."""
    xs = [x for x in xs if x is not None and math.isfinite(x)]
    return sum(xs) / len(xs) if xs else math.nan


def run_stats(metrics_path: Path, max_grad_norm: float) -> dict[str, float | bool]:
    """One run's regime statistics from its ``metrics.jsonl`` (definitions: ``rows_stats``), read and checked
    by ``run_records.read_metrics``."""
    return rows_stats(read_metrics(metrics_path), max_grad_norm)


def rows_stats(rows: list[dict[str, Any]], max_grad_norm: float) -> dict[str, float | bool]:
    """The regime statistics of checked metrics lines (every value a finite number or null): validation
    reward at the first and last validation step, training reward over the first three steps and the last
    quarter, ``zero_grad`` (share of tokens without gradient, ``method/zero_grad_frac``, over every step) and
    over the reuse steps, ``ratio_std`` and ``behaviour_kl`` over the reuse steps, ``grad_clipped`` (share of
    steps whose gradient norm exceeded ``max_grad_norm``), ``reward_fell`` (the last quarter's reward below
    ``COLLAPSE_RATIO`` of the first steps') and the step count."""
    steps = [r for r in rows if "train/loss" in r]
    reuse = [r for r in steps if r.get("method/ratio_max") not in (None, 1.0) or r.get("train/behaviour_kl")]
    rewards = [r["train/reward"] for r in steps if r.get("train/reward") is not None]
    vals = [r["eval/reward"] for r in rows if r.get("eval/reward") is not None]
    norms = [r["train/grad_norm"] for r in steps if r.get("train/grad_norm") is not None]
    first = mean_finite(rewards[:3])
    last = mean_finite(rewards[-max(1, len(rewards) // 4) :])
    return {
        "val_first": vals[0] if vals else math.nan,
        "val_last": vals[-1] if vals else math.nan,
        "reward_first": first,
        "reward_last": last,
        "zero_grad": mean_finite([r.get("method/zero_grad_frac") for r in steps]),
        "zero_grad_reuse": mean_finite([r.get("method/zero_grad_frac") for r in reuse]),
        "ratio_std": mean_finite([r.get("train/ratio_std") for r in reuse]),
        "behaviour_kl": mean_finite([r.get("train/behaviour_kl") for r in reuse]),
        "grad_clipped": mean_finite([float(n > max_grad_norm) for n in norms]),
        "reward_fell": bool(rewards) and last < COLLAPSE_RATIO * first,
        "steps": len(steps),
    }


def folder_stats(folder: Path, info: dict[str, Any]) -> dict[str, float | bool]:
    """``rows_stats`` of the run in ``folder`` whose run.json is ``info`` (its ``max_grad_norm``); both
    checked by ``run_records`` (ResultsError naming the file and field)."""
    return rows_stats(_checked_rows(folder, info), max_grad_norm(info))


def _checked_rows(folder: Path, info: dict[str, Any]) -> list[dict[str, Any]]:
    """The metrics.jsonl rows of the run in ``folder`` whose run.json is ``info``, both checked."""
    if why := info_problem(info):
        raise ResultsError(f"{run_json(folder)}: {why}")
    return read_metrics(folder / "metrics.jsonl", finished=info.get("status") == "finished")
