"""Issue 25, items 2, 3 and 6: identity read from a file is checked against where the file sits, a checkpoint
is the run's own (or explicitly foreign and marked), no link steers a write out of results/, and a table set
is one set (the previous aggregation's outputs that the new one does not write are moved into ``stale/``).

Bad input through the real command lines is in ``tests/test_bad_inputs.py`` (cases after
``# --- issue 25 item 2`` and ``item 3``); these are the functions behind them and what passes.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

import pytest

from pspo_repro.analysis import aggregate, regime
from pspo_repro.analysis.results_io import ResultsError, load_runs
from pspo_repro.common import atomic, run_dir, safe_paths
from pspo_repro.common.cli import compose_config
from pspo_repro.common.paths import PROJECT_ROOT
from pspo_repro.common.safe_paths import UnsafePathError, results_path

sys.path.insert(0, str(Path(__file__).parent))
from test_aggregate import build_tree, write_run  # noqa: E402  (the fixture trees of the aggregate tests)

CONF = str(PROJECT_ROOT / "conf")


def _agg_cfg(*overrides):
    return compose_config(CONF, "aggregate", list(overrides))


# ---------------------------------------------------------------- item 2: run.json against its folder

RUN = {"model": "tiny", "method": "pspo", "seed": 0, "tag": ""}


@pytest.mark.parametrize(
    ("folder", "info", "field"),
    [
        ("tiny/pspo/seed0", {**RUN, "method": "clip"}, "method 'clip'"),
        ("tiny/pspo/seed0", {**RUN, "model": "qwen2p5_0p5b"}, "model 'qwen2p5_0p5b'"),
        ("tiny/pspo/seed0", {**RUN, "seed": 2}, "seed 2"),
        ("tiny/pspo/seed1", {**RUN, "seed": True}, "seed True"),  # a bool is no seed, though True == 1
        ("tiny/pspo/seed1", {**RUN, "seed": 0}, "seed 0"),
        ("tiny/pspo/seed0", {**RUN, "tag": "alpha0.5"}, "tag 'alpha0.5'"),
        ("tiny/pspo/seed0-alpha0.5", RUN, "tag ''"),
        ("tiny/pspo/seed0-alpha0.5", {k: v for k, v in RUN.items() if k != "tag"}, "tag None"),
        ("tiny/pspo/myrun", RUN, "'myrun' is not seed<N>[-<tag>]"),
    ],
)  # fmt: skip
def test_a_run_json_that_names_another_run_is_one_line(tmp_path, folder, info, field):
    path = tmp_path / "runs" / folder
    why = run_dir.identity_problem(path, info, path / "run.json")
    assert why is not None and "\n" not in why and field in why, why
    assert why.startswith(f"{path / 'run.json'}: ")


@pytest.mark.parametrize(
    ("folder", "info"),
    [
        ("tiny/pspo/seed0", RUN),
        ("tiny/pspo/seed0", {"model": "tiny", "method": "pspo", "seed": 0}),  # no tag: none
        ("tiny/pspo/seed0", {"model": "tiny", "method": "pspo", "seed": "0", "tag": None}),
        ("tiny/pspo/seed3-alpha0.5", {**RUN, "seed": 3, "tag": "alpha0.5"}),
        ("tiny/pspo/seed0", {"status": "finished"}),  # no identity recorded: the folder says it
    ],
)  # fmt: skip
def test_a_run_json_that_agrees_with_its_folder_passes(tmp_path, folder, info):
    path = tmp_path / "runs" / folder
    assert run_dir.identity_problem(path, info, path / "run.json") is None


def test_a_relocated_run_folder_reached_through_a_link_passes(tmp_path):
    """``runs/tiny/pspo/seed0 -> /scratch/abc``: the place as written agrees; a link named otherwise that
    leads to the right place agrees after resolving it."""
    store = tmp_path / "store" / "tiny" / "pspo" / "seed0"
    store.mkdir(parents=True)
    linked = tmp_path / "runs" / "tiny" / "pspo" / "seed0"
    linked.parent.mkdir(parents=True)
    linked.symlink_to(store)
    assert run_dir.identity_problem(linked, RUN, linked / "run.json") is None
    other = tmp_path / "my-run"
    other.symlink_to(store)
    assert run_dir.identity_problem(other, RUN, other / "run.json") is None


def test_committed_run_json_files_agree_with_their_folders():
    runs = sorted(PROJECT_ROOT.glob("results/*/runs/*/*/seed*/run.json"))
    if not runs:
        pytest.skip("no committed runs in this checkout")
    for path in runs:
        assert run_dir.identity_problem(path.parent, json.loads(path.read_text()), path) is None, path


def test_load_runs_refuses_a_relabelled_run_and_reads_the_others(tmp_path):
    """A run.json saying clip in pspo's folder used to file that run as clip in the curves and long_runs.csv."""
    for seed in range(2):
        write_run(tmp_path, "pspo", seed, [0.1, 0.2])
    runs, long = load_runs(tmp_path)
    assert sorted(runs["method"]) == ["pspo", "pspo"] and set(long["method"]) == {"pspo"}
    info_path = tmp_path / "runs" / "tiny" / "pspo" / "seed1" / "run.json"
    info_path.write_text(json.dumps({**json.loads(info_path.read_text()), "method": "clip"}))
    with pytest.raises(ResultsError) as err:
        load_runs(tmp_path)
    assert str(err.value).startswith(f"{info_path}: method 'clip' disagrees with its folder")


