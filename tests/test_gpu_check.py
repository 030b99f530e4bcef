"""scripts/gpu_check.py on CPU: arguments, JSON writing, the padded tokenizer, the overrides it passes to
the project's entry points, and (slow) a whole dry run. The real check needs a GPU (scripts/gpu_check.sh)."""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("gpu_check", ROOT / "scripts" / "gpu_check.py")
gc = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(gc)


def test_real_defaults_are_the_issue_sizes(monkeypatch, tmp_path):
    monkeypatch.setenv("OUT", str(tmp_path))
    a = gc.parse_args([])
    assert (a.prompts, a.temperatures, a.grpo_steps) == (500, (0.0, 0.2, 0.4, 0.6, 0.8), 5)
    assert a.model_preset == "qwen2p5_0p5b" and a.dtype == "bfloat16" and a.legs == gc.LEGS
    assert a.out == tmp_path / "gpu_check.json"
    assert a.budget_s <= 540  # the whole check (install included) must end within one 10-minute call
    hard = int(re.search(r"GPU_CHECK_TIMEOUT:-(\d+)", (ROOT / "scripts" / "gpu_check.sh").read_text())[1])
    assert a.budget_s < hard <= 590


def test_dry_run_defaults_and_explicit_values_win(monkeypatch):
    monkeypatch.delenv("OUT", raising=False)
    monkeypatch.delenv("PSPO_RESULTS_DIR", raising=False)
    a = gc.parse_args(["--dry-run", "--prompts", "3", "--temperatures", "0,1.0", "--legs", "eval_hf,grpo"])
    assert a.dry_run and a.model_preset == "tiny" and a.dtype == "float32"
    assert (a.prompts, a.temperatures, a.legs, a.grpo_steps) == (3, (0.0, 1.0), ("eval_hf", "grpo"), 1)
    assert a.out == ROOT / "results" / "gpu_check.json"


def test_without_out_the_json_goes_to_the_results_root_the_commands_use(monkeypatch, tmp_path):
    monkeypatch.delenv("OUT", raising=False)
    monkeypatch.setenv("PSPO_RESULTS_DIR", str(tmp_path))
    assert gc.parse_args(["--dry-run"]).out == tmp_path / "gpu_check.json"


@pytest.mark.parametrize(
    "argv", [["--temperatures", "0,-1"], ["--temperatures", "a"], ["--legs", "eval_tgi"], ["--prompts", "0"]]
)
def test_bad_arguments_exit_with_usage(argv, capsys):
    with pytest.raises(SystemExit) as exc:
        gc.parse_args(argv)
    assert exc.value.code == 2
    assert "usage:" in capsys.readouterr().err


def test_write_json_is_atomic_and_complete(tmp_path):
    path = tmp_path / "deep" / "gpu_check.json"
    gc.write_json(path, {"b": 1, "a": [1.5, None]})
    gc.write_json(path, {"b": 2})
    assert json.loads(path.read_text()) == {"b": 2}
    assert [p.name for p in path.parent.iterdir()] == ["gpu_check.json"]  # no temp file left


def test_pad_tokenizer_json_fills_every_unused_id():
    tj = {"model": {"vocab": {"a": 3, "b": 4}}, "added_tokens": [{"id": 0}, {"id": 1}, {"id": 2}]}
    assert gc.pad_tokenizer_json(tj, 8) == 3
    assert sorted(tj["model"]["vocab"].values()) == [3, 4, 5, 6, 7]
    assert tj["model"]["vocab"]["<fill7>"] == 7
    with pytest.raises(ValueError, match="vocab_size"):
        gc.pad_tokenizer_json({"model": {"vocab": {"a": 9}}}, 8)


def test_padded_tiny_tokenizer_keeps_its_ids(tiny_model_dir, tmp_path):
    import shutil

    from transformers import AutoTokenizer

    for f in Path(tiny_model_dir).iterdir():
        if f.is_file() and f.name.startswith(("tokenizer", "chat_template", "special_tokens")):
            shutil.copy(f, tmp_path / f.name)
    tj = json.loads((tmp_path / "tokenizer.json").read_text())
    gc.pad_tokenizer_json(tj, 4096)
    (tmp_path / "tokenizer.json").write_text(json.dumps(tj))
    old, new = AutoTokenizer.from_pretrained(tiny_model_dir), AutoTokenizer.from_pretrained(tmp_path)
    text = "<|im_start|>user\nTom has 12 apples, 3.5 cents!\n#### 1,234<|im_end|>"
    assert len(new) == 4096 and new(text)["input_ids"] == old(text)["input_ids"]
    assert new.decode([4000]) == "<fill4000>"  # every id the model can emit decodes to something
    msgs = [{"role": "user", "content": "hi"}]
    assert new.apply_chat_template(msgs, tokenize=False) == old.apply_chat_template(msgs, tokenize=False)


