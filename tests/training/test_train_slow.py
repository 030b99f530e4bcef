"""Tiny-model training on CPU: every method moves the weights, parity with TRL, exact resume."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from safetensors.torch import load_file

from pspo_repro.common.paths import CONF_DIR
from pspo_repro.methods import list_methods
from pspo_repro.training import grpo as train

pytestmark = pytest.mark.slow

# Small and fast: 1 prompt x 4 completions per step, 12 tokens, no validation, a reward that varies.
FAST = [
    "model=tiny",
    "logger=none",
    "reward=smoke_length",
    "trainer.max_steps=3",
    "trainer.max_completion_length=12",
    "trainer.eval_steps=null",
    "trainer.save_steps=2",
    "trainer.disable_tqdm=true",
]


def _compose(overrides):
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        return compose("train", overrides=list(overrides))


def _run(overrides) -> Path:
    ov = [*FAST, *overrides]
    return train.run(_compose(ov), ov)


def _weights(folder: Path) -> dict[str, torch.Tensor]:
    return load_file(str(folder / "model.safetensors"))


@pytest.mark.parametrize("method", list_methods())
def test_three_steps_change_weights_and_log_method_metrics(results_root, tiny_model_dir, method):
    # 64 training prompts: 3 steps draw 3; the full 7,000 would cost each of the ~33 runs ~1.5 s of prompt
    # tokenization (to_dataset's length check) and nothing else
    folder = _run([f"method={method}", "data.n_train=64"])
    run = json.loads((folder / "run.json").read_text())
    assert run["status"] == "finished" and run["final_step"] == 3 and run["num_tokens"] > 0
    before, after = _weights(tiny_model_dir), _weights(folder / "checkpoint-3")
    changed = [k for k in before if not torch.equal(before[k], after[k])]
    assert changed, "no parameter moved"
    rows = [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2, 3]
    assert all(any(k.startswith("method/") for k in r) for r in rows)
    assert all("train/loss" in r and "num_tokens" in r for r in rows)


def _pair(method_overrides, trl_kwargs, results_root):
    """Our trainer and TRL's GRPOTrainer built from the same composed settings; returns their losses."""
    from trl import GRPOTrainer

    from pspo_repro.scoring.rewards import get_reward
    from pspo_repro.training.models import load_model, load_tokenizer
    from pspo_repro.training.trainer import MethodGRPOTrainer

    ov = [*FAST, *method_overrides]
    cfg = _compose(ov)
    method = train.validate(cfg)
    rows, _ = train.load_data(cfg)
    losses = {}
    for which in ("trl", "ours"):
        tok = load_tokenizer(cfg.model)
        ds = train.to_dataset(rows[:16], tok, "paper", None)
        args = train._grpo_config(cfg, results_root / which, method, use_cuda=False)
        args.save_strategy = "no"
        common = dict(
            model=load_model(cfg.model, tok, False),
            reward_funcs=[get_reward("smoke_length")],
            train_dataset=ds,
            processing_class=tok,
        )
        if which == "trl":
            for k, v in trl_kwargs.items():
                setattr(args, k, v)
            trainer = GRPOTrainer(args=args, **common)
        else:
            trainer = MethodGRPOTrainer(
                args=args,
                method_name=method.name,
                method_params=method.params,
                loss_agg=method.loss_agg,
                **common,
            )
        trainer.train()
        losses[which] = [h["loss"] for h in trainer.state.log_history if "loss" in h]
        losses[which + "_params"] = {k: v.detach().clone() for k, v in trainer.model.named_parameters()}
    return losses


@pytest.mark.parametrize(
    ("method_overrides", "trl_kwargs"),
    [
        (["method=clip"], {"loss_type": "dapo"}),
        (["method=sapo", "method.loss_agg=grpo"], {"loss_type": "sapo"}),
        (["method=cispo"], {"loss_type": "cispo", "epsilon_high": 5.0}),
    ],
)
def test_parity_with_trl(results_root, method_overrides, trl_kwargs):
    out = _pair(method_overrides, trl_kwargs, results_root)
    assert len(out["ours"]) == 3 and any(abs(x) > 0 for x in out["ours"])
    assert out["ours"] == pytest.approx(out["trl"], rel=1e-5, abs=1e-7)
    for k, v in out["trl_params"].items():
        torch.testing.assert_close(out["ours_params"][k], v, rtol=1e-5, atol=1e-6)


