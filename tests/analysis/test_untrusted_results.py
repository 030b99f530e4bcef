"""Issue 19: untrusted names and files stay inside results/, cells read back are checked, the aggregation's
outputs switch as one set, and relative folders mean the same folder in every process.

The one-line CLI cases of the issue's classes are in ``tests/test_bad_inputs.py`` (CASES); this file holds
the path rule's property test, the read-back checks, the output-set switch and the relative-path promise.
"""

from __future__ import annotations

import json
import os
import random
import string
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from pspo_repro.common import atomic
from pspo_repro.common.paths import PROJECT_ROOT
from pspo_repro.common.safe_paths import UnsafePathError, check_name, ensure_under, results_path, seed_folder

PROJECT = PROJECT_ROOT


# ---------------------------------------------------------------- class 1: the path rule


def hostile_names(n: int = 3000, seed: int = 19) -> list[str]:
    """Names an adversary would try (traversal, separators, control and non-ASCII characters, secrets'
    interpolations, huge lengths) plus ``n`` random strings over an alphabet rich in such characters."""
    fixed = [
        "", ".", "..", "...", "../x", "x/..", "a/b", "/abs", "\\\\server\\share", "a\\b", "x/../../../escaped",
        "..\\..\\x", "~", "~root", "$HOME", "${oc.env:HF_TOKEN}", "a\x00b", "a\nb", "a\rb", " a", "a ", "-rf",
        "+x", "_x", ".hidden", "a:b", "a*b", "a?b", "con", "é", "ｆｕｌｌ", "a" * 129, "a" * 128, "seed0",
        "model.tiny", "x..y", "%2e%2e", "a/./b", "a//b", "\u202eexe.txt",
    ]  # fmt: skip
    alphabet = string.ascii_letters + string.digits + "_.+-" * 4 + "/\\.~$ \t\n\x00:*?<>|%'\"é\u2215\uff0f"
    rng = random.Random(seed)
    rand = ["".join(rng.choice(alphabet) for _ in range(rng.randint(0, 12))) for _ in range(n)]
    rand += ["/".join(rng.choice(["..", ".", "a", ""]) for _ in range(rng.randint(1, 6))) for _ in range(200)]
    return fixed + rand


def test_path_rule_property_over_hostile_names(tmp_path):
    """Every name is either refused with a one-line UnsafePathError or is one plain folder name whose path
    lies directly under the root, before and after resolving it on the real file system."""
    root = tmp_path / "results" / "eval"
    root.mkdir(parents=True)
    accepted = refused = 0
    for name in hostile_names():
        try:
            path = results_path(root, ("model", name))
        except UnsafePathError as exc:
            refused += 1
            assert "\n" not in str(exc) and str(exc).startswith("model"), (name, str(exc))
            continue
        accepted += 1
        assert path.parent == root and path.name == name, name
        assert name not in (".", "..") and not set(name) & set("/\\\x00\n\r\t "), name
        assert path.resolve().is_relative_to(root.resolve()) and path.resolve() != root.resolve(), name
    assert accepted > 100 and refused > 1000, (accepted, refused)  # the corpus exercises both sides


def test_path_rule_accepts_the_names_the_suite_uses():
    for name in ["tiny", "qwen2p5_0p5b", "Qwen2.5-Math-1.5B", "pspo", "dppo_topk_tv", "gsm8k", "math500",
                 "alpha0.1", "lr1e-06_max_steps2", "alpha_ablation-alpha0.5", "eps_high0.28+0.2"]:  # fmt: skip
        assert check_name("name", name) == name
    assert seed_folder(0, "") == "seed0" and seed_folder(2, "max_steps2") == "seed2-max_steps2"


@pytest.mark.parametrize(
    "seed", ["abc", -1, 2**32, "1.5", 1.5, True, None, "99999999999999999999", "0x10", " 1", "-1"]
)
def test_seed_rule(seed):
    with pytest.raises(UnsafePathError, match=r"seed must be an integer in \[0, 4294967295\]"):
        seed_folder(seed, "")


