"""The trainer learns: a reward the tiny model can learn in a few steps rises by a set margin.

Every other training test checks plumbing (weights move, losses match TRL, resume is exact); none of them
fails if a sign flip, a detached tensor or a wrong aggregation leaves GRPO unable to improve a policy.
Here the untrained tiny model is rewarded for longer completions (``smoke_length``, characters / 64, with
8-token completions: a reward it raises by preferring longer tokens and a later end-of-sequence), and the mean training reward of the last steps must
exceed that of the first steps by ``MARGIN``. The same run with a learning rate too small to move the
model is the control: its reward must stay within the margin, so the margin is above sampling noise.
"""

from __future__ import annotations

import json

import pytest
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra

from pspo_repro.common.paths import CONF_DIR
from pspo_repro.training import grpo as train

pytestmark = pytest.mark.slow  # two 12-step trainings, ~25 s each on an idle core (CI runs slow tests)

STEPS = 12
# Measured (8-token completions, 8 prompts x 4 per step): lr 3e-2 takes the reward 0.40 -> 1.00 in 9 steps
# (gain of the last 3 over the first 3 steps: 0.59), 1e-2 0.40 -> 0.50 (0.085), 1e-3 and 1e-7 stay within
# 0.37-0.44 (|gain| <= 0.011). The margin sits far from both.
MARGIN = 0.25  # on a reward in [0, 1]
LR_LEARNS = 3e-2  # large: a random tiny model (near-uniform over 917 tokens) must move in a few steps


def _rewards(lr: float, max_len: int = 8) -> list[float]:
    ov = [
        "model=tiny",
        "logger=none",
        "reward=smoke_length",
        "method=noclip",
        f"trainer.learning_rate={lr}",
        f"trainer.max_steps={STEPS}",
        "trainer.per_device_train_batch_size=32",  # 8 prompts x G=4 per step
        "trainer.num_generations=4",
        f"trainer.max_completion_length={max_len}",
        "trainer.eval_steps=null",
        f"trainer.save_steps={STEPS}",
        "trainer.disable_tqdm=true",
    ]
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        cfg = compose("train", overrides=ov)
    folder = train.run(cfg, ov)
    rows = [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines()]
    return [r["train/reward"] for r in rows if r.get("train/reward") is not None]


def _gain(rewards: list[float]) -> float:
    k = 3
    return sum(rewards[-k:]) / k - sum(rewards[:k]) / k


@pytest.mark.parametrize(("lr", "learns"), [(LR_LEARNS, True), (1e-7, False)])
def test_length_reward_rises_by_a_margin(results_root, tiny_model_dir, lr, learns):
    rewards = _rewards(lr)
    assert len(rewards) == STEPS
    gain = _gain(rewards)
    if learns:
        assert gain >= MARGIN, f"the trainer did not learn: reward {rewards}"
    else:
        assert abs(gain) < MARGIN, f"control moved by more than the margin: reward {rewards}"
