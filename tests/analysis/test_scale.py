"""The model-size ladder's table (analysis.scale): a toy ladder whose GR-PSPO - GRPO-clip gap grows with size
read end to end, and the rule's parts (slope, Welch, one Holm family, the verdict phrases) on their own."""

from __future__ import annotations

import csv
import math

import numpy as np
import pytest
import toy_ladder
from scipy import stats
from table_text import assert_csv_matches

from pspo_repro.analysis import scale

GAPS = {"small": 0.0, "mid": 0.2, "big": 0.4, "mid_general": 0.0}

# One worker runs the module: the toy ladder (the module fixture) is built once.
pytestmark = pytest.mark.xdist_group("toy_ladder")


@pytest.fixture(scope="module")
def ladder(tmp_path_factory):
    root = tmp_path_factory.mktemp("ladder")
    spec = toy_ladder.build(root, GAPS)
    paths = scale.write(root, root, spec)
    return root, spec, paths, scale.read_ladder(root, spec)


def test_toy_ladder_table(ladder):
    root, _, paths, _ = ladder
    assert sorted(p.name for p in paths) == ["scale.csv", "scale.md", "scale.png"]
    md = (root / "scale.md").read_text()
    for name, params in (("small", "190,464"), ("mid", "446,464"), ("big", "2,204,928")):
        assert f"### {name}: {params} parameters" in md
    assert "### mid_general (general): 446,464 parameters" in md
    # the gap grows 0 -> 20 -> 40 points over 1.06 decades, and is 20 points larger on the specialised base
    rows = {r["measure"]: r for r in csv.DictReader((root / "scale.csv").open()) if r["rung"] == "ladder"}
    size, special = rows["size_d_true"], rows["special_d_true"]
    assert float(size["value"]) > 0.3 and float(size["low"]) > 0 and size["verdict"] == "supported"
    assert float(special["value"]) == pytest.approx(0.2) and special["verdict"] == "supported"
    assert rows["size_h_d"]["verdict"] == ""  # preservation rows are beside the rule, not in it
    assert "**Claim 13: supported.**" in md
    # every rung's claims are in one Holm family with claim 13's two key tests
    assert "Holm over the whole ladder (18 key tests" in md
    assert "Unlike clipping, PSPO keeps a non-zero gradient on every token | supported" in md
    assert "| holds at every rung |" in md


def test_table_numbers_come_from_the_cells(ladder):
    rungs = ladder[3]
    big = next(r for r in rungs if r.name == "big")
    d = scale.measured(big, "d_true")
    cells = big.rec.evals
    want = []
    for seed in (0, 1, 2):

        def acc(method, seed=seed):
            row = cells[
                (cells.method == method)
                & (cells.seed == seed)
                & (cells.dataset == "synthetic")
                & (cells.metric == "true_acc")
                & (cells.tag == "tuned-learning_rate0.0003")
            ]
            return sum(r["true_correct"] for r in row.iloc[0]["per_prompt"]) / toy_ladder.PROMPTS

        want.append(acc("pspo") - acc("clip"))
    assert [d.seeds[s] for s in (0, 1, 2)] == pytest.approx(want)


def test_rewrite_is_identical(ladder):
    root, spec, _, _ = ladder
    before = {n: (root / n).read_bytes() for n in scale.OUTPUTS}
    scale.write(root, root, spec)
    assert {n: (root / n).read_bytes() for n in scale.OUTPUTS} == before


def test_missing_rung_and_equal_sizes(ladder, monkeypatch):
    """Refused before any rung's records are read (the reading is the slow part)."""
    root, spec, _, _ = ladder

    def read(folder):
        raise AssertionError(f"records of {folder} read before the ladder's shape was checked")

    monkeypatch.setattr(scale.Records, "read", staticmethod(read))
    with pytest.raises(ValueError, match="rung nowhere: no results folder"):
        scale.read_ladder(root, [*spec, {"name": "nowhere", "arch": {}}])
    same = [dict(spec[0]), {**spec[1], "arch": spec[0]["arch"], "params": spec[0]["params"]}]
    with pytest.raises(ValueError, match="rungs of equal size"):
        scale.read_ladder(root, same)


