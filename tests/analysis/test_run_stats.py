"""Norm-clipped steps and update norms per optimizer step, counted by hand (NaN and missing norms apart)."""

from __future__ import annotations

import json
import math

import pytest

from pspo_repro.analysis.run_stats import StepNorms, run_step_norms, step_norms


def _steps(norms, updates=None):
    rows = [{"step": 0, "eval/reward": 0.1}]  # not an optimizer step
    for i, n in enumerate(norms):
        row = {"step": i + 1, "train/loss": 0.1}
        if n is not ...:  # ... = the key is absent
            row["train/grad_norm"] = n
        if updates is not None and updates[i] is not ...:
            row["train/update_norm"] = updates[i]
        rows.append(row)
    return rows


def test_clipped_share_leaves_out_and_counts_missing_norms():
    # 6 steps: 2.0 and 1.5 exceed 1.0; 1.0 itself does not (clip_grad_norm_ scales only above the max);
    # NaN and an absent key are neither clipped nor unclipped
    n = step_norms(_steps([0.5, 2.0, math.nan, 1.0, ..., 1.5]), 1.0)
    assert (n.steps, n.clipped, n.no_norm, n.clipping_off) == (6, 2, 2, 0)
    assert n.clipped_share == pytest.approx(2 / 4)
    assert math.isnan(n.update_norm) and n.update_steps == 0  # not logged, never 0


def test_clipping_off_and_update_norm():
    n = step_norms(_steps([5.0, 7.0], [0.1, 0.3]), None)
    assert (n.clipping_off, n.clipped) == (2, 0) and math.isnan(n.clipped_share)
    assert n.update_norm == pytest.approx(0.2)
    partial = step_norms(_steps([5.0, 0.5, 0.2], [0.4, ..., math.inf]), 1.0)
    assert (partial.update_steps, partial.update_norm) == (1, pytest.approx(0.4))
    pooled = n + partial
    assert (pooled.steps, pooled.clipped, pooled.clipping_off, pooled.update_steps) == (5, 1, 2, 3)
    assert pooled.clipped_share == pytest.approx(1 / 3)
    assert StepNorms().steps == 0 and math.isnan(StepNorms().clipped_share)


def test_run_step_norms_reads_the_runs_max_grad_norm(tmp_path):
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in _steps([0.3, 0.6, 0.9])))
    info = {"config": {"trainer": {"max_grad_norm": 0.5}}}
    assert run_step_norms(tmp_path, info).clipped == 2
    info["config"]["trainer"]["max_grad_norm"] = 0.0  # HF Trainer: 0 turns clipping off
    assert run_step_norms(tmp_path, info).clipping_off == 3
