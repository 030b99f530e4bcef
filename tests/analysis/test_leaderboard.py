"""The leaderboard: numbers recomputed by hand from the cell JSONs, the Holm step, bad arguments, and the
registry feeding the grid (a new method joins with no other edit)."""

from __future__ import annotations

import csv
import json

import pytest
import scipy.stats

from pspo_repro.analysis import leaderboard
from pspo_repro.common.cli import compose_config
from pspo_repro.common.paths import PROJECT_ROOT
from pspo_repro.methods import registry
from pspo_repro.pipelines import mini

STUDY = PROJECT_ROOT / "results" / "study"
STALE = "reuse-num_iterations1_steps_per_generation4"


def _true_acc(cell_path) -> float:
    """Greedy true accuracy of one cell from its per-prompt counts (samples correct over samples)."""
    rows = json.loads(cell_path.read_text())["per_prompt"]
    return sum(r["true_correct"] for r in rows) / sum(r["n"] for r in rows)


@pytest.fixture(scope="module")
def study_rows(tmp_path_factory):
    out = tmp_path_factory.mktemp("leaderboard")
    leaderboard.write(STUDY, out, "", STALE)
    with (out / "leaderboard.csv").open() as fh:
        return out, list(csv.DictReader(fh))


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
    stale = {r["method"]: r for r in rows if r["tag"] == STALE}
    assert stale["clip"]["group_vs_reference"] == "ref"
    assert stale["pspo"]["group_vs_reference"] == ">"  # the study's claim 2: +24.8 points per prompt
    ranks = [int(r["rank"]) for r in rows if r["tag"] == ""]
    means = [float(r["true_acc_T0"]) for r in rows if r["tag"] == ""]
    assert ranks == list(range(1, len(ranks) + 1)) and means == sorted(means, reverse=True)


def test_markdown_marks_clipped_intervals_and_lists_hyperparameters(study_rows):
    out, _ = study_rows
    text = (out / "leaderboard.md").read_text()
    # clip in the stale regime: 5.2 with a t interval whose low end is above 0 is printed as is
    assert "| clip | ref | 5.2 [0.2, 10.2] |" in text
    assert "| pspo | alpha=0.1, loss_agg=dapo, num_iterations=2 |" in text
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
        (["results_dir={study}", "out_dir={out}", "tag=nosuchtag"], 1, "nosuchtag"),
        (["results_dir={out}", "out_dir={out}"], 1, "no evaluation cells"),
    ],
)
def test_bad_arguments_write_nothing(tmp_path, capsys, argv, code, needle):
    out = tmp_path / "out"
    args = [a.format(study=STUDY, out=out) for a in argv]
    assert leaderboard.main(args) == code
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and needle in err[0]
    assert not out.exists() or not any(out.iterdir())


def test_every_registered_method_is_in_the_grid_and_a_new_one_joins(monkeypatch):
    cfg = compose_config(PROJECT_ROOT / "conf", "leaderboard", [])
    runs = mini.rl_runs(cfg)
    names = registry.list_methods()
    assert len(names) >= 19 and list(cfg.eval.methods) == names
    for tag in ("", STALE):
        assert sorted((m, s) for m, t, s in runs if t == tag) == sorted(
            (m, s) for m in names for s in (0, 1, 2)
        )

    def toy(logp, old_logp, advantages, mask, *, scale: float = 1.0):  # pragma: no cover - never called
        raise AssertionError

    monkeypatch.setitem(registry._REGISTRY, "zz_toy", registry.MethodSpec("zz_toy", toy, {"scale": 1.0}, ()))
    cfg = compose_config(PROJECT_ROOT / "conf", "leaderboard", [])
    assert "zz_toy" in cfg.eval.methods
    assert {(m, t) for m, t, _ in mini.rl_runs(cfg) if m == "zz_toy"} == {("zz_toy", ""), ("zz_toy", STALE)}


def test_committed_leaderboard_regenerates_byte_for_byte(tmp_path):
    committed = PROJECT_ROOT / "results" / "leaderboard"
    leaderboard.write(committed, tmp_path, "", STALE)
    for name in ("leaderboard.md", "leaderboard.csv"):
        assert (tmp_path / name).read_bytes() == (committed / name).read_bytes(), name
    text = (committed / "leaderboard.md").read_text()
    assert text.count("| ref |") == 2 and "19 methods, 3 seeds each" in text
