"""Catalogue of bad inputs across the three CLIs: each fails fast with ONE line naming the bad value
and what is allowed, exits non-zero (2), loads no model and writes nothing under results/.

Most cases run the real entry points (``main()`` of train/evaluate/aggregate, Hydra included) in this
process with argv patched and stderr captured: a subprocess costs ~6 s of imports on the project's CPU
machines. A sample of them also runs as real subprocesses (``slow``), started together.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

import pytest
import warm_cli

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


def _finished_run(results: Path, tiny: Path, marker: bool = True, **info) -> Path:
    """A run folder with a real (tiny) best checkpoint, its completion marker and run.json ``info``."""
    run = _run_folder(results, ckpt_files={n: tiny / n for n in (
        "config.json", "tokenizer.json", "tokenizer_config.json", "model.safetensors")})  # fmt: skip
    if marker:
        (run / "checkpoint-4" / "pspo_complete.json").write_text('{"files": {}}')
    record = {"model": "tiny", "method": "pspo", "seed": 0, "tag": "", "best_checkpoint": "checkpoint-4",
              "status": "finished", **info}  # fmt: skip
    (run / "run.json").write_text(json.dumps(record))
    return run


def setup_run_model_escape(tmp, results, tiny):
    return {"RUN": str(_finished_run(results, tiny, model="../../../../escaped_model"))}


def setup_run_seed_text(tmp, results, tiny):
    return {"RUN": str(_finished_run(results, tiny, seed="abc"))}


def setup_run_running(tmp, results, tiny):
    return {"RUN": str(_finished_run(results, tiny, status="running"))}


def setup_run_no_marker(tmp, results, tiny):
    return {"RUN": str(_finished_run(results, tiny, marker=False))}


def setup_run_outside_ckpt(tmp, results, tiny):
    return {"RUN": str(_finished_run(results, tiny)), "TINY": str(tiny)}


def setup_model_bad_name(tmp, results, tiny):
    folder = tmp / "my@model:v2"
    shutil.copytree(tiny, folder)
    return {"FOLDER": str(folder)}


def setup_pickle_model_path(tmp, results, tiny):
    folder = tmp / "pickled"
    _write(folder / "config.json", (tiny / "config.json").read_text())
    (folder / "pytorch_model.bin").write_bytes(b"\x80\x04not really a pickle")
    return {"FOLDER": str(folder)}


def setup_secret_env(tmp, results, tiny):
    return {"__env__": {"HF_TOKEN": "hf_0123456789abcdef"}}


def setup_non_utf8_cell(tmp, results, tiny):
    _cell(results, 0)
    path = results / "eval" / "tiny" / "pspo" / "seed0" / "gsm8k" / "T0.0.json"
    path.write_bytes(path.read_bytes().replace(b'"paper"', b'"pa\xffper"'))
    return {}


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


def _bad_gold(tmp: Path, rel: str, rows: str) -> dict:
    """A data folder holding only ``rel`` (one benchmark file) with ``rows``; PSPO_DATA_DIR points at it."""
    _write(tmp / "data" / rel, rows)
    return {"__env__": {"PSPO_DATA_DIR": str(tmp / "data")}}


def setup_gsm_hard_nan(tmp, results, tiny):
    return _bad_gold(
        tmp, "gsm_hard/gsmhardv2.jsonl", '{"input": "q", "target": 3}\n{"input": "q", "target": NaN}\n'
    )


def setup_gsm_hard_text(tmp, results, tiny):
    return _bad_gold(tmp, "gsm_hard/gsmhardv2.jsonl", '{"input": "q", "target": "abc"}\n')


def setup_gsm_hard_list(tmp, results, tiny):
    return _bad_gold(tmp, "gsm_hard/gsmhardv2.jsonl", '{"input": "q", "target": [1, 2]}\n')


def setup_gsm_hard_inf(tmp, results, tiny):
    return _bad_gold(tmp, "gsm_hard/gsmhardv2.jsonl", '{"input": "q", "target": Infinity}\n')


def setup_svamp_text(tmp, results, tiny):
    return _bad_gold(
        tmp, "svamp/test.jsonl", '{"ID": "chal-1", "Body": "b", "Question": "q", "Answer": "many"}\n'
    )


def setup_one_cell(tmp, results, tiny):
    _cell(results, 0)
    return {}


# ---------------------------------------------------------------- issue 25 items 2 and 3: identity from where a file sits,
# names from options, links out of results/


def _other_run(results: Path, tiny: Path, method: str = "clip") -> Path:
    """A second finished run (``runs/tiny/<method>/seed0``) with its own checkpoint-4."""
    other = results / "runs" / "tiny" / method / "seed0"
    shutil.copytree(tiny, other / "checkpoint-4")
    (other / "checkpoint-4" / "pspo_complete.json").write_text('{"files": {}}')
    info = {"model": "tiny", "method": method, "seed": 0, "tag": "", "best_checkpoint": "checkpoint-4",
            "status": "finished"}  # fmt: skip
    (other / "run.json").write_text(json.dumps(info))
    return other


def setup_runjson_method_clip(tmp, results, tiny):
    return {"RUN": str(_finished_run(results, tiny, method="clip"))}


def setup_runjson_seed_1(tmp, results, tiny):
    return {"RUN": str(_finished_run(results, tiny, seed=1))}


def setup_runjson_tag_x(tmp, results, tiny):
    return {"RUN": str(_finished_run(results, tiny, tag="x"))}


def setup_runjson_model_other(tmp, results, tiny):
    return {"RUN": str(_finished_run(results, tiny, model="qwen2p5_0p5b"))}


def setup_run_outside_layout(tmp, results, tiny):
    run = _finished_run(results, tiny)
    moved = tmp / "myrun"
    shutil.move(run, moved)
    return {"RUN": str(moved)}


def setup_best_checkpoint_links_to_other_run(tmp, results, tiny):
    run = _finished_run(results, tiny)
    other = _other_run(results, tiny)
    shutil.rmtree(run / "checkpoint-4")
    (run / "checkpoint-4").symlink_to(other / "checkpoint-4")  # run.json's best_checkpoint: another run's
    return {"RUN": str(run)}


def setup_named_checkpoint_links_outside(tmp, results, tiny):
    run = _finished_run(results, tiny)
    shutil.copytree(tiny, tmp / "elsewhere")
    (tmp / "elsewhere" / "pspo_complete.json").write_text('{"files": {}}')
    (run / "checkpoint-9").symlink_to(tmp / "elsewhere")
    return {"RUN": str(run)}


def setup_checkpoint_weights_linked(tmp, results, tiny):
    run = _finished_run(results, tiny)
    other = _other_run(results, tiny)
    (run / "checkpoint-4" / "model.safetensors").unlink()
    (run / "checkpoint-4" / "model.safetensors").symlink_to(other / "checkpoint-4" / "model.safetensors")
    return {"RUN": str(run)}


def _metrics_run(results: Path, folder: str, **info) -> None:
    run = results / "runs" / "tiny" / "pspo" / folder
    record = {"model": "tiny", "method": "pspo", "seed": 0, "tag": "", "status": "finished", **info}
    _write(run / "run.json", json.dumps(record))
    _write(run / "metrics.jsonl", '{"step": 0, "eval/reward": 0.1}\n{"step": 1, "eval/reward": 0.2}\n')


def setup_agg_runjson_method(tmp, results, tiny):
    _cell(results, 0)
    _metrics_run(results, "seed0", method="clip")
    return {}


def setup_agg_runjson_seed(tmp, results, tiny):
    _cell(results, 0)
    _metrics_run(results, "seed0", seed=3)
    return {}


def setup_agg_runjson_tag(tmp, results, tiny):
    _cell(results, 0)
    _metrics_run(results, "seed0-alpha_ablation", tag="main")
    return {}


def setup_cell_method_escape(tmp, results, tiny):
    """A cell whose method (read from the file) is a path: paired.pairs naming it used to write there."""
    _cell(results, 0)
    _cell(results, 1, method="../../../../x")
    return {}


def setup_tables_link_outside(tmp, results, tiny):
    _cell(results, 0)
    (tmp / "elsewhere").mkdir()
    (results / "tables").symlink_to(tmp / "elsewhere")
    return {}


def setup_eval_link_outside(tmp, results, tiny):
    (tmp / "elsewhere").mkdir()
    results.mkdir(parents=True)
    (results / "eval").symlink_to(tmp / "elsewhere")
    return {}


def setup_runs_link_outside(tmp, results, tiny):
    (tmp / "elsewhere").mkdir()
    results.mkdir(parents=True)
    (results / "runs").symlink_to(tmp / "elsewhere")
    return {}


def _not_utf8(path: Path) -> Path:
    """``path`` with a byte that is not UTF-8 appended to its last name (Linux takes any bytes but ``/``)."""
    return Path(os.fsdecode(os.fsencode(path) + b"\xff"))


def setup_eval_folder_not_utf8(tmp, results, tiny):
    _cell(results, 0)
    cell = results / "eval" / "tiny" / "pspo" / "seed0" / "gsm8k" / "T0.0.json"
    other = _not_utf8(results / "eval" / "tiny" / "pspo" / "seed1") / "gsm8k" / "T0.0.json"
    other.parent.mkdir(parents=True)
    other.write_text(cell.read_text().replace('"seed": 0', '"seed": 1'))
    return {}


def setup_run_folder_not_utf8(tmp, results, tiny):
    _cell(results, 0)
    run = _not_utf8(results / "runs" / "tiny" / "pspo" / "seed0")
    _write(run / "metrics.jsonl", '{"step": 1, "eval/reward": 0.5}\n')
    return {}


# ---------------------------------------------------------------- issue 36 item 1: one reader of run records


def _records_run(results: Path, metrics: str, folder: str = "seed0", method: str = "pspo", **info) -> Path:
    """A cell (so aggregate has a table) and a run whose metrics.jsonl is ``metrics`` and run.json ``info``."""
    _cell(results, 0)
    run = results / "runs" / "tiny" / method / folder
    config = {"method": {"name": method}, "trainer": {"max_grad_norm": 1.0}}
    record = {"model": "tiny", "method": method, "seed": 0, "tag": "", "status": "finished", "config": config,
              **info}  # fmt: skip
    _write(run / "run.json", json.dumps(record))
    _write(run / "metrics.jsonl", metrics)
    return run


_GOOD = '{"step": 0, "num_tokens": 10, "eval/reward": 0.1}\n'


def _metrics_case(metrics: str, **info):
    return lambda tmp, results, tiny: (_records_run(results, metrics, **info), {})[1]


def _config_case(config):
    def setup(tmp, results, tiny):
        _records_run(results, _GOOD, config=config)
        return {}

    return setup


def setup_runs_two_base_models(tmp, results, tiny):
    """Two seeds of one method folder trained from different base models (config.model.path)."""
    for seed, path in ((0, "/models/a"), (1, "/models/b")):
        config = {
            "model": {"name": "tiny", "path": path},
            "method": {"name": "pspo"},
            "trainer": {"max_grad_norm": 1.0},
        }
        _records_run(results, _GOOD, folder=f"seed{seed}", seed=seed, config=config)
    return {}


def setup_runs_method_not_registered(tmp, results, tiny):
    _records_run(results, _GOOD, method="nope")
    return {}


# ---------------------------------------------------------------- issue 36 item 2: output folders before any work


def setup_results_dir_file(tmp, results, tiny):
    _write(tmp / "resfile", "a file, not a folder")
    return {"__env__": {"PSPO_RESULTS_DIR": str(tmp / "resfile")}}


def setup_log_dir_file(tmp, results, tiny):
    _write(tmp / "logfile", "a file, not a folder")
    return {"__env__": {"PSPO_LOG_DIR": str(tmp / "logfile")}}


def setup_results_dir_too_long(tmp, results, tiny):
    return {"__env__": {"PSPO_RESULTS_DIR": str(tmp / ("r" * 300))}}


def setup_log_dir_under_file(tmp, results, tiny):
    _write(tmp / "logfile", "a file, not a folder")
    return {"__env__": {"PSPO_LOG_DIR": str(tmp / "logfile" / "logs")}}


def setup_out_dir_file(tmp, results, tiny):
    _cell(results, 0)
    _write(tmp / "outfile", "a file, not a folder")
    return {}


def setup_stale_is_file(tmp, results, tiny):
    _cell(results, 0)
    _write(results / "tables" / "stale", "a file where aggregation sets files aside")
    return {}


# ---------------------------------------------------------------- issue 36 item 3: the claims spec, checked up front

# A valid spec (each case below edits one thing); written by hand so its lines are known: the claim starts on
# line 2, its measurements are on lines 10-11, the verdict on line 12.
CLAIMS_SPEC = """\
claims:
  - id: c1
    claim: PSPO beats clip
    quote: q
    section: s
    test: t
    test_short: toy
    key: diff
    measure:
      - {id: acc, kind: accuracy, a: {method: pspo}}
      - {id: diff, kind: compare, a: {method: pspo}, b: {method: clip}}
    verdict: {rule: greater, diff: diff}
