"""Multi-process training: `accelerate launch` with 2 processes (gloo on CPU) matches one process.

Note: `accelerate launch --cpu --num_processes 2` starts ONE process in accelerate 1.15 (`--cpu` always
takes the simple launcher); two CPU processes need the multi-process launcher, here through
conf/accelerate/ddp.yaml (MULTI_GPU = torchrun; without CUDA the processes use gloo).
The reference is one process (the test's own) with the same global batch (8 completions = 2 prompts x 4
per step). The sampled completions differ between the two layouts (each rank draws from its own
generator), so per-step values agree only up to sampling noise; the tolerances still catch a wrong
normaliser (a factor of 2 in the loss/gradient from num_processes), tokens counted on one rank only, or
ranks training apart.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from pspo_repro.common.paths import PROJECT_ROOT

pytestmark = pytest.mark.slow

ROOT = PROJECT_ROOT
TRAIN = [
    "model=tiny",
    "logger=none",
    "reward=smoke_length",
    "method=noclip",  # a fresh rollout every step: no reuse, so each step compares like with like
    "seed=0",
    "trainer.max_steps=4",
    "trainer.max_completion_length=12",
    "trainer.eval_steps=null",
    "trainer.save_steps=2",
    "trainer.disable_tqdm=true",
]


def _train(tmp: Path, launcher: list[str], extra: list[str], data_dir: Path) -> list[dict]:
    env = dict(os.environ, PSPO_RESULTS_DIR=str(tmp / "results"), PSPO_LOG_DIR=str(tmp / "logs"))
    env.update(PSPO_DATA_DIR=str(data_dir), OMP_NUM_THREADS="1", WANDB_MODE="disabled")
    cmd = [*launcher, "-m", "pspo_repro.train", *TRAIN, *extra]
    r = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stderr[-4000:]
    return _metrics(tmp / "results")


def _train_in_process(tmp: Path, extra: list[str]) -> list[dict]:
    """The one-process reference in this test's own process (one torch thread, as the ranks): the same run
    without a third interpreter's imports."""
    from pspo_repro.common.cli import compose_config
    from pspo_repro.common.paths import CONF_DIR
    from pspo_repro.training import grpo

    overrides = [*TRAIN, *extra, f"paths.results_dir={tmp / 'results'}"]
    grpo.run(compose_config(CONF_DIR, "train", overrides), overrides)
    return _metrics(tmp / "results")


def _metrics(results: Path) -> list[dict]:
    (run,) = results.glob("runs/tiny/noclip/seed0*/run.json")
    info = json.loads(run.read_text())
    assert info["status"] == "finished" and info["final_step"] == 4
    return [json.loads(line) for line in (run.parent / "metrics.jsonl").read_text().splitlines()]


def test_two_processes_match_one(tmp_path, data_dir, tiny_model_dir):
    accelerate = str(Path(sys.executable).parent / "accelerate")
    launcher = [accelerate, "launch", "--config_file", str(ROOT / "conf" / "accelerate" / "ddp.yaml")]
    launcher += ["--num_processes", "2", "--mixed_precision", "no", "--main_process_port", "29611"]
    two = _train(tmp_path / "two", launcher, ["trainer.per_device_train_batch_size=4"], data_dir)
    one = _train_in_process(tmp_path / "one", ["trainer.per_device_train_batch_size=8"])

    assert [r["step"] for r in two] == [r["step"] for r in one] == [1, 2, 3, 4]  # rank 0 logs, once
    for a, b in zip(two, one, strict=True):
        # Same prompts (the sampler is global); completions differ by at most 12 tokens each.
        assert abs(a["num_tokens"] - b["num_tokens"]) <= 0.02 * b["num_tokens"], (
            a["num_tokens"],
            b["num_tokens"],
        )
        assert abs(a["train/entropy"] - b["train/entropy"]) < 0.01
    mean = lambda rows, k: sum(r[k] for r in rows) / len(rows)  # noqa: E731
    ratio = mean(two, "train/grad_norm") / mean(one, "train/grad_norm")
    assert 0.75 < ratio < 1.33, f"grad norm 2 processes / 1 process = {ratio:.2f}"
    assert abs(mean(two, "train/loss") - mean(one, "train/loss")) < 0.15
