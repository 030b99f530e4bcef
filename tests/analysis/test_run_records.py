"""Issue 36: one reader of run records (``analysis.run_records``) behind aggregate, regime, claims and the
leaderboard; regime's outputs as one set; output folders checked before any work; small things a user reads."""

from __future__ import annotations

import json
import math
import os
import sys
from pathlib import Path

import pytest

from pspo_repro.analysis import regime, run_stats
from pspo_repro.analysis.result_files import ResultsError
from pspo_repro.analysis.results_io import load_runs
from pspo_repro.analysis.run_records import read_runs
from pspo_repro.common import atomic, output_dirs

LINE = {"num_tokens": 10, "train/loss": 0.1, "train/reward": 0.5, "train/grad_norm": 0.5,
        "method/zero_grad_frac": 0.1, "method/ratio_max": 1.0, "eval/reward": 0.4}  # fmt: skip


def _run(
    root: Path, method: str, seed: int, status: str = "finished", lines: str | None = None, **config
) -> Path:
    folder = root / "runs" / "tiny" / method / f"seed{seed}"
    folder.mkdir(parents=True)
    cfg = {"method": {"name": method}, "trainer": {"max_grad_norm": 1.0, **config}}
    info = {"model": "tiny", "method": method, "seed": seed, "tag": "", "status": status, "config": cfg}
    (folder / "run.json").write_text(json.dumps(info))
    if lines is None:
        lines = "".join(json.dumps({"step": s, **LINE}) + "\n" for s in range(4))
    (folder / "metrics.jsonl").write_text(lines)
    return folder


def test_a_failed_run_is_left_out_of_both_tables_and_named(tmp_path):
    """status: failed used to put the run's metrics into the curves while the runs table said failed."""
    for seed in range(3):
        _run(tmp_path, "pspo", seed, status="failed" if seed == 1 else "finished")
    left_out: list[str] = []
    runs, long = load_runs(tmp_path, left_out=left_out)
    assert sorted(runs["seed"]) == [0, 2] and sorted(set(long["seed"])) == [0, 2]
    assert len(left_out) == 1 and "pspo/seed1: status failed" in left_out[0]


def test_regime_counts_no_failed_run(tmp_path, capsys):
    for seed in range(3):
        _run(tmp_path, "pspo", seed, status="failed" if seed == 2 else "finished")
    (row,) = regime.collect(tmp_path)
    assert row["n_seeds"] == 2
    assert "seed2: status failed; left out of every table" in capsys.readouterr().err


@pytest.mark.parametrize("command", ["leaderboard", "claims"])
def test_the_leaderboard_and_claims_name_a_failed_run_and_count_without_it(command, tmp_path, capsys):
    """status: failed leaves the run out of their run statistics too, named on stderr, and the numbers that
    read runs say over how many (claims' grad_clipped: 2 seeds, not 3)."""
    import toy_records

    from pspo_repro.analysis import claims_report, leaderboard

    root, out = toy_records.build(tmp_path / "records"), tmp_path / "out"
    path = root / "runs" / "tiny" / "clip" / "seed1" / "run.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), "status": "failed", "error": "boom"}))
    args = [f"results_dir={root}", f"out_dir={out}"]
    if command == "claims":
        assert claims_report.main([*args, f"spec={toy_records.spec(tmp_path / 'spec.yaml')}"]) == 0
        line = next(x for x in (out / "claims.md").read_text().splitlines() if "clip [] grad_clipped" in x)
        assert "mean over 2 seeds" in line, line
    else:
        assert leaderboard.main(args) == 0
    err = capsys.readouterr().err
    assert f"warning: {path.parent}: status failed (boom); left out of every table" in err


def test_a_torn_last_line_of_an_unfinished_run_is_dropped_and_named(tmp_path, capsys):
    good = "".join(json.dumps({"step": s, **LINE}) + "\n" for s in range(2))
    _run(tmp_path, "pspo", 0, status="running", lines=good + '{"step": 2, "train/lo')
    (run,) = read_runs(tmp_path)
    assert [r["step"] for r in run.rows] == [0, 1]
    assert "metrics.jsonl:3: a torn last line" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        ({"train/grad_norm": "NaN"}, "train/grad_norm=nan is not a finite number"),
        ({"train/grad_norm": "1e999"}, "train/grad_norm=inf"),
        ({"train/reward": '"high"'}, "train/reward='high'"),
        ({"step": "0"}, "step 0 repeats line 1's"),
    ],
)  # fmt: skip
def test_regime_names_the_file_line_and_field(tmp_path, capsys, edit, message):
    """A NaN gradient norm used to count as "not clipped"; a repeated step counted twice."""
    lines = [{"step": s, **LINE} for s in range(3)]
    text = [json.dumps(line) for line in lines]
    key, raw = next(iter(edit.items()))
    text[1] = text[1].replace(f'"{key}": {json.dumps(lines[1][key])}', f'"{key}": {raw}')
    folder = _run(tmp_path, "pspo", 0, lines="\n".join(text) + "\n")
    out = tmp_path / "out"
    assert regime.main([f"results_dir={tmp_path}", f"out_dir={out}"]) == 1
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(err) == 1 and err[0].startswith(f"error: {folder / 'metrics.jsonl'}:2: ") and message in err[0]
    assert not out.exists()