"""


def _spec_case(old: str = "", new: str = "", *, raw: bytes | None = None):
    """A claims case: the valid spec with ``old`` replaced by ``new`` (or ``raw`` bytes), beside one cell, so
    a command that read the records before the spec would meet the records first."""
    assert old in CLAIMS_SPEC

    def setup(tmp, results, tiny):
        _cell(results, 0)
        spec = tmp / "spec.yaml"
        if raw is not None:
            spec.write_bytes(raw)
        else:
            spec.write_text(CLAIMS_SPEC.replace(old, new, 1) if old else new)
        return {"SPEC": str(spec)}

    return setup


def _user_set(text: str):
    """A case with a user's own data file ``{TMP}/mine.jsonl`` holding ``text`` (issue 58, item 1)."""

    def setup(tmp, results, tiny):
        (tmp / "mine.jsonl").write_text(text)
        return {}

    return setup


_USER_ROWS = '{"q": "What is 1 plus 1?", "a": "2"}\n{"q": "What is 2 plus 5?", "a": "seven"}\n'
_CLAIMS_ARGS = ["results_dir={RESULTS}", "out_dir={TMP}/claims_out", "spec={SPEC}"]
_TUNING = "tuning:\n  lr: {from_tag: tune, to_tag: tuned, key: trainer.learning_rate, values: [1.0e-4], seeds: [100]}\n"


