"""train/update_norm (callbacks.UpdateNormCallback) and the SFT base's path in a run's identity."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from pspo_repro.common.run_dir import INFRA_TRAINER_KEYS, portable_identity
from pspo_repro.training.callbacks import UpdateNormCallback


def test_update_norm_is_the_norm_of_the_parameter_change():
    """With SGD the change is lr x gradient: its norm by hand, frozen parameters left out."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.Linear(3, 1))
    model[1].weight.requires_grad_(False)
    opt = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=0.1)
    model(torch.randn(5, 4)).pow(2).sum().backward()
    grads = [p.grad.clone() for p in model.parameters() if p.requires_grad]
    cb, state = UpdateNormCallback(), SimpleNamespace()
    cb.on_pre_optimizer_step(None, state, None, model=model)
    opt.step()
    cb.on_optimizer_step(None, state, None, model=model)
    expected = 0.1 * torch.sqrt(sum(g.pow(2).sum() for g in grads))
    assert cb.last == pytest.approx(float(expected), rel=1e-6)
    logs = {"loss": 1.0}
    cb.on_log(None, state, None, logs=logs)
    assert logs["update_norm"] == cb.last
    summary = {"train_runtime": 3.0}
    cb.on_log(None, state, None, logs=summary)  # the end-of-training summary gets nothing
    assert "update_norm" not in summary
    assert "param_sum" not in logs  # the checksum only when asked (trainer.log_param_sum)


def test_param_sum_is_the_float64_sum_of_the_trainable_parameters_after_the_step():
    """The per-step checksum (issue 55): equal for two models with equal parameters, parted by one changed
    weight; logged alone when the norm is off."""
    torch.manual_seed(0)
    a, b = torch.nn.Linear(4, 3), torch.nn.Linear(4, 3)
    b.load_state_dict(a.state_dict())
    sums = []
    for model, bump in ((a, 0.0), (b, 0.0), (b, 1e-3)):
        with torch.no_grad():
            model.weight[0, 0] += bump
        cb, state = UpdateNormCallback(norm=False, checksum=True), SimpleNamespace()
        cb.on_pre_optimizer_step(None, state, None, model=model)
        cb.on_optimizer_step(None, state, None, model=model)
        logs = {"loss": 1.0}
        cb.on_log(None, state, None, logs=logs)
        assert "update_norm" not in logs
        sums.append(logs["param_sum"])
    want = sum(p.detach().double().sum() for p in a.parameters())
    assert sums[0] == sums[1] == pytest.approx(float(want), rel=0, abs=0)
    assert sums[2] != sums[1]


def test_log_update_norm_is_not_part_of_a_runs_identity():
    assert "log_update_norm" in INFRA_TRAINER_KEYS
    assert "log_param_sum" in INFRA_TRAINER_KEYS


def test_portable_identity_compares_the_sft_base_relative_to_the_results_root(tmp_path):
    a = tmp_path / "a" / "results" / "study"
    b = tmp_path / "b" / "results" / "study"

    def ident(root):
        return {"model": {"name": "mini_sft", "path": str(root / "work" / "sft" / "model")}, "seed": 0}

    def run(root):
        return root / "runs" / "mini_sft" / "clip" / "seed0"

    assert portable_identity(ident(a), run(a)) == portable_identity(ident(b), run(b))
    assert portable_identity(ident(a), run(a))["model"]["path"] == "<results root>/work/sft/model"
    # a base outside the results root (a hub id, another folder) is compared as written
    other = {"model": {"name": "q", "path": str(tmp_path / "elsewhere")}}
    assert portable_identity(other, run(a)) == other
    assert portable_identity(ident(a), run(a)) != portable_identity(
        {"model": {"name": "mini_sft", "path": str(a / "work" / "sft2")}, "seed": 0}, run(a)
    )
