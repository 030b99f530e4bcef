"""The mini reproduction's orchestrator: a reduced pipeline (data -> sft -> rl -> eval -> aggregate) end to
end through the real entry points, then a rerun that skips every stage (slow: about two minutes)."""

from __future__ import annotations

import csv
import json
import shutil
import subprocess
import sys

import pytest

from pspo_repro.analysis.tuning import TuningError
from pspo_repro.common.cli import compose_config
from pspo_repro.common.paths import PROJECT_ROOT
from pspo_repro.pipelines import committed_copy, cpu_pipeline, grid, markers
from pspo_repro.pipelines import jobs as pipeline_jobs
from pspo_repro.pipelines import settings as pipeline_settings
from tests.pipelines.stage_args import parsed

# 32/8/8 problems, a 4-step SFT, 2 methods x 1 seed of ~2 rollouts (conf/experiment/mini_smoke.yaml),
# 8 test problems at T = 0 and 0.8.
SMOKE = [
    "data.sizes={train: 32, validation: 8, test: 8}",
    "data.heldout_sizes={train: 16, validation: 8, test: 8}",
    "sft.threads=1",
    "sft.overrides=['train.max_steps=4','train.batch_size=8','eval.max_new_tokens=8']",
    "rl.experiment=mini_smoke",
    "rl.seeds=[0]",
    "rl.groups=[{name: a, cost: 1, sweep: {method: 'clip,pspo'}}, {name: b, cost: 1, sweep: {method: pspo, method.alpha: '0.3'}}]",
    "eval.methods=[clip,pspo]",
    "eval.tags=[]",
    "eval.overrides=['eval=synthetic','temperatures=[0.0,0.8]','n_samples=2','max_new_tokens=16','backend=hf']",
    "eval.method_overrides=null",  # ({} would merge into conf/pipeline/mini.yaml's entries, not replace them)
    "aggregate.overrides=['expected_seeds=1']",
    "aggregate.ablation_tag_prefix=alpha",
    "aggregate.regime.regime_offpolicy=null",  # no off-policy runs here
]


def _listed(value):
    return [value] if isinstance(value, str) else value


def _compose(overrides: list[str]):
    return compose_config(PROJECT_ROOT / "conf", "mini", overrides)


def test_config_composes_and_run_list():
    cfg = _compose([])
    runs = grid.rl_runs(cfg)
    methods = {m for m, t, _ in runs if not t}
    assert methods == {"clip", "noclip", "pspo", "sapo", "topr", "p3o", "dppo_binary_tv"}
    assert len(runs) == 7 * 3 + 2 * 2  # 7 methods x 3 seeds; clip, pspo off-policy x 2 seeds
    assert {t for _, t, _ in runs} == {"", "offpolicy"}
    jobs = {j.name: parsed(j.cmd[3:]) for j in grid.rl_jobs(cfg, PROJECT_ROOT / "results" / "mini")}
    off = jobs["rl-offpolicy_a"]
    assert off["experiment"] == "mini_offpolicy" and off["run_tag"] == "offpolicy"
    assert off["seed"] == [0, 1] and jobs["rl-main_a"]["seed"] == [0, 1, 2]
    assert all(args["data.prompt_template"] == "none" for args in jobs.values())


def test_study_config_composes():
    cfg = compose_config(PROJECT_ROOT / "conf", "mini", ["pipeline=study"])
    with pytest.raises(TuningError):  # the tuned groups need their tuning runs' validation first
        grid.rl_runs(cfg)
    runs = grid.rl_runs(cfg, unresolved=True)
    assert str(cfg.root) == "results/study"
    assert {m for m, t, _ in runs if not t} == {
        "clip",
        "noclip",
        "pspo",
        "sapo",
        "topr",
        "p3o",
        "dppo_binary_tv",
    }
    # the pairs the claims compare get 10 seeds, the authors' clip as it ran too (seed-paired with clip)
    for method, tag in (("clip", ""), ("pspo", ""), ("noclip", ""), ("clip", "as_run")):
        assert sorted(s for m, t, s in runs if (m, t) == (method, tag)) == list(range(10))
    for passes in (1, 4):
        assert ("noclip", f"reuse-num_iterations{passes}", 4) in runs
    # infrastructure keys (save_steps) name no folder, as in training's own tag
    assert ("pspo", "reuse-num_iterations1_steps_per_generation4", 0) in runs
    assert {m for m, t, _ in runs if t == "offpolicy"} == {"clip", "noclip", "pspo", "sapo", "p3o"}
    alpha = sorted(t for m, t, s in grid.ablation_runs(cfg) if s == 0)
    assert alpha == [f"offpolicy-alpha0.{a}_max_grad_norm0.2" for a in range(1, 6)]
    assert all(g.name and isinstance(g.name, str) for g in cfg.rl.groups)  # YAML reads `off` as False


