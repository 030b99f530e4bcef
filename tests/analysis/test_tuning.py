"""Selection on validation (analysis/tuning.py) and the pipeline's tuned groups that run at the chosen value."""

from __future__ import annotations

import json
import math
import os
import sys
from pathlib import Path

import pytest

from pspo_repro.analysis import tuning
from pspo_repro.analysis.tuning import TuningError, point_tag, select, split_tag
from pspo_repro.common.cli import compose_config
from pspo_repro.common.paths import PROJECT_ROOT
from pspo_repro.pipelines import grid, stages
from pspo_repro.pipelines import jobs as pipeline_jobs

VALUES = ["1e-4", "3e-4", "1e-3"]
STUDY_VALUES = ("3e-5", "1e-4", "3e-4", "1e-3")  # conf/pipeline/study.yaml's sweep


def _run(folder: Path, rewards: list[float | None], status: str = "finished") -> None:
    """A run folder whose metrics.jsonl validates at steps 0, 4, 8, ... with these rewards."""
    folder.mkdir(parents=True)
    (folder / "run.json").write_text(json.dumps({"status": status, "tag": folder.name.partition("-")[2]}))
    lines = [json.dumps({"step": 4 * i, "eval/reward": r}) for i, r in enumerate(rewards)]
    lines.insert(1, json.dumps({"step": 1, "train/loss": 0.1}))  # a training line has no validation
    (folder / "metrics.jsonl").write_text("\n".join(lines) + "\n")


def _sweep(root: Path, method: str, scores: dict[str, list[list[float]]], point=None, tag="tune") -> None:
    for value, per_seed in scores.items():
        vtag = point_tag(tag, {**(point or {}), "trainer.learning_rate": value})
        for seed, rewards in zip((100, 101, 102), per_seed, strict=True):
            _run(root / method / f"seed{seed}-{vtag}", rewards)


def test_point_tag_matches_training_tags():
    assert point_tag("tune", {"trainer.learning_rate": "3e-4"}) == "tune-learning_rate0.0003"
    # keys sorted by their full name, as run_dir.tag_from_overrides: method.* before trainer.*
    p = {"trainer.learning_rate": 1e-3, "method.num_iterations": 2}
    assert point_tag("tune", p) == "tune-num_iterations2_learning_rate0.001"
    assert split_tag("tune-num_iterations2_learning_rate0.001", "tune", "learning_rate") == (
        "0.001",
        "num_iterations2",
    )
    assert split_tag("tuned-learning_rate0.001", "tune", "learning_rate") is None


def test_select_by_mean_best_validation_after_step_zero(tmp_path):
    # step 0 (the base model's validation, 0.9 here) never counts; each run's best later value does
    _sweep(tmp_path, "clip", {
        "1e-4": [[0.9, 0.1, 0.2], [0.9, 0.2, 0.1], [0.9, 0.3, 0.3]],  # bests 0.2, 0.2, 0.3 -> 0.2333
        "3e-4": [[0.9, 0.3, 0.1], [0.9, 0.1, 0.4], [0.9, 0.2, 0.2]],  # bests 0.3, 0.4, 0.2 -> 0.3
        "1e-3": [[0.9, 0.5, 0.0], [0.9, 0.0, 0.0], [0.9, 0.1, 0.0]],  # bests 0.5, 0.0, 0.1 -> 0.2
    })  # fmt: skip
    sel = select(tmp_path, "clip", "tune", "trainer.learning_rate", VALUES, [100, 101, 102])
    assert sel.chosen == "0.0003"
    assert sel.scores["0.0001"] == pytest.approx((0.2 + 0.2 + 0.3) / 3)
    assert sel.per_seed["0.001"] == {100: 0.5, 101: 0.0, 102: 0.1}
    assert "**0.0003: 0.300**" in sel.text()