def test_overrides_compose_against_the_project_configs(tmp_path):
    """The keys gpu_check passes exist in conf/ (a renamed trainer key fails here, not on the GPU)."""

    from pspo_repro.common import cli
    from pspo_repro.evaluation.evaluator import compose_config

    for dry in (False, True):
        a = gc.parse_args(["--dry-run"] if dry else [])
        for backend in ("hf", "vllm"):
            cfg = compose_config(gc.eval_overrides(a, tmp_path, backend))
            assert cfg.backend == backend and cfg.eval.limit == a.prompts and cfg.chunk_size == a.prompts
            assert list(cfg.temperatures) == list(a.temperatures) and cfg.vllm.dtype == a.dtype
        cfg = cli.compose_config(ROOT / "conf", "train", gc.grpo_overrides(a, tmp_path, use_vllm=not dry))
        assert cfg.model.name == a.model_preset and cfg.model.path == str(tmp_path)
        assert cfg.method.name == "pspo" and cfg.trainer.max_steps == a.grpo_steps
        assert cfg.trainer.use_vllm is (not dry) and cfg.trainer.vllm_mode == "colocate"
        if not dry:
            assert cfg.model.arch.hidden_size == 896 and cfg.model.arch.vocab_size == 151936


def test_figures_summaries():
    leg = {
        "figures": {
            "step_s": [4.0, 2.0, 2.0],
            "profiling_s": {"vLLM.generate": [1.0, 0.5], "sync_weights": [0.5]},
        }
    }
    gc.grpo_figures(leg)
    s = leg["summary"]
    assert s["steps"] == 3 and s["mean_step_s_after_first"] == 2.0 and s["generation_share"] == 0.25


def _precision_leg(**figures):
    base = {"param_dtype": "float32", "param_dtype_after": "float32", "autocast_dtype": "bfloat16",
            "steps": 3, "learning_rate": 1e-6, "changed_after_first_step": 0.99, "changed_after_last_step": 1.0,
            "first_pass_max_abs_ratio_dev": 0.0}  # fmt: skip
    return {"status": "ok", "rc": 0, "log": "precision.log", "figures": {**base, **figures}}


def test_precision_leg_passes_fp32_master_weights_and_reports_the_ratio_deviation():
    leg = _precision_leg(first_pass_max_abs_ratio_dev=3.5e-3)  # finite, even large: reported, not judged
    line = gc.finish_precision_leg(leg)
    assert leg["status"] == "ok" and "reason" not in leg
    assert line.startswith("[gpu_check] precision: ok, parameters float32, autocast bfloat16")
    assert "first-pass max |r - 1| 0.0035" in line


@pytest.mark.parametrize(
    ("figures", "fragment"),
    [
        ({"param_dtype": "bfloat16"}, "training parameters are bfloat16, not float32"),
        ({"param_dtype_after": "bfloat16"}, "training parameters are bfloat16 after training, not float32"),
        (
            {"param_dtype": ["bfloat16", "float32"]},
            "training parameters are ['bfloat16', 'float32'], not float32",
        ),
        ({"first_pass_max_abs_ratio_dev": "nan"}, "first-pass max |r - 1| is nan"),
        ({"first_pass_max_abs_ratio_dev": "inf"}, "first-pass max |r - 1| is inf"),
        ({"first_pass_max_abs_ratio_dev": None}, "first-pass max |r - 1| was not measured"),
    ],
)
def test_precision_leg_fails_in_one_line(figures, fragment, capsys):
    leg = _precision_leg(**figures)
    line = gc.finish_precision_leg(leg)
    assert leg["status"] == "failed" and fragment in leg["reason"] and "\n" not in leg["reason"]
    assert line.startswith("[gpu_check] FAIL precision: ") and fragment in line
    assert gc.overall_rc({"precision": leg, "eval_hf": {"status": "ok"}}) == 1