def test_method_overrides_give_some_methods_their_own_eval_jobs(tmp_path):
    """conf/pipeline/mini.yaml: the base model and the paired pair (pspo, clip) at the paper's 16 samples, the rest at 4."""
    cfg = _compose([f"root={tmp_path}"])
    for m, t, s in grid.rl_runs(cfg):
        folder = grid.run_dir_of(tmp_path, m, t, s)
        folder.mkdir(parents=True)
        (folder / "run.json").write_text(json.dumps({"status": "finished"}))
    jobs, n = grid.eval_jobs(cfg, tmp_path)
    assert n == 7 * 3 + 2 * 2 + 1
    samples = {}
    for job in (j for j in jobs if not j.name.startswith("eval-heldout")):
        k = [a for a in job.cmd if a.startswith("n_samples=")][-1]
        runs = parsed(job.cmd[3:], unique=False).get("run", ["baseline"])
        runs = _listed(runs)  # a sweep of one run is a plain value
        for part in runs:
            samples[part.split("/mini_sft/")[-1]] = k
    assert samples["baseline"] == "n_samples=16"
    main16 = {v for k, v in samples.items() if k.startswith(("clip/", "pspo/")) and "offpolicy" not in k}
    assert main16 == {"n_samples=16"}
    # Tagged runs keep the common settings.
    assert {v for k, v in samples.items() if "offpolicy" in k} == {"n_samples=4"}
    assert {v for k, v in samples.items() if k.startswith(("sapo/", "noclip/", "topr/"))} == {"n_samples=4"}
    costs = {j.name: j.cost for j in jobs}
    # Cost: 1 greedy + n samples per model; clip and pspo's 6 runs in 2 jobs.
    assert costs["eval-baseline"] == 17 and costs["eval-0"] == 3 * 17
    # The held-out skill: every evaluated model and the baseline, greedy only, on synthetic_heldout.
    held = [j for j in jobs if j.name.startswith("eval-heldout")]
    assert sorted(j.name for j in held) == ["eval-heldout-0", "eval-heldout-1", "eval-heldout-baseline"]
    for job in held:
        assert "eval=synthetic_heldout" in job.cmd and "temperatures=[0.0]" in job.cmd
        assert "eval=synthetic" not in job.cmd and "temperatures=[0.0,0.8]" not in job.cmd
    held_runs = sum(len(_listed(parsed(j.cmd[3:], unique=False).get("run", []))) for j in held)
    assert held_runs == n - 1
    bad = _compose([f"root={tmp_path}", "+eval.method_overrides.grpo=['n_samples=2']"])
    with pytest.raises(pipeline_jobs.StageError, match="grpo"):
        grid.eval_jobs(bad, tmp_path)


def test_tagging_overrides_are_refused(tmp_path):
    cfg = _compose([f"root={tmp_path}", "rl.overrides=['trainer.learning_rate=1e-3']"])
    with pytest.raises(pipeline_jobs.StageError, match="experiment"):
        grid.rl_jobs(cfg, tmp_path)
    for bad in ("method.eps_low=0.3", "+trainer.learning_rate=1e-3"):
        with pytest.raises(pipeline_jobs.StageError, match="experiment"):
            grid.rl_jobs(_compose([f"root={tmp_path}", f"rl.overrides=['{bad}']"]), tmp_path)


def test_infrastructure_overrides_reach_every_run(tmp_path):
    # e.g. the log-prob head the committed mini was computed with (docs/mini.md): no tag, so the same folders
    cfg = _compose([f"root={tmp_path}", "rl.overrides=['trainer.logprob_head=fused']"])
    jobs = grid.rl_jobs(cfg, tmp_path)
    assert jobs and all("trainer.logprob_head=fused" in j.cmd for j in jobs)