# (id, module, args, setup, env, patterns that must all be in the one line). "{RUN}" and "{RESULTS}" are
# filled in from the setup. Every message names the bad value and what is allowed (or what to do).
CASES = [
    # --- train: names of things
    ("train-unknown-method", "train", ["method=nope"], None, None, ["'nope'", "options: archer, aspo, bapo, bypass_seq_max_rs, bypass_seq_mean_rs, bypass_token_rs, ce_gppo, cispo, clip"]),
    ("train-unknown-model", "train", ["model=gpt9"], None, None, ["'gpt9'", "options:", "tiny"]),
    ("train-unknown-dataset", "train", ["data=nope"], None, None, ["unknown data 'nope'", "gsm8k"]),
    ("train-unknown-dataset-name", "train", ["model=tiny", "data.name=nope"], None, None, ["'nope'", "allowed: ", "gsm8k"]),
    ("train-unknown-reward", "train", ["reward=nope"], None, None, ["unknown reward 'nope'", "gsm8k_numeric"]),
    ("train-unknown-reward-func", "train", ["model=tiny", "reward.funcs=[nope]"], None, None, ["unknown reward 'nope'", "valid rewards:"]),
    ("train-unknown-launcher", "train", ["hydra/launcher=nope"], None, None, ["launcher 'nope'", "options:", "slurm"]),
    # a typo of a closed set's name: the closest name first, then still the whole list (issue 58, 7b)
    ("train-typo-method", "train", ["method=pspp"], None, None, ["unknown method 'pspp'; did you mean pspo? options: archer, aspo"]),
    ("train-typo-model", "train", ["model=tny"], None, None, ["unknown model 'tny'; did you mean tiny? options:", "qwen2p5_0p5b"]),
    ("train-typo-data", "train", ["data=gsm8"], None, None, ["unknown data 'gsm8'; did you mean gsm8k? options:", "synthetic"]),
    ("train-typo-data-name", "train", ["model=tiny", "data.name=gsm8"], None, None, ["'gsm8'; did you mean gsm8k? allowed: ", "math"]),
    ("train-typo-reward", "train", ["reward=gsm8k_numerc"], None, None, ["unknown reward 'gsm8k_numerc'; did you mean gsm8k_numeric? options:", "math_verify"]),
    ("train-typo-launcher", "train", ["hydra/launcher=slurn"], None, None, ["launcher 'slurn'; did you mean slurm? options:"]),
    # --- train: hyperparameters out of range
    ("train-alpha-1.5", "train", ["model=tiny", "method=pspo", "method.alpha=1.5"], None, None, ["alpha=1.5", "[0, 1]"]),
    ("train-tau-0", "train", ["model=tiny", "method=p3o", "method.tau=0"], None, None, ["tau=0", "> 0"]),
    ("train-eps-negative", "train", ["model=tiny", "method=clip", "method.eps_low=-0.1"], None, None, ["eps_low=-0.1", ">= 0"]),
    ("train-K-0", "train", ["model=tiny", "method=dppo_topk_tv", "method.topk=0"], None, None, ["topk=0", "integer >= 1"]),
    ("train-num-iterations-0", "train", ["model=tiny", "method.num_iterations=0"], None, None, ["num_iterations=0", "integer >= 1"]),
    ("train-alpha-text", "train", ["model=tiny", "method.alpha=abc"], None, None, ["alpha='abc'", "[0, 1]"]),
    # --- train: two method values that must agree (issue 59), and a rollout correction that is no mode
    ("train-bapo-lower-start-above-max", "train", ["model=tiny", "method=bapo", "method.ratio_lower_start=0.95"], None, None, ["ratio_lower_start=0.95 is above ratio_lower_max=0.9", "allowed: ratio_lower_start <= ratio_lower_max"]),
    ("train-bapo-upper-start-above-max", "train", ["model=tiny", "method=bapo", "method.ratio_upper_start=3.5"], None, None, ["ratio_upper_start=3.5 is above ratio_upper_max=3.0", "allowed: ratio_upper_start <= ratio_upper_max"]),
    ("train-erc-empty-band", "train", ["model=tiny", "method=erc", "method.entropy_ratio_low=1.05"], None, None, ["entropy_ratio_low=1.05 is not below entropy_ratio_high=1.05", "allowed: entropy_ratio_low < entropy_ratio_high"]),
    ("train-rollout-correction-number", "train", ["model=tiny", "method.rollout_correction=5"], None, None, ["method.rollout_correction=5 is invalid", "allowed: none, a mode or a list of modes"]),
    ("train-save-steps", "train", ["model=tiny", "trainer.save_steps=3"], None, None, ["save_steps=3", "must equal trainer.eval_steps"]),
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
    # a researcher's own data set: the built-in sets' checks, one line naming the file and row (issue 58, item 1)
    ("train-user-set-missing-column", "train", ["model=tiny", "data={TMP}/mine.jsonl"], _user_set(_USER_ROWS), None, ["mine.jsonl: no column 'question' (data.columns.question); columns: q, a"]),
    ("train-user-set-bad-gold", "train", ["model=tiny", "data={TMP}/mine.jsonl", "data.columns.question=q", "data.columns.answer=a"], _user_set(_USER_ROWS), None, ["mine.jsonl:2:", "gold 'seven' is not a finite number"]),
    ("train-user-set-empty", "train", ["model=tiny", "data={TMP}/mine.jsonl"], _user_set(""), None, ["mine.jsonl: the data set is empty"]),
    ("train-user-set-kind", "train", ["model=tiny", "data={TMP}/mine.jsonl", "data.answer_kind=numbr"], _user_set(_USER_ROWS), None, ["data.answer_kind must be one of numeric, number", "did you mean number?"]),
    ("train-user-set-no-file", "train", ["model=tiny", "data={TMP}/none.parquet"], None, None, ["data file not found: ", "none.parquet"]),
    ("eval-user-set-missing-column", "evaluate", ["model=tiny", "eval={TMP}/mine.jsonl", "eval.columns.question=q", "eval.columns.answer=answer"], _user_set(_USER_ROWS), None, ["mine.jsonl: no column 'answer' (eval.columns.answer); columns: q, a"]),
    ("eval-typo-eval", "evaluate", ["model=tiny", "eval=gsm8"], None, None, ["unknown eval config 'gsm8'; did you mean gsm8k? allowed:", "svamp"]),
    ("eval-typo-dataset", "evaluate", ["model=tiny", "eval.datasets=[svam]"], None, None, ["'svam'; did you mean svamp? allowed:", "gsm8k"]),
    ("eval-typo-backend", "evaluate", ["model=tiny", "backend=vlm"], None, None, ["'vlm'; did you mean vllm? allowed: auto, hf, vllm"]),
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
    ("agg-expected-seeds", "aggregate", ["results_dir={RESULTS}", "expected_seeds=0"], setup_mixed, None, ["expected_seeds", "[1, inf)", "0"]),
    ("agg-confidence", "aggregate", ["results_dir={RESULTS}", "confidence=1.5"], setup_mixed, None, ["confidence", "(0, 1)", "1.5"]),
    ("agg-curves-x", "aggregate", ["results_dir={RESULTS}", "curves.x=epoch"], setup_mixed, None, ["curves.x", "num_tokens, step", "'epoch'"]),
    ("agg-typo-key", "aggregate", ["results_dir={RESULTS}", "expected_seed=3"], setup_mixed, None, ["expected_seed", "not in struct"]),
    # --- issue 19, class 1: names that become paths (one rule, safe_paths.check_name)
    ("train-run-tag-escape", "train", ["model=tiny", "run_tag=x/../../../../../escaped"], None, None, ["run_tag='x/../../../../../escaped'", "cannot name a results folder", "A-Z a-z 0-9"]),
    ("train-run-tag-nested", "train", ["model=tiny", "run_tag=a/b"], None, None, ["run_tag='a/b'", "cannot name a results folder"]),
    ("train-run-tag-dotdot", "train", ["model=tiny", "run_tag=.."], None, None, ["run_tag='..'", "starting with a letter or digit"]),
    ("train-run-tag-secret", "train", ["model=tiny", "run_tag=${{oc.env:HF_TOKEN}}"], setup_secret_env, None, ["run_tag reads the environment", "takes the name itself"]),
    ("train-run-tag-unset-env", "train", ["model=tiny", "run_tag=${{oc.env:PSPO_NO_SUCH_VARIABLE}}"], None, None, ["run_tag reads the environment", "takes the name itself"]),
    ("eval-runjson-model-escape", "evaluate", ["run={RUN}"], setup_run_model_escape, None, ["model in ", "run.json='../../../../escaped_model'", "cannot name a results folder"]),
    ("eval-runjson-seed-text", "evaluate", ["run={RUN}"], setup_run_seed_text, None, ["seed in ", "'abc'", "[0, 4294967295]"]),
    ("eval-checkpoint-outside-run", "evaluate", ["run={RUN}", "checkpoint={TINY}"], setup_run_outside_ckpt, None, ["checkpoint=", "lies outside", "model=<folder>"]),
    ("eval-model-folder-name", "evaluate", ["model={FOLDER}"], setup_model_bad_name, None, ["'my@model:v2'", "cannot name a results folder"]),
    # --- class 3: an unfinished run or checkpoint is not evaluated as final unless named
    ("eval-run-running", "evaluate", ["run={RUN}"], setup_run_running, None, ["'running', not 'finished'", "checkpoint=<folder>"]),
    ("eval-checkpoint-no-marker", "evaluate", ["run={RUN}"], setup_run_no_marker, None, ["pspo_complete.json", "cut short", "checkpoint=<folder>"]),
    # --- class 4: one line where there was a traceback
    ("train-seed-text", "train", ["model=tiny", "seed=abc"], None, None, ["seed must be an integer", "'abc'"]),
    ("train-seed-huge", "train", ["model=tiny", "seed=99999999999999999999"], None, None, ["seed must be an integer in [0, 4294967295]", "99999999999999999999"]),
    ("train-max-steps-text", "train", ["model=tiny", "trainer.max_steps=abc"], None, None, ["trainer.max_steps", "an integer", "'abc'"]),
    ("train-answer-number", "train", ["model=tiny"], None, 'train:{"question": "q", "answer": 2}\n', ["train.jsonl:1", "'answer' must be a string", "int 2"]),
    ("eval-question-number", "evaluate", ["model=tiny"], None, 'test:{"question": 12345, "answer": "#### 1"}\n', ["test.jsonl:1", "'question' must be a string", "12345"]),
    ("train-model-path-pickled", "train", ["model=qwen2p5_0p5b", "model.path={FOLDER}"], setup_pickle_model_path, None, ["model.path=", "no *.safetensors", "pickled"]),
    ("eval-data-not-utf8", "evaluate", ["model=tiny"], None, b'test:{"question": "q\xff", "answer": "#### 1"}\n', ["test.jsonl:1", "not UTF-8"]),
    ("agg-expected-seeds-text", "aggregate", ["results_dir={RESULTS}", "expected_seeds=abc"], setup_mixed, None, ["expected_seeds must be an integer", "'abc'"]),
    ("agg-confidence-text", "aggregate", ["results_dir={RESULTS}", "confidence=abc"], setup_mixed, None, ["confidence must be a number in (0, 1)", "'abc'"]),
    ("agg-cell-not-utf8", "aggregate", ["results_dir={RESULTS}"], setup_non_utf8_cell, None, ["T0.0.json", "cannot read JSON", "utf-8"]),
    # --- class 5: values that must not be accepted (infinity is no number; integers take integers)
    ("train-lr-inf", "train", ["model=tiny", "trainer.learning_rate=inf"], None, None, ["trainer.learning_rate", "(0, inf)", "got inf"]),
    ("train-temperature-inf", "train", ["model=tiny", "trainer.temperature=inf"], None, None, ["trainer.temperature", "got inf"]),
    ("train-eval-limit-0", "train", ["model=tiny", "trainer.eval_limit=0"], None, None, ["trainer.eval_limit", "integer in [1, inf) or null", "got 0"]),
    ("train-eval-limit-negative", "train", ["model=tiny", "trainer.eval_limit=-1"], None, None, ["trainer.eval_limit", "got -1"]),
    ("train-save-steps-float", "train", ["model=tiny", "trainer.save_steps=2.5"], None, None, ["trainer.save_steps", "an integer", "2.5"]),
    ("eval-temperature-inf", "evaluate", ["model=tiny", "temperatures=[inf]"], None, None, ["temperature", "a number", "inf"]),
    ("agg-expected-seeds-float", "aggregate", ["results_dir={RESULTS}", "expected_seeds=1.9"], setup_mixed, None, ["expected_seeds must be an integer", "1.9"]),
    ("agg-confidence-inf", "aggregate", ["results_dir={RESULTS}", "confidence=inf"], setup_mixed, None, ["confidence", "inf"]),
    ("eval-plus-typo", "evaluate", ["model=tiny", "+eval.limt=3"], None, None, ["+eval.limt=3", "not a setting", "did you mean eval.limit"]),
    ("train-plus-typo", "train", ["model=tiny", "+trainer.max_stepz=3"], None, None, ["+trainer.max_stepz=3", "did you mean trainer.max_steps"]),
    # --- class 7: messages name the key, the value and what is allowed; a bad file names file and line
    ("train-seed-negative", "train", ["model=tiny", "seed=-1"], None, None, ["seed must be an integer in [0, 4294967295], got -1"]),
    ("train-data-not-utf8", "train", ["model=tiny"], None, b'train:{"question": "q", "answer": "#### 1"}\n{"question": "\xfe"}\n', ["train.jsonl:2", "not UTF-8"]),
    # --- issue 25 item 4: values that cannot be right are refused at the door
    ("eval-n-samples-huge", "evaluate", ["model=tiny", "n_samples=1e9"], None, None, ["n_samples must be a positive integer <= 1024", "1000000000"]),
    ("eval-n-samples-float", "evaluate", ["model=tiny", "n_samples=1.5"], None, None, ["n_samples must be an integer", "1.5"]),
    ("eval-n-samples-text", "evaluate", ["model=tiny", "n_samples=abc"], None, None, ["n_samples must be an integer", "'abc'"]),
    ("eval-max-new-tokens-huge", "evaluate", ["model=tiny", "max_new_tokens=1e9"], None, None, ["max_new_tokens must be a positive integer <= 32768", "1000000000"]),
    ("eval-max-new-tokens-float", "evaluate", ["model=tiny", "max_new_tokens=1.5"], None, None, ["max_new_tokens must be an integer", "1.5"]),
    ("eval-max-new-tokens-text", "evaluate", ["model=tiny", "max_new_tokens=abc"], None, None, ["max_new_tokens must be an integer", "'abc'"]),
    ("eval-max-new-tokens-context", "evaluate", ["model=tiny", "max_new_tokens=2047", "eval.limit=2"], None, None, ["max_new_tokens=2047", "max_position_embeddings 2048", "at most"]),
    ("eval-vllm-dtype", "evaluate", ["model=tiny", "vllm.dtype=int8"], None, None, ["vllm.dtype", "'int8'", "auto, float32, bfloat16, float16"]),
    ("eval-device", "evaluate", ["model=tiny", "device=gpu"], None, None, ["device", "'gpu'", "auto, cpu, cuda"]),
    ("eval-gsm-hard-nan", "evaluate", ["model=tiny", "eval=gsm_hard"], setup_gsm_hard_nan, None, ["gsmhardv2.jsonl:2", "gsm_hard", "gsm_hard/1", "nan", "a finite number"]),
    ("eval-gsm-hard-text", "evaluate", ["model=tiny", "eval=gsm_hard"], setup_gsm_hard_text, None, ["gsm_hard/0", "'abc'", "a finite number"]),
    ("eval-gsm-hard-list", "evaluate", ["model=tiny", "eval=gsm_hard"], setup_gsm_hard_list, None, ["gsm_hard/0", "[1, 2]", "a finite number"]),
    ("eval-gsm-hard-inf", "evaluate", ["model=tiny", "eval=gsm_hard"], setup_gsm_hard_inf, None, ["gsm_hard/0", "inf", "a finite number"]),
    ("eval-svamp-text", "evaluate", ["model=tiny", "eval=svamp"], setup_svamp_text, None, ["svamp", "svamp/chal-1", "'many'", "a finite number"]),
    ("eval-gsm8k-gold-text", "evaluate", ["model=tiny"], None, 'test:{"question": "q", "answer": "so #### many"}\n', ["test.jsonl:1", "gsm8k/test/0", "'many'", "a finite number"]),
    ("train-gsm8k-gold-nan", "train", ["model=tiny"], None, 'train:{"question": "q", "answer": "#### nan"}\n', ["train.jsonl:1", "gsm8k/train/0", "'nan'", "a finite number"]),
    ("train-eval-on-start-maybe", "train", ["model=tiny", "trainer.eval_on_start=maybe"], None, None, ["trainer.eval_on_start must be true or false", "'maybe'"]),
    ("train-dry-run-maybe", "train", ["model=tiny", "dry_run=maybe"], None, None, ["dry_run must be true or false", "'maybe'"]),
    ("train-use-vllm-yes", "train", ["model=tiny", "trainer.use_vllm=yes"], None, None, ["trainer.use_vllm must be true or false", "'yes'"]),
    ("train-skip-nonfinite-1", "train", ["model=tiny", "trainer.skip_nonfinite=1"], None, None, ["trainer.skip_nonfinite must be true or false", "got 1"]),
    ("train-random-init-text", "train", ["model=tiny", "model.random_init=maybe"], None, None, ["model.random_init must be true or false", "'maybe'"]),
    ("train-bf16-maybe", "train", ["model=tiny", "trainer.bf16=maybe"], None, None, ["trainer.bf16 must be auto, true or false", "'maybe'"]),
    ("train-eval-on-start-no-eval", "train", ["model=tiny", "trainer.eval_on_start=true", "trainer.eval_steps=null"], None, None, ["trainer.eval_on_start=true", "trainer.eval_steps=null", "no validation"]),
    ("train-dtype-int8", "train", ["model=tiny", "model.dtype=int8"], None, None, ["model.dtype must be one of auto, float32, float64, bfloat16, float16", "'int8'"]),
    ("train-dtype-int8-opted-in", "train", ["model=tiny", "model.dtype=int8", "model.train_dtype=float32"], None, None, ["model.dtype must be one of auto, float32", "'int8'"]),
    ("train-default-reward-unknown", "train", ["model=tiny", "data.default_reward=nope"], None, None, ["data.default_reward", "'nope'", "gsm8k_numeric"]),
    ("agg-add-metrics-string", "aggregate", ["results_dir={RESULTS}", "add_metrics=maj@16"], setup_one_cell, None, ["add_metrics must be a list", "'maj@16'", 'add_metrics=["maj@16"]']),
    ("agg-add-metrics-maj0", "aggregate", ["results_dir={RESULTS}", 'add_metrics=["maj@0"]'], setup_one_cell, None, ["add_metrics", "'maj@0'", "k an integer >= 1"]),
    ("agg-add-metrics-maj-negative", "aggregate", ["results_dir={RESULTS}", 'add_metrics=["maj@-1"]'], setup_one_cell, None, ["add_metrics", "'maj@-1'", "k an integer >= 1"]),
    ("agg-add-metrics-pass-abc", "aggregate", ["results_dir={RESULTS}", 'add_metrics=["pass@abc"]'], setup_one_cell, None, ["add_metrics", "'pass@abc'", "reward_pass@k"]),
    ("agg-add-metrics-unknown", "aggregate", ["results_dir={RESULTS}", "add_metrics=[accuracy]"], setup_one_cell, None, ["add_metrics", "'accuracy'", "true_acc"]),
    ("agg-paired-metrics-unknown", "aggregate", ["results_dir={RESULTS}", "paired.metrics=[true_accc]"], setup_one_cell, None, ["paired.metrics", "'true_accc'", "true_acc"]),
    ("agg-paired-method-no-cells", "aggregate", ["results_dir={RESULTS}", "paired.pairs=[[pspo,clpi]]"], setup_one_cell, None, ["paired.pairs", "'clpi'", "no evaluation cells", "methods with cells: pspo"]),
    # --- issue 25 item 2: a run.json names the run its folder is; a checkpoint is the run's own
    ("eval-runjson-method-disagrees", "evaluate", ["run={RUN}"], setup_runjson_method_clip, None, ["run.json: method 'clip' disagrees with its folder", "(method 'pspo'", "runs/<model>/<method>/seed<N>"]),
    ("eval-runjson-seed-disagrees", "evaluate", ["run={RUN}"], setup_runjson_seed_1, None, ["run.json: seed 1 disagrees with its folder", "(seed 0"]),
    ("eval-runjson-tag-disagrees", "evaluate", ["run={RUN}"], setup_runjson_tag_x, None, ["run.json: tag 'x' disagrees with its folder", "(tag ''"]),
    ("eval-runjson-model-disagrees", "evaluate", ["run={RUN}"], setup_runjson_model_other, None, ["run.json: model 'qwen2p5_0p5b' disagrees", "(model 'tiny'"]),
    ("eval-run-outside-layout", "evaluate", ["run={RUN}"], setup_run_outside_layout, None, ["run.json: its folder 'myrun' is not seed<N>[-<tag>]"]),
    ("eval-best-checkpoint-is-other-run", "evaluate", ["run={RUN}"], setup_best_checkpoint_links_to_other_run, None, ["best_checkpoint in", "runs/tiny/clip/seed0/checkpoint-4", "outside the run folder", "allow_foreign_checkpoint=true"]),
    ("eval-checkpoint-links-outside", "evaluate", ["run={RUN}", "checkpoint=checkpoint-9"], setup_named_checkpoint_links_outside, None, ["checkpoint= ", "elsewhere", "outside the run folder", "model=<folder>"]),
    ("eval-checkpoint-weights-linked", "evaluate", ["run={RUN}"], setup_checkpoint_weights_linked, None, ["model.safetensors resolves to", "clip/seed0/checkpoint-4/model.safetensors", "outside the run folder"]),
    ("eval-allow-foreign-maybe", "evaluate", ["model=tiny", "allow_foreign_checkpoint=maybe"], None, None, ["allow_foreign_checkpoint must be true or false", "'maybe'"]),
    ("agg-runjson-method-disagrees", "aggregate", ["results_dir={RESULTS}"], setup_agg_runjson_method, None, ["pspo/seed0/run.json: method 'clip' disagrees with its folder", "(method 'pspo'"]),
    ("agg-runjson-seed-disagrees", "aggregate", ["results_dir={RESULTS}"], setup_agg_runjson_seed, None, ["run.json: seed 3 disagrees with its folder", "(seed 0"]),
    ("agg-runjson-tag-disagrees", "aggregate", ["results_dir={RESULTS}"], setup_agg_runjson_tag, None, ["run.json: tag 'main' disagrees", "(tag 'alpha_ablation'"]),
    # --- issue 25 item 3: options that become file names; links out of results/
    ("agg-paired-method-escape", "aggregate", ["results_dir={RESULTS}", "paired.pairs=[[pspo,../../../../x]]"], setup_cell_method_escape, None, ["paired.pairs method='../../../../x'", "cannot name a results folder"]),
    ("agg-paired-method-nested", "aggregate", ["results_dir={RESULTS}", "paired.pairs=[[pspo,a/b]]"], setup_one_cell, None, ["paired.pairs method='a/b'", "cannot name a results folder"]),
    ("agg-paired-method-dotdot", "aggregate", ["results_dir={RESULTS}", "paired.pairs=[[pspo,..]]"], setup_one_cell, None, ["paired.pairs method='..'", "starting with a letter or digit"]),
    ("agg-add-metrics-escape", "aggregate", ["results_dir={RESULTS}", 'add_metrics=["../../../../x"]'], setup_one_cell, None, ["add_metrics", "'../../../../x'"]),
    ("agg-tables-link-outside", "aggregate", ["results_dir={RESULTS}"], setup_tables_link_outside, None, ["out_dir", "tables is a symlink to", "elsewhere", "refusing to write through it", "PSPO_RESULTS_DIR"]),
    ("eval-eval-link-outside", "evaluate", ["model=tiny", "eval.limit=2", "temperatures=[0.0]"], setup_eval_link_outside, None, ["results/eval is a symlink to", "elsewhere", "refusing to write through it"]),
    ("train-runs-link-outside", "train", ["model=tiny"], setup_runs_link_outside, None, ["results/runs is a symlink to", "elsewhere", "refusing to write through it"]),
    # --- issue 25 item 3 (hydra): names Hydra builds its own folder from are checked before it makes one
    # (the run runs in a sandbox working folder: an escaping .hydra/ or a multirun/ there fails the test)
    ("train-hydra-model-name-dotdot", "train", ["model=tiny", "model.name=../../escaped"], None, None, ["model.name='../../escaped'", "cannot name a results folder", "hydra.run.dir"]),
    ("train-hydra-method-name-dotdot", "train", ["model=tiny", "method.name=x/../../../escaped"], None, None, ["method.name='x/../../../escaped'", "hydra.run.dir"]),
    ("train-hydra-model-name-nested", "train", ["model=tiny", "model.name=a/b"], None, None, ["model.name='a/b'", "starting with a letter or digit"]),
    ("train-hydra-seed-path", "train", ["model=tiny", "seed=x/../../../escaped"], None, None, ["seed='x/../../../escaped'", "hydra.run.dir"]),
    ("train-hydra-model-name-unset-env", "train", ["model=tiny", "model.name=${{oc.env:PSPO_NO_SUCH_VARIABLE}}"], None, None, ["model.name reads the environment", "takes the name itself"]),
    ("train-hydra-run-dir-unknown-key", "train", ["model=tiny", "hydra.run.dir={TMP}/logs/${{nope.key}}"], None, None, ["hydra.run.dir refers to nope.key", "not a setting"]),
    ("train-hydra-multirun-tag-dotdot", "train", ["-m", "model=tiny", "run_tag=a,x/../../../escaped"], None, None, ["'..'", "run_tag=x/../../../escaped", "hydra.sweep.subdir"]),
    ("train-hydra-multirun-method-name", "train", ["-m", "model=tiny", "method.name=pspo,../../escaped"], None, None, ["'..'", "method.name=../../escaped", "hydra.sweep.subdir"]),
    ("eval-hydra-multirun-cwd", "evaluate", ["-m", "model=tiny", "n_samples=0"], None, None, ["n_samples must be a positive integer"]),
    ("agg-hydra-multirun-cwd", "aggregate", ["-m", "results_dir={RESULTS}", "ci=jackknife"], setup_mixed, None, ["'jackknife'", "allowed: t_seeds"]),
    # --- issue 25 item 4 (leftovers): a folder name that is not UTF-8 under results/eval or results/runs
    ("agg-eval-folder-not-utf8", "aggregate", ["results_dir={RESULTS}"], setup_eval_folder_not_utf8, None, ["seed1\\xff/gsm8k/T0.0.json", "not UTF-8", "rename it"]),
    ("agg-run-folder-not-utf8", "aggregate", ["results_dir={RESULTS}"], setup_run_folder_not_utf8, None, ["seed0\\xff", "not UTF-8"]),
    # --- issue 36 item 1: run records read by the one reader (run_records): file:line and the field, exit 2
    ("agg-runs-step-repeated", "aggregate", ["results_dir={RESULTS}"], _metrics_case('{"step": 0, "eval/reward": 0.1}\n{"step": 0, "eval/reward": 0.9}\n'), None, ["metrics.jsonl:2", "step 0 repeats line 1's"]),
    ("agg-runs-step-negative", "aggregate", ["results_dir={RESULTS}"], _metrics_case('{"step": -1, "eval/reward": 0.1}\n'), None, ["metrics.jsonl:1", "step=-1 is not an integer >= 0"]),
    ("agg-runs-step-text", "aggregate", ["results_dir={RESULTS}"], _metrics_case(_GOOD + '{"step": "two", "eval/reward": 0.1}\n'), None, ["metrics.jsonl:2", "step='two'"]),
    ("agg-runs-step-float", "aggregate", ["results_dir={RESULTS}"], _metrics_case('{"step": 1.5, "eval/reward": 0.1}\n'), None, ["metrics.jsonl:1", "step=1.5"]),
    ("agg-runs-step-bool", "aggregate", ["results_dir={RESULTS}"], _metrics_case('{"step": true, "eval/reward": 0.1}\n'), None, ["metrics.jsonl:1", "step=True"]),
    ("agg-runs-no-step", "aggregate", ["results_dir={RESULTS}"], _metrics_case('{"eval/reward": 0.1}\n'), None, ["metrics.jsonl:1", "no 'step'"]),
    ("agg-runs-blank-line", "aggregate", ["results_dir={RESULTS}"], _metrics_case(_GOOD + '\n{"step": 1, "eval/reward": 0.2}\n'), None, ["metrics.jsonl:2", "a blank line"]),
    ("agg-runs-torn-middle", "aggregate", ["results_dir={RESULTS}"], _metrics_case('{"step": 0, "eval/rew\n{"step": 1, "eval/reward": 0.2}\n'), None, ["metrics.jsonl:1", "bad JSON line"]),
    ("agg-runs-torn-last-finished", "aggregate", ["results_dir={RESULTS}"], _metrics_case(_GOOD + '{"step": 1, "eval/rew'), None, ["metrics.jsonl:2", "bad JSON line"]),
    ("agg-runs-nan", "aggregate", ["results_dir={RESULTS}"], _metrics_case('{"step": 0, "train/grad_norm": NaN}\n'), None, ["metrics.jsonl:1", "train/grad_norm=nan", "not a finite number or null"]),
    ("agg-runs-infinity", "aggregate", ["results_dir={RESULTS}"], _metrics_case('{"step": 0, "train/loss": Infinity}\n'), None, ["metrics.jsonl:1", "train/loss=inf"]),
    ("agg-runs-text-value", "aggregate", ["results_dir={RESULTS}"], _metrics_case('{"step": 0, "eval/reward": "0.5"}\n'), None, ["metrics.jsonl:1", "eval/reward='0.5'"]),
    ("agg-runs-bool-value", "aggregate", ["results_dir={RESULTS}"], _metrics_case('{"step": 0, "eval/reward": true}\n'), None, ["metrics.jsonl:1", "eval/reward=True"]),
    ("agg-runs-list-value", "aggregate", ["results_dir={RESULTS}"], _metrics_case('{"step": 0, "eval/reward": [0.5]}\n'), None, ["metrics.jsonl:1", "eval/reward=[0.5]"]),
    ("agg-runs-line-not-object", "aggregate", ["results_dir={RESULTS}"], _metrics_case(_GOOD + '[1, 2]\n'), None, ["metrics.jsonl:2", "a JSON list, not an object"]),
    ("agg-runs-num-tokens-negative", "aggregate", ["results_dir={RESULTS}"], _metrics_case('{"step": 0, "num_tokens": -5}\n'), None, ["metrics.jsonl:1", "num_tokens=-5"]),
    ("agg-runs-max-grad-norm-negative", "aggregate", ["results_dir={RESULTS}"], _config_case({"method": {"name": "pspo"}, "trainer": {"max_grad_norm": -1}}), None, ["run.json", "config.trainer.max_grad_norm=-1", "a finite number >= 0)"]),
    ("agg-runs-max-grad-norm-text", "aggregate", ["results_dir={RESULTS}"], _config_case({"method": {"name": "pspo"}, "trainer": {"max_grad_norm": "abc"}}), None, ["run.json", "config.trainer.max_grad_norm='abc'"]),
    ("agg-runs-max-grad-norm-nan", "aggregate", ["results_dir={RESULTS}"], _config_case({"method": {"name": "pspo"}, "trainer": {"max_grad_norm": float("nan")}}), None, ["run.json", "config.trainer.max_grad_norm=nan"]),
    ("agg-runs-max-grad-norm-null", "aggregate", ["results_dir={RESULTS}"], _config_case({"method": {"name": "pspo"}, "trainer": {"max_grad_norm": None}}), None, ["run.json", "config.trainer.max_grad_norm=None is not what training takes"]),
    ("agg-runs-learning-rate-text", "aggregate", ["results_dir={RESULTS}"], _config_case({"method": {"name": "pspo"}, "trainer": {"max_grad_norm": 1.0, "learning_rate": "3e-4"}}), None, ["run.json", "config.trainer.learning_rate='3e-4'", "a finite number > 0"]),
    ("agg-runs-learning-rate-zero", "aggregate", ["results_dir={RESULTS}"], _config_case({"method": {"name": "pspo"}, "trainer": {"max_grad_norm": 1.0, "learning_rate": 0}}), None, ["run.json", "config.trainer.learning_rate=0"]),
    ("agg-runs-eval-steps-float", "aggregate", ["results_dir={RESULTS}"], _config_case({"method": {"name": "pspo"}, "trainer": {"max_grad_norm": 1.0, "eval_steps": 2.5}}), None, ["run.json", "config.trainer.eval_steps=2.5", "an integer >= 1 or null"]),
    ("agg-runs-step-out-of-order", "aggregate", ["results_dir={RESULTS}"], _metrics_case('{"step": 0, "eval/reward": 0.1}\n{"step": 4, "eval/reward": 0.2}\n{"step": 2, "eval/reward": 0.3}\n'), None, ["metrics.jsonl:3", "step 2 after step 4", "in order"]),
    ("agg-runs-num-tokens-fall", "aggregate", ["results_dir={RESULTS}"], _metrics_case('{"step": 0, "num_tokens": 10}\n{"step": 1, "num_tokens": 30}\n{"step": 2, "num_tokens": 20}\n'), None, ["metrics.jsonl:3", "num_tokens 20 below an earlier line's 30", "running total"]),
    ("agg-runs-method-name-other", "aggregate", ["results_dir={RESULTS}"], _config_case({"method": {"name": "clip"}, "trainer": {"max_grad_norm": 1.0}}), None, ["run.json", "config.method.name 'clip' disagrees with the run's method 'pspo'"]),
    ("agg-runs-model-name-other", "aggregate", ["results_dir={RESULTS}"], _config_case({"model": {"name": "qwen2p5_0p5b"}, "method": {"name": "pspo"}, "trainer": {"max_grad_norm": 1.0}}), None, ["run.json", "config.model.name 'qwen2p5_0p5b' disagrees with the run's model 'tiny'"]),
    ("agg-runs-model-not-mapping", "aggregate", ["results_dir={RESULTS}"], _config_case({"model": "tiny", "method": {"name": "pspo"}}), None, ["run.json", "config.model must be a mapping"]),
    ("agg-runs-two-base-models", "aggregate", ["results_dir={RESULTS}"], setup_runs_two_base_models, None, ["pspo/seed0/run.json and ", "pspo/seed1/run.json: runs of different base models", "config.model.path '/models/a' vs '/models/b'"]),
    ("agg-runs-config-method-list", "aggregate", ["results_dir={RESULTS}"], _config_case({"method": ["pspo"]}), None, ["run.json", "config.method must be a mapping", "list"]),
    ("agg-runs-config-method-text", "aggregate", ["results_dir={RESULTS}"], _config_case({"method": "pspo"}), None, ["run.json", "config.method must be a mapping", "'pspo'"]),
    ("agg-runs-config-trainer-text", "aggregate", ["results_dir={RESULTS}"], _config_case({"trainer": "fast"}), None, ["run.json", "config.trainer must be a mapping"]),
    ("agg-runs-config-not-mapping", "aggregate", ["results_dir={RESULTS}"], _config_case([1, 2]), None, ["run.json", "config must be a mapping"]),
    ("agg-runs-status-unknown", "aggregate", ["results_dir={RESULTS}"], _metrics_case(_GOOD, status="done"), None, ["run.json", "status must be one of running, finished, failed", "'done'"]),
    ("agg-runs-method-not-registered", "aggregate", ["results_dir={RESULTS}"], setup_runs_method_not_registered, None, ["runs/tiny/nope/seed0", "'nope' is not a registered method", "pspo"]),
    # --- issue 36 item 2: output folders checked before any work (one line, exit 2, nothing written)
    ("train-results-dir-file", "train", ["model=tiny"], setup_results_dir_file, None, ["PSPO_RESULTS_DIR=", "resfile is a file, not a folder", "set PSPO_RESULTS_DIR"]),
    ("train-log-dir-file", "train", ["model=tiny"], setup_log_dir_file, None, ["PSPO_LOG_DIR=", "logfile is a file, not a folder"]),
    ("train-log-dir-under-file", "train", ["model=tiny"], setup_log_dir_under_file, None, ["PSPO_LOG_DIR=", "logfile is a file, not a folder"]),
    ("train-results-dir-too-long", "train", ["model=tiny"], setup_results_dir_too_long, None, ["PSPO_RESULTS_DIR=", "is 300 bytes, longer than the file system allows"]),
    ("eval-results-dir-file", "evaluate", ["model=tiny"], setup_results_dir_file, None, ["PSPO_RESULTS_DIR=", "resfile is a file, not a folder"]),
    ("eval-log-dir-file", "evaluate", ["model=tiny"], setup_log_dir_file, None, ["PSPO_LOG_DIR=", "logfile is a file, not a folder"]),
    ("eval-results-dir-too-long", "evaluate", ["model=tiny"], setup_results_dir_too_long, None, ["PSPO_RESULTS_DIR=", "longer than the file system allows"]),
    ("agg-out-dir-file", "aggregate", ["results_dir={RESULTS}", "out_dir={TMP}/outfile"], setup_out_dir_file, None, ["out_dir=", "outfile is a file, not a folder"]),
    ("agg-out-dir-too-long", "aggregate", ["results_dir={RESULTS}", "out_dir={TMP}/" + "t" * 300], setup_one_cell, None, ["out_dir=", "longer than the file system allows"]),
    ("agg-stale-is-file", "aggregate", ["results_dir={RESULTS}"], setup_stale_is_file, None, ["tables/stale is not a folder", "move or rename it"]),
    # --- issue 36 item 3: the claims spec, checked whole before any record is read (file:line, claim, field)
    ("claims-spec-broken-yaml", "claims", _CLAIMS_ARGS, _spec_case("claim: PSPO beats clip", "claim: [PSPO beats clip"), None, ["spec.yaml:4", "not a readable YAML spec", "expected ',' or ']'"]),
    ("claims-spec-not-utf8", "claims", _CLAIMS_ARGS, _spec_case(raw=b"claims:\n  - id: c\xff1\n"), None, ["spec.yaml", "not a readable YAML spec"]),
    ("claims-spec-duplicate-yaml-key", "claims", _CLAIMS_ARGS, _spec_case("    quote: q\n", "    quote: q\n    quote: r\n"), None, ["spec.yaml:", "not a readable YAML spec", "quote"]),
    ("claims-spec-a-list", "claims", _CLAIMS_ARGS, _spec_case(new="- 1\n- 2\n"), None, ["spec.yaml:1", "the spec", "must be a mapping, got [1, 2]"]),
    ("claims-spec-top-key-typo", "claims", _CLAIMS_ARGS, _spec_case("claims:", "claim:"), None, ["spec.yaml:1", "claim: not a key of the spec; did you mean claims? keys: claims, tuning"]),
    ("claims-spec-no-claims", "claims", _CLAIMS_ARGS, _spec_case(new="claims: []\n"), None, ["spec.yaml:1", "non-empty `claims` list"]),
    ("claims-spec-claim-not-mapping", "claims", _CLAIMS_ARGS, _spec_case(new="claims: [c1]\n"), None, ["claim #1", "must be a mapping, got 'c1'"]),
    ("claims-spec-missing-test-short", "claims", _CLAIMS_ARGS, _spec_case("    test_short: toy\n", ""), None, ["spec.yaml:2", "claim 'c1': test_short is missing"]),
    ("claims-spec-quote-number", "claims", _CLAIMS_ARGS, _spec_case("quote: q", "quote: 12"), None, ["spec.yaml:4", "claim 'c1': quote must be a non-empty text, got 12"]),
    ("claims-spec-claim-key-typo", "claims", _CLAIMS_ARGS, _spec_case("    verdict:", "    verdcit: {}\n    verdict:"), None, ["spec.yaml:12", "claim 'c1': verdcit: not a key of a claim"]),
    ("claims-spec-duplicate-claim-id", "claims", _CLAIMS_ARGS, _spec_case(new=CLAIMS_SPEC + CLAIMS_SPEC.split("\n", 1)[1]), None, ["spec.yaml:13", "claim id 'c1' used twice"]),
    ("claims-spec-duplicate-measure-id", "claims", _CLAIMS_ARGS, _spec_case("{id: diff, kind: compare", "{id: acc, kind: compare"), None, ["spec.yaml:11", "claim 'c1'", "measurement id(s) ['acc'] used twice"]),
    ("claims-spec-unknown-kind", "claims", _CLAIMS_ARGS, _spec_case("kind: accuracy", "kind: acuracy"), None, ["spec.yaml:10", "measure 'acc'", "kind 'acuracy'; did you mean accuracy? allowed: accuracy, compare"]),
    ("claims-spec-temperature-text", "claims", _CLAIMS_ARGS, _spec_case("a: {method: pspo}}", "a: {method: pspo, temperature: hot}}"), None, ["spec.yaml:10", "claim 'c1': measure 'acc': a.temperature must be a number >= 0, got 'hot'"]),
    ("claims-spec-temperature-quoted", "claims", _CLAIMS_ARGS, _spec_case("a: {method: pspo}}", "a: {method: pspo, temperature: '0.8'}}"), None, ["measure 'acc': a.temperature must be a number >= 0, got '0.8'"]),
    ("claims-spec-temperature-negative", "claims", _CLAIMS_ARGS, _spec_case("b: {method: clip}}", "b: {method: clip, temperature: -0.5}}"), None, ["measure 'diff': b.temperature must be a number >= 0, got -0.5"]),
    ("claims-spec-temperature-env", "claims", _CLAIMS_ARGS, _spec_case("a: {method: pspo}}", "a: {method: pspo, temperature: '${oc.env:PSPO_T}'}}"), None, ["a.temperature must be a number >= 0, got '${oc.env:PSPO_T}'"]),
    ("claims-spec-group-key-typo", "claims", _CLAIMS_ARGS, _spec_case("a: {method: pspo}}", "a: {method: pspo, temprature: 0.8}}"), None, ["measure 'acc': a.temprature: not a key of a run group; did you mean temperature? keys: method, tag"]),
    ("claims-spec-group-no-method", "claims", _CLAIMS_ARGS, _spec_case("a: {method: pspo}}", "a: {tag: x}}"), None, ["measure 'acc': a.method is missing"]),
    ("claims-spec-group-text", "claims", _CLAIMS_ARGS, _spec_case("a: {method: pspo}}", "a: pspo}"), None, ["measure 'acc': a (a run group", "must be a mapping, got 'pspo'"]),
    ("claims-spec-tag-number", "claims", _CLAIMS_ARGS, _spec_case("a: {method: pspo}}", "a: {method: pspo, tag: 3}}"), None, ["measure 'acc': a.tag must be a text", "got 3"]),
    ("claims-spec-compare-no-b", "claims", _CLAIMS_ARGS, _spec_case(", b: {method: clip}}", "}"), None, ["spec.yaml:11", "measure 'diff': b is missing"]),
    ("claims-spec-tuned-unknown", "claims", _CLAIMS_ARGS, _spec_case("a: {method: pspo}}", "a: {method: pspo, tuned: lr}}"), None, ["measure 'acc': a.tuned: 'lr' is not in the spec's tuning section (none)"]),
    ("claims-spec-tuned-and-tag", "claims", _CLAIMS_ARGS, _spec_case(new=_TUNING + CLAIMS_SPEC.replace("a: {method: pspo}}", "a: {method: pspo, tuned: lr, tag: x}}")), None, ["measure 'acc': a.tag: a tuned group's tag is the selection's"]),
    ("claims-spec-tuning-no-seeds", "claims", _CLAIMS_ARGS, _spec_case(new=_TUNING.replace(", seeds: [100]", "") + CLAIMS_SPEC), None, ["spec.yaml:2", "tuning.lr.seeds must be a non-empty list, got None"]),
    ("claims-spec-tuning-seed-text", "claims", _CLAIMS_ARGS, _spec_case(new=_TUNING.replace("[100]", "[abc]") + CLAIMS_SPEC), None, ["spec.yaml:2", "tuning.lr.seeds[0] must be an integer >= 0, got 'abc'"]),
    ("claims-spec-tuning-not-mapping", "claims", _CLAIMS_ARGS, _spec_case(new="tuning: [lr]\n" + CLAIMS_SPEC), None, ["spec.yaml:1", "tuning (selections", "must be a mapping, got ['lr']"]),
    ("claims-spec-interaction-temps", "claims", _CLAIMS_ARGS, _spec_case("{id: diff, kind: compare, a: {method: pspo}, b: {method: clip}}", "{id: diff, kind: interaction, a: {method: pspo}, b: {method: clip}, temperatures: [0.0, hot]}"), None, ["measure 'diff': temperatures must be two numbers >= 0, the lower first, got [0.0, 'hot']"]),
    ("claims-spec-run-stat-steps", "claims", _CLAIMS_ARGS, _spec_case("{id: acc, kind: accuracy, a: {method: pspo}}", "{id: acc, kind: run_stat, a: {method: pspo}, stat: method/zero_grad_frac, steps: some}"), None, ["measure 'acc': steps must be one of all, reuse, got 'some'"]),
    ("claims-spec-run-stat-percent", "claims", _CLAIMS_ARGS, _spec_case("{id: acc, kind: accuracy, a: {method: pspo}}", "{id: acc, kind: run_stat, a: {method: pspo}, stat: s, percent: 'yes'}"), None, ["measure 'acc': percent must be true or false, got 'yes'"]),
    ("claims-spec-run-stat-no-stat", "claims", _CLAIMS_ARGS, _spec_case("{id: acc, kind: accuracy, a: {method: pspo}}", "{id: acc, kind: run_stat, a: {method: pspo}}"), None, ["measure 'acc': stat is missing"]),
    ("claims-spec-frontier-no-groups", "claims", _CLAIMS_ARGS, _spec_case("{id: acc, kind: accuracy, a: {method: pspo}}", "{id: acc, kind: frontier, a: {method: pspo}, b: {method: clip, groups: [{}]}}"), None, ["measure 'acc': a.groups must be a non-empty list of run groups"]),
    ("claims-spec-measure-not-list", "claims", _CLAIMS_ARGS, _spec_case(CLAIMS_SPEC[CLAIMS_SPEC.index("    measure:"):CLAIMS_SPEC.index("    verdict")], "    measure: acc\n"), None, ["spec.yaml:9", "claim 'c1': measure must be a list of measurements, got 'acc'"]),
    ("claims-spec-rule-unknown", "claims", _CLAIMS_ARGS, _spec_case("rule: greater", "rule: greatest"), None, ["spec.yaml:12", "claim 'c1': rule 'greatest'; did you mean greater? allowed: greater, interaction"]),
    ("claims-spec-rule-missing-id", "claims", _CLAIMS_ARGS, _spec_case("diff: diff}", "dif: diff}"), None, ["spec.yaml:12", "verdict.dif: not a key of the greater rule"]),
    ("claims-spec-rule-unknown-id", "claims", _CLAIMS_ARGS, _spec_case("diff: diff}", "diff: dif}"), None, ["spec.yaml:12", "verdict.diff: 'dif' names no measurement of this claim; measurements: acc, diff"]),
    ("claims-spec-key-unknown-id", "claims", _CLAIMS_ARGS, _spec_case("key: diff", "key: dif"), None, ["spec.yaml:8", "claim 'c1': key 'dif' names no measurement of this claim"]),
    ("claims-spec-threshold-text", "claims", _CLAIMS_ARGS, _spec_case("{rule: greater, diff: diff}", "{rule: exceeds, stats: [acc], threshold: high}"), None, ["spec.yaml:12", "verdict.threshold must be a number, got 'high'"]),
    ("claims-spec-margin-missing", "claims", _CLAIMS_ARGS, _spec_case("{rule: greater, diff: diff}", "{rule: non_inferior, diff: diff}"), None, ["the non_inferior rule needs verdict.margin: an absolute margin fixed before the runs"]),
    ("claims-spec-bootstrap-not-frontier", "claims", _CLAIMS_ARGS, _spec_case("{rule: greater, diff: diff}", "{rule: greater, diff: diff, test: bootstrap}"), None, ["verdict.test: bootstrap is the test of a frontier measurement", "'diff' is a compare"]),
    ("claims-spec-test-unknown", "claims", _CLAIMS_ARGS, _spec_case("{rule: greater, diff: diff}", "{rule: greater, diff: diff, test: z}"), None, ["verdict.test must be one of t, wilcoxon, sign, bootstrap, got 'z'"]),
    ("claims-spec-peak-best-outside", "claims", _CLAIMS_ARGS, _spec_case("{rule: greater, diff: diff}", "{rule: peak, values: [acc], best: diff}"), None, ["verdict.best 'diff' is not one of verdict.values ['acc']"]),
    ("claims-spec-verdict-missing", "claims", _CLAIMS_ARGS, _spec_case("    verdict: {rule: greater, diff: diff}\n", ""), None, ["spec.yaml:2", "claim 'c1': verdict is missing"]),
    ("claims-spec-not-a-file", "claims", ["results_dir={RESULTS}", "out_dir={TMP}/claims_out", "spec={RESULTS}"], setup_one_cell, None, ["spec=", "is not a file"]),
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
    subs = {"RESULTS": str(results), "TMP": str(tmp)}
    env = {"PSPO_RESULTS_DIR": str(results), "PSPO_LOG_DIR": str(tmp / "hydra-logs")}
    if setup is not None:
        subs.update(setup(tmp, results, tiny))
        env.update(subs.pop("__env__", {}))
    if isinstance(data, bytes):  # bytes that are not UTF-8
        split, raw = data.split(b":", 1)
        (tmp / "data" / "gsm8k").mkdir(parents=True, exist_ok=True)
        (tmp / "data" / "gsm8k" / f"{split.decode()}.jsonl").write_bytes(raw)
        env["PSPO_DATA_DIR"] = str(tmp / "data")
    elif data is not None:
        split, text = data.split(":", 1)
        env.update(_data_dir(tmp, split, text))
    return [a.format(**subs) for a in args], env, results


def _outside(tmp: Path) -> dict[str, bytes]:
    """Every file under ``tmp`` (a case's whole sandbox, where an escaping path would land) but Hydra's logs."""
    return {
        str(p.relative_to(tmp)): p.read_bytes()
        for p in sorted(tmp.rglob("*"))
        if p.is_file() and "hydra-logs" not in p.relative_to(tmp).parts
    }


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

    import pspo_repro.evaluation.backends as backends
    import pspo_repro.training.models as models

    monkeypatch.setattr(models, "load_model", boom)
    monkeypatch.setattr(models, "load_tokenizer", boom)
    monkeypatch.setattr(backends, "make_backend", boom)


@pytest.fixture
def hydra_logging_undone():
    """Hydra's multirun (``-m``) points logging handlers at this test's captured stderr; drop them after
    the test, else the next case's log records go to a closed stream (a logging traceback on its stderr).
    Handlers on a closed stream that an earlier test left (the order under xdist varies) are dropped first."""
    import logging

    loggers = [logging.getLogger(), *(logging.getLogger(n) for n in list(logging.root.manager.loggerDict))]
    for lg in loggers:  # an earlier test (any file, same worker) may have left a handler on a closed capture
        lg.handlers[:] = [
            h
            for h in lg.handlers
            if not (isinstance(h, logging.StreamHandler) and getattr(h.stream, "closed", False))
        ]
    saved = {id(lg): (lg.handlers[:], lg.level, lg.propagate, lg.disabled) for lg in loggers}
    yield
    for lg in [logging.getLogger(), *(logging.getLogger(n) for n in list(logging.root.manager.loggerDict))]:
        handlers, level, propagate, disabled = saved.get(id(lg), ([], logging.NOTSET, True, False))
        lg.handlers[:], lg.level, lg.propagate, lg.disabled = handlers, level, propagate, disabled


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_bad_input_in_process(
    case, tmp_path, tiny_model_dir, monkeypatch, capsys, no_model, entry_main, hydra_logging_undone
):
    argv, env, results = _prepare(case, tmp_path, tiny_model_dir)
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    (tmp_path / "cwd").mkdir()
    monkeypatch.chdir(tmp_path / "cwd")  # Hydra's default folders (outputs/, multirun/) would land here
    before, sandbox = _snapshot(results), _outside(tmp_path)
    main = entry_main(case[1])
    monkeypatch.setattr(sys, "argv", [f"pspo_repro.{case[1]}", *argv])
    try:  # train, evaluate, aggregate exit; the small commands (claims) return their exit status
        code = main()
    except SystemExit as exc:
        code = exc.code
    _check(case, code, capsys.readouterr().err, before, results)
    assert _outside(tmp_path) == sandbox, "something was written outside results/ (an escaping path?)"


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
    "train-run-tag-escape",
    "train-seed-text",
    "eval-plus-typo",
    "agg-expected-seeds-text",
]


