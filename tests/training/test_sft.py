"""The SFT stage: config composes, the training rows are the RL prompt + an <|im_end|>-terminated
solution, and (slow) a reduced run writes a loadable checkpoint, skips when finished, refuses a mismatch."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pspo_repro.common.cli import compose_config
from pspo_repro.common.paths import PROJECT_ROOT
from pspo_repro.data.prompts import PAPER_SYSTEM_PROMPT, render_prompt
from pspo_repro.data.synthetic import load_split
from pspo_repro.training import sft


def _compose(overrides: list[str]):
    return compose_config(PROJECT_ROOT / "conf", "sft", overrides)


def test_config_composes_with_defaults(results_root):
    cfg = _compose([])
    assert cfg.prompt_template == "none" and cfg.model.arch.hidden_size == 128
    assert cfg.data.habit_frac == 0.7  # the stop-early habit (sft.with_habit)
    assert cfg.data.heldout_n_train == 500  # the held-out skill's SFT rows (synthetic_heldout)
    assert cfg.data.n_train == 2000 and cfg.data.n_val == 200
    assert sft.default_out_dir() == results_root / "mini" / "work" / "sft"


def test_training_row_is_the_rl_prompt_plus_solution(tiny_model_dir):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    problem = load_split("train", 1)[0]
    row = sft.sft_dataset([problem], "paper")[0]
    assert row["prompt"][0] == {"role": "system", "content": PAPER_SYSTEM_PROMPT}
    # TRL's prompt-completion split: the completion is what prompt+completion adds after the prompt.
    prompt = tok.apply_chat_template(row["prompt"], tokenize=False, add_generation_prompt=True)
    full = tok.apply_chat_template(row["prompt"] + row["completion"], tokenize=False)
    assert prompt == render_prompt(tok, problem.question)  # the exact prompt GRPO will see
    assert full.startswith(prompt)
    assert full[len(prompt) :] == problem.solution + "<|im_end|>\n"  # loss reaches the stop token
    p_ids, f_ids = tok(prompt)["input_ids"], tok(full)["input_ids"]
    assert f_ids[: len(p_ids)] == p_ids  # no token merges across the boundary


def test_arch_override_keeps_head_dim():
    with pytest.raises(ValueError, match="head_dim"):
        sft.init_model({"hidden_size": 96}, seed=0)


@pytest.mark.slow
def test_reduced_sft_end_to_end(results_root, tiny_model_dir):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    overrides = [
        "data.n_train=48",
        "data.n_val=6",
        "data.heldout_n_train=16",
        "train.max_steps=4",
        "train.batch_size=8",
        "train.logging_steps=2",
        "eval.max_new_tokens=8",
        "model.arch={hidden_size: 128, num_attention_heads: 2, num_key_value_heads: 2, intermediate_size: 256}",
    ]
    record = sft.run_sft(_compose(overrides))
    out = results_root / "mini" / "work" / "sft"
    marker = out / sft.MARKER
    assert record["status"] == "finished" and json.loads(marker.read_text())["status"] == "finished"
    assert record["train_steps"] == 4 and 0.0 <= record["val"]["accuracy"] <= 1.0
    assert record["val"]["num_prompts"] == 6
    assert record["val_heldout"]["num_prompts"] == 6  # the held-out skill's validation rows
    model_dir = Path(record["checkpoint"])
    assert model_dir == out / "model" and (model_dir / "model.safetensors").is_file()
    assert not (out / "trainer").exists()
    # The progress file the mini orchestrator's step bar reads: the last step of max_steps.
    assert json.loads((out / sft.PROGRESS).read_text()) == {"step": 4, "max_steps": 4}

    model = AutoModelForCausalLM.from_pretrained(model_dir)
    tok = AutoTokenizer.from_pretrained(model_dir)
    assert model.config.hidden_size == 128 and model.config.head_dim == 64
    assert len(tok) == len(AutoTokenizer.from_pretrained(tiny_model_dir)) == model.config.vocab_size
    assert tok.eos_token == "<|im_end|>"
    with torch.no_grad():  # it generates with the RL prompt
        enc = tok(render_prompt(tok, "Tom has 3 apples."), return_tensors="pt")
        assert model.generate(**enc, max_new_tokens=3, do_sample=False).shape[1] > enc["input_ids"].shape[1]

    # Finished: a rerun with the same config is skipped (the marker is not rewritten).
    mtime = marker.stat().st_mtime_ns
    assert sft.run_sft(_compose(overrides))["identity"] == record["identity"]
    assert marker.stat().st_mtime_ns == mtime
    # A different config into the same folder is refused, not mixed.
    with pytest.raises(RuntimeError, match="different SFT config"):
        sft.run_sft(_compose([*overrides, "train.lr=1e-3"]))

    # Seeded: the same config into another folder gives the same weights.
    from safetensors.torch import load_file

    again = sft.run_sft(_compose([*overrides, f"out_dir={results_root / 'again'}"]))
    first, second = (
        load_file(model_dir / "model.safetensors"),
        load_file(Path(again["checkpoint"]) / "model.safetensors"),
    )
    assert first.keys() == second.keys()
    assert all(torch.equal(first[k], second[k]) for k in first)
    assert again["train_loss"] == record["train_loss"]


@pytest.mark.parametrize(
    "content",
    [b'{"identity": {"a": 1}, "val": {"accur', b"\xff\xfe not utf-8", b"[1, 2]", b'{"identity": {}}', b""],
)
def test_a_corrupted_finished_marker_means_train_again(tmp_path, caplog, content):
    marker = tmp_path / sft.MARKER
    marker.write_bytes(content)
    with caplog.at_level("WARNING"):
        assert sft._finished_record(marker, tmp_path, {"a": 1}) is None
    assert str(marker) in caplog.text and "training again" in caplog.text


def test_a_finished_marker_of_another_config_is_refused(tmp_path):
    marker = tmp_path / sft.MARKER
    marker.write_text(json.dumps({"identity": {"a": 2}, "val": {"accuracy": 0.5}}))
    with pytest.raises(RuntimeError, match="different SFT config"):
        sft._finished_record(marker, tmp_path, {"a": 1})
    assert sft._finished_record(marker, tmp_path, {"a": 2})["val"]["accuracy"] == 0.5
