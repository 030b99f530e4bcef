"""The evaluator: metrics by hand, partial shards, end-to-end sweeps with resume, and one-line errors."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from pspo_repro.common.paths import PROJECT_ROOT
from pspo_repro.data.problems import DataError
from pspo_repro.evaluation import cells
from pspo_repro.evaluation import evaluator as ev
from pspo_repro.evaluation.metrics import cell_metrics

PROJECT = PROJECT_ROOT


def _pp(n, rc, tc, rmaj=0, tmaj=0, length=10.0):
    return {
        "id": "x",
        "n": n,
        "reward_correct": rc,
        "true_correct": tc,
        "reward_maj": rmaj,
        "true_maj": tmaj,
        "mean_length": length,
    }


def test_cell_metrics_hand_computed():
    rows = [_pp(4, 2, 3, 1, 1, 10.0), _pp(4, 0, 1, 0, 0, 20.0)]
    m = cell_metrics(rows)
    assert m["reward_acc"] == pytest.approx(2 / 8)  # over all samples, not the first column
    assert m["true_acc"] == pytest.approx(4 / 8)
    # pass@2, prompt 1: 1 - C(2,2)/C(4,2) = 5/6; prompt 2: 0
    assert m["reward_pass@2"] == pytest.approx((5 / 6 + 0) / 2)
    # true pass@2: prompt 1: 1 - 0 = 1 (n-c=1 < 2); prompt 2: 1 - C(3,2)/C(4,2) = 1/2
    assert m["true_pass@2"] == pytest.approx((1 + 0.5) / 2)
    assert m["reward_pass@4"] == pytest.approx(0.5) and m["true_pass@4"] == pytest.approx(1.0)
    assert "reward_pass@8" not in m  # k > n is not reported
    assert m["reward_pass@1"] == pytest.approx(m["reward_acc"])
    assert m["reward_maj"] == 0.5 and m["mean_length"] == pytest.approx(15.0)


def test_per_prompt_row_majority_and_counts():
    def s(key, rc, tc, ntok):
        return {"answer_key": key, "reward_correct": rc, "true_correct": tc, "token_ids": [0] * ntok,
                "reward": 1.0 if rc else 0.05, "timed_out": 0}  # fmt: skip

    rec = {"id": "p", "gold": "7", "authors_gold": "7 (apples)",
           "samples": [s("5", 0, 1, 2), s("7", 1, 1, 4), s("5", 0, 0, 6)]}  # fmt: skip
    row = cells.per_prompt_row(rec)
    assert cells.per_prompt_row({**rec, "authors_gold": None})["authors_gold"] == "7"  # theirs = ours
    assert row == {
        "id": "p",
        "authors_gold": "7 (apples)",  # the string the authors' reward read: the tables' denominators
        "n": 3,
        "reward_correct": 1,
        "true_correct": 2,
        "reward_maj": 0,  # "5" wins the vote and is wrong
        "true_maj": 1,  # 2 of 3 samples contain the gold
        "authors_correct": 1,  # the authors' reward > 0.5
        "authors_reward_mean": pytest.approx((1.0 + 0.05 + 0.05) / 3),
        "mean_length": 4.0,
        # per-sample lists (docs/architecture.md): what maj@k, top-1, agreement, correlation need
        "answers": ["5", "7", "5"],
        "reward_flags": [0, 1, 0],
        "true_flags": [1, 1, 0],
        "rewards": [0.05, 1.0, 0.05],
        "lengths": [2, 4, 6],
        "timeouts": 0,
    }


def test_partial_shard_dedup_torn_line_and_header(tmp_path):
    path = tmp_path / "T0.0.partial.jsonl"
    header = {"a": 1}
    cells.append_records(path, header, [{"id": "p1", "v": 1}, {"id": "p2", "v": 2}])
    cells.append_records(path, header, [{"id": "p1", "v": 99}])  # a duplicate (re-run of a chunk)
    with open(path, "a") as fh:
        fh.write('{"id": "p3", "v"')  # torn by a kill
    done = cells.read_partial(path, header, {"p1", "p2", "p3"})
    assert {k: v["v"] for k, v in done.items()} == {"p1": 1, "p2": 2}
    cells.append_records(path, header, [{"id": "p3", "v": 3}])  # lands on its own line
    assert cells.read_partial(path, header, {"p1", "p2", "p3"})["p3"]["v"] == 3
    assert cells.read_partial(path, {"a": 2}, {"p1"}) == {} and not path.exists()  # other settings: discarded


# ---------------------------------------------------------------- bad input: one line, nothing written


def _cfg(*overrides):
    return ev.compose_config(list(overrides))


def _write_run(root: Path, best="checkpoint-10", tokenizer_dir=None) -> Path:
    run = root / "runs" / "tiny" / "pspo" / "seed0"
    run.mkdir(parents=True)
    (run / "run.json").write_text(
        json.dumps(
            {
                "model": "tiny",
                "method": "pspo",
                "seed": 0,
                "tag": "",
                "best_checkpoint": best,
                "status": "finished",
            }
        )
    )
    return run


@pytest.mark.parametrize(
    "overrides, match",
    [
        (["model=tiny", "eval.datasets=[nope]"], r"unknown dataset 'nope'; allowed: .*gsm8k"),
        (["model=tiny", "temperatures=[0.0,-0.2]"], r"temperature must be >= 0, got -0.2"),
        (
            ["model=tiny", "temperatures=[0.0,0.25]"],
            r"^temperature 0.25 cannot be filed exactly \(cells are named T\{t:.1f\}.json, it would be "
            r"T0.2.json\); allowed: multiples of 0.1 such as 0.0, 0.2, 0.8$",
        ),
        (["model=tiny", "temperatures=[0.05]"], r"^temperature 0.05 cannot be filed exactly .*T0.1.json"),
        (["run=/does/not/exist"], r"run folder not found: /does/not/exist"),
        ([], r"nothing to evaluate"),
        (["model=/no/such/model"], r"model path not found"),
        (["model=tiny", "eval.top_k=0"], r"eval.top_k must be a positive integer or null .*got 0"),
        (["model=tiny", "eval=mmlu", "eval.sources.mmlu=/no/such/mmlu.parquet"], r"^source file not found: "),
        (
            ["model=tiny", "+eval.sources.mmlu=cais/mmlu"],
            r"^eval.sources.mmlu: 'mmlu' is not in eval.datasets",
        ),
        (
            ["model=tiny", "eval=boolq", "eval.sources.boolq=[1]"],
            r"^eval.sources.boolq must be a local file or a hub",
        ),
        (["model=tiny", "eval.top_k=2.5"], r"eval.top_k must be an integer, got 2.5"),
    ],
)
def test_bad_input_errors(results_root, overrides, match):
    with pytest.raises((ev.EvalError, DataError), match=match) as err:
        ev.evaluate(_cfg(*overrides))
    assert "\n" not in str(err.value)
    assert not results_root.exists()


def test_run_without_checkpoint_or_tokenizer(results_root, tmp_path, tiny_model_dir):
    run = _write_run(results_root)
    with pytest.raises(ev.EvalError, match=r"checkpoint not found: .*checkpoint-10"):
        ev.evaluate(_cfg(f"run={run}"))
    ckpt = run / "checkpoint-10"
    ckpt.mkdir()
    (ckpt / "config.json").write_text((tiny_model_dir / "config.json").read_text())
    with pytest.raises(ev.EvalError, match=r"has no tokenizer files"):
        ev.evaluate(_cfg(f"run={run}"))
    assert not (results_root / "eval").exists()


def test_malformed_data_row_names_file_and_line(results_root, tmp_path, monkeypatch):
    (tmp_path / "gsm8k").mkdir()
    (tmp_path / "gsm8k" / "test.jsonl").write_text('{"question": "q", "answer": "#### 1"}\n{oops\n')
    monkeypatch.setenv("PSPO_DATA_DIR", str(tmp_path))
    with pytest.raises(DataError, match=r"gsm8k/test.jsonl:2: malformed JSON row"):
        ev.evaluate(_cfg("model=tiny"))
    assert not results_root.exists()


@pytest.mark.parametrize(
    "args, match",
    [
        (["model=tiny", "temperatures=[-0.5]"], "temperature must be >= 0"),
        (["model=tiny", "temperatures=[0.25]"], "temperature 0.25 cannot be filed exactly"),
        (["model=tiny", "eval=nope"], "unknown eval config 'nope'"),
    ],
)
def test_cli_errors_are_one_line(results_root, args, match):
    proc = subprocess.run(
        [sys.executable, "-m", "pspo_repro.evaluate", *args],
        cwd=PROJECT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode != 0
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and match in lines[0], proc.stderr
    assert "Traceback" not in proc.stdout + proc.stderr
    assert not results_root.exists()


# ---------------------------------------------------------------- end to end with the tiny model

SWEEP = [
    "model=tiny",
    "eval.limit=20",
    "temperatures=[0.0,0.8]",
    "n_samples=2",
    "max_new_tokens=8",
    "chunk_size=5",
    "backend=hf",
]


def _files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.mark.slow
def test_sweep_rerun_and_resume_give_identical_files(results_root, tmp_path, monkeypatch):
    results = ev.evaluate(_cfg(*SWEEP))
    cell = results_root / "eval" / "tiny" / "baseline" / "seed0" / "gsm8k"
    assert sorted(p.name for p in cell.iterdir()) == [
        "T0.0.completions.jsonl.gz",
        "T0.0.json",
        "T0.8.completions.jsonl.gz",
        "T0.8.json",
    ]
    t0, t8 = results
    assert (t0["num_prompts"], t0["n_samples"], t8["n_samples"], t8["sampling_seed"]) == (20, 1, 2, 123)
    assert len(t8["per_prompt"]) == 20 and all(r["n"] == 2 for r in t8["per_prompt"])
    assert {"reward_acc", "true_acc", "reward_pass@1", "reward_pass@2", "true_maj", "mean_length"} <= set(
        t8["metrics"]
    )
    reference = _files(results_root)

    # A rerun does no work: the backend is never built.
    def no_backend(*a, **k):
        raise AssertionError("a finished sweep must not load the model")

    monkeypatch.setattr("pspo_repro.evaluation.backends.make_backend", no_backend)
    ev.evaluate(_cfg(*SWEEP))
    assert _files(results_root) == reference
    monkeypatch.undo()

    # Interrupted after 2 of 4 chunks, then resumed (with a duplicated record and a torn line, as a
    # kill mid-append would leave): the final files are byte-identical to the uninterrupted run.
    other = tmp_path / "other"
    monkeypatch.setenv("PSPO_RESULTS_DIR", str(other))

    def boom(chunk_no):
        if chunk_no == 2:
            raise RuntimeError("injected failure")

    monkeypatch.setattr(ev, "AFTER_CHUNK_HOOK", boom)
    with pytest.raises(RuntimeError, match="injected"):
        ev.evaluate(_cfg(*SWEEP))
    part = other / "eval" / "tiny" / "baseline" / "seed0" / "gsm8k" / "T0.8.partial.jsonl"
    lines = part.read_text().splitlines()
    assert len(lines) == 1 + 10  # header + 2 chunks of 5 prompts
    with open(part, "a") as fh:
        fh.write(lines[1] + "\n" + lines[2][:40])
    monkeypatch.setattr(ev, "AFTER_CHUNK_HOOK", None)
    ev.evaluate(_cfg(*SWEEP))
    assert _files(other) == reference


def test_paper_eval_sets_the_authors_top_k():
    """eval=paper (and its per-set files) sample with top-k 50 as the authors' generate did; others none."""
    for name, top_k in (("paper", 50), ("svamp_paper", 50), ("asdiv_paper", 50), ("gsm8k", None)):
        assert ev.top_k_of(_cfg("model=tiny", f"eval={name}")) == top_k