def test_slope_and_welch_match_scipy():
    rng = np.random.default_rng(0)
    x = np.repeat([5.3, 5.65, 6.34], 3)
    y = 0.1 * x + rng.normal(0, 0.02, x.size)
    s = scale.slope(list(zip(x, y, strict=True)))
    fit = stats.linregress(x, y)
    assert s["value"] == pytest.approx(fit.slope) and s["p"] == pytest.approx(fit.pvalue)
    half = stats.t.ppf(0.975, x.size - 2) * fit.stderr
    assert (s["low"], s["high"]) == pytest.approx((fit.slope - half, fit.slope + half))
    with pytest.raises(ValueError, match="needs >= 3 points at >= 2 sizes"):
        scale.slope([(1.0, 0.1), (1.0, 0.2), (1.0, 0.3)])
    a, b = [0.1, 0.3, 0.2], [0.0, 0.05, -0.02]
    w = scale.welch(a, b)
    assert w["p"] == pytest.approx(stats.ttest_ind(a, b, equal_var=False).pvalue)
    assert w["value"] == pytest.approx(np.mean(a) - np.mean(b))
    with pytest.raises(ValueError, match=">= 2 seeds a side"):
        scale.welch([0.1], b)


@pytest.mark.parametrize(
    ("size", "special", "want"),
    [
        ((0.1, 0.01), (0.2, 0.01), "supported"),
        ((0.1, 0.01), (0.2, 0.5), "not resolved"),
        ((0.1, 0.01), (-0.2, 0.01), "contradicted"),
        ((-0.1, 0.01), (0.2, 0.5), "contradicted"),
        ((0.1, 0.2), (0.2, 0.3), "not resolved"),
    ],
)
def test_claim13_rule(size, special, want):
    rows = {"size_d_true": {"value": size[0], "p_holm": size[1], "key": True},
            "special_d_true": {"value": special[0], "p_holm": special[1], "key": True},
            "size_h_d": {"value": -1.0, "p_holm": 0.0, "key": False}}  # fmt: skip
    assert scale.claim13_verdict(rows) == want


@pytest.mark.parametrize(
    ("verdicts", "want"),
    [
        (["supported"] * 3, "holds at every rung"),
        (["contradicted"] * 3, "contradicted at every rung"),
        (["supported", "not resolved", "contradicted"], "changes with scale"),
        (["not resolved"] * 3, "not resolved at every rung"),
        (["supported", "not resolved", "not resolved"], "not resolved"),
    ],
)
def test_across_rungs(verdicts, want):
    assert scale.across(verdicts) == want


def test_ladder_holm_counts_every_key_test():
    class T:
        def __init__(self, p):
            self.p, self.if_significant, self.otherwise = p, "supported", "not resolved"

    class R:
        def __init__(self, ps):
            self.results = [{"key_test": T(p)} for p in ps]

    rungs = [R([0.01, None]), R([0.02, 0.5])]
    c13 = {"a": {"p": 0.001, "key": True}, "b": {"p": 0.9, "key": False}}
    assert scale.ladder_holm(rungs, c13) == 4
    assert rungs[0].results[0]["p_ladder"] == pytest.approx(min(1.0, 0.01 * 3))
    assert rungs[0].results[1]["p_ladder"] is None and "p_holm" not in c13["b"]
    assert c13["a"]["p_holm"] == pytest.approx(0.004)
    assert not math.isnan(rungs[1].results[1]["p_ladder"])


def test_committed_ladder_regenerates(tmp_path):
    """results/scale/scale.md and scale.csv are what analysis.scale computes from the committed rungs' records."""
    from pspo_repro.common.cli import compose_config
    from pspo_repro.common.paths import PROJECT_ROOT
    from pspo_repro.pipelines import ladder as pipeline

    root = PROJECT_ROOT / "results" / "scale"
    spec = pipeline.ladder_spec(pipeline.bases(compose_config(PROJECT_ROOT / "conf", "scale", [])))
    scale.write(root, tmp_path, spec)
    assert (tmp_path / "scale.md").read_text() == (root / "scale.md").read_text()
    assert_csv_matches((tmp_path / "scale.csv").read_text(), (root / "scale.csv").read_text(), "scale.csv")


def test_a_spec_without_claim_13s_measurements_is_one_line_before_any_record(tmp_path, monkeypatch):
    """Issue 59, item 7: conf/claims/scale.yaml without ``pspo_beats_clip`` failed with a traceback (None has
    no ``seeds``) after every rung's records were read."""
    import yaml

    spec = yaml.safe_load(scale.SPEC.read_text())
    spec["claims"] = [c for c in spec["claims"] if c["id"] != "pspo_beats_clip"]
    path = tmp_path / "scale.yaml"
    path.write_text(yaml.safe_dump(spec))

    def read(folder):
        raise AssertionError(f"records of {folder} read before the spec was checked")

    monkeypatch.setattr(scale.Records, "read", staticmethod(read))
    with pytest.raises(ValueError) as err:
        scale.read_ladder(tmp_path, [{"name": "a", "arch": {}, "params": 1}], spec=path)
    assert str(err.value).splitlines() == [str(err.value)]
    assert f"{path}: claim 13 needs the measurement(s) d_true (claim pspo_beats_clip)" in str(err.value)