def test_ensure_under_refuses_the_root_itself_and_escapes(tmp_path):
    ensure_under(tmp_path, tmp_path / "a" / "b")
    for bad in (tmp_path, tmp_path / "..", tmp_path / "a" / ".." / "..", Path("/etc")):
        with pytest.raises(UnsafePathError, match="lies outside"):
            ensure_under(tmp_path, bad)


def test_secret_in_a_name_is_refused_without_echoing_it(monkeypatch):
    monkeypatch.setenv("HF_TOKEN", "hf_0123456789abcdef")
    with pytest.raises(UnsafePathError) as err:
        check_name("run_tag", "x-hf_0123456789abcdef")
    assert "HF_TOKEN" in str(err.value) and "hf_0123456789abcdef" not in str(err.value)


def _train_cfg(*overrides):
    from pspo_repro.common.cli import compose_config
    from pspo_repro.common.paths import CONF_DIR

    return compose_config(CONF_DIR, "train", ["model=tiny", *overrides])


def test_run_folder_and_eval_dir_stay_under_results_for_hostile_tags(tmp_path, monkeypatch):
    """The real folder builders (train's run folder, the evaluator's cell folder) over hostile run tags and
    identities read from a run.json: refused, or under results/runs and results/eval."""
    from pspo_repro.common.run_dir import run_folder
    from pspo_repro.evaluation.evaluator import Target, eval_dir

    monkeypatch.setenv("PSPO_RESULTS_DIR", str(tmp_path / "results"))
    cfg = _train_cfg()
    names = [n for n in hostile_names(n=300) if "${" not in n]  # interpolations: tests/test_bad_inputs.py
    for name in names:
        cfg.run_tag = name
        try:
            folder = run_folder(cfg, "")
        except UnsafePathError:
            continue
        assert ensure_under(tmp_path / "results" / "runs", folder)
        assert folder.relative_to(tmp_path / "results" / "runs").parts[:2] == ("tiny", "pspo")
    for name in names:
        for target in (Target(name, "pspo", 0, "", None, "c"), Target("tiny", name, 0, name, None, "c")):
            try:
                folder = eval_dir(target, "gsm8k")
            except UnsafePathError:
                continue
            assert len(folder.relative_to(tmp_path / "results" / "eval").parts) == 4


# ---------------------------------------------------------------- class 2: cells read back


def _cell(s: int, **over) -> dict:
    per_prompt = [{"id": f"p{i}", "n": 2, "reward_correct": int(i < 2 + s), "true_correct": int(i < 3),
                   "reward_maj": int(i < 2 + s), "true_maj": 0, "mean_length": 10.0} for i in range(5)]  # fmt: skip
    reward = sum(r["reward_correct"] for r in per_prompt) / 10
    cell = {
        "schema_version": 1, "model": "tiny", "method": "pspo", "seed": s, "tag": "", "dataset": "gsm8k",
        "temperature": 0.8, "max_new_tokens": 64, "n_samples": 2, "top_p": 1.0, "prompt_template": "paper",
        "rows_sha256": "abc", "num_prompts": 5, "per_prompt": per_prompt,
        "metrics": {"reward_acc": reward, "true_acc": 0.3, "reward_maj": (2 + s) / 5, "true_maj": 0.0,
                    "reward_pass@1": reward, "true_pass@1": 0.3, "mean_length": 10.0},
    }  # fmt: skip
    for key, value in over.items():
        if key.startswith("m_"):
            cell["metrics"][key[2:]] = value
        elif key.startswith("p0_"):
            per_prompt[0][key[3:]] = value
        else:
            cell[key] = value
    return cell


def _tree(root: Path, bad: dict) -> Path:
    for seed in range(3):
        cell = _cell(seed, **(bad if seed == 2 else {}))
        path = root / "eval" / "tiny" / "pspo" / f"seed{seed}" / "gsm8k" / "T0.8.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(cell))
    return root / "eval" / "tiny" / "pspo" / "seed2" / "gsm8k" / "T0.8.json"


