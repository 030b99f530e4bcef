"""The first-pass ratio deviation: max |r - 1| on the first pass over a freshly generated batch.

On that pass the policy has not been updated since the old log-probs were stored, so r == 1 up to how
reproducible the log-prob computation is (exactly on CPU; on a GPU a recomputation in another batch
layout can differ, and with the as-run clip eps = 0 that alone zeroes the gradient of about half the
tokens). The trainer logs it per micro-batch, ``log`` reports the window's maximum, and run.json the run's.
"""

from __future__ import annotations

import json
import math
from types import SimpleNamespace

import pytest
import torch
from trl import GRPOTrainer

from pspo_repro.methods import get_method, method_optional_inputs, validate_params
from pspo_repro.training.trainer import MethodGRPOTrainer

KEY = "first_pass_max_abs_ratio_dev"


def _batch(seed: int = 0, b: int = 4, t: int = 6):
    g = torch.Generator().manual_seed(seed)
    logp = -torch.rand(b, t, generator=g) * 3 - 0.05
    old = logp + 0.05 * torch.randn(b, t, generator=g)  # the stored old log-probs, perturbed
    mask = (torch.rand(b, t, generator=g) > 0.3).float()
    mask[:, 0] = 1.0
    old[mask == 0] = logp[mask == 0] + 5.0  # padding far off: must not count
    adv = torch.randn(b, generator=g)
    return logp, old, adv, mask


def _run(
    compute_loss_bare,
    step: int,
    *,
    spg: int = 2,
    iterations: int = 2,
    ga: int | None = None,
    name: str = "clip",
    seed: int = 0,
):
    logp, old, adv, mask = _batch(seed)
    _, _, metrics, _ = compute_loss_bare(
        MethodGRPOTrainer,
        logp,
        old,
        adv,
        mask,
        num_items=mask.sum(),
        method_name=name,
        _method=get_method(name),
        _method_params=validate_params(name, {}),
        loss_agg="dapo",
        _topk=None,
        _method_takes_is="importance_sampling_ratio" in method_optional_inputs(name),
        current_gradient_accumulation_steps=ga or spg,
        max_completion_length=logp.shape[1],
        _step=step,
        num_iterations=iterations,
        args=SimpleNamespace(
            steps_per_generation=spg, gradient_accumulation_steps=ga or spg, use_bias_correction_kl=False
        ),
    )
    truth = ((logp - old).exp() - 1).abs()[mask.bool()].max().item()
    return metrics, truth


@pytest.mark.parametrize("step", range(8))
def test_logged_on_first_passes_only_and_equal_to_the_true_max(compute_loss_bare, step):
    # steps_per_generation 2, num_iterations 2: micro-steps 0, 1 use a new rollout, 2, 3 reuse it, 4 regenerates
    metrics, truth = _run(compute_loss_bare, step)
    if step % 4 < 2:
        assert metrics[KEY] == [pytest.approx(truth, rel=1e-6)]
        assert truth > 0.01
    else:
        assert KEY not in metrics


def test_every_micro_step_is_a_first_pass_with_one_iteration(compute_loss_bare):
    for step in range(3):
        metrics, truth = _run(compute_loss_bare, step, spg=1, iterations=1)
        assert metrics[KEY] == [pytest.approx(truth, rel=1e-6)]


def test_a_first_pass_after_an_optimizer_step_is_not_counted(compute_loss_bare):
    # steps_per_generation 4 over gradient accumulation 2 (TRL stores old log-probs for this): slices 2 and 3
    # are used once, but after the update at the end of micro-step 1, so r - 1 there is real policy change
    logged = [KEY in _run(compute_loss_bare, step, spg=4, iterations=1, ga=2)[0] for step in range(8)]
    assert logged == [True, True, False, False, True, True, False, False]


def test_run_maximum_is_kept_on_the_trainer(compute_loss_bare):
    # one trainer object across calls: the running maximum; non-finite values stick
    trainer = MethodGRPOTrainer.__new__(MethodGRPOTrainer)
    assert trainer.first_pass_max_abs_ratio_dev is None  # never measured
    for value, expected in [(0.2, 0.2), (0.1, 0.2), (0.3, 0.3), (math.nan, math.nan), (5.0, math.nan)]:
        trainer._record_first_pass_dev(value)
        got = trainer.first_pass_max_abs_ratio_dev
        assert (math.isnan(got) and math.isnan(expected)) or got == expected
    assert MethodGRPOTrainer.ratio_dev_for_json(math.inf) == "inf"
    assert MethodGRPOTrainer.ratio_dev_for_json(math.nan) == "nan"
    assert MethodGRPOTrainer.ratio_dev_for_json(0.0) == 0.0
    assert MethodGRPOTrainer.ratio_dev_for_json(None) is None


def test_log_reports_the_window_maximum_not_the_mean(monkeypatch):
    captured = []
    monkeypatch.setattr(GRPOTrainer, "log", lambda self, logs, start_time=None: captured.append(dict(logs)))
    trainer = MethodGRPOTrainer.__new__(MethodGRPOTrainer)
    trainer.model = SimpleNamespace(training=True)
    trainer._metrics = {"train": {KEY: [0.1, 0.3, 0.2], "entropy": [1.0]}, "eval": {}}
    trainer.log({"loss": 1.0})
    assert captured[-1] == {"loss": 1.0, KEY: 0.3}
    assert KEY not in trainer._metrics["train"] and trainer._metrics["train"]["entropy"] == [1.0]
    trainer._metrics["train"][KEY] = [0.1, math.nan, 0.2]
    trainer.log({})
    assert math.isnan(captured[-1][KEY])
    trainer.log({})  # a window without a first pass: no value (not 0)
    assert KEY not in captured[-1]


@pytest.mark.slow
def test_tiny_training_logs_exactly_zero_on_cpu(results_root, tiny_model_dir):
    """2 steps, num_iterations 2, one micro-step per rollout: step 1 is a first pass (logged, exactly 0.0 on
    CPU), step 2 reuses the rollout after an update (not logged); run.json holds the run's maximum."""
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    from pspo_repro.common.paths import CONF_DIR
    from pspo_repro.training import grpo as train

    overrides = [
        "model=tiny", "logger=none", "reward=smoke_length", "method=clip", "method.num_iterations=2",
        "trainer.max_steps=2", "trainer.max_completion_length=12", "trainer.eval_steps=null",
        "trainer.save_steps=2", "trainer.disable_tqdm=true",
    ]  # fmt: skip
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        cfg = compose("train", overrides=overrides)
    folder = train.run(cfg, overrides)
    rows = [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2]
    assert rows[0][f"train/{KEY}"] == 0.0
    assert f"train/{KEY}" not in rows[1]
    assert rows[1]["train/ratio_std"] > 0  # the second pass did see an updated policy
    run = json.loads((folder / "run.json").read_text())
    assert run[KEY] == 0.0
