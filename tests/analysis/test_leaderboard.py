"""The leaderboard: numbers recomputed by hand from the cell JSONs, the Holm step, bad arguments, and the
registry feeding the grid (a new method joins with no other edit)."""

from __future__ import annotations

import csv
import json
import math

import pytest
import scipy.stats

from pspo_repro.analysis import knobs, leaderboard, leaderboard_rows
from pspo_repro.common.cli import compose_config
from pspo_repro.common.paths import PROJECT_ROOT
from pspo_repro.methods import registry
from pspo_repro.pipelines import grid

STUDY = PROJECT_ROOT / "results" / "study"
STALE = "reuse-num_iterations1_steps_per_generation4"


def _true_acc(cell_path) -> float:
    """Greedy true accuracy of one cell from its per-prompt counts (samples correct over samples)."""
    rows = json.loads(cell_path.read_text())["per_prompt"]
    return sum(r["true_correct"] for r in rows) / sum(r["n"] for r in rows)


# The tests of the study's leaderboard run in one worker: the module fixture is computed once, not once per worker.
STUDY_GROUP = pytest.mark.xdist_group("leaderboard_study")


@pytest.fixture(scope="module")
def study_rows(tmp_path_factory):
    out = tmp_path_factory.mktemp("leaderboard")
    leaderboard.write(STUDY, out, "", STALE)
    with (out / "leaderboard.csv").open() as fh:
        return out, list(csv.DictReader(fh))


@STUDY_GROUP
def test_numbers_are_the_cells_own(study_rows):
    _, rows = study_rows
    row = next(r for r in rows if r["method"] == "pspo" and r["tag"] == "")
    ev = STUDY / "eval" / "mini_sft"
    seeds = [_true_acc(ev / "pspo" / f"seed{s}" / "synthetic" / "T0.0.json") for s in range(10)]
    base = _true_acc(ev / "baseline" / "seed0" / "synthetic" / "T0.0.json")
    assert int(row["n_seeds"]) == 10
    assert float(row["true_acc_T0"]) == pytest.approx(sum(seeds) / 10, abs=1e-12)
    gains = [s - base for s in seeds]
    low, high = scipy.stats.t.interval(0.95, 9, loc=sum(gains) / 10, scale=scipy.stats.sem(gains))
    assert float(row["gain_low"]) == pytest.approx(low, abs=1e-12)
    assert float(row["gain_high"]) == pytest.approx(high, abs=1e-12)
    held_base = _true_acc(ev / "baseline" / "seed0" / "synthetic_heldout" / "T0.0.json")
    held = [
        _true_acc(ev / "pspo" / f"seed{s}" / "synthetic_heldout" / "T0.0.json") - held_base for s in range(10)
    ]
    assert float(row["preservation"]) == pytest.approx(sum(held) / 10, abs=1e-12)


@STUDY_GROUP
def test_holm_adjustment_and_groups(study_rows):
    _, rows = study_rows
    tested = [r for r in rows if r["tag"] == "" and r["method"] != "clip"]
    raw = sorted((float(r["p_value"]), r["method"]) for r in tested)
    # Holm by hand: the k-th smallest p times (m - k), running maximum, capped at 1
    m, running, expect = len(raw), 0.0, {}
    for k, (p, method) in enumerate(raw):
        running = max(running, min(1.0, (m - k) * p))
        expect[method] = running
    for r in tested:
        assert float(r["p_holm"]) == pytest.approx(expect[r["method"]], rel=1e-9)
        group = "=" if expect[r["method"]] >= 0.05 else (">" if float(r["prompt_diff"]) > 0 else "<")
        assert r["group_vs_reference"] == group
    # the stale regime: clip collapsed there, so the reference is the best mean, noclip. Under the study's bf16
    # numerics PSPO no longer takes noclip's steps bit for bit (its (1 - alpha) scale rounds differently), so
    # it is its own class: 0.9 points below noclip, 11 prompts worse and 2 better (conditional on these seeds)
    stale = {r["method"]: r for r in rows if r["tag"] == STALE}
    assert {r["reference"] for r in stale.values()} == {"noclip"}
    assert [stale[m]["group_vs_reference"] for m in ("noclip", "pspo", "clip")] == ["ref", "<", "<"]
    assert stale["noclip"]["equivalence_class"] == stale["pspo"]["equivalence_class"] == ""  # no class
    assert float(stale["pspo"]["prompt_diff"]) == pytest.approx(-0.009, abs=5e-4)
    assert float(stale["clip"]["prompt_diff"]) == pytest.approx(-0.272, abs=5e-4)
    assert {r["reference"] for r in rows if r["tag"] == ""} == {"clip"}
    means = [float(r["true_acc_T0"]) for r in rows if r["tag"] == ""]
    assert means == sorted(means, reverse=True) and "rank" not in rows[0]
    for r in rows:
        assert 1 <= int(r["rank_low"]) <= int(r["rank_high"]) <= 7