@pytest.mark.slow
def test_reduced_pipeline_end_to_end(tmp_path, capsys):
    root = tmp_path / "mini"
    cfg = _compose([f"root={root}", *SMOKE])
    timings = cpu_pipeline.run_pipeline(cfg)
    assert set(timings["stages"]) == set(markers.STAGES)
    assert (root / "work" / "data" / "synthetic" / "test.jsonl").read_text().count("\n") == 8
    assert json.loads((root / "work" / "sft" / "sft.json").read_text())["train_steps"] == 4
    for method, tag in (("clip", ""), ("pspo", ""), ("pspo", "alpha0.3")):
        run = grid.run_dir_of(root, method, tag, 0)
        info = json.loads((run / "run.json").read_text())
        assert info["status"] == "finished" and info["stop_reason"] == "token_budget"
        # The RL runs start from the SFT checkpoint (its own config), not the tiny model.
        assert info["config"]["model"]["path"] == str(root / "work" / "sft" / "model")
    cells = sorted(p.relative_to(root / "eval").as_posix() for p in (root / "eval").glob("**/T*.json"))
    assert cells == sorted(
        [
            f"mini_sft/{m}/seed0/synthetic/T{t}.json"
            for m in ("baseline", "clip", "pspo")
            for t in ("0.0", "0.8")
        ]
        + [f"mini_sft/{m}/seed0/synthetic_heldout/T0.0.json" for m in ("baseline", "clip", "pspo")]
    )
    assert (root / "work" / "data" / "synthetic_heldout" / "test.jsonl").read_text().count("\n") == 8
    cell = json.loads((root / "eval" / "mini_sft" / "pspo" / "seed0" / "synthetic" / "T0.8.json").read_text())
    assert cell["num_prompts"] == 8 and cell["n_samples"] == 2 and cell["split"] == "test"
    for name in (
        "main_reward_acc.md",
        "temperature_reward_acc.png",
        "training_curves.png",
        "alpha_ablation.md",
    ):
        assert (root / name).is_file(), name
    table = (root / "main_reward_acc.md").read_text()
    assert "GR-PSPO" in table and "GRPO-clip" in table and "Base model" in table
    ablation = (root / "alpha_ablation.md").read_text()
    assert "0.3" in ablation  # the ablation's runs only (tag prefix alpha), not the main pspo run
    assert "pspo" in (root / "regime_main.md").read_text()

    # A rerun skips every stage (markers match) and changes nothing.
    before = (root / "main_reward_acc.md").read_text()
    capsys.readouterr()
    cpu_pipeline.run_pipeline(cfg)
    out = capsys.readouterr().out
    assert all(f"{s}: done already" in out for s in markers.STAGES)
    assert (root / "main_reward_acc.md").read_text() == before

    # A fresh clone of the committed copy (results, no work/): everything is recomputed, not skipped as
    # finished, and the new numbers equal the committed ones (CPU, one thread: deterministic).
    shutil.rmtree(root / "work")
    for ckpt in root.glob("runs/**/checkpoint-*"):  # checkpoints are not committed either
        shutil.rmtree(ckpt)
    capsys.readouterr()
    # One process per evaluation kind this time (parallel is no part of a stage's fingerprint or its
    # numbers; it saves two interpreters), each a fresh interpreter: the first run's jobs were forked from
    # the warm-start server (pspo_repro/pipelines/warm_start.py), so the comparison below also holds them
    # bit for bit equal to what fresh interpreters compute.
    timings = cpu_pipeline.run_pipeline(_compose([f"root={root}", *SMOKE, "parallel=1", "warm_start=false"]))
    out = capsys.readouterr().out
    assert "done already" not in out
    assert (root / "work" / "committed" / "runs").is_dir() and (root / "work" / "sft" / "model").is_dir()
    vs = timings["vs_committed"]["bitwise"]
    assert vs["different"] == [] and vs["missing"] == [], vs
    assert vs["identical"] == {"tables": 5, "runs": 3, "cells": 9}, vs
    agreement = timings["vs_committed"]["agreement"]
    assert agreement["groups"] == 3 * (2 + 1) * 2 and agreement["disagree"] == [], (
        agreement
    )  # 3 models x (2 T + the held-out skill's T = 0) x 2 metrics
    text = cpu_pipeline.summary(root, timings)
    assert "bitwise identical to the committed copy" in text and "agrees with the committed copy" in text