def test_select_ties_go_to_the_first_value_and_points_select_their_own_runs(tmp_path):
    same = [[0.0, 0.2]] * 3
    _sweep(tmp_path, "noclip", {v: same for v in VALUES}, point={"method.num_iterations": 2})
    sel = select(tmp_path, "noclip", "tune", "trainer.learning_rate", VALUES, [100, 101, 102],
                 {"method.num_iterations": 2})  # fmt: skip
    assert sel.chosen == "0.0001"
    with pytest.raises(TuningError, match="not finished"):  # the 1-pass point has no runs here
        select(tmp_path, "noclip", "tune", "trainer.learning_rate", VALUES, [100, 101, 102])


@pytest.mark.parametrize("problem", ["unfinished", "no_validation", "torn", "nan", "relabelled"])
def test_select_refuses_a_choice_on_fewer_runs(tmp_path, problem):
    _sweep(tmp_path, "pspo", {v: [[0.0, 0.2]] * 3 for v in VALUES})
    bad = tmp_path / "pspo" / "seed101-tune-learning_rate0.001"
    if problem == "unfinished":
        (bad / "run.json").write_text(json.dumps({"status": "running", "tag": "tune-learning_rate0.001"}))
        match = "not finished"
    elif problem == "no_validation":
        (bad / "metrics.jsonl").write_text(json.dumps({"step": 0, "eval/reward": 0.5}) + "\n")
        match = "no validation after step 0"
    elif problem == "torn":
        (bad / "metrics.jsonl").write_text('{"step": 4, "eval/rew\n')
        match = "metrics.jsonl:1: bad JSON line"  # the one reader of run records names the line
    elif problem == "nan":  # it used to be passed over, so the choice was made on the other steps
        (bad / "metrics.jsonl").write_text(
            '{"step": 0, "eval/reward": 0.1}\n{"step": 4, "eval/reward": NaN}\n'
        )
        match = "metrics.jsonl:2: eval/reward=nan is not a finite number"
    else:  # another run's run.json copied into this folder
        (bad / "run.json").write_text(json.dumps({"status": "finished", "tag": "tune-learning_rate0.0003"}))
        match = "tag 'tune-learning_rate0.0003' disagrees with its folder"
    with pytest.raises(TuningError, match=match):
        select(tmp_path, "pspo", "tune", "trainer.learning_rate", VALUES, [100, 101, 102])


def test_best_validation_ignores_non_finite(tmp_path):
    _run(tmp_path / "r", [0.3, None, 0.2])
    assert tuning.best_validation(tmp_path / "r" / "metrics.jsonl") == pytest.approx(0.2)
    _run(tmp_path / "s", [0.3])
    assert math.isnan(tuning.best_validation(tmp_path / "s" / "metrics.jsonl"))


def test_study_runs_the_tuned_groups_at_the_chosen_lr(tmp_path):
    """conf/pipeline/study.yaml: the tuned groups wait for their sweeps, then run each method at its own choice."""
    cfg = compose_config(PROJECT_ROOT / "conf", "mini", ["pipeline=study", f"root={tmp_path}"])
    runs = tmp_path / "runs" / "mini_sft"
    best = {"clip": "1e-3", "pspo": "3e-4", "noclip": "1e-4"}
    for method, pick in best.items():
        _sweep(runs, method, {v: [[0.0, 0.5 if v == pick else 0.1]] * 3 for v in STUDY_VALUES})
    _sweep(runs, "noclip", {v: [[0.0, 0.5 if v == "1e-3" else 0.1]] * 3 for v in STUDY_VALUES},
           point={"method.num_iterations": 2})  # fmt: skip
    jobs = {j.name: j.cmd for j in grid.rl_jobs(cfg, tmp_path, "select")}
    assert set(jobs) == {"rl-tuned-0", "rl-tuned-1", "rl-tuned-2", "rl-tuned_noclip2"}
    lrs = {next(a for a in c if a.startswith("method=")): next(a for a in c if "learning_rate" in a)
           for c in jobs.values() if "method.num_iterations=2" not in c}  # fmt: skip
    assert lrs == {"method=clip": "trainer.learning_rate=0.001", "method=pspo": "trainer.learning_rate=0.0003",
                   "method=noclip": "trainer.learning_rate=0.0001"}  # fmt: skip
    report = ",".join(map(str, range(200, 220)))  # the fresh report seeds of issue 55's design
    assert all("run_tag=tuned" in c and f"seed={report}" in c for c in jobs.values())
    assert "trainer.learning_rate=0.001" in jobs["rl-tuned_noclip2"]
    tagged = {(m, t) for m, t, s in grid.rl_runs(cfg, tmp_path) if t.startswith("tuned-")}
    assert tagged == {("clip", "tuned-learning_rate0.001"), ("pspo", "tuned-learning_rate0.0003"),
                      ("noclip", "tuned-learning_rate0.0001"),
                      ("noclip", "tuned-num_iterations2_learning_rate0.001")}  # fmt: skip
    assert not [j for j in grid.rl_jobs(cfg, tmp_path, "sweep") if "run_tag=tuned" in j.cmd]