@pytest.fixture(scope="module")
def subprocess_runs(tmp_path_factory, tiny_model_dir):
    """Start every sampled case at once, then collect them: each a process of its own, forked from the warm
    server of tests/warm_cli.py where its environment allows (a case that sets another variable starts fresh)."""
    procs = {}
    for case in CASES:
        if case[0] not in SUBPROCESS_IDS:
            continue
        tmp = tmp_path_factory.mktemp(case[0])
        argv, env, results = _prepare(case, tmp, tiny_model_dir)
        full_env = {**os.environ, **env, "OMP_NUM_THREADS": "1"}
        before = _snapshot(results)
        logs = tmp_path_factory.mktemp(f"{case[0]}-logs")
        proc = warm_cli.popen(
            [sys.executable, "-m", f"pspo_repro.{case[1]}", *argv],
            cwd=PROJECT, env=full_env, out=logs / "stdout", err=logs / "stderr",
        )  # fmt: skip
        procs[case[0]] = (case, proc, before, results, logs / "stderr")
    out = {}
    for name, (case, proc, before, results, err) in procs.items():
        code = proc.wait(timeout=400)  # 12 commands started together on 2 cores
        out[name] = (case, code, err.read_text(), before, results)
    return out


@pytest.mark.slow
@pytest.mark.xdist_group("warm_cli")  # one worker: the fixture's processes start once, from one warm server
@pytest.mark.parametrize("name", SUBPROCESS_IDS)
def test_bad_input_subprocess(name, subprocess_runs):
    case, code, err, before, results = subprocess_runs[name]
    _check(case, code, err, before, results)