BAD_CELLS = [
    ("acc-above-one", {"m_reward_acc": 1.7}, "metric reward_acc=1.7 is not a fraction in [0, 1]"),
    ("acc-text", {"m_reward_acc": "high"}, "metric reward_acc='high' is not a fraction in [0, 1]"),
    ("correct-above-n", {"p0_reward_correct": 99}, "per_prompt[0] reward_correct=99 is not an integer in [0, n=2]"),
    ("temperature-text", {"temperature": "hot"}, "temperature must be a finite number >= 0, got 'hot'"),
    ("num-prompts-over-rows", {"num_prompts": 1000}, "num_prompts=1000 but per_prompt holds 5 records"),
    ("acc-not-from-records", {"m_true_acc": 0.9}, "metric true_acc=0.9 but its per-prompt records give 0.3"),
    ("pass-not-from-records", {"m_true_pass@1": 0.5}, "metric true_pass@1=0.5 but its per-prompt records give 0.3"),
    ("n-over-samples", {"p0_n": 3}, "per_prompt[0] n=3 is not an integer in [1, n_samples=2]"),
    ("seed-text", {"seed": "abc"}, "seed must be a non-negative integer, got 'abc'"),
    ("maj-not-binary", {"p0_reward_maj": 2}, "per_prompt[0] reward_maj=2 is not 0 or 1"),
    ("metric-nan", {"m_true_maj": float("nan")}, "metric true_maj=nan is not a fraction in [0, 1]"),
    ("extra-rate-out-of-range", {"m_reward_maj@16": 1.2}, "metric reward_maj@16=1.2 is not a fraction in [0, 1]"),
    # per-sample lists: the whole-list fast check lets none of these through, the scan names the entry
    ("flag-bool", {"p0_reward_flags": [True, 0]}, "per_prompt[0] reward_flags holds True"),
    ("flag-float", {"p0_true_flags": [1.0, 0]}, "per_prompt[0] true_flags holds 1.0"),
    ("flag-two", {"p0_true_flags": [0, 2]}, "per_prompt[0] true_flags holds 2"),
    ("reward-inf", {"p0_rewards": [1.0, float("inf")]}, "per_prompt[0] rewards holds inf"),
    ("reward-text", {"p0_rewards": ["1", 0.0]}, "per_prompt[0] rewards holds '1'"),
    ("length-negative", {"p0_lengths": [3, -1]}, "per_prompt[0] lengths holds -1"),
    ("answer-number", {"p0_answers": ["1", 2]}, "per_prompt[0] answers holds 2"),
]  # fmt: skip


def _aggregate_main(monkeypatch, results: Path, out: Path, *extra: str) -> None:
    from pspo_repro.analysis import aggregate

    monkeypatch.setattr(sys, "argv", ["pspo_repro.aggregate", f"results_dir={results}", f"out_dir={out}",
                                      "expected_seeds=3", *extra])  # fmt: skip
    aggregate.main()


def _files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("name, bad, reason", BAD_CELLS, ids=[c[0] for c in BAD_CELLS])
def test_a_bad_cell_is_named_in_one_line_and_left_out(name, bad, reason, tmp_path):
    from pspo_repro.analysis.results_io import ResultsError, load_eval_cells

    bad_file = _tree(tmp_path, bad)
    left_out: list[str] = []
    cells = load_eval_cells(tmp_path, left_out)
    assert left_out == [f"{bad_file}: {reason}; left out of every table"]
    assert sorted(cells["seed"]) == [0, 1]  # never averaged in
    with pytest.raises(ResultsError, match="seed2"):  # without a list to report into: an error
        load_eval_cells(tmp_path)


