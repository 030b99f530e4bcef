"""trainer.old_logps: the first pass's own log-probs serve a batch's later passes, bit for bit TRL's pass on CPU.

TRL stores old log-probs when a batch serves more than one optimizer step (num_iterations 2 here) and computes
them in a no-grad pass at rollout, in training and in validation. ``first_pass`` skips that pass; the run
must come out the same: every weight, every logged number (the step times aside), run.json.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from pspo_repro.common.cli import compose_config
from pspo_repro.common.paths import CONF_DIR
from pspo_repro.training import grpo as train
from pspo_repro.training.settings import UsageError, check_old_logps
from pspo_repro.training.trainer import MethodGRPOTrainer
from pspo_repro.training.trainer_checks import first_pass_problem

RUN = [
    "model=tiny",
    "logger=none",
    "reward=smoke_length",
    "data.n_train=64",
    "method=clip",
    "method.num_iterations=2",
    "trainer.max_steps=4",
    "trainer.per_device_train_batch_size=8",
    "trainer.num_generations=4",
    "trainer.max_completion_length=12",
    "trainer.eval_steps=2",
    "trainer.save_steps=2",
    "trainer.eval_limit=4",
    "trainer.eval_on_start=true",
    "trainer.disable_tqdm=true",
]


def _compose(overrides):
    return compose_config(CONF_DIR, "train", list(overrides))


def _rows(folder: Path) -> list[dict]:
    rows = [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines()]
    return [
        {k: v for k, v in r.items() if "time" not in k and "runtime" not in k and "per_second" not in k}
        for r in rows
    ]


@pytest.mark.slow
@pytest.mark.parametrize("bf16", [False, True], ids=["fp32", "bf16-autocast"])
def test_first_pass_runs_the_same_training_as_trls_pass(results_root, tmp_path, monkeypatch, bf16):
    passes = []
    original = MethodGRPOTrainer._get_per_token_logps_and_entropies

    def counted(self, *args, **kwargs):
        out = original(self, *args, **kwargs)
        if out[0] is not None:  # a pass that ran (first_pass answers TRL's rollout call with None)
            passes.append(torch.is_grad_enabled())
        return out

    monkeypatch.setattr(MethodGRPOTrainer, "_get_per_token_logps_and_entropies", counted)
    folders = {}
    for mode in ("recompute", "first_pass"):
        monkeypatch.setenv("PSPO_RESULTS_DIR", str(tmp_path / mode))
        ov = [*RUN, f"trainer.old_logps={mode}", f"trainer.bf16={str(bf16).lower()}"]
        passes.clear()
        folders[mode] = train.run(_compose(ov), ov)
        folders[mode, "no-grad passes"] = passes.count(False)
    a, b = folders["recompute"], folders["first_pass"]
    # 2 rollouts (4 steps, 2 passes each) and 3 validations of 2 batches (4 prompts x 4 in batches of 8): TRL's
    # pass runs at each, first_pass skips them (the validations' own loss passes stay, without a gradient too)
    assert folders["recompute", "no-grad passes"] - folders["first_pass", "no-grad passes"] == 2 + 3 * 2
    for ckpt in ("checkpoint-2", "checkpoint-4"):
        wa, wb = (
            load_file(str(a / ckpt / "model.safetensors")),
            load_file(str(b / ckpt / "model.safetensors")),
        )
        assert all(torch.equal(wa[k], wb[k]) for k in wa)
    assert _rows(a) == _rows(b)
    ra, rb = (json.loads((f / "run.json").read_text()) for f in (a, b))
    assert ra["first_pass_max_abs_ratio_dev"] == rb["first_pass_max_abs_ratio_dev"] == 0.0
    assert ra["best_checkpoint"] == rb["best_checkpoint"]


def test_auto_is_first_pass_on_cpu_where_it_applies_and_recompute_elsewhere():
    ok = dict(
        use_vllm=False,
        rollout_correction_active=False,
        method_name="clip",
        beta=0.0,
        gradient_accumulation_steps=4,
        steps_per_generation=None,
    )
    assert first_pass_problem(**ok) is None
    assert first_pass_problem(**{**ok, "steps_per_generation": 2}) is None  # both slices before the step
    for change, why in [
        ({"use_vllm": True}, "vLLM"),
        ({"rollout_correction_active": True}, "rollout correction"),
        ({"method_name": "dppo_topk_tv"}, "top-K"),
        ({"method_name": "erc"}, "ERC"),
        ({"beta": 0.04}, "KL penalty"),
        ({"steps_per_generation": 8}, "after an optimizer step"),
        ({"steps_per_generation": 3}, "after an optimizer step"),
    ]:
        assert why in first_pass_problem(**{**ok, **change})


@pytest.mark.parametrize(
    ("overrides", "why"),
    [
        (
            ["trainer.steps_per_generation=4", "trainer.save_steps=8", "trainer.eval_steps=8"],
            "after an optimizer step",
        ),
        (["trainer.beta=0.04"], "KL penalty"),
        (["method=dppo_topk_tv"], "top-K"),
    ],
)
def test_first_pass_where_it_cannot_apply_is_refused_in_one_line(overrides, why):
    cfg = _compose(["model=tiny", "trainer.old_logps=first_pass", *overrides])
    method = train.validate(_compose(["model=tiny", *overrides]))
    with pytest.raises(UsageError, match=f"trainer.old_logps=first_pass: .*{why}"):
        check_old_logps(cfg, method)


def test_a_bad_value_is_refused():
    with pytest.raises(UsageError, match="trainer.old_logps must be auto, recompute or first_pass, got 'x'"):
        train.validate(_compose(["model=tiny", "trainer.old_logps=x"]))