def test_train_tokenizer_that_cannot_load_writes_nothing(tmp_path, monkeypatch, capsys):
    """The tokenizer loads before the run folder (and its lock) is made: a folder without tokenizer files is
    one line naming it, and results/ stays empty."""
    from pspo_repro.training import grpo as train

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


# ---------------------------------------------------------------- issue 25 item 4, case 8: the reward names the folder


def _train_cfg(overrides: list[str]):
    from pspo_repro.common.cli import compose_config
    from pspo_repro.common.paths import CONF_DIR

    return compose_config(CONF_DIR, "train", overrides)


@pytest.mark.parametrize(
    ("overrides", "tag"),
    [
        (["data=math", "reward=math_verify"], ""),  # MATH's default reward
        (["data=math", "reward=authors_gsm8k"], "reward_authors_gsm8k"),
        (["data=math"], "reward_gsm8k_numeric"),  # train.yaml's reward is not MATH's default
        (["reward=authors_gsm8k"], "reward_authors_gsm8k"),  # GSM8K's default is gsm8k_numeric
        (["reward.funcs=[authors_gsm8k]"], "reward_authors_gsm8k"),  # by content, not by the group's name
        (["reward=math_verify_format"], "reward_math_verify+format_w1+0.05"),
        (["model=tiny", "reward=authors_gsm8k", "trainer.learning_rate=1e-6"], "reward_authors_gsm8k-learning_rate1e-06"),
        (["experiment=paper_qwen2p5_0p5b"], ""),  # the experiment's reward is its default
        (["experiment=paper_qwen2p5_0p5b", "reward=gsm8k_numeric"], "reward_gsm8k_numeric"),
        (["experiment=alpha_ablation", "reward=gsm8k_numeric"], "alpha_ablation-reward_gsm8k_numeric"),
        (["experiment=mini"], ""),
    ],
)  # fmt: skip
def test_a_reward_other_than_the_data_default_gets_its_own_folder(overrides, tag):
    """Runs whose reward is not their data config's ``default_reward`` never share a folder with the
    default-reward runs (``reward=authors_gsm8k data=math`` used to land in ``data=math``'s folder)."""
    from pspo_repro.common.run_dir import run_folder, tag_from_overrides

    cfg = _train_cfg(overrides)
    assert tag_from_overrides(cfg, overrides) == tag
    default = _train_cfg([o for o in overrides if not o.startswith(("reward", "trainer."))])
    if tag:
        assert run_folder(cfg, tag_from_overrides(cfg, overrides)) != run_folder(default, "")