@pytest.mark.parametrize(
    ("norm", "message"),
    [(-1, "max_grad_norm=-1"), ("abc", "max_grad_norm='abc'"), (True, "max_grad_norm=True")],
)
def test_the_leaderboards_run_statistics_refuse_a_norm_training_would_refuse(tmp_path, norm, message):
    """``run_stats.folder_stats`` (the leaderboard's per-run statistics) checks run.json as the reader does."""
    folder = _run(tmp_path, "pspo", 0)
    info = json.loads((folder / "run.json").read_text())
    info["config"]["trainer"]["max_grad_norm"] = norm
    with pytest.raises(ResultsError, match=f"run.json: config.trainer.{message}"):
        run_stats.folder_stats(folder, info)
    info["config"]["trainer"]["max_grad_norm"] = 0  # 0: no clipping, as HF reads it
    assert run_stats.folder_stats(folder, info)["grad_clipped"] == 0.0


def test_regime_writes_its_three_files_as_one_set(tmp_path, monkeypatch):
    """A failure while writing leaves the previous three files, never a mix of old and new."""
    for seed in range(2):
        _run(tmp_path, "pspo", seed)
    out = tmp_path / "out"
    paths = regime.write(tmp_path, out)
    before = {p.name: p.read_bytes() for p in paths}
    _run(tmp_path, "clip", 0)  # the next table differs
    real, calls = atomic.write_text, []

    def fail_second(path, text):
        calls.append(path)
        if len(calls) == 2:
            raise OSError(28, "No space left on device", str(path))
        real(path, text)

    monkeypatch.setattr(atomic, "write_text", fail_second)
    with pytest.raises(OSError):
        regime.write(tmp_path, out)
    assert {p.name: p.read_bytes() for p in paths} == before
    assert sorted(p.name for p in out.iterdir()) == sorted(before)  # no staged file, no journal
    monkeypatch.undo()
    regime.write(tmp_path, out)
    assert "| clip |" in (out / "regime.md").read_text()


def test_write_set_refuses_a_stale_file_before_the_journal(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "old.md").write_text("old")
    (out / "stale").write_text("a file")
    with pytest.raises(OSError, match="stale is not a folder"):
        atomic.write_set({out / "new.md": "new"}, (".md",), aside=["old.md"])
    assert sorted(p.name for p in out.iterdir()) == ["old.md", "stale"]


def test_aggregation_with_a_stale_file_switches_nothing(tmp_path, monkeypatch, capsys):
    """It used to leave a journal and a summary listing moves that never happened."""
    from pspo_repro.analysis import aggregate

    for seed in range(2):
        _run(tmp_path, "pspo", seed)
    out = tmp_path / "tables"
    monkeypatch.setattr(sys, "argv", ["pspo_repro.aggregate", f"results_dir={tmp_path}", f"out_dir={out}"])
    aggregate.main()
    (out / "extra.md").write_text("x")
    summary = (out / "summary.md").read_text().replace("## Notes", "- extra.md\n\n## Notes")
    (out / "summary.md").write_text(summary)
    (out / "stale").write_text("a file")
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    with pytest.raises(SystemExit) as exc:
        aggregate.main()
    assert exc.value.code == 2 and "stale is not a folder" in capsys.readouterr().err
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before


# ---------------------------------------------------------------- output folders


def test_folder_problem_names_each_kind(tmp_path, monkeypatch):
    (tmp_path / "f").write_text("x")
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere")
    assert output_dirs.folder_problem(tmp_path / "new" / "deeper") is None
    assert "f is a file, not a folder" in output_dirs.folder_problem(tmp_path / "f" / "sub")
    assert "dangling is a dangling link" in output_dirs.folder_problem(tmp_path / "dangling")
    assert "longer than the file system allows" in output_dirs.folder_problem(tmp_path / ("n" * 256))
    real = os.access
    monkeypatch.setattr(output_dirs.os, "access", lambda p, mode: Path(p) != tmp_path and real(p, mode))
    assert f"{tmp_path} cannot be written (read-only" in output_dirs.folder_problem(tmp_path / "x")


