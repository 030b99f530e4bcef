"""The trainer learns: a reward the tiny model can learn in a few steps rises by a set margin.

Every other training test checks plumbing (weights move, losses match TRL, resume is exact); none of them
fails if a sign flip, a detached tensor or a wrong aggregation leaves GRPO unable to improve a policy.
Here the untrained tiny model is rewarded for longer completions (``smoke_length``: a reward it can
raise by delaying its end-of-sequence token), and the mean training reward of the last steps must
exceed that of the first steps by ``MARGIN``. The same run with a learning rate too small to move the
model is the control: its reward must stay within the margin, so the margin is above sampling noise.
"""

from __future__ import annotations

import json

import pytest
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra

from pspo_repro import train
from pspo_repro.train import CONF_DIR

STEPS = 12
MARGIN = 0.10  # on a reward in [0, 1]


def _rewards(lr: float) -> list[float]:
    ov = [
        "model=tiny",
        "logger=none",
        "reward=smoke_length",
        "method=noclip",
        f"trainer.learning_rate={lr}",
        f"trainer.max_steps={STEPS}",
        "trainer.per_device_train_batch_size=32",  # 8 prompts x G=4 per step
        "trainer.num_generations=4",
        "trainer.max_completion_length=24",
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


@pytest.mark.parametrize(("lr", "learns"), [(1e-3, True), (1e-7, False)])
def test_length_reward_rises_by_a_margin(results_root, tiny_model_dir, lr, learns):
    rewards = _rewards(lr)
    assert len(rewards) == STEPS
    gain = _gain(rewards)
    if learns:
        assert gain >= MARGIN, f"the trainer did not learn: reward {rewards}"
    else:
        assert abs(gain) < MARGIN, f"control moved by more than the margin: reward {rewards}"