def test_default_reward_is_no_part_of_the_identity_and_committed_runs_keep_their_folders():
    """``data.default_reward`` names folders only: a committed mini run reopens with the same tag and the
    same stored data/reward identity (else every finished run would read as another configuration)."""
    from omegaconf import OmegaConf

    from pspo_repro.common.run_dir import identity_config, tag_from_overrides
    from pspo_repro.training.grpo import apply_per_method

    # one seed of every committed (method, tag) folder kind, in results/mini and results/study
    kinds = {
        (p.parents[1], p.parent.name.partition("-")[2]): p
        for p in PROJECT.glob("results/*/runs/*/*/seed*/run.json")
    }
    runs = sorted(kinds.values())
    if not runs:
        pytest.skip("no committed mini runs in this checkout")
    for path in runs:
        info = json.loads(path.read_text())
        cfg = _train_cfg(info["overrides"])
        apply_per_method(cfg, info["overrides"])  # variant=as_run adds its run_tag as training does
        identity = identity_config(OmegaConf.to_container(cfg, resolve=True))
        assert tag_from_overrides(cfg, info["overrides"]) == info["tag"], path
        assert (identity["data"], identity["reward"]) == (
            info["identity"]["data"],
            info["identity"]["reward"],
        )


# ---------------------------------------------------------------- issue 25 item 3 (hydra): Hydra's own folders