@pytest.mark.slow
def test_cells_record_top_k_and_never_mix_it(results_root):
    """Every cell records its top-k; a cell file written under another top-k is not reused or overwritten."""
    sweep = ["model=tiny", "eval.limit=3", "temperatures=[0.0,0.8]", "n_samples=2", "max_new_tokens=4",
             "backend=hf"]  # fmt: skip
    cells = ev.evaluate(_cfg(*sweep, "eval.top_k=50"))
    assert [c["top_k"] for c in cells] == [50, 50]
    path = results_root / "eval" / "tiny" / "baseline" / "seed0" / "gsm8k" / "T0.8.json"
    before = path.read_bytes()
    assert json.loads(before)["top_k"] == 50
    with pytest.raises(ev.EvalError, match=r"exists with different settings \(top_k\)"):
        ev.evaluate(_cfg(*sweep))
    assert path.read_bytes() == before


@pytest.mark.slow
def test_run_folder_identity_and_checkpoint(results_root, tiny_model_dir):
    import shutil

    run = _write_run(results_root, best="checkpoint-10")
    shutil.copytree(tiny_model_dir, run / "checkpoint-10")
    (run / "checkpoint-10" / "pspo_complete.json").write_text('{"files": {}}')  # saved whole
    (result,) = ev.evaluate(
        _cfg(f"run={run}", "eval.limit=2", "temperatures=[0.0]", "max_new_tokens=4", "backend=hf")
    )
    assert (result["model"], result["method"], result["seed"], result["tag"]) == ("tiny", "pspo", 0, "")
    assert result["checkpoint"] == str((run / "checkpoint-10").resolve()) and result["run_dir"] == str(run)
    assert (results_root / "eval" / "tiny" / "pspo" / "seed0" / "gsm8k" / "T0.0.json").is_file()
    # Other settings for a finished cell: refused, not silently mixed.
    with pytest.raises(ev.EvalError, match="exists with different settings"):
        ev.evaluate(
            _cfg(f"run={run}", "eval.limit=2", "temperatures=[0.0]", "max_new_tokens=5", "backend=hf")
        )