def test_regime_refuses_a_relabelled_run(tmp_path):
    write_run(tmp_path, "pspo", 0, [0.1, 0.2])
    info_path = tmp_path / "runs" / "tiny" / "pspo" / "seed0" / "run.json"
    info_path.write_text(json.dumps({**json.loads(info_path.read_text()), "seed": 5}))
    with pytest.raises(ValueError, match="seed 5 disagrees with its folder"):
        regime.collect(tmp_path)


# ---------------------------------------------------------------- item 2: foreign checkpoints


def _run_with_checkpoint(results: Path, tiny: Path, method: str) -> Path:
    run = results / "runs" / "tiny" / method / "seed0"
    shutil.copytree(tiny, run / "checkpoint-4")
    (run / "checkpoint-4" / "pspo_complete.json").write_text('{"files": {}}')
    info = {**RUN, "method": method, "best_checkpoint": "checkpoint-4", "status": "finished"}
    (run / "run.json").write_text(json.dumps(info))
    return run


def test_a_foreign_checkpoint_is_evaluated_only_when_allowed_and_then_marked(
    results_root, tiny_model_dir, capsys
):
    from pspo_repro.evaluation import evaluator as ev

    run = _run_with_checkpoint(results_root, tiny_model_dir, "pspo")
    other = _run_with_checkpoint(results_root, tiny_model_dir, "clip")
    (run / "checkpoint-9").symlink_to(other / "checkpoint-4")
    own = ev.resolve_target(ev.compose_config([f"run={run}"]))
    assert own.foreign_checkpoint is None and own.checkpoint == str((run / "checkpoint-4").resolve())
    with pytest.raises(ev.EvalError, match="resolves to .*clip/seed0/checkpoint-4, outside the run folder"):
        ev.resolve_target(ev.compose_config([f"run={run}", "checkpoint=checkpoint-9"]))
    capsys.readouterr()
    target = ev.resolve_target(
        ev.compose_config([f"run={run}", "checkpoint=checkpoint-9", "allow_foreign_checkpoint=true"])
    )
    assert (target.model, target.method, target.seed) == ("tiny", "pspo", 0)
    assert target.foreign_checkpoint == str((other / "checkpoint-4").resolve()) == target.checkpoint
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(err) == 1 and err[0].startswith("warning: evaluating a foreign checkpoint"), err