@pytest.mark.parametrize("ci", ["t_seeds", "wilson_pooled"])
def test_aggregate_warns_in_one_line_and_tables_leave_the_cell_out(ci, tmp_path, monkeypatch, capsys):
    """End to end: reward_correct 99 with n = 2 (which raised under wilson_pooled) is one warning line, the
    tables pool the two good seeds, the summary names the file, and nothing is written into results/."""
    name, bad, reason = BAD_CELLS[2]
    results, out = tmp_path / "results", tmp_path / "tables"
    bad_file = _tree(results, bad)
    inputs = _files(results)
    _aggregate_main(monkeypatch, results, out, f"ci={ci}")
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert lines == [f"warning: {bad_file}: {reason}; left out of every table"], lines
    frame = pd.read_csv(out / "temperature_reward_acc.csv")
    assert frame["n_seeds"].tolist() == [2] and frame["seeds"].tolist() == ["0 1"]
    # Seeds 0 and 1: 2/10 and 3/10 (mean 0.25). The authors' pooled Wilson counts 0.2 x 5 + 0.3 x 5 = 2.5
    # prompts correct, rounds it half to even to 2 and shows 2 / 10 prompts.
    assert frame["mean"].iloc[0] == pytest.approx(0.25 if ci == "t_seeds" else 0.2)
    assert f"{bad_file}: {reason}" in (out / "summary.md").read_text()
    assert _files(results) == inputs
    assert sorted(p.name for p in tmp_path.iterdir()) == ["results", "tables"]


def test_new_metric_keys_and_per_prompt_fields_are_tolerated(tmp_path, monkeypatch, capsys):
    """Other work adds per-prompt fields and metrics (maj@k, an authors' reward column): no warning."""
    results, out = tmp_path / "results", tmp_path / "tables"
    _tree(results, {"m_reward_maj@16": 0.4, "m_answer_agreement": 0.7, "m_authors_reward": 0.25,
                    "m_reward_true_corr": float("nan"), "p0_answers": ["1", "2"], "p0_authors_reward": 1.0})  # fmt: skip
    _aggregate_main(monkeypatch, results, out)
    assert "warning" not in capsys.readouterr().err
    assert pd.read_csv(out / "temperature_reward_acc.csv")["n_seeds"].tolist() == [3]


def test_cell_check_is_exact_on_a_real_cell():
    from pspo_repro.analysis.results_io import cell_problem
    from pspo_repro.evaluation.metrics import cell_metrics

    cell = _cell(1)
    cell["metrics"] = cell_metrics(cell["per_prompt"])  # the evaluator's own arithmetic passes
    assert cell_problem(cell) is None
    recomputed: dict = {}  # what a reader tables: the recomputation, handed back once
    assert cell_problem(cell, recomputed) is None and recomputed == cell_metrics(cell["per_prompt"])


# ---------------------------------------------------------------- class 3: a provisional checkpoint


def test_a_checkpoint_named_although_unfinished_warns_once_and_is_marked(
    tmp_path, monkeypatch, tiny_model_dir
):
    from pspo_repro.evaluation import evaluator as ev

    results = tmp_path / "results"
    monkeypatch.setenv("PSPO_RESULTS_DIR", str(results))
    run = results / "runs" / "tiny" / "pspo" / "seed0"
    (run / "checkpoint-2").mkdir(parents=True)
    for n in ("config.json", "tokenizer.json", "tokenizer_config.json", "model.safetensors"):
        (run / "checkpoint-2" / n).write_bytes((tiny_model_dir / n).read_bytes())
    info = {
        "model": "tiny",
        "method": "pspo",
        "seed": 0,
        "status": "running",
        "best_checkpoint": "checkpoint-2",
    }
    (run / "run.json").write_text(json.dumps(info))
    cfg = ev.compose_config([f"run={run}"])
    with pytest.raises(ev.EvalError, match="not 'finished'"):
        ev.resolve_target(cfg)
    target = ev.resolve_target(ev.compose_config([f"run={run}", "checkpoint=checkpoint-2"]))
    assert "'running'" in target.provisional
    assert "pspo_complete.json" in target.provisional


# ---------------------------------------------------------------- class 6: outputs as one set