def test_only_cells_holding_a_list_gold_carry_the_list_grader():
    from pspo_repro.data.problems import Problem

    math = [Problem("m/1", "q", "1/2", "latex"), Problem("m/528", "q", "70,110", "list")]
    assert cells.grader_version(math) == cells.LIST_GRADER_VERSION == 4
    assert (
        cells.grader_version(math[:1]) == cells.GRADER_VERSION == 3
    )  # committed cells of other sets stay valid


@pytest.mark.slow
def test_cells_record_non_default_numerics_and_never_mix_them(results_root, monkeypatch):
    """dtype / attn_implementation reach the hf backend's model; a cell records them only where they are not the
    defaults (older cells stay valid), and a cell of other numerics is neither reused nor overwritten."""
    from pspo_repro.evaluation.backends import hf

    loaded = []
    original = hf.HFBackend.__init__

    def spy(self, *args, **kwargs):
        original(self, *args, **kwargs)
        loaded.append((self.model.dtype, self.model.config._attn_implementation))

    monkeypatch.setattr(hf.HFBackend, "__init__", spy)
    sweep = ["model=tiny", "eval.limit=3", "temperatures=[0.0]", "max_new_tokens=4", "backend=hf"]
    plain = ev.evaluate(_cfg(*sweep))
    assert "numerics" not in plain[0]
    monkeypatch.setenv("PSPO_RESULTS_DIR", str(results_root / "other"))
    bf16_cells = ev.evaluate(_cfg(*sweep, "dtype=bfloat16", "attn_implementation=eager"))
    assert bf16_cells[0]["numerics"] == {"dtype": "bfloat16", "attn_implementation": "eager"}
    import torch

    assert loaded[-1] == (torch.bfloat16, "eager") and loaded[0][0] == torch.float32
    with pytest.raises(ev.EvalError, match=r"exists with different settings \(numerics\)"):
        ev.evaluate(_cfg(*sweep))