def test_precision_leg_that_did_not_run_keeps_its_status():
    leg = {"status": "timeout", "rc": -15, "log": "precision.log"}
    line = gc.finish_precision_leg(leg)
    assert leg["status"] == "timeout" and line.startswith("[gpu_check] FAIL precision: timeout")
    assert gc.overall_rc({"precision": {"status": "ok"}, "eval_vllm": {"status": "skipped"}}) == 0


def test_precision_leg_forces_stored_old_logprobs():
    """The leg's overrides keep num_iterations 2, so the first-pass deviation is measured (not r == 1 by fiat)."""
    from pspo_repro.common import cli

    for dry in (False, True):
        a = gc.parse_args(["--dry-run"] if dry else [])
        cfg = cli.compose_config(ROOT / "conf", "train", gc.precision_overrides(a, ROOT))
        assert cfg.method.num_iterations == 2 and cfg.trainer.max_steps == a.precision_steps
        assert cfg.trainer.use_vllm is False and cfg.trainer.get("bf16") == (True if dry else "auto")


def test_real_architecture_is_qwen2p5_0p5b():
    arch = gc.model_arch("qwen2p5_0p5b", dry_run=False)
    assert {k: arch[k] for k in ("hidden_size", "num_hidden_layers", "num_attention_heads")} == {
        "hidden_size": 896,
        "num_hidden_layers": 24,
        "num_attention_heads": 14,
    }
    assert (arch["num_key_value_heads"], arch["intermediate_size"], arch["vocab_size"]) == (2, 4864, 151936)
    assert arch["tie_word_embeddings"] is True


def _report(**legs):
    base = {
        "precision": _precision_leg(),
        "eval_hf": {"status": "ok", "throughput": {"tokens_per_s": 1000.0, "sequences_per_s": 10.0}},
        "eval_vllm": {"status": "ok", "throughput": {"tokens_per_s": 8000.0, "sequences_per_s": 80.0}},
        "grpo": {"status": "ok", "use_vllm": False, "gpu_used_peak_mib": 30000,
                 "figures": {"torch_max_allocated_mib": 25000},
                 "summary": {"first_step_s": 20.0, "mean_step_s_after_first": 12.5, "generation_share": 0.7}},
    }  # fmt: skip
    return {"legs": {**base, **legs}, "vllm_over_hf_tokens_per_s": 8.0, "t0_token_match": {"rate": 0.98}}


def test_answers_from_a_full_report():
    a = gc.answers(_report())
    assert a["fp32_masters"]["answer"] is True and a["fp32_masters"]["autocast_dtype"] == "bfloat16"
    assert a["weights_move_at_lr_1e-6"]["answer"] is True
    assert a["weights_move_at_lr_1e-6"]["changed_after_first_step"] == 0.99
    assert a["first_pass_ratio_dev"] == {
        "answer": 0.0,
        "as_run_clip_unaffected": True,
        "clip_eps_0p1_unaffected": True,
    }
    hv = a["hf_vs_vllm_eval"]
    assert (hv["answer"], hv["hf_tokens_per_s"], hv["vllm_tokens_per_s"], hv["t0_token_match"]) == (
        8.0,
        1000.0,
        8000.0,
        0.98,
    )
    g = a["grpo_step"]
    assert (g["answer"], g["first_step_s"], g["torch_max_allocated_mib"], g["gpu_used_peak_mib"]) == (
        12.5,
        20.0,
        25000,
        30000,
    )


@pytest.mark.parametrize(
    ("figures", "key", "answer"),
    [
        ({"param_dtype": "bfloat16"}, "fp32_masters", False),
        ({"param_dtype_after": "bfloat16"}, "fp32_masters", False),
        ({"changed_after_first_step": 0.022}, "weights_move_at_lr_1e-6", False),  # bf16 weights: ~2% move
        ({"changed_after_first_step": None}, "weights_move_at_lr_1e-6", False),
    ],
)
def test_answers_say_no_where_the_figures_do(figures, key, answer):
    assert gc.answers(_report(precision=_precision_leg(**figures)))[key]["answer"] is answer