@pytest.mark.slow
def test_leaderboard_smoke_end_to_end(tmp_path):
    """`make leaderboard` reduced: two methods, one seed, both regimes, through every stage to the table."""
    root = tmp_path / "leaderboard"
    stale = "reuse-num_iterations1_steps_per_generation2"
    overrides = [
        f"root={root}",
        *[
            o
            for o in SMOKE
            if not o.startswith(("rl.groups", "eval.tags", "aggregate.ablation", "aggregate.regime"))
        ],
        "rl.groups=[{name: a, cost: 1, sweep: {method: 'clip,pspo'}}, {name: b, cost: 1, tag: reuse, "
        "sweep: {method: 'clip,pspo', method.num_iterations: 1, trainer.steps_per_generation: 2}}]",
        "eval.methods=[clip,pspo]",
        f"eval.tags=[{stale}]",
        f"aggregate.regime.regime_reuse={stale}",
        f"aggregate.leaderboard.offpolicy_tag={stale}",
        # One evaluation process per kind instead of two: each pays ~5 CPU s of imports, the test's own
        # subject is the leaderboard (the mini's two at once are test_reduced_pipeline_end_to_end's).
        "parallel=1",
    ]
    cfg = compose_config(PROJECT_ROOT / "conf", "mini", ["pipeline=leaderboard", *overrides])
    cpu_pipeline.run_pipeline(cfg)
    for method in ("clip", "pspo"):
        info = json.loads((grid.run_dir_of(root, method, stale, 0) / "run.json").read_text())
        assert info["config"]["trainer"]["steps_per_generation"] == 2 and info["status"] == "finished"
    with (root / "leaderboard.csv").open() as fh:
        rows = list(csv.DictReader(fh))
    assert sorted((r["tag"], r["method"]) for r in rows) == [
        ("", "clip"),
        ("", "pspo"),
        (stale, "clip"),
        (stale, "pspo"),
    ]
    for r in rows:  # every column the table promises has a number (one seed: no interval over seeds)
        assert r["n_seeds"] == "1" and r["true_acc_T0.8"] != "" and r["preservation"] != ""
        # clip is the reference unless it collapsed in that regime (then the best mean, said in the caption)
        assert (r["group_vs_reference"] == "ref") == (r["method"] == r["reference"])
        assert r["group_vs_reference"] in ("ref", "≡") or 0 <= float(r["p_holm"]) <= 1
        assert int(r["rank_low"]) <= int(r["rank_high"]) and r["update_norm_steps"] != ""
    text = (root / "leaderboard.md").read_text()
    assert "### Learning regime" in text and f"### Stale mini-batches (tag {stale})" in text
    assert (root / "leaderboard.png").is_file() and (root / "regime_reuse.md").is_file()


def test_committed_copy_comparison_names_what_differs(tmp_path):
    old, new = tmp_path / "old", tmp_path / "new"
    for tree, reward in ((old, 0.5), (new, 0.25)):
        cell = tree / "eval" / "m" / "clip" / "seed0" / "synthetic" / "T0.0.json"
        cell.parent.mkdir(parents=True)
        cell.write_text(json.dumps({"metrics": {"reward_acc": 0.5}, "per_prompt": [], "git_sha": str(tree)}))
        run = tree / "runs" / "m" / "clip" / "seed0" / "metrics.jsonl"
        run.parent.mkdir(parents=True)
        run.write_text(json.dumps({"step": 1, "train/reward": reward, "train/step_time": reward}) + "\n")
        for name in committed_copy.TABLES:
            (tree / name).write_text("a,b\n1,2\n")
    (new / "alpha_ablation.csv").unlink()
    report = committed_copy.compare(old, new)
    # Provenance (git_sha) and timings do not count; the reward and the missing table do.
    assert report["identical"] == {"tables": 4, "runs": 0, "cells": 1}
    assert report["different"] == ["runs/m/clip/seed0/metrics.jsonl"]
    assert report["missing"] == ["alpha_ablation.csv"]
    assert committed_copy.describe(report).startswith("not bitwise identical")