@STUDY_GROUP
def test_markdown_marks_clipped_intervals_and_lists_hyperparameters(study_rows):
    out, _ = study_rows
    text = (out / "leaderboard.md").read_text()
    # clip in the stale regime: 4.1 with a t interval whose low end is above 0 is printed as is
    assert "| 3 | clip | - | < | 4.1 [1.9, 6.3] |" in text
    assert "clip collapsed here (1 of 5 seeds), so the reference is the method with the best mean" in text
    assert (
        "| pspo | alpha=0.1, loss_agg=dapo, num_iterations=2, rollout_correction=none, "
        "rollout_correction_batch_normalize=False, rollout_correction_threshold=None | alpha 0.1/0.2/0.3/0.4/0.5/0.9 |"
    ) in text
    assert (out / "leaderboard.png").read_bytes()[:4] == b"\x89PNG"
    iv = leaderboard.Interval(0.02, -0.03, 0.07, 3, "t_seeds")
    assert leaderboard._pct(iv) == "2.0 [0.0, 7.0]§"
    assert leaderboard._pct(iv, signed=True) == "+2.0 [-3.0, +7.0]"


@pytest.mark.parametrize(
    ("argv", "code", "needle"),
    [
        (["out_dir={out}"], 2, "results_dir"),
        (["results_dir={study}", "out_dir={out}", "alpha=2"], 2, "alpha='2'"),
        (["results_dir={study}", "out_dir={out}", "alpha=abc"], 2, "alpha='abc'"),
        # an unknown tag is found once the records are read: the mini's tree, an eighth of the study's
        (["results_dir={mini}", "out_dir={out}", "tag=nosuchtag"], 1, "nosuchtag"),
        (["results_dir={out}", "out_dir={out}"], 1, "no evaluation cells"),
        (["results_dir={study}", "out_dir={out}", "reference=clpi"], 2, "reference='clpi' is no method"),
    ],
)
def test_bad_arguments_write_nothing(tmp_path, capsys, argv, code, needle):
    out = tmp_path / "out"
    args = [a.format(study=STUDY, mini=PROJECT_ROOT / "results" / "mini", out=out) for a in argv]
    assert leaderboard.main(args) == code
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and needle in err[0]
    assert not out.exists() or not any(out.iterdir())


def test_every_registered_method_is_in_the_grid_and_a_new_one_joins(monkeypatch):
    cfg = compose_config(PROJECT_ROOT / "conf", "mini", ["pipeline=leaderboard"])
    runs = grid.rl_runs(cfg)
    names = registry.list_methods()
    assert len(names) >= 19 and list(cfg.eval.methods) == names
    for tag in ("", STALE):
        assert sorted((m, s) for m, t, s in runs if t == tag) == sorted(
            (m, s) for m in names for s in (0, 1, 2)
        )

    def toy(logp, old_logp, advantages, mask, *, scale: float = 1.0):  # pragma: no cover - never called
        raise AssertionError

    monkeypatch.setitem(registry._REGISTRY, "zz_toy", registry.MethodSpec("zz_toy", toy, {"scale": 1.0}, ()))
    cfg = compose_config(PROJECT_ROOT / "conf", "mini", ["pipeline=leaderboard"])
    assert "zz_toy" in cfg.eval.methods
    assert {(m, t) for m, t, _ in grid.rl_runs(cfg) if m == "zz_toy"} == {("zz_toy", ""), ("zz_toy", STALE)}