def test_an_absolute_checkpoint_of_another_run_needs_the_opt_in(results_root, tiny_model_dir):
    from pspo_repro.evaluation import evaluator as ev

    run = _run_with_checkpoint(results_root, tiny_model_dir, "pspo")
    other = _run_with_checkpoint(results_root, tiny_model_dir, "clip")
    with pytest.raises(ev.EvalError, match="lies outside"):
        ev.resolve_target(ev.compose_config([f"run={run}", f"checkpoint={other / 'checkpoint-4'}"]))
    cfg = ev.compose_config(
        [f"run={run}", f"checkpoint={other / 'checkpoint-4'}", "allow_foreign_checkpoint=true"]
    )
    assert ev.resolve_target(cfg).foreign_checkpoint == str((other / "checkpoint-4").resolve())


def test_aggregation_lists_foreign_cells_in_the_summary(tmp_path):
    build_tree(tmp_path)
    cell = tmp_path / "eval" / "tiny" / "pspo" / "seed1" / "gsm8k" / "T0.0.json"
    cell.write_text(
        json.dumps({**json.loads(cell.read_text()), "foreign_checkpoint": "/x/clip/checkpoint-4"})
    )
    outputs = aggregate.run(_agg_cfg(f"results_dir={tmp_path}"))
    summary = outputs.files[tmp_path / "tables" / "summary.md"]
    assert (
        f"foreign checkpoint (allow_foreign_checkpoint=true, not this run's own): {cell}: /x/clip/checkpoint-4"
        in summary
    )


@pytest.mark.slow
def test_cells_of_a_foreign_checkpoint_carry_it(results_root, tiny_model_dir):
    """End to end: the cell written from a foreign checkpoint says so; one from the run's own does not."""
    from pspo_repro.evaluation import evaluator as ev

    run = _run_with_checkpoint(results_root, tiny_model_dir, "pspo")
    other = _run_with_checkpoint(results_root, tiny_model_dir, "clip")
    (run / "checkpoint-9").symlink_to(other / "checkpoint-4")
    common = ["eval.limit=2", "temperatures=[0.0]", "max_new_tokens=4", "backend=hf"]
    (cell,) = ev.evaluate(ev.compose_config([f"run={run}", "checkpoint=checkpoint-9", "allow_foreign_checkpoint=true",
                                             *common]))  # fmt: skip
    assert cell["foreign_checkpoint"] == str((other / "checkpoint-4").resolve())
    (own,) = ev.evaluate(ev.compose_config([f"run={other}", *common]))
    assert "foreign_checkpoint" not in own


# ---------------------------------------------------------------- item 3: links out of results/


def test_a_link_inside_results_that_stays_inside_is_followed(tmp_path, monkeypatch):
    results = tmp_path / "results"
    (results / "store").mkdir(parents=True)
    (results / "eval").symlink_to(results / "store")
    monkeypatch.delenv("PSPO_RESULTS_DIR", raising=False)
    assert results_path(results / "eval", ("model", "tiny")) == results / "eval" / "tiny"


def test_a_link_out_of_results_is_refused_unless_pspo_results_dir_is_there(tmp_path, monkeypatch):
    results, scratch = tmp_path / "results", tmp_path / "scratch"
    (scratch / "eval").mkdir(parents=True)
    results.mkdir()
    (results / "eval").symlink_to(scratch / "eval")
    monkeypatch.delenv("PSPO_RESULTS_DIR", raising=False)
    with pytest.raises(UnsafePathError) as err:
        results_path(results / "eval", ("model", "tiny"))
    assert f"{results / 'eval'} is a symlink to {scratch / 'eval'}" in str(err.value)
    monkeypatch.setenv("PSPO_RESULTS_DIR", str(scratch))  # the user's explicit choice of that folder
    assert results_path(results / "eval", ("model", "tiny")) == results / "eval" / "tiny"