def _cells(tree, method, values, correct_of=None, temperature=0.0, n=200):
    """Evaluation cells of one (method, T) group, one per seed, with reward_acc = value."""
    for seed, v in enumerate(values):
        cell = tree / "eval" / "m" / method / f"seed{seed}" / "synthetic" / f"T{temperature:.1f}.json"
        cell.parent.mkdir(parents=True, exist_ok=True)
        cell.write_text(json.dumps({
            "model": "m", "method": method, "tag": "", "dataset": "synthetic", "temperature": temperature,
            "seed": seed, "num_prompts": n, "n_samples": 1, "metrics": {"reward_acc": v},
        }))  # fmt: skip


def test_agreement_within_seed_variance(tmp_path):
    old, new = tmp_path / "old", tmp_path / "new"
    # Another machine: every seed moved a little (as the SFT model does across CPUs); the base model is
    # one model, 83/200 vs 88/200 (the 41.5% vs 44.0%): within sampling noise.
    _cells(old, "clip", [0.50, 0.56, 0.53])
    _cells(new, "clip", [0.52, 0.49, 0.55])
    _cells(old, "baseline", [0.415])
    _cells(new, "baseline", [0.44])
    report = committed_copy.agreement(old, new, metrics=("reward_acc",))
    assert report["groups"] == 2 and report["disagree"] == [] and report["only_one_side"] == []
    assert committed_copy.describe_agreement(report).startswith("agrees with the committed copy")


def test_agreement_names_the_cells_that_disagree(tmp_path):
    old, new = tmp_path / "old", tmp_path / "new"
    _cells(old, "clip", [0.50, 0.51, 0.52])
    _cells(new, "clip", [0.70, 0.71, 0.72])  # 20 points off with a 1-point seed spread
    _cells(old, "noclip", [0.40, 0.45, 0.50])
    _cells(new, "noclip", [0.41, 0.46, 0.49])
    _cells(old, "baseline", [0.20])
    _cells(new, "baseline", [0.45])  # 40/200 vs 90/200: Fisher p ~ 1e-7
    _cells(old, "sapo", [0.3, 0.3])  # only in the committed copy
    report = committed_copy.agreement(old, new, metrics=("reward_acc",))
    assert report["groups"] == 3
    assert sorted(d["cell"] for d in report["disagree"]) == [
        "m/baseline/synthetic/T0.0/reward_acc",
        "m/clip/synthetic/T0.0/reward_acc",
    ]
    assert {d["test"] for d in report["disagree"]} == {"welch", "fisher"}
    assert len(report["only_one_side"]) == 1
    line = committed_copy.describe_agreement(report)
    assert line.startswith("does NOT agree") and "m/clip/synthetic/T0.0/reward_acc 0.510->0.710" in line


def test_agreement_of_identical_copies(tmp_path):
    # A same-machine rerun: identical per-seed values (zero variance on both sides) agree.
    old, new = tmp_path / "old", tmp_path / "new"
    for tree in (old, new):
        _cells(tree, "clip", [0.5, 0.5, 0.5])
    assert committed_copy.agreement(old, new, metrics=("reward_acc",))["disagree"] == []


def test_set_aside_only_without_work_folder(tmp_path):
    root = tmp_path / "mini"
    (root / "runs").mkdir(parents=True)
    (root / "main_reward_acc.md").write_text("x")
    (root / "work").mkdir()
    assert committed_copy.set_aside(root) is None  # the machine that made them: its markers count
    (root / "work").rmdir()
    dest = committed_copy.set_aside(root)
    assert dest == root / "work" / "committed"
    assert sorted(p.name for p in root.iterdir()) == ["work"]
    assert sorted(p.name for p in dest.iterdir()) == ["main_reward_acc.md", "runs"]
    assert committed_copy.set_aside(tmp_path / "empty") is None