def _set(folder: Path, tag: str) -> dict[Path, str | bytes]:
    return {folder / f"t{i}.md": f"{tag} {i}" for i in range(4)} | {folder / "fig.png": tag.encode()}


class Killed(BaseException):
    """Stands for SIGKILL: nothing after it runs (no handler catches a BaseException it does not name)."""


@pytest.mark.parametrize("at", range(1, 12))
def test_write_set_killed_anywhere_recovers_to_one_whole_set(tmp_path, monkeypatch, at):
    """Kill at the at-th os.replace (staging 5 files, the journal, the switch of 5): afterwards, recovery
    leaves the whole old set or the whole new set, and no temporary."""
    out = tmp_path / "out"
    atomic.write_set(_set(out, "old"))
    calls, real = [0], os.replace

    def replace(src, dst):
        calls[0] += 1
        if calls[0] == at:
            raise Killed
        return real(src, dst)

    monkeypatch.setattr(atomic.os, "replace", replace)
    monkeypatch.setattr(
        atomic.os, "unlink", lambda *a: (_ for _ in ()).throw(Killed)
    )  # no cleanup after a kill
    with pytest.raises(Killed):
        atomic.write_set(_set(out, "new"))
    monkeypatch.undo()
    atomic.recover_set(out, (".md", ".png"))
    now = {p.name: p.read_bytes() for p in out.iterdir()}
    old = {p.name: (c if isinstance(c, bytes) else c.encode()) for p, c in _set(out, "old").items()}
    new = {p.name: (c if isinstance(c, bytes) else c.encode()) for p, c in _set(out, "new").items()}
    assert now in (old, new), now
    assert now == (new if at > 6 else old)  # past the journal (5 staged + 1), the switch is finished


def test_stale_temporaries_are_removed_and_others_kept(tmp_path, monkeypatch):
    out = tmp_path / "out"
    out.mkdir()
    stale = [".main_true_acc.md.ab12_XYZ.tmp", ".fig.png.0123abcd.tmp", ".t0.md.0123456789ab.staged",
             "..t1.md.0123456789ab.staged.k3j4h5g6.tmp"]  # fmt: skip
    kept = [".timings.json.ab12cdef.tmp", "notes.md", ".hidden"]
    for name in stale + kept:
        (out / name).write_text("x")
    atomic.write_set(_set(out, "new"), (".md", ".png"))
    assert sorted(p.name for p in out.iterdir()) == sorted(
        kept + ["fig.png", "t0.md", "t1.md", "t2.md", "t3.md"]
    )


def test_read_only_out_dir_names_the_target(tmp_path, monkeypatch, capsys):
    """A folder where no temp file can be made: one line naming the output, not the temp file."""
    import errno

    results, out = tmp_path / "results", tmp_path / "tables"
    _tree(results, {})

    def denied(*a, dir=None, **k):
        raise PermissionError(errno.EACCES, "Permission denied", f"{dir}/.x.md.abcd1234.tmp")

    monkeypatch.setattr(atomic.tempfile, "mkstemp", denied)
    with pytest.raises(SystemExit) as exc:
        _aggregate_main(monkeypatch, results, out)
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert exc.value.code == 2 and len(lines) == 1, lines
    assert lines[0].startswith(f"error: cannot write the outputs: writing {out}/") and ".tmp" not in lines[0]
    assert "Permission denied" in lines[0] and not any(out.iterdir())


def test_read_only_results_folder_for_training_is_one_line(tmp_path, monkeypatch, capsys):
    import errno

    from pspo_repro.training import grpo as train

    results = tmp_path / "results"
    monkeypatch.setenv("PSPO_RESULTS_DIR", str(results))
    monkeypatch.setenv("PSPO_LOG_DIR", str(tmp_path / "logs"))
    real = Path.mkdir

    def mkdir(self, *a, **k):
        if self.is_relative_to(results):
            raise PermissionError(errno.EROFS, "Read-only file system", str(self))
        return real(self, *a, **k)

    monkeypatch.setattr(Path, "mkdir", mkdir)
    monkeypatch.setattr(sys, "argv", ["pspo_repro.train", "model=tiny", "logger=none"])
    with pytest.raises(SystemExit) as exc:
        train.main()
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert exc.value.code == 2 and len(lines) == 1, lines
    assert lines[0].startswith(f"error: cannot write {results}/runs/tiny/pspo/seed0: Read-only file system")
    assert not results.exists()


