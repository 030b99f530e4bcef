"""trainer.validation_loss=false: validation generates and scores only; training and checkpoint choice unchanged."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file
from test_old_logps import RUN, _compose

from pspo_repro.training import grpo as train


@pytest.mark.slow
def test_validation_without_its_loss_pass_trains_the_same_run(results_root, tmp_path, monkeypatch):
    folders = {}
    for flag in ("true", "false"):
        monkeypatch.setenv("PSPO_RESULTS_DIR", str(tmp_path / flag))
        ov = [*RUN, f"trainer.validation_loss={flag}"]
        folders[flag] = train.run(_compose(ov), ov)
    rows = {
        f: [json.loads(line) for line in (d / "metrics.jsonl").read_text().splitlines()]
        for f, d in folders.items()
    }
    evals = {f: [r for r in rs if "eval/reward" in r] for f, rs in rows.items()}
    assert [r["eval/reward"] for r in evals["true"]] == [r["eval/reward"] for r in evals["false"]]
    assert all("eval/loss" in r and "eval/entropy" in r for r in evals["true"])
    assert not any("eval/loss" in r or "eval/entropy" in r for r in evals["false"])
    a, b = (load_file(str(d / "checkpoint-4" / "model.safetensors")) for d in folders.values())
    assert all(torch.equal(a[k], b[k]) for k in a)
    best = [json.loads((d / "run.json").read_text())["best_checkpoint"] for d in folders.values()]
    assert best[0] == best[1] is not None
