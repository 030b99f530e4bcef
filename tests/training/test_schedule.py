"""The token-budget learning-rate schedule and the run-length switch (trainer.length / trainer.lr_horizon)."""

from __future__ import annotations

import io

import pytest
import torch
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra

from pspo_repro.common.cli import UsageError
from pspo_repro.common.paths import CONF_DIR
from pspo_repro.training import grpo
from pspo_repro.training.schedule import TokenLinearLR


def _sched(warmup: int, budget: int, tokens: list[int], lr: float = 1.0):
    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=lr)
    return opt, TokenLinearLR(opt, warmup, budget, lambda: tokens[0])


def _lrs(sched, opt, tokens, counts):
    out = []
    for t in counts:
        tokens[0] = t
        opt.step()
        sched.step()
        out.append(sched.get_last_lr()[0])
    return out


def test_warmup_in_steps_then_linear_decay_to_zero_at_the_budget():
    tokens = [0]
    opt, sched = _sched(2, 1000, tokens, lr=2.0)
    assert sched.get_last_lr() == [0.0]  # step 0 of a 2-step warmup
    lrs = _lrs(sched, opt, tokens, [100, 200, 600, 1000, 1300])
    # step 1: warmup 1/2; step 2: warmup ends at 200 tokens (the peak); then (1000 - T) / (1000 - 200)
    assert lrs == pytest.approx([1.0, 2.0, 2.0 * 400 / 800, 0.0, 0.0])


def test_no_warmup_decays_from_the_first_token():
    tokens = [0]
    opt, sched = _sched(0, 500, tokens)
    assert sched.get_last_lr() == [1.0]
    assert _lrs(sched, opt, tokens, [125, 250, 499]) == pytest.approx([0.75, 0.5, 0.002])


def test_budget_spent_during_warmup_gives_zero():
    tokens = [0]
    opt, sched = _sched(3, 100, tokens)
    assert _lrs(sched, opt, tokens, [60, 120, 180, 240])[-2:] == [0.0, 0.0]


def test_state_survives_a_checkpoint_and_leaves_out_the_token_callback():
    """A resumed run keeps the slope fixed at its warmup end (torch.save of the state must work: the
    callback is a closure over the trainer and is not part of the state)."""
    tokens = [0]
    opt, sched = _sched(1, 1000, tokens)
    _lrs(sched, opt, tokens, [300, 400])
    state = sched.state_dict()
    assert "_tokens_seen" not in state and state["decay_start_tokens"] == 300
    buf = io.BytesIO()
    torch.save(state, buf)
    buf.seek(0)
    tokens2 = [400]
    opt2, resumed = _sched(1, 1000, tokens2)
    resumed.load_state_dict(torch.load(buf, weights_only=False))
    tokens[0] = tokens2[0] = 650
    sched.step()
    resumed.step()
    assert resumed.get_last_lr() == sched.get_last_lr() == [pytest.approx(350 / 700)]


def _compose(*overrides):
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        return compose("train", overrides=list(overrides))


@pytest.mark.parametrize(
    "experiment, budget",
    [
        ("paper_qwen2p5_0p5b", 150_000_000),
        ("paper_qwen2p5_1p5b", 150_000_000),
        ("paper_qwen2_math_1p5b", 75_000_000),
    ],
)
def test_paper_experiments_decay_to_zero_at_the_papers_budget(experiment, budget):
    cfg = _compose(f"experiment={experiment}")
    grpo.apply_run_length(cfg, [])
    assert (cfg.trainer.length, cfg.trainer.lr_horizon) == ("token_budget", "run")
    assert grpo.lr_token_budget(cfg.trainer) == budget


def test_as_run_length_is_the_scripts_three_epochs_without_a_budget():
    ov = ["experiment=paper_qwen2p5_0p5b", "trainer.length=as_run"]
    cfg = _compose(*ov)
    grpo.apply_run_length(cfg, ov)
    t = cfg.trainer
    assert (t.token_budget, t.max_steps, t.num_train_epochs) == (None, -1, 3)
    assert grpo.lr_token_budget(t) is None  # HF's linear schedule over the 3 epochs' steps, to 0


def test_the_mini_decays_to_zero_at_its_budget():
    cfg = _compose("experiment=mini")
    grpo.apply_run_length(cfg, [])
    assert cfg.trainer.lr_horizon == "run" and grpo.lr_token_budget(cfg.trainer) == 75_000


@pytest.mark.parametrize(
    "overrides, match",
    [
        (["trainer.length=epochs"], r"unknown trainer.length 'epochs'; options: token_budget, as_run"),
        (["trainer.lr_horizon=budget"], r"unknown trainer.lr_horizon 'budget'; options: run, epochs"),
        (
            ["trainer.length=as_run", "trainer.token_budget=1000"],
            r"trainer.length=as_run sets the script's length .*; drop trainer.token_budget",
        ),
    ],
)
def test_bad_length_settings_are_one_line_errors(overrides, match):
    with pytest.raises(UsageError, match=match) as err:
        grpo.apply_run_length(_compose(*overrides), overrides)
    assert "\n" not in str(err.value)


def test_token_horizon_needs_the_linear_schedule():
    cfg = _compose("trainer.lr_scheduler_type=cosine", "trainer.token_budget=1000")
    with pytest.raises(UsageError, match=r"lr_horizon=run decays linearly .*lr_scheduler_type=cosine"):
        grpo.validate(cfg)