def test_resume_matches_straight_run(results_root, tmp_path, monkeypatch):
    common = ["method=clip", "trainer.max_steps=4"]
    straight = _run(common)
    monkeypatch.setenv("PSPO_RESULTS_DIR", str(tmp_path / "resumed"))
    stopped = _run([*common, "trainer.stop_after_step=2"])
    assert json.loads((stopped / "run.json").read_text())["status"] == "running"
    assert not (stopped / "checkpoint-4").exists()
    resumed = _run(common)  # same command again: resumes from checkpoint-2
    assert resumed == stopped
    run = json.loads((resumed / "run.json").read_text())
    assert run["status"] == "finished" and run["resumed_from"].endswith("checkpoint-2")
    a, b = _weights(straight / "checkpoint-4"), _weights(resumed / "checkpoint-4")
    for k in a:
        torch.testing.assert_close(a[k], b[k], rtol=0, atol=0)
    steps = [json.loads(line)["step"] for line in (resumed / "metrics.jsonl").read_text().splitlines()]
    assert steps == [1, 2, 3, 4]
    # and once finished, the same command is reported and skipped
    assert _run(common) == resumed


def test_eval_on_start_logs_the_base_point_once(results_root, monkeypatch, tmp_path):
    """trainer.eval_on_start: a step-0 validation at 0 tokens (the curve's base point), kept out of
    checkpoint selection and not repeated when a stopped run resumes."""
    common = [
        "method=clip", "trainer.max_steps=4", "trainer.eval_steps=2", "trainer.eval_limit=2",
        "trainer.eval_on_start=true",
    ]  # fmt: skip
    monkeypatch.setenv("PSPO_RESULTS_DIR", str(tmp_path / "r"))
    stopped = _run([*common, "trainer.stop_after_step=2"])
    resumed = _run(common)
    assert resumed == stopped
    rows = [json.loads(line) for line in (resumed / "metrics.jsonl").read_text().splitlines()]
    evals = [(r["step"], r["num_tokens"]) for r in rows if "eval/reward" in r]
    assert [s for s, _ in evals] == [0, 2, 4] and evals[0][1] == 0
    run = json.loads((resumed / "run.json").read_text())
    assert run["best_checkpoint"] in ("checkpoint-2", "checkpoint-4")


def test_budget_run_decays_to_zero_at_its_budget_and_resumes_exactly(results_root, tmp_path, monkeypatch):
    """trainer.lr_horizon=run: every logged learning rate is peak x (budget - tokens) / budget (no warmup),
    falling to 0 as the tokens reach the budget; a stopped and resumed run keeps the schedule (its state,
    saved in the checkpoint, holds no trainer closure) and ends with the straight run's weights."""
    budget = 3000
    common = [
        "method=clip", "trainer.max_steps=-1", "trainer.num_train_epochs=50", f"trainer.token_budget={budget}",
        "trainer.learning_rate=1e-3",
    ]  # fmt: skip
    straight = _run(common)
    rows = [json.loads(line) for line in (straight / "metrics.jsonl").read_text().splitlines()]
    assert len(rows) >= 4 and rows[-1]["num_tokens"] >= budget > rows[-2]["num_tokens"]
    # HF logs the rate a step trained with: set by the scheduler after the step before, from the tokens
    # seen by then (the previous row's count; a step's own rollout is counted when it is generated).
    seen = [0] + [r["num_tokens"] for r in rows[:-1]]
    assert [r["train/learning_rate"] for r in rows] == pytest.approx([1e-3 * (1 - t / budget) for t in seen])
    monkeypatch.setenv("PSPO_RESULTS_DIR", str(tmp_path / "resumed"))
    _run([*common, "trainer.stop_after_step=2"])
    resumed = _run(common)
    a, b = _weights(straight / f"checkpoint-{len(rows)}"), _weights(resumed / f"checkpoint-{len(rows)}")
    for k in a:
        torch.testing.assert_close(a[k], b[k], rtol=0, atol=0)
    # lr_horizon=epochs: HF's schedule over 50 epochs, still near the peak when the budget stops the run
    monkeypatch.setenv("PSPO_RESULTS_DIR", str(tmp_path / "epochs"))
    folder = _run([*common, "trainer.lr_horizon=epochs"])
    last = [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines()][-1]
    assert last["train/learning_rate"] > 0.9e-3