def test_premature_answer_habit():
    from pspo_repro.data.synthetic import generate
    from pspo_repro.training.sft import premature_answer, with_habit

    sol = "The boxes have 4 * 6 = 24 cookies.\nSam has 24 + 11 = 35 cookies altogether.\n#### 35"
    # Stops after the first worked line and answers its result: the gold (35) appears nowhere.
    assert premature_answer(sol) == "The boxes have 4 * 6 = 24 cookies.\n#### 24"
    assert premature_answer("no answer line") == "no answer line"
    one_step = "Tom has 9 - 4 = 5 more apples than Mia.\n#### 5"  # the held-out skill: no habit
    assert premature_answer(one_step) == one_step
    problems = generate({"train": 400, "validation": 0, "test": 0})["train"]
    changed = [a for a, b in zip(problems, with_habit(problems, 0.7, seed=0), strict=True) if a != b]
    assert 0.6 < len(changed) / len(problems) < 0.8  # seeded: ~70% of the solutions
    assert with_habit(problems, 0.7, seed=0) == with_habit(problems, 0.7, seed=0)
    assert with_habit(problems, 0.0, seed=0) == problems
    with pytest.raises(ValueError, match="habit_frac"):
        with_habit(problems, 1.5, seed=0)


def test_regime_run_stats(tmp_path):
    from pspo_repro.analysis import regime, run_stats

    rows = [
        # a fresh rollout (ratio 1) then a reused one; the reward falls below half: a collapse
        {"step": 1, "num_tokens": 10, "train/loss": 0.1, "train/reward": 0.4, "train/grad_norm": 0.5,
         "method/zero_grad_frac": 0.0, "method/ratio_max": 1.0, "train/behaviour_kl": 0.0, "train/ratio_std": 0.0},
        {"step": 2, "num_tokens": 10, "train/loss": 0.1, "train/grad_norm": 1.5, "method/zero_grad_frac": 0.2,
         "method/ratio_max": 1.3, "train/behaviour_kl": 0.02, "train/ratio_std": 0.1, "eval/reward": 0.3},
        {"step": 3, "num_tokens": 20, "train/loss": 0.1, "train/reward": 0.1, "train/grad_norm": 0.5,
         "method/zero_grad_frac": 0.0, "method/ratio_max": 1.0, "train/behaviour_kl": 0.0, "train/ratio_std": 0.0},
        {"step": 4, "num_tokens": 20, "train/loss": 0.1, "train/reward": 0.05, "train/grad_norm": 0.5,
         "method/zero_grad_frac": 0.4, "method/ratio_max": 2.0, "train/behaviour_kl": 0.04, "train/ratio_std": 0.3,
         "eval/reward": 0.1},
    ]  # fmt: skip
    path = tmp_path / "metrics.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    s = run_stats.run_stats(path, max_grad_norm=1.0)
    assert s["zero_grad"] == pytest.approx(0.15) and s["zero_grad_reuse"] == pytest.approx(0.3)
    assert s["behaviour_kl"] == pytest.approx(0.03) and s["ratio_std"] == pytest.approx(0.2)
    assert s["grad_clipped"] == pytest.approx(0.25)
    assert (s["val_first"], s["val_last"]) == (0.3, 0.1)
    assert s["reward_fell"]  # last-quarter reward 0.05 < half of the first three logged rewards' mean 0.183
    assert regime.main(["results_dir=" + str(tmp_path), "out_dir=" + str(tmp_path), "bogus=1"]) == 2
    assert regime.main(["results_dir=" + str(tmp_path), "out_dir=" + str(tmp_path)]) == 1  # no runs


def test_rl_runs_tag_matches_training(tmp_path):
    """The folder the pipeline expects is the one training writes: as_run, and no infrastructure keys."""
    from pspo_repro.common.run_dir import tag_from_overrides
    from pspo_repro.training.grpo import apply_per_method

    cfg = _compose([
        "rl.groups=[{name: g, sweep: {method: clip, variant: as_run, trainer.save_steps: 6}}]",
    ])  # fmt: skip
    (method, tag, _), *_ = grid.rl_runs(cfg)
    train = compose_config(
        PROJECT_ROOT / "conf",
        "train",
        ["experiment=mini", "method=clip", "variant=as_run", "trainer.save_steps=6"],
    )
    apply_per_method(train, ["variant=as_run", "trainer.save_steps=6"])
    assert (method, tag) == ("clip", tag_from_overrides(train, ["variant=as_run", "trainer.save_steps=6"]))
    assert tag == "as_run" and float(train.trainer.learning_rate) == 1.5e-4 and train.method.eps_low == 0.0