def test_committed_leaderboard_regenerates_byte_for_byte(tmp_path):
    committed = PROJECT_ROOT / "results" / "leaderboard"
    leaderboard.write(committed, tmp_path, "", STALE)
    for name in ("leaderboard.md", "leaderboard.csv"):
        assert (tmp_path / name).read_bytes() == (committed / name).read_bytes(), name
    text = (committed / "leaderboard.md").read_text()
    assert text.count("| ref |") == 2 and "33 methods, 3 seeds each" in text
    assert "| 30-33 | clip | - | < | 3.7 [0.0, 11.9]§ |" in text  # collapsed in the stale regime
    assert "clip collapsed here (2 of 3 seeds), so the reference is" in text


# ---------------------------------------------------------------- small synthetic records, numbers by hand

# Greedy per-prompt correctness (4 prompts, n = 1) per method, seed and dataset. b repeats a everywhere (one
# class); d repeats a on the rewarded task but differs on one held-out prompt of seed 1 (not a's class);
# "ref" is at the base's 0 on seed 0 (a collapse).
TOY = {
    "a": {0: ([1, 1, 0, 0], [1, 1, 1, 0]), 1: ([1, 1, 1, 0], [1, 1, 0, 0])},
    "c": {0: ([1, 0, 0, 0], [1, 1, 1, 0]), 1: ([1, 1, 0, 0], [1, 1, 0, 0])},
    "d": {0: ([1, 1, 0, 0], [1, 1, 1, 0]), 1: ([1, 1, 1, 0], [1, 1, 0, 1])},
    "ref": {0: ([0, 0, 0, 0], [1, 1, 1, 1]), 1: ([1, 0, 0, 0], [1, 1, 1, 1])},
}
TOY["b"] = TOY["a"]
# pre-clip grad norms per run (max_grad_norm 1.0); None: the key is absent
# "null": a norm training could not compute (written as null: a NaN in metrics.jsonl is refused by the reader)
NORMS = {("a", 0): [0.5, 2.0, "null"], ("a", 1): [1.5, None, 0.9]}


def _toy_cell(root, method, seed, dataset, flags):
    rows = [{"id": f"{dataset}/test/{i}", "n": 1, "true_correct": f, "reward_correct": f, "mean_length": 9.0}
            for i, f in enumerate(flags)]  # fmt: skip
    acc = sum(flags) / len(flags)
    cell = {"schema_version": 1, "model": "tiny", "method": method, "seed": seed, "tag": "", "run_dir": None,
            "checkpoint": "ckpt", "dataset": dataset, "num_prompts": len(flags), "limit": None,
            "rows_sha256": f"sha-{dataset}", "temperature": 0.0, "top_p": 1.0, "max_new_tokens": 48,
            "n_samples": 1, "sampling_seed": 1, "prompt_template": "none", "backend": "hf", "config": {},
            "versions": {}, "git_sha": "x", "per_prompt": rows,
            "metrics": {"true_acc": acc, "reward_acc": acc, "mean_length": 9.0}}  # fmt: skip
    path = root / "eval" / "tiny" / method / f"seed{seed}" / dataset / "T0.0.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(cell))