def test_a_near_tie_runs_the_whole_selection_set_on_the_report_seeds(tmp_path):
    """select.tolerance (issue 55): clip's two near-tied lrs both run, as one Hydra sweep of the tuned job."""
    cfg = compose_config(PROJECT_ROOT / "conf", "mini", ["pipeline=study", f"root={tmp_path}"])
    runs = tmp_path / "runs" / "mini_sft"
    near = {"1e-4": [[0.0, 0.200]] * 3, "3e-4": [[0.0, 0.195]] * 3}
    _sweep(runs, "clip", {v: near.get(v, [[0.0, 0.1]] * 3) for v in STUDY_VALUES})
    (job,) = [j for j in grid.ready_select_jobs(cfg, tmp_path, set()) if "method=clip" in j.cmd]
    assert "trainer.learning_rate=0.0001,0.0003" in job.cmd
    _sweep(runs, "pspo", {v: [[0.0, 0.5 if v == "3e-4" else 0.1]] * 3 for v in STUDY_VALUES})
    _sweep(runs, "noclip", {v: [[0.0, 0.5 if v == "3e-4" else 0.1]] * 3 for v in STUDY_VALUES})
    _sweep(runs, "noclip", {v: [[0.0, 0.5 if v == "3e-4" else 0.1]] * 3 for v in STUDY_VALUES},
           point={"method.num_iterations": 2})  # fmt: skip
    clip = {t for m, t, s in grid.rl_runs(cfg, tmp_path) if m == "clip" and t.startswith("tuned-")}
    assert clip == {"tuned-learning_rate0.0001", "tuned-learning_rate0.0003"}


def test_reuse_committed_checks_the_recomputed_base(tmp_path, capsys):
    """reuse_committed: new runs are compared with committed ones only if the SFT base is the same one."""
    same = {"val_accuracy": 0.015, "model_sha256": "ab" * 32}
    stages.check_same_base(same, dict(same), tmp_path)
    assert "matches the committed one" in capsys.readouterr().out
    with pytest.raises(pipeline_jobs.StageError, match="sha256"):
        stages.check_same_base({**same, "model_sha256": "cd" * 32}, same, tmp_path)
    with pytest.raises(pipeline_jobs.StageError, match="validation accuracy 0.02 differs"):
        stages.check_same_base({"val_accuracy": 0.02}, {"val_accuracy": 0.015}, tmp_path)
    with pytest.raises(pipeline_jobs.StageError, match="no sft record"):
        stages.check_same_base(same, None, tmp_path)


