"""Per optimizer step, from a run's metrics.jsonl: did gradient-norm clipping act, and how far did the
update move the weights.

A step is a metrics row with ``train/loss``. ``train/grad_norm`` is the pre-clip global gradient norm (what
``torch.nn.utils.clip_grad_norm_`` returns, which the HF Trainer logs); clipping acted on the step when it
exceeded the run's ``trainer.max_grad_norm`` (run.json; None or <= 0: clipping off). A step whose grad norm
is missing or not finite is neither clipped nor unclipped: it is left out of the share and counted.
``train/update_norm`` is the norm of the step's parameter update, logged by newer runs only.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pspo_repro.analysis.result_files import ResultsError


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
    from pspo_repro.analysis.run_records import info_problem, read_metrics
    from pspo_repro.analysis.run_records import max_grad_norm as limit_of

    if why := info_problem(info):
        raise ResultsError(f"{folder / 'run.json'}: {why}")
    rows = read_metrics(folder / "metrics.jsonl", finished=info.get("status") == "finished")
    limit = limit_of(info)
    return step_norms(rows, None if math.isinf(limit) else limit)