def test_every_study_point_names_the_folder_training_writes():
    """For each sweep point of the study (the tuned groups aside), the folder the pipeline waits for is the
    one the trainer names, long sweeps' hashed tags included (the stale arms once waited on folders that
    training had shortened)."""
    from pspo_repro.common.run_dir import tag_from_overrides
    from pspo_repro.training.grpo import apply_per_method

    cfg = _compose(["pipeline=study"])
    checked = 0
    for group in cfg.rl.groups:
        if group.get("select"):
            continue
        for point in grid.sweep_points(group):
            overrides = [f"{k}={v}" for k, v in point.items()]
            run_tag = [f"run_tag={group.tag}"] if group.get("tag") else []
            experiment = group.get("experiment") or cfg.rl.experiment
            train = compose_config(
                PROJECT_ROOT / "conf", "train", [f"experiment={experiment}", *run_tag, *overrides]
            )
            apply_per_method(train, overrides)
            assert grid._point_tag(group, point) == tag_from_overrides(train, overrides), (group.name, point)
            checked += 1
    assert checked > 20


def test_long_swept_tags_keep_a_head_and_a_hash_of_the_whole():
    from pspo_repro.common.run_dir import swept_tag

    parts = [f"key{i}_{'x' * 10}{i}" for i in range(8)]
    tag = swept_tag(parts)
    assert tag.startswith("key0_xxxxxxxxxx0_") and len(tag) == 32 + 10 and tag != swept_tag(parts[::-1])
    assert swept_tag(["eps_high0.2", "eps_low0.2", "num_iterations1", "steps_per_generation4"]) == (
        "eps_high0.2_eps_low0.2_num_iterations1_steps_per_generation4"
    )


def test_tagged_runs_get_their_own_eval_settings(tmp_path):
    cfg = _compose(["+eval.tagged_overrides=['temperatures=[0.0]']"])
    for m, t, s in grid.rl_runs(cfg):
        folder = grid.run_dir_of(tmp_path, m, t, s)
        folder.mkdir(parents=True)
        (folder / "run.json").write_text('{"status": "finished"}')
    jobs, _ = grid.eval_jobs(cfg, tmp_path)
    tagged = [j for j in jobs if "offpolicy" in " ".join(j.cmd) and "heldout" not in j.name]
    untagged = [
        j
        for j in jobs
        if j.name.startswith("eval-")
        and "offpolicy" not in " ".join(j.cmd)
        and "heldout" not in j.name
        and j.name != "eval-baseline"
    ]
    assert tagged and all(j.cmd[-1] == "temperatures=[0.0]" for j in tagged)
    assert untagged and all("temperatures=[0.0]" not in j.cmd for j in untagged)


def test_claims_job_only_when_configured(tmp_path):
    assert grid.claims_cmds(_compose([]), tmp_path) == []
    (job,) = grid.claims_cmds(compose_config(PROJECT_ROOT / "conf", "mini", ["pipeline=study"]), tmp_path)
    assert job.cmd[2] == "pspo_repro.claims" and parsed(job.cmd[3:])["spec"] == str(
        PROJECT_ROOT / "conf" / "claims" / "study.yaml"
    )
    with pytest.raises(pipeline_jobs.StageError, match="aggregate.claims='nope.yaml': no such file"):
        grid.claims_cmds(_compose(["aggregate.claims=nope.yaml"]), tmp_path)


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("stages=[]", "stages must be a non-empty list"),
        ("stages=[evl]", "unknown stage(s) ['evl']"),
        ("parallel=0", "parallel must be an integer >= 1, got 0"),
        ("parallel=abc", "parallel must be an integer >= 1, got 'abc'"),
        ("threads=1.5", "threads must be an integer >= 1, got 1.5"),
        ("sft.threads=true", "sft.threads must be an integer >= 1, got True"),
        ("force=maybe", "force must be true or false, got 'maybe'"),
        ("warm_start=1", "warm_start must be true or false, got 1"),
        # issue 25 item 3: settings that become file names (logs, Hydra folders, run folders, tables)
        (
            "rl.groups=[{name: ../../x, cost: 1, sweep: {method: clip}}]",
            "rl.groups[0].name='../../x' cannot name",
        ),
        (
            "rl.groups=[{name: a, tag: x/../../y, sweep: {method: clip}}]",
            "rl.groups[0].tag='x/../../y' cannot name",
        ),
        (
            "rl.groups=[{name: a, sweep: {method: 'clip,../x'}}]",
            "rl.groups[0].sweep.method='../x' cannot name",
        ),
        ("eval.tags=[offpolicy,../x]", "eval.tags='../x' cannot name"),
        ("+aggregate.regime={../x: offpolicy}", "aggregate.regime='../x' cannot name"),
    ],
)
def test_bad_pipeline_settings_are_refused_before_anything_runs(tmp_path, override, message):
    cfg = _compose([f"root={tmp_path / 'r'}", override])
    with pytest.raises(pipeline_settings.SettingsError) as err:
        cpu_pipeline.run_pipeline(cfg)
    assert message in str(err.value) and "\n" not in str(err.value)
    assert not (tmp_path / "r").exists()  # nothing written