def test_each_tuned_point_is_ready_as_soon_as_its_own_sweep_is(tmp_path):
    """conf/pipeline/study.yaml: a tuned job joins the queue once its method's sweep has finished, not after all."""
    cfg = compose_config(PROJECT_ROOT / "conf", "mini", ["pipeline=study", f"root={tmp_path}"])
    runs = tmp_path / "runs" / "mini_sft"
    issued: set[str] = set()
    assert grid.ready_select_jobs(cfg, tmp_path, issued) == []
    _sweep(runs, "clip", {v: [[0.0, 0.5 if v == "1e-3" else 0.1]] * 3 for v in STUDY_VALUES})
    first = grid.ready_select_jobs(cfg, tmp_path, issued)
    assert [j.name for j in first] == ["rl-tuned-0"]
    assert "method=clip" in first[0].cmd and "trainer.learning_rate=0.001" in first[0].cmd
    assert grid.ready_select_jobs(cfg, tmp_path, issued) == []  # issued once only
    _sweep(runs, "pspo", {v: [[0.0, 0.5 if v == "3e-4" else 0.1]] * 3 for v in STUDY_VALUES})
    assert [j.name for j in grid.ready_select_jobs(cfg, tmp_path, issued)] == ["rl-tuned-1"]
    # the same jobs as the all-at-once path, and the sweeps the tuned groups read go first
    _sweep(runs, "noclip", {v: [[0.0, 0.5]] * 3 for v in STUDY_VALUES})
    _sweep(runs, "noclip", {v: [[0.0, 0.5]] * 3 for v in STUDY_VALUES}, point={"method.num_iterations": 2})
    rest = {j.name: j.cmd for j in grid.ready_select_jobs(cfg, tmp_path, issued)}
    every = {j.name: j.cmd for j in grid.rl_jobs(cfg, tmp_path, "select")}
    assert set(rest) | {"rl-tuned-0", "rl-tuned-1"} == set(every) and all(
        every[n] == c for n, c in rest.items()
    )
    prio = {j.name: j.priority for j in grid.rl_jobs(cfg, tmp_path, "sweep")}
    assert {n for n, p in prio.items() if p} == {n for n in prio if n.startswith("rl-tune_")} != set()


def test_run_jobs_starts_ready_jobs_beside_running_ones(tmp_path):
    """A job that ``ready()`` hands over when one ends starts at once, while the other still runs."""
    marker = tmp_path / "first.done"

    def job(name, seconds, cost, priority=0):
        code = f"import time, pathlib; time.sleep({seconds}); pathlib.Path(r'{tmp_path}/{name}.done').touch()"
        return pipeline_jobs.Job(
            name, [sys.executable, "-c", code], cost, tmp_path / f"{name}.log", priority=priority
        )

    handed: list[str] = []

    def ready():
        if marker.exists() and not handed:
            handed.append("late")
            return [job("late", 0, 1.0)]
        return []

    class Bar:
        n = 0

        def refresh(self):
            pass

    # "first" goes before the costlier "long" (priority); "late" starts when "first" ends, "long" still running
    jobs = [job("long", 6, 5.0), job("first", 0, 1.0, priority=1)]
    pipeline_jobs.run_jobs(jobs, 2, dict(os.environ), Bar(), lambda: 0, ready)
    assert handed == ["late"]
    done = {p.stem: p.stat().st_mtime for p in tmp_path.glob("*.done")}
    assert set(done) == {"first", "long", "late"} and done["late"] < done["long"]


def test_the_selection_set_holds_every_pick_within_the_selections_noise():
    """Selection.near (issue 55): the chosen value, each leave-one-seed-out subset's pick and every value within
    the tolerance of the best's mean, best first; a clear winner stands alone."""
    from pspo_repro.analysis.tuning import Selection

    per_seed = {"0.0001": {100: 0.20, 101: 0.15, 102: 0.20}, "0.0003": {100: 0.12, 101: 0.25, 102: 0.16},
                "0.001": {100: 0.05, 101: 0.06, 102: 0.04}}  # fmt: skip
    scores = {v: sum(x.values()) / 3 for v, x in per_seed.items()}
    sel = Selection("clip", "trainer.learning_rate", "0.0001", scores, per_seed)
    # leaving seed 100 out picks 3e-4 (0.205 against 0.175); no subset picks 1e-3
    assert sel.near(0.0) == ["0.0001", "0.0003"]
    assert sel.near(1.0) == ["0.0001", "0.0003", "0.001"]
    clear = Selection("clip", "trainer.learning_rate", "0.001", {"0.0001": 0.1, "0.001": 0.3},
                      {"0.0001": {1: 0.1, 2: 0.1, 3: 0.1}, "0.001": {1: 0.3, 2: 0.3, 3: 0.3}})  # fmt: skip
    assert clear.near(0.01) == ["0.001"]
    assert "selection set: the pick alone" in clear.text(0.01) and "selection set" not in clear.text()
    assert sel.text(0.0).endswith("selection set (within the noise of the pick): 0.0001, 0.0003")
