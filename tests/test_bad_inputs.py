"""Catalogue of bad inputs across the three CLIs: each fails fast with ONE line naming the bad value
and what is allowed, exits non-zero (2), loads no model and writes nothing under results/.

Most cases run the real entry points (``main()`` of train/evaluate/aggregate, Hydra included) in this
process with argv patched and stderr captured: a subprocess costs ~6 s of imports on the project's CPU
machines. A sample of them also runs as real subprocesses (``slow``), started together.
"""

from __future__ import annotations

import importlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

PROJECT = Path(__file__).resolve().parents[1]


def _write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


# ---------------------------------------------------------------- fixtures a case may need (built in tmp)


def _data_dir(tmp: Path, split: str, text: str) -> dict[str, str]:
    """An offline data folder whose gsm8k ``split`` file holds ``text``."""
    _write(tmp / "data" / "gsm8k" / f"{split}.jsonl", text)
    return {"PSPO_DATA_DIR": str(tmp / "data")}


def _run_folder(results: Path, best: str | None = "checkpoint-4", ckpt_files: dict | None = None) -> Path:
    run = results / "runs" / "tiny" / "pspo" / "seed0"
    info = {"model": "tiny", "method": "pspo", "seed": 0, "tag": "", "best_checkpoint": best}
    _write(run / "run.json", json.dumps(info))
    for name, content in (ckpt_files or {}).items():
        p = run / best / name
        p.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, Path):
            shutil.copy(content, p)
        else:
            p.write_bytes(content)
    return run