def _read_only(monkeypatch, folder: Path) -> None:
    """``folder`` read-only as a non-root user sees a chmod 555 folder (root ignores the mode bits)."""
    folder.mkdir(parents=True, exist_ok=True)
    real = os.access
    monkeypatch.setattr(output_dirs.os, "access", lambda p, mode: Path(p) != folder and real(p, mode))


@pytest.mark.parametrize("command", ["train", "evaluate"])
def test_a_read_only_results_folder_is_one_line_before_any_work(
    command, tmp_path, monkeypatch, capsys, entry_main
):
    results = tmp_path / "results"
    _read_only(monkeypatch, results)
    monkeypatch.setenv("PSPO_RESULTS_DIR", str(results))
    monkeypatch.setenv("PSPO_LOG_DIR", str(tmp_path / "logs"))
    monkeypatch.setattr(sys, "argv", [f"pspo_repro.{command}", "model=tiny"])
    with pytest.raises(SystemExit) as exc:
        entry_main(command)()
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert exc.value.code == 2 and len(err) == 1, err
    assert f"PSPO_RESULTS_DIR={results}: {results} cannot be written (read-only" in err[0]
    assert not any(results.iterdir()) and not (tmp_path / "logs").exists()


def test_regime_refuses_an_out_dir_it_cannot_write(tmp_path, monkeypatch, capsys):
    _run(tmp_path, "pspo", 0)
    out = tmp_path / "out"
    _read_only(monkeypatch, out)
    assert regime.main([f"results_dir={tmp_path}", f"out_dir={out}"]) == 2
    assert "cannot write the outputs under out_dir=" in capsys.readouterr().err
    (tmp_path / "file").write_text("x")
    assert regime.main([f"results_dir={tmp_path}", f"out_dir={tmp_path / 'file'}"]) == 2


# ---------------------------------------------------------------- item 5: small things a user reads


def test_mean_length_is_titled_in_tokens_once(tmp_path):
    from pspo_repro.analysis.units import unit_of, with_unit

    assert (
        with_unit("Mean completion length (tokens)", unit_of("mean_length"))
        == "Mean completion length (tokens)"
    )
    assert with_unit("mean_length", unit_of("mean_length")) == "mean_length (tokens)"
    assert with_unit("Accuracy", unit_of("true_acc")) == "Accuracy (%)"


def test_the_aggregate_cli_titles_mean_length_once(tmp_path, monkeypatch):
    from test_recomputed_cells import _tree

    from pspo_repro.analysis import aggregate

    results, out = tmp_path / "results", tmp_path / "tables"
    _tree(results, prompts=25)
    monkeypatch.setattr(sys, "argv", ["pspo_repro.aggregate", f"results_dir={results}", f"out_dir={out}",
                                      'add_metrics=["mean_length"]'])  # fmt: skip
    aggregate.main()
    text = (out / "temperature_mean_length.md").read_text()
    assert "(tokens) against" in text and "(tokens) (tokens)" not in text


@pytest.mark.parametrize(
    ("overrides", "warned"),
    [
        (["data=math", "reward=gsm8k_numeric"], "reward gsm8k_numeric grades a final number only"),
        (["data=math", "reward=authors_gsm8k"], "reward authors_gsm8k grades a final number only"),
        (["data=math", "reward=math_verify"], None),
        (["reward=gsm8k_numeric"], None),  # GSM8K: its own reward
    ],
)
def test_a_gsm8k_only_reward_on_math_warns_naming_both(overrides, warned, capsys):
    from pspo_repro.common.cli import compose_config
    from pspo_repro.common.paths import CONF_DIR
    from pspo_repro.training import settings

    cfg = compose_config(CONF_DIR, "train", ["model=tiny", *overrides])
    settings.validate(cfg)
    err = capsys.readouterr().err
    if warned:
        assert err.startswith("warning: ") and warned in err and "data=math" in err and "math_verify" in err
    else:
        assert "warning" not in err


def test_max_grad_norm_zero_or_absent_means_no_clipping():
    from pspo_repro.analysis.run_records import max_grad_norm

    assert (
        max_grad_norm({}) == math.inf
        and max_grad_norm({"config": {"trainer": {"max_grad_norm": 0}}}) == math.inf
    )
    assert max_grad_norm({"config": {"trainer": {"max_grad_norm": 0.2}}}) == 0.2