def _toy_run(root, method, seed, knob):
    folder = root / "runs" / "tiny" / method / f"seed{seed}"
    folder.mkdir(parents=True)
    config = {"method": {"name": method, "loss_agg": "dapo", "num_iterations": 2, "knob": knob},
              "trainer": {"max_grad_norm": 1.0, "learning_rate": 3e-4}}  # fmt: skip
    info = {
        "model": "tiny",
        "method": method,
        "seed": seed,
        "tag": "",
        "status": "finished",
        "config": config,
    }
    (folder / "run.json").write_text(json.dumps(info))
    steps = []
    for i, norm in enumerate(NORMS.get((method, seed), [0.1, 0.2, 0.3])):
        row = {"step": i + 1, "num_tokens": 100 * (i + 1), "train/loss": 0.1, "train/reward": 0.5}
        if norm is not None:
            row["train/grad_norm"] = None if norm == "null" else norm
        if method == "c":
            row["train/update_norm"] = 0.1 * (i + 1)  # mean 0.2 over its 6 steps
        steps.append(row)
    (folder / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in steps))


@pytest.fixture
def toy(tmp_path, monkeypatch):
    # the toy's method folders (a, b, c, d, ref) stand in for registered methods: the one reader of run
    # records refuses any other folder name (analysis/run_records.py)
    from pspo_repro.analysis import run_records

    names = sorted({*run_records.registered_methods(), *TOY})
    monkeypatch.setattr(run_records, "registered_methods", lambda: names)
    root = tmp_path / "records"
    _toy_cell(root, "baseline", 0, "synthetic", [0, 0, 0, 0])
    _toy_cell(root, "baseline", 0, "synthetic_heldout", [1, 1, 1, 1])
    for method, seeds in TOY.items():
        for seed, (task, held) in seeds.items():
            _toy_cell(root, method, seed, "synthetic", task)
            _toy_cell(root, method, seed, "synthetic_heldout", held)
            _toy_run(root, method, seed, knob=0.1 * (seed + 1) if method == "c" else 0.5)
    return root


def _toy_rows(root, out, **kw):
    leaderboard.write(root, out, **kw)
    with (out / "leaderboard.csv").open() as fh:
        return {r["method"]: r for r in csv.DictReader(fh)}, (out / "leaderboard.md").read_text()


def test_toy_rank_intervals_by_hand(toy, tmp_path):
    rows, text = _toy_rows(toy, tmp_path / "out", reference="ref")
    # Means over 2 resampled seeds: a, b, d in {0.5, 0.625, 0.75} (1/4, 1/2, 1/4), a and b drawn together;
    # c in {0.25, 0.375, 0.5}; ref in {0, 0.125, 0.25}. Ties share the better rank.
    # a = b: rank 1, or 2 when d is above them (P = 1/2 * 1/4 + 1/4 * 3/4 = 5/16).
    # d: rank 1, or 3 when a and b are above it (P 5/16).
    # c: 1 + the methods strictly above: a, b and d unless they tie it at 0.5 (c at 0.5: 1/4; a = b at 0.5: 1/4;
    #    d at 0.5: 1/4): rank 1 w.p. 1/64, 2 w.p. 3/64, 3 w.p. 3/64, 4 otherwise: 2.5% and 97.5% -> 2 and 4.
    # ref: 5, or 4 when c and ref tie at 0.25 (1/16 > 2.5%).
    got = {m: (int(r["rank_low"]), int(r["rank_high"])) for m, r in rows.items()}
    assert got == {"a": (1, 2), "b": (1, 2), "d": (1, 3), "c": (2, 4), "ref": (4, 5)}
    assert "| 1-2 | a | A |" in text and "| 4-5 | ref | - |" in text