def test_answers_a_non_zero_first_pass_deviation_breaks_only_the_as_run_clip():
    dev = gc.answers(_report(precision=_precision_leg(first_pass_max_abs_ratio_dev=2e-3)))[
        "first_pass_ratio_dev"
    ]
    assert dev == {"answer": 2e-3, "as_run_clip_unaffected": False, "clip_eps_0p1_unaffected": True}


def test_answers_name_the_leg_that_did_not_run():
    a = gc.answers(_report(eval_vllm={"status": "skipped", "reason": "vLLM is not importable: No module"},
                           grpo={"status": "timeout"}) | {"vllm_over_hf_tokens_per_s": None})  # fmt: skip
    assert a["hf_vs_vllm_eval"]["answer"] is None and a["hf_vs_vllm_eval"]["hf_tokens_per_s"] == 1000.0
    assert a["hf_vs_vllm_eval"]["why"] == "the eval_vllm leg is skipped: vLLM is not importable: No module"
    assert a["grpo_step"] == {"answer": None, "why": "the grpo leg is timeout"}
    del_prec = gc.answers({"legs": {}})
    assert del_prec["fp32_masters"] == {"answer": None, "why": "the precision leg was not run"}


def test_grpo_step_is_the_papers_real_size_step():
    a = gc.parse_args([])
    s = gc.grpo_step_settings(a, ROOT, use_vllm=False)
    assert (s["per_device_train_batch_size"], s["gradient_accumulation_steps"]) == (4, 16)
    assert (s["completions_per_step"], s["num_generations"], s["max_completion_length"]) == (64, 4, 128)


@pytest.mark.slow
def test_dry_run_end_to_end(tmp_path, data_dir):
    """Build + precision + hf evaluation + one GRPO step on CPU; vLLM legs are skipped (or run, in .venv-vllm)."""
    out = tmp_path / "gpu_check.json"
    res = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "gpu_check.py"), "--dry-run", "--out", str(out)]
        + ["--work-dir", str(tmp_path / "work"), "--prompts", "2", "--temperatures", "0,0.8"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=900,
    )
    report = json.loads(out.read_text())
    assert res.returncode == 0, (res.stdout[-2000:], json.dumps(report["legs"], indent=1)[-4000:])
    assert report["finished"] and report["dry_run"] and report["schema_version"] == 1
    assert report["model"]["params"] > 0 and report["model"]["arch"]["vocab_size"] == gc.DRY_VOCAB
    prec = report["legs"]["precision"]
    assert prec["status"] == "ok", prec.get("log_tail")
    fig = prec["figures"]
    assert (fig["param_dtype"], fig["param_dtype_after"], fig["autocast_dtype"]) == (
        "float32",
        "float32",
        "bfloat16",
    )
    assert fig["learning_rate"] == 1e-6 and fig["steps"] == 1 and fig["changed_after_first_step"] >= 0.9
    assert "[gpu_check] precision: ok, parameters float32, autocast bfloat16" in res.stderr
    assert fig["first_pass_max_abs_ratio_dev"] == 0.0  # CPU: recomputed log-probs equal the stored ones
    hf = report["legs"]["eval_hf"]
    assert hf["status"] == "ok" and hf["throughput"]["sequences"] == 2 + 2 * 2
    assert hf["figures"]["engine_start_s"] >= 0
    grpo = report["legs"]["grpo"]
    assert grpo["status"] == "ok" and grpo["use_vllm"] is False
    assert grpo["summary"]["steps"] == 1 and 0 < grpo["summary"]["generation_share"] < 1
    vl = report["legs"]["eval_vllm"]
    assert vl["status"] == ("ok" if importlib.util.find_spec("vllm") else "skipped")
    ans = report["answers"]
    assert ans["fp32_masters"]["answer"] is True and ans["weights_move_at_lr_1e-6"]["answer"] is True
    assert (
        ans["first_pass_ratio_dev"]["answer"] == 0.0 and ans["first_pass_ratio_dev"]["as_run_clip_unaffected"]
    )
    assert ans["grpo_step"]["answer"] == grpo["summary"]["first_step_s"] > 0  # one step: no mean after it
    assert ans["grpo_step"]["step"]["completions_per_step"] == grpo["step_settings"]["completions_per_step"]
    assert (ans["hf_vs_vllm_eval"]["answer"] is None) == (vl["status"] == "skipped")