def test_bad_settings_exit_2_in_one_line(tmp_path):
    """The command, not just the function: bad settings are one line and exit status 2, as every command."""
    root = tmp_path / "r"
    proc = subprocess.run(
        [sys.executable, "-m", "pspo_repro.mini", f"root={root}", "parallel=0"],
        capture_output=True, text=True, cwd=PROJECT_ROOT, timeout=300,
    )  # fmt: skip
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2, proc.stderr
    assert len(lines) == 1 and lines[0] == "error: parallel must be an integer >= 1, got 0"
    assert not root.exists()


def test_later_stages_on_a_fresh_clone_move_nothing(tmp_path):
    """stages=[eval] on a committed copy without work/: refused before the copy is set aside."""
    root = tmp_path / "r"
    (root / "runs" / "x").mkdir(parents=True)
    (root / "main_true_acc.md").write_text("committed\n")
    cfg = _compose([f"root={root}", "stages=[eval,aggregate]"])
    with pytest.raises(
        pipeline_jobs.StageError, match=r"no work/ folder .* \(data, sft, rl\) .*nothing was moved"
    ):
        cpu_pipeline.run_pipeline(cfg)
    assert sorted(p.name for p in root.iterdir()) == ["main_true_acc.md", "runs"]


@pytest.mark.parametrize(
    "content",
    [b"\xff\xfe{", b"[1, 2]", b"null", b'{"fingerprint": "FP"', b'{"fingerprint": "FP"}',
     b'{"fingerprint": "FP", "seconds": "12"}', b'{"fingerprint": "FP", "seconds": NaN}'],
    ids=["not-utf8", "list", "null", "cut", "no-seconds", "seconds-text", "seconds-nan"],
)  # fmt: skip
def test_corrupted_stage_marker_reruns_the_stage(tmp_path, capsys, content):
    """Issue 25 item 4: a stage marker that is not a record the pipeline wrote (cut, edited, not UTF-8) is
    named and the stage runs again (its entry points skip finished work); it used to be a traceback, or,
    without ``seconds``, a KeyError after the skip."""
    path = markers.marker_path(tmp_path, "rl")
    path.parent.mkdir(parents=True)
    path.write_bytes(content)
    assert markers.stage_done(tmp_path, "rl", "FP") is None
    assert str(path) in capsys.readouterr().out
    path.write_text('{"fingerprint": "FP", "seconds": 3.5}')
    assert markers.stage_done(tmp_path, "rl", "FP") == {"fingerprint": "FP", "seconds": 3.5}


def test_corrupted_markers_and_timings_do_not_stop_the_pipeline(tmp_path):
    """The data stage with a torn marker and a timings.json that is not UTF-8: the stage runs again and
    timings.json is written afresh (both used to end in a traceback)."""
    root = tmp_path / "r"
    cfg = _compose([f"root={root}", "stages=[data]", "data.sizes={train: 8, validation: 4, test: 4}",
                    "data.heldout_sizes=null"])  # fmt: skip
    markers.marker_path(root, "data").parent.mkdir(parents=True)
    markers.marker_path(root, "data").write_text('{"fingerprint": "' + markers.fingerprint(cfg, "data") + '"')
    (root / "timings.json").write_bytes(b'\xff{"stages": {}}')
    timings = cpu_pipeline.run_pipeline(cfg)
    assert set(timings["stages"]) == {"data"}
    assert json.loads((root / "timings.json").read_text())["stages"]["data"]["seconds"] >= 0
    marker = json.loads(markers.marker_path(root, "data").read_text())
    assert marker["fingerprint"] == markers.fingerprint(cfg, "data")