def test_a_deeper_link_out_of_results_is_refused_and_named(tmp_path, monkeypatch):
    results = tmp_path / "results"
    (results / "eval").mkdir(parents=True)
    (tmp_path / "elsewhere").mkdir()
    (results / "eval" / "tiny").symlink_to(tmp_path / "elsewhere")
    monkeypatch.setenv("PSPO_RESULTS_DIR", str(results))
    with pytest.raises(UnsafePathError, match=f"{results / 'eval' / 'tiny'} is a symlink to"):
        results_path(results / "eval", ("model", "tiny"), ("method", "pspo"))


def test_a_results_folder_that_is_itself_a_link_and_out_dirs_elsewhere_are_the_users(tmp_path, monkeypatch):
    real = tmp_path / "real"
    real.mkdir()
    (tmp_path / "results").symlink_to(real)
    monkeypatch.delenv("PSPO_RESULTS_DIR", raising=False)
    assert (
        results_path(tmp_path / "results" / "runs", ("model", "tiny")).parent == tmp_path / "results" / "runs"
    )
    assert (
        safe_paths.no_symlink_escape(tmp_path / "results", tmp_path / "anywhere" / "tables")
        == tmp_path / "anywhere" / "tables"
    )


def test_regime_name_is_one_file_name(tmp_path, capsys):
    write_run(tmp_path, "pspo", 0, [0.1, 0.2])
    out = tmp_path / "out"
    for name in ("../../../../x", "a/b", ".."):
        assert regime.main([f"results_dir={tmp_path}", f"out_dir={out}", f"name={name}"]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith(f"error: name={name!r} cannot name a results folder"), err
    assert not out.exists() and not (tmp_path.parent / "x.md").exists()


# ---------------------------------------------------------------- item 6: a table set is one set


def _names(folder: Path) -> set[str]:
    return {p.name for p in folder.iterdir() if p.is_file()}


def test_reaggregating_with_fewer_options_sets_the_old_outputs_aside(tmp_path):
    """mini-style: out_dir is the results folder, shared with evaluation cells, runs, and the regime and
    claims tables. The paired tables of a first aggregation are not beside the second's set: they are in
    stale/, named in summary.md; nothing the aggregation did not write is touched."""
    build_tree(tmp_path)
    others = {"regime_main.md": "r", "regime_main.csv": "r", "claims.md": "c", "timings.json": "{}"}
    for name, text in others.items():
        (tmp_path / name).write_text(text)
    first = aggregate.run(
        _agg_cfg(f"results_dir={tmp_path}", f"out_dir={tmp_path}", "paired.pairs=[[pspo,clip]]")
    )
    paired = {p.name for p in first.files if p.name.startswith("paired_")}
    assert paired == {"paired_pspo_vs_clip_true_acc.md", "paired_pspo_vs_clip_true_acc.csv",
                      "paired_pspo_vs_clip_reward_acc.md", "paired_pspo_vs_clip_reward_acc.csv"}  # fmt: skip
    cells = sorted(p for p in (tmp_path / "eval").rglob("*") if p.is_file())
    second = aggregate.run(_agg_cfg(f"results_dir={tmp_path}", f"out_dir={tmp_path}"))
    assert sorted(second.stale) == sorted(paired)
    assert _names(tmp_path) == {p.name for p in second.files} | set(others)
    assert _names(tmp_path / "stale") == paired
    assert all((tmp_path / n).read_text() == t for n, t in others.items())
    assert sorted(p for p in (tmp_path / "eval").rglob("*") if p.is_file()) == cells
    summary = (tmp_path / "summary.md").read_text()
    assert "## Set aside as stale (stale/)" in summary
    assert all(f"- stale/{n}" in summary for n in paired)
    # a third run with the same options: nothing stale, the summary says nothing of it
    third = aggregate.run(_agg_cfg(f"results_dir={tmp_path}", f"out_dir={tmp_path}"))
    assert third.stale == [] and "stale" not in (tmp_path / "summary.md").read_text()


def test_only_files_the_previous_summary_lists_as_written_are_moved(tmp_path):
    """summary.md is the manifest, but an untrusted one: only plain names with an output suffix, regular files
    directly in the folder, are ever moved; a summary another tool wrote (another title) lists nothing."""
    build_tree(tmp_path)
    out = tmp_path / "tables"
    out.mkdir()
    (tmp_path / "outside.md").write_text("keep")
    (out / "sub").mkdir()
    (out / "sub" / "x.md").write_text("keep")
    (out / "notes.txt").write_text("keep")
    (out / "link.md").symlink_to(tmp_path / "outside.md")
    (out / "old_table.md").write_text("old")
    listed = ["../outside.md", "sub", "sub/x.md", "notes.txt", "link.md", ".hidden.md", "old_table.md", "eval"]  # fmt: skip
    (out / "summary.md").write_text(
        "# Aggregation summary\n\n## Written\n\n" + "".join(f"- {n}\n" for n in listed)
    )
    assert aggregate.previous_outputs(out) == ["old_table.md"]
    aggregate.run(_agg_cfg(f"results_dir={tmp_path}"))
    assert (out / "stale" / "old_table.md").read_text() == "old" and not (out / "old_table.md").exists()
    assert (tmp_path / "outside.md").read_text() == "keep" and (out / "sub" / "x.md").is_file()
    assert (out / "notes.txt").is_file() and (out / "link.md").is_symlink()
    (out / "summary.md").write_text("# Claims\n\n## Written\n\n- main_true_acc.md\n")
    assert aggregate.previous_outputs(out) == []


def test_committed_mini_summary_lists_only_the_aggregations_own_files():
    """results/mini is shared by aggregate, regime, claims and the pipeline's timings: the manifest read from
    its summary.md names aggregate's outputs only, so a re-aggregation never moves the others."""
    mini = PROJECT_ROOT / "results" / "mini"
    if not (mini / "summary.md").is_file():
        pytest.skip("no committed mini results in this checkout")
    names = aggregate.previous_outputs(mini)
    assert "summary.md" in names and "main_true_acc.md" in names
    assert not [n for n in names if n.startswith(("regime_", "claims", "timings"))], names
    assert all((mini / n).is_file() for n in names)


def _set(folder: Path, tag: str, n: int = 3) -> dict[Path, str | bytes]:
    return {folder / f"t{i}.md": f"{tag} {i}" for i in range(n)}


class Killed(BaseException):
    """Stands for SIGKILL: nothing after it runs."""


@pytest.mark.parametrize("at", range(1, 7))
def test_setting_aside_killed_anywhere_recovers_to_one_set(tmp_path, monkeypatch, at):
    """A new set of 2 files replacing one of 3 (the third set aside): a kill at the at-th os.replace (staging
    2, the journal, switching 2, setting 1 aside) leaves, after recovery, the old set whole or the new set whole
    with the third file in stale/, never both sets side by side."""
    out = tmp_path / "out"
    atomic.write_set(_set(out, "old"))
    (out / "other.json").write_text("not ours")
    calls, real = [0], os.replace

    def replace(src, dst):
        calls[0] += 1
        if calls[0] == at:
            raise Killed
        return real(src, dst)

    monkeypatch.setattr(atomic.os, "replace", replace)
    monkeypatch.setattr(atomic.os, "unlink", lambda *a: (_ for _ in ()).throw(Killed))
    with pytest.raises(Killed):
        atomic.write_set(_set(out, "new", 2), (".md",), aside=["t2.md"])
    monkeypatch.undo()
    atomic.recover_set(out, (".md",))
    now = {p.name: p.read_text() for p in out.iterdir() if p.is_file()}
    stale = {p.name: p.read_text() for p in (out / "stale").iterdir()} if (out / "stale").is_dir() else {}
    old = {"t0.md": "old 0", "t1.md": "old 1", "t2.md": "old 2", "other.json": "not ours"}
    new = {"t0.md": "new 0", "t1.md": "new 1", "other.json": "not ours"}
    assert (now, stale) in ((old, {}), (new, {"t2.md": "old 2"})), (now, stale)
    assert (now == new) == (at > 3)  # past the journal (2 staged + 1), the switch is finished