@pytest.mark.parametrize(
    ("name", "overrides"),
    [
        *((n, []) for n in ("train", "evaluate", "sft", "aggregate", "mini", "explore")),
        ("mini", ["pipeline=study"]),
    ],
)
def test_every_entry_points_multirun_folder_is_under_the_log_folder(name, overrides, tmp_path, monkeypatch):
    """``-m`` writes multirun.yaml (and, for training, each job's .hydra/) under ``PSPO_LOG_DIR``; the
    evaluate/sft/aggregate/mini/explore configs used Hydra's default, a dated multirun/ in the working folder."""
    from omegaconf import OmegaConf

    from pspo_repro.common.cli import compose_config
    from pspo_repro.common.paths import CONF_DIR

    monkeypatch.setenv("PSPO_LOG_DIR", str(tmp_path / "logs"))
    cfg = compose_config(CONF_DIR, name, overrides, return_hydra_config=True)
    OmegaConf.resolve(cfg.hydra.sweep)
    assert Path(cfg.hydra.sweep.dir).is_relative_to(tmp_path / "logs"), cfg.hydra.sweep.dir


@pytest.mark.parametrize(
    ("config", "overrides", "message"),
    [
        ("sft", ["hydra.run.dir=/logs/${prompt_template}", "prompt_template=../../x"], "prompt_template='../../x'"),
        ("sft", ["-m", "hydra.sweep.subdir=${prompt_template}", "prompt_template=a,../x"], "prompt_template='../x'"),
        ("evaluate", ["-m", "hydra.sweep.subdir=${hydra.job.override_dirname}", "run=/a,/b/../../c"], "'..'"),
        ("train", ["model.name=..", "method=clip"], "model.name='..'"),
        ("train", ["-m", "seed=0,1", "run_tag=x,a/../../b"], "run_tag=a/../../b"),
    ],
)  # fmt: skip
def test_hydra_dir_error_names_the_value(config, overrides, message):
    from pspo_repro.common.cli import hydra_dir_error
    from pspo_repro.common.paths import CONF_DIR

    err = hydra_dir_error(CONF_DIR, config, overrides)
    assert err and message in err and "\n" not in err


def test_hydra_dir_check_passes_the_pipelines_own_commands(tmp_path):
    """No false alarm: the mini pipeline's and the study's training multiruns (absolute paths, sweeps, tags)
    and plain runs pass."""
    from pspo_repro.common.cli import compose_config, hydra_dir_error
    from pspo_repro.common.paths import CONF_DIR
    from pspo_repro.pipelines import grid

    for pipeline in ("mini", "study"):
        # the sweeps (the study's tuned groups need their tuning runs first: tests/analysis/test_tuning.py)
        for job in grid.rl_jobs(
            compose_config(CONF_DIR, "mini", [f"pipeline={pipeline}"]), tmp_path, "sweep"
        ):
            assert job.cmd[2] == "pspo_repro.train"
            assert hydra_dir_error(CONF_DIR, "train", job.cmd[3:]) is None, job.cmd
    for argv in (["model=tiny"], ["model=tiny", "seed=3", "method=clip", "run_tag=a.b"], ["-m", "seed=0,1"]):
        assert hydra_dir_error(CONF_DIR, "train", argv) is None, argv