# ---------------------------------------------------------------- issue 18: relative folders


def test_relative_env_and_args_become_absolute(tmp_path, monkeypatch):
    from pspo_repro.common.paths import absolutize_args, absolutize_env

    monkeypatch.chdir(tmp_path)
    env = {"PSPO_DATA_DIR": "../data", "PSPO_RESULTS_DIR": "res", "PSPO_LOG_DIR": "/abs/logs", "OTHER": "x"}
    assert absolutize_env(env) == {"PSPO_DATA_DIR": str(tmp_path.parent / "data"),
                                   "PSPO_RESULTS_DIR": str(tmp_path / "res")}  # fmt: skip
    assert env["PSPO_LOG_DIR"] == "/abs/logs" and env["OTHER"] == "x"
    argv = ["model.path=w", "model_path=../w", "out_dir=/abs", "model.tokenizer=Qwen/Q", "model.tokenizer=./t",
            "model.path=a,b", "results_dir=${oc.env:X}", "run_tag=w", "paths.results_dir=r"]  # fmt: skip
    assert absolutize_args(argv) == [
        f"model.path={tmp_path / 'w'}", f"model_path={tmp_path.parent / 'w'}", "out_dir=/abs",
        "model.tokenizer=Qwen/Q", f"model.tokenizer={tmp_path / 't'}", "model.path=a,b",
        "results_dir=${oc.env:X}", "run_tag=w", f"paths.results_dir={tmp_path / 'r'}",
    ]  # fmt: skip


def _relative_env(cwd: Path, tmp_path: Path) -> dict[str, str]:
    data = Path(os.environ["PSPO_DATA_DIR"])
    return {
        **os.environ,
        "PSPO_DATA_DIR": os.path.relpath(data, cwd),
        "PSPO_RESULTS_DIR": os.path.relpath(tmp_path / "results", cwd),
        "PSPO_LOG_DIR": os.path.relpath(tmp_path / "logs", cwd),
        "OMP_NUM_THREADS": "1",
    }


@pytest.mark.slow
def test_relative_folders_reach_child_processes_as_the_same_folder(tmp_path, data_dir):
    """``PSPO_DATA_DIR=../shared/data make test``: the suite's subprocess-spawning test (the docs' command,
    run by pytest from the user's folder) passes with relative folders given where pytest starts."""
    test = "tests/methods/test_docs_adding_method.py::test_docs_command_validates_from_the_command_line"
    env = _relative_env(PROJECT, tmp_path)
    assert not Path(env["PSPO_DATA_DIR"]).is_absolute()
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", test],
        cwd=PROJECT, env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]


@pytest.mark.slow
def test_relative_folders_and_model_path_in_a_cli_started_elsewhere(tmp_path, tiny_model_dir):
    """A CLI started from another folder with relative PSPO_* folders and model.path: the run folder and the
    weights named are the folders the user meant (printed absolute), and the data is found."""
    cwd = tmp_path / "elsewhere"
    cwd.mkdir()
    weights = os.path.relpath(tiny_model_dir, cwd)
    proc = subprocess.run(
        [sys.executable, "-m", "pspo_repro.train", "model=tiny", f"model.path={weights}", "dry_run=true"],
        cwd=cwd, env={**_relative_env(cwd, tmp_path), "PYTHONPATH": str(PROJECT)},
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert f"run folder: {tmp_path / 'results' / 'runs' / 'tiny' / 'pspo' / 'seed0'}\n" in proc.stdout
    assert f"path: {tiny_model_dir}\n" in proc.stdout