def test_toy_equivalence_class_and_reference_rule(toy, tmp_path):
    rows, text = _toy_rows(toy, tmp_path / "out", reference="ref")
    assert {m: r["equivalence_class"] for m, r in rows.items()} == {
        "a": "A",
        "b": "A",
        "c": "",
        "d": "",
        "ref": "",
    }
    assert (
        "Equivalence classes (identical per-prompt values on every shared seed, in every cell): A = {a, b}."
        in text
    )
    # ref collapsed (seed 0 not above the base's 0), so the best mean (a, b and d tie at 0.625: the first name)
    # is the reference, said in the caption; b is a's own class and not tested
    assert {r["reference"] for r in rows.values()} == {"a"}
    assert "ref collapsed here (1 of 2 seeds), so the reference is the method with the best mean greedy " \
           "true accuracy here, a (not the given ref)" in text  # fmt: skip
    assert [rows[m]["group_vs_reference"] for m in ("a", "b")] == ["ref", leaderboard.SAME]
    assert rows["b"]["p_value"] == "" or math.isnan(float(rows["b"]["p_value"]))
    assert float(rows["d"]["prompt_diff"]) == 0.0 and float(rows["d"]["p_value"]) == 1.0
    # c - a per prompt, seeds averaged: c (1, .5, 0, 0), a (1, 1, .5, 0): mean -0.25
    assert float(rows["c"]["prompt_diff"]) == pytest.approx(-0.25)
    # a reference that works is kept
    rows, text = _toy_rows(toy, tmp_path / "out2", reference="c")
    assert {r["reference"] for r in rows.values()} == {"c"} and "the reference is c (given;" in text


def test_toy_norm_clipping_update_norm_and_foreign_defaults(toy, tmp_path):
    rows, text = _toy_rows(toy, tmp_path / "out", reference="ref")
    # a: norms 0.5, 2.0, null | 1.5, absent, 0.9 -> 2 of the 4 finite exceed 1.0; 2 steps have no norm
    a = rows["a"]
    assert (int(a["optimizer_steps"]), int(a["grad_norm_missing_steps"])) == (6, 2)
    assert float(a["grad_norm_clipped_share"]) == pytest.approx(0.5)
    assert "| 50.0 (2 steps no norm) | not logged |" in text
    assert float(rows["b"]["grad_norm_clipped_share"]) == 0.0 and math.isnan(float(rows["b"]["update_norm"]))
    assert float(rows["c"]["update_norm"]) == pytest.approx(0.2) and "| 0.0 | 0.2 |" in text
    # c's knob took two values (0.1, 0.2) in the records: swept; every other method's one value: foreign
    assert {m: r["at_foreign_defaults"] for m, r in rows.items()} == {
        "a": "yes", "b": "yes", "c": "no", "d": "yes", "ref": "yes"}  # fmt: skip
    assert "| no (swept: knob) |" in text and "| yes (knob) |" in text
    assert (
        "| c | knob=0.1, loss_agg=dapo, num_iterations=2 | knob 0.1/0.2 | knob: not in conf/method/c.yaml |"
        in text
    )


def test_misspelt_reference_is_refused_naming_the_methods(toy, tmp_path, capsys):
    out = tmp_path / "out"
    assert leaderboard.main([f"results_dir={toy}", f"out_dir={out}", "reference=Ref"]) == 2
    err = capsys.readouterr().err.strip().splitlines()  # no registered method: refused before any reading
    assert len(err) == 1 and err[0].startswith(
        "error: reference='Ref' is no method; the registered methods are: "
    )
    assert ", ref, " in err[0] + ", " and "clip" in err[0]
    # a registered method without cells in these records: refused naming the methods that have them
    assert leaderboard.main([f"results_dir={toy}", f"out_dir={out}", "reference=clip"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["error: reference='clip' is no method of the records; the methods are: a, b, c, d, ref"]
    assert not out.exists()


def test_shared_keys_are_the_registrys_reserved_keys():
    assert knobs.SHARED_KEYS == registry.RESERVED_KEYS


def test_choose_reference_states_each_case():
    rows = [{"method": "x", "collapsed": 0, "n_seeds": 3}, {"method": "clip", "collapsed": 1, "n_seeds": 3}]
    assert leaderboard_rows.choose_reference(rows, "x") == (
        "x",
        "the reference is x (given; none of its seeds collapsed here)",
    )
    ref, note = leaderboard_rows.choose_reference(rows, "clip")
    assert (
        ref == "x"
        and note.startswith("clip collapsed here (1 of 3 seeds), so the reference is")
        and "(not the given clip)" in note
    )
    ref, note = leaderboard_rows.choose_reference(
        rows[1:] + rows[:1], "y"
    )  # y: a method of another regime only
    assert ref == "clip" and note.startswith("y has no evaluation cells here, so")