def _tiny_ckpt(tiny: Path, weights: str) -> dict:
    files = {n: tiny / n for n in ("config.json", "tokenizer.json", "tokenizer_config.json")}
    blob = (tiny / "model.safetensors").read_bytes()
    if weights == "pickle":
        files["pytorch_model.bin"] = b"\x80\x04not really a pickle"
    elif weights == "truncated":
        files["model.safetensors"] = blob[: len(blob) // 2]
    return files


def _cell(results: Path, seed: int, **over) -> None:
    cell = {
        "schema_version": 1, "model": "tiny", "method": "pspo", "seed": seed, "tag": "", "dataset": "gsm8k",
        "temperature": 0.0, "max_new_tokens": 128, "n_samples": 1, "top_p": 1.0, "prompt_template": "paper",
        "rows_sha256": "abc", "num_prompts": 2, "metrics": {"true_acc": 0.5, "reward_acc": 0.5},
        "per_prompt": [{"id": "a", "n": 1, "true_correct": 1, "reward_correct": 1},
                       {"id": "b", "n": 1, "true_correct": 0, "reward_correct": 0}],
    }  # fmt: skip
    cell.update(over)
    _write(results / "eval" / "tiny" / "pspo" / f"seed{seed}" / "gsm8k" / "T0.0.json", json.dumps(cell))


def setup_mixed(tmp, results, tiny):
    _cell(results, 0)
    _cell(results, 1, max_new_tokens=64)  # the seeds of one cell were evaluated differently
    return {}


def setup_duplicate(tmp, results, tiny):
    _cell(results, 0)
    dup = results / "eval" / "tiny" / "pspo" / "seed0-copy" / "gsm8k" / "T0.0.json"
    _write(dup, (results / "eval" / "tiny" / "pspo" / "seed0" / "gsm8k" / "T0.0.json").read_text())
    return {}


def setup_torn_cell(tmp, results, tiny):
    _write(results / "eval" / "tiny" / "pspo" / "seed0" / "gsm8k" / "T0.0.json", '{"model": "tiny", "met')
    return {}


def setup_empty_tree(tmp, results, tiny):
    results.mkdir(parents=True)
    return {}


def setup_run_no_ckpt(tmp, results, tiny):
    return {"RUN": str(_run_folder(results, best=None))}


def setup_run_missing_ckpt(tmp, results, tiny):
    return {"RUN": str(_run_folder(results))}


def setup_run_pickle_ckpt(tmp, results, tiny):
    return {"RUN": str(_run_folder(results, ckpt_files=_tiny_ckpt(tiny, "pickle")))}


def setup_run_truncated_ckpt(tmp, results, tiny):
    return {"RUN": str(_run_folder(results, ckpt_files=_tiny_ckpt(tiny, "truncated")))}


# (id, module, args, setup, env, patterns that must all be in the one line). "{RUN}" and "{RESULTS}" are
# filled in from the setup. Every message names the bad value and what is allowed (or what to do).
CASES = [
    # --- train: names of things
    ("train-unknown-method", "train", ["method=nope"], None, None, ["'nope'", "options: cispo, clip"]),
    ("train-unknown-model", "train", ["model=gpt9"], None, None, ["'gpt9'", "options:", "tiny"]),
    ("train-unknown-dataset", "train", ["data=nope"], None, None, ["unknown data 'nope'", "gsm8k"]),
    ("train-unknown-dataset-name", "train", ["model=tiny", "data.name=nope"], None, None, ["'nope'", "allowed: ", "gsm8k"]),
    ("train-unknown-reward", "train", ["reward=nope"], None, None, ["unknown reward 'nope'", "gsm8k_numeric"]),
    ("train-unknown-reward-func", "train", ["model=tiny", "reward.funcs=[nope]"], None, None, ["unknown reward 'nope'", "valid rewards:"]),
    ("train-unknown-launcher", "train", ["hydra/launcher=nope"], None, None, ["launcher 'nope'", "options:", "slurm"]),
    # --- train: hyperparameters out of range
    ("train-alpha-1.5", "train", ["model=tiny", "method=pspo", "method.alpha=1.5"], None, None, ["alpha=1.5", "[0, 1]"]),
    ("train-tau-0", "train", ["model=tiny", "method=p3o", "method.tau=0"], None, None, ["tau=0", "> 0"]),
    ("train-eps-negative", "train", ["model=tiny", "method=clip", "method.eps_low=-0.1"], None, None, ["eps_low=-0.1", ">= 0"]),
    ("train-K-0", "train", ["model=tiny", "method=dppo_topk_tv", "method.topk=0"], None, None, ["topk=0", "integer >= 1"]),
    ("train-num-iterations-0", "train", ["model=tiny", "method.num_iterations=0"], None, None, ["num_iterations=0", "integer >= 1"]),
    ("train-alpha-text", "train", ["model=tiny", "method.alpha=abc"], None, None, ["alpha='abc'", "[0, 1]"]),
    ("train-save-steps", "train", ["model=tiny", "trainer.save_steps=3"], None, None, ["save_steps=3", "multiple of"]),
    ("train-temperature-negative", "train", ["model=tiny", "trainer.temperature=-1"], None, None, ["trainer.temperature", "(0, inf)", "-1"]),
    ("train-temperature-text", "train", ["model=tiny", "trainer.temperature=abc"], None, None, ["trainer.temperature", "'abc'"]),
    ("train-top-p", "train", ["model=tiny", "trainer.top_p=1.5"], None, None, ["trainer.top_p", "(0, 1]", "1.5"]),
    ("train-num-generations-0", "train", ["model=tiny", "trainer.num_generations=0"], None, None, ["trainer.num_generations", "integer in [2, inf)", "0"]),
    ("train-lr-0", "train", ["model=tiny", "trainer.learning_rate=0"], None, None, ["trainer.learning_rate", "(0, inf)"]),
    ("train-prompt-template", "train", ["model=tiny", "data.prompt_template=bogus"], None, None, ["'bogus'", "options:", "paper"]),
    ("train-model-path-missing", "train", ["model=qwen2p5_0p5b", "model.path=/no/such/model"], None, None, ["model.path=/no/such/model", "not a folder"]),
    # --- train: typos and data files
    ("train-typo-key", "train", ["model=tiny", "trainer.max_stepz=3"], None, None, ["trainer.max_stepz", "not in struct"]),
    ("train-empty-dataset", "train", ["model=tiny"], None, "train:", ["train.jsonl", "is empty"]),
    ("train-jsonl-not-json", "train", ["model=tiny"], None, "train:{oops\n", ["train.jsonl:1", "malformed JSON"]),
    ("train-row-no-answer", "train", ["model=tiny"], None, 'train:{"question": "q"}\n', ["train.jsonl:1", "'answer'"]),
    # --- evaluate
    ("eval-unknown-eval", "evaluate", ["model=tiny", "eval=nope"], None, None, ["'nope'", "allowed:", "gsm8k"]),
    ("eval-unknown-dataset", "evaluate", ["model=tiny", "eval.datasets=[nope]"], None, None, ["'nope'", "allowed:", "svamp"]),
    ("eval-unknown-backend", "evaluate", ["model=tiny", "backend=foo"], None, None, ["'foo'", "allowed: auto, hf, vllm"]),
    ("eval-negative-temperature", "evaluate", ["model=tiny", "temperatures=[0.0,-0.2]"], None, None, ["-0.2", ">= 0"]),
    ("eval-text-temperature", "evaluate", ["model=tiny", "temperatures=[abc]"], None, None, ["'abc'", "a number"]),
    ("eval-zero-samples", "evaluate", ["model=tiny", "n_samples=0"], None, None, ["n_samples", "positive integer", "0"]),
    ("eval-top-p", "evaluate", ["model=tiny", "top_p=1.5"], None, None, ["top_p", "(0, 1]", "1.5"]),
    ("eval-typo-key", "evaluate", ["model=tiny", "eval.limt=3"], None, None, ["eval.limt", "not in struct"]),
    ("eval-prompt-template", "evaluate", ["model=tiny", "prompt_template=bogus"], None, None, ["'bogus'", "allowed:", "paper"]),
    ("eval-model-path-no-preset", "evaluate", ["model=/no/such", "model.path=/x"], None, None, ["model_path=", "needs model=<preset>", "qwen2p5_0p5b"]),
    ("eval-model-path-missing", "evaluate", ["model=qwen2p5_0p5b", "model.path=/no/such/model"], None, None, ["/no/such/model", "not found"]),
    ("eval-no-model-path", "evaluate", ["model=/no/such/model"], None, None, ["/no/such/model", "not found"]),
    ("eval-no-run-folder", "evaluate", ["run=/no/such/run"], None, None, ["/no/such/run", "not found"]),
    ("eval-run-no-checkpoint", "evaluate", ["run={RUN}"], setup_run_no_ckpt, None, ["best_checkpoint", "checkpoint=<folder>"]),
    ("eval-run-missing-checkpoint", "evaluate", ["run={RUN}"], setup_run_missing_ckpt, None, ["checkpoint not found", "checkpoint-4"]),
    ("eval-pickle-checkpoint", "evaluate", ["run={RUN}"], setup_run_pickle_ckpt, None, ["no *.safetensors", "pickled"]),
    ("eval-truncated-checkpoint", "evaluate", ["run={RUN}"], setup_run_truncated_ckpt, None, ["model.safetensors", "truncated"]),
    ("eval-empty-dataset", "evaluate", ["model=tiny"], None, "test:", ["test.jsonl", "is empty"]),
    ("eval-jsonl-not-json", "evaluate", ["model=tiny"], None, 'test:{"question": "q", "answer": "#### 1"}\n{oops\n', ["test.jsonl:2", "malformed JSON"]),
    ("eval-row-no-answer", "evaluate", ["model=tiny"], None, 'test:{"question": "q"}\n', ["test.jsonl:1", "'answer'"]),
    # --- aggregate
    ("agg-unknown-ci", "aggregate", ["results_dir={RESULTS}", "ci=jackknife"], setup_mixed, None, ["'jackknife'", "allowed: t_seeds, wilson_pooled, bootstrap"]),
    ("agg-mixed-settings", "aggregate", ["results_dir={RESULTS}"], setup_mixed, None, ["max_new_tokens differs", "seed1/gsm8k/T0.0.json: max_new_tokens=64"]),
    ("agg-duplicate-cells", "aggregate", ["results_dir={RESULTS}"], setup_duplicate, None, ["duplicate results", "seed0-copy"]),
    ("agg-torn-cell", "aggregate", ["results_dir={RESULTS}"], setup_torn_cell, None, ["T0.0.json", "cannot read JSON"]),
    ("agg-empty-tree", "aggregate", ["results_dir={RESULTS}"], setup_empty_tree, None, ["no results found", "eval/**/*.json"]),
    ("agg-expected-seeds", "aggregate", ["results_dir={RESULTS}", "expected_seeds=0"], setup_mixed, None, ["expected_seeds", ">= 1", "0"]),
    ("agg-confidence", "aggregate", ["results_dir={RESULTS}", "confidence=1.5"], setup_mixed, None, ["confidence", "(0, 1)", "1.5"]),
    ("agg-curves-x", "aggregate", ["results_dir={RESULTS}", "curves.x=epoch"], setup_mixed, None, ["curves.x", "num_tokens, step", "'epoch'"]),
    ("agg-typo-key", "aggregate", ["results_dir={RESULTS}", "expected_seed=3"], setup_mixed, None, ["expected_seed", "not in struct"]),
]  # fmt: skip
IDS = [c[0] for c in CASES]


def _snapshot(root: Path) -> dict[str, bytes] | None:
    if not root.exists():
        return None
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def _prepare(case, tmp: Path, tiny: Path):
    """(argv, extra env, results root) for one case, with its files written."""
    _, module, args, setup, data, _ = case
    results = tmp / "results"
    subs = {"RESULTS": str(results)}
    env = {"PSPO_RESULTS_DIR": str(results), "PSPO_LOG_DIR": str(tmp / "hydra-logs")}
    if setup is not None:
        subs.update(setup(tmp, results, tiny))
    if data is not None:
        split, text = data.split(":", 1)
        env.update(_data_dir(tmp, split, text))
    return [a.format(**subs) for a in args], env, results


def _check(case, code, stderr: str, before, results: Path) -> None:
    patterns = case[5]
    assert code == 2, f"exit {code}: {stderr}"
    assert "Traceback" not in stderr, stderr
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1, f"expected one line on stderr, got {len(lines)}: {stderr}"
    last = lines[-1]
    assert last.startswith("error: "), stderr
    for pat in patterns:
        assert pat in last, f"{pat!r} not in {last!r}"
    assert _snapshot(results) == before, "something was written under results/"


@pytest.fixture
def no_model(monkeypatch):
    """Any model, tokenizer or generation backend load fails the test: bad input must stop earlier."""

    def boom(*a, **k):
        raise AssertionError("a model was loaded for bad input")

    import pspo_repro.backends as backends
    import pspo_repro.models as models

    monkeypatch.setattr(models, "load_model", boom)
    monkeypatch.setattr(models, "load_tokenizer", boom)
    monkeypatch.setattr(backends, "make_backend", boom)


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_bad_input_in_process(case, tmp_path, tiny_model_dir, monkeypatch, capsys, no_model):
    argv, env, results = _prepare(case, tmp_path, tiny_model_dir)
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    before = _snapshot(results)
    module = importlib.import_module(f"pspo_repro.{case[1]}")
    monkeypatch.setattr(sys, "argv", [f"pspo_repro.{case[1]}", *argv])
    with pytest.raises(SystemExit) as exc:
        module.main()
    _check(case, exc.value.code, capsys.readouterr().err, before, results)


# A sample through real subprocesses (the whole CLI, interpreter start to exit status).
SUBPROCESS_IDS = [
    "train-unknown-method",
    "train-unknown-launcher",
    "train-alpha-1.5",
    "train-typo-key",
    "train-jsonl-not-json",
    "eval-text-temperature",
    "eval-run-no-checkpoint",
    "agg-mixed-settings",
]


@pytest.fixture(scope="module")
def subprocess_runs(tmp_path_factory, tiny_model_dir):
    """Start every sampled case at once (they are mostly import time), then collect them."""
    procs = {}
    for case in CASES:
        if case[0] not in SUBPROCESS_IDS:
            continue
        tmp = tmp_path_factory.mktemp(case[0])
        argv, env, results = _prepare(case, tmp, tiny_model_dir)
        full_env = {**os.environ, **env, "OMP_NUM_THREADS": "1"}
        proc = subprocess.Popen(
            [sys.executable, "-m", f"pspo_repro.{case[1]}", *argv],
            cwd=PROJECT,
            env=full_env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        procs[case[0]] = (case, proc, _snapshot(results), results)
    out = {}
    for name, (case, proc, before, results) in procs.items():
        _, err = proc.communicate(timeout=180)
        out[name] = (case, proc.returncode, err, before, results)
    return out


@pytest.mark.slow
@pytest.mark.parametrize("name", SUBPROCESS_IDS)
def test_bad_input_subprocess(name, subprocess_runs):
    case, code, err, before, results = subprocess_runs[name]
    _check(case, code, err, before, results)


def test_train_tokenizer_that_cannot_load_writes_nothing(tmp_path, monkeypatch, capsys):
    """The tokenizer loads before the run folder (and its lock) is made: a folder without tokenizer files is
    one line naming it, and results/ stays empty."""
    from pspo_repro import train

    empty = tmp_path / "no_tokenizer"
    empty.mkdir()
    results = tmp_path / "results"
    monkeypatch.setenv("PSPO_RESULTS_DIR", str(results))
    monkeypatch.setenv("PSPO_LOG_DIR", str(tmp_path / "logs"))
    monkeypatch.setattr(sys, "argv", ["pspo_repro.train", "model=tiny", f"model.tokenizer={empty}"])
    with pytest.raises(SystemExit) as exc:
        train.main()
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert exc.value.code == 2 and len(lines) == 1, lines
    assert lines[0].startswith(f"error: cannot load the tokenizer of {empty}: "), lines
    assert not results.exists()
