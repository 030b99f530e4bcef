"""The claims table: verdict rules, numbers recomputed from the cells, bad specs, and the committed copy."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import yaml

from pspo_repro.analysis import claims
from pspo_repro.analysis.claims import ClaimsError, Measured, verdict
from pspo_repro.analysis.stats import t_interval
from pspo_repro.common.paths import CONF_DIR, PROJECT_ROOT

MINI = PROJECT_ROOT / "results" / "mini"
STUDY = PROJECT_ROOT / "results" / "study"


def _m(mid: str, value: float, low: float = math.nan, high: float = math.nan, seeds=None) -> Measured:
    return Measured(mid, mid, value, low, high, dict(seeds or {}))


@pytest.mark.parametrize(
    ("low", "high", "expected"),
    [(0.01, 0.2, "supported"), (-0.2, -0.01, "contradicted"), (-0.1, 0.1, "not resolved")],
)
def test_greater(low, high, expected):
    assert verdict({"rule": "greater", "diff": "d"}, {"d": _m("d", 0.0, low, high)})[0] == expected


@pytest.mark.parametrize(
    ("low", "high", "expected"),
    [(-0.04, 0.02, "supported"), (-0.2, -0.01, "contradicted"), (-0.08, 0.02, "not resolved")],
)
def test_similar_or_better(low, high, expected):
    rule = {"rule": "similar_or_better", "diff": "d", "margin": 0.05}
    assert verdict(rule, {"d": _m("d", 0.0, low, high)})[0] == expected


@pytest.mark.parametrize(
    ("gain", "drop", "stable"),
    [
        ((0.1, 0.3), (-0.04, 0.05), "supported"),  # gains, no real drop
        ((0.1, 0.3), (-0.2, -0.01), "contradicted"),  # a significant drop
        ((-0.01, 0.3), (-0.04, 0.05), "contradicted"),  # no gain over the base
        ((0.1, 0.3), (-0.09, 0.05), "not resolved"),  # a drop of up to 9 points not excluded
    ],
)
def test_stable_and_unstable(gain, drop, stable):
    got = {"g": _m("g", 0.2, *gain), "d": _m("d", 0.0, *drop)}
    assert verdict({"rule": "stable", "gain": "g", "drop": "d", "margin": 0.05}, got)[0] == stable
    flipped = {"supported": "contradicted", "contradicted": "supported"}.get(stable, stable)
    assert verdict({"rule": "unstable", "gain": "g", "drop": "d", "margin": 0.05}, got)[0] == flipped


def test_exceeds_and_zero_vs_positive():
    got = {"a": _m("a", 0.05), "b": _m("b", 0.0005), "r": _m("r", 0.0)}
    rule = {"rule": "exceeds", "stats": ["a", "b"], "reference": "r", "threshold": 0.001}
    assert verdict(rule, got)[0] == "not resolved"
    assert verdict({**rule, "stats": ["a"]}, got)[0] == "supported"
    assert verdict({**rule, "stats": ["b"]}, got)[0] == "contradicted"
    z = {"z": _m("z", 0.0, seeds={0: 0.0, 1: 0.0004}), "p": _m("p", 0.08, seeds={0: 0.06, 1: 0.1})}
    assert verdict({"rule": "zero_vs_positive", "zero": "z", "positive": "p"}, z)[0] == "contradicted"
    rule = {"rule": "zero_vs_positive", "zero": "z", "positive": "p", "tolerance": 0.001}
    assert verdict(rule, z)[0] == "supported"


def test_peak():
    seeds = range(5)
    vals = {
        f"a{i}": _m(f"a{i}", v, seeds={s: v + 0.01 * s for s in seeds}) for i, v in enumerate([0.1, 0.2, 0.3])
    }
    rule = {"rule": "peak", "values": list(vals), "best": "a2"}
    assert verdict(rule, vals)[0] == "supported"  # a2 above every other on every seed
    assert verdict({**rule, "best": "a0"}, vals)[0] == "contradicted"
    noisy = dict(vals, a1=_m("a1", 0.3, seeds={0: 0.5, 1: 0.1, 2: 0.5, 3: 0.1, 4: 0.3}))
    assert verdict(rule, noisy)[0] == "not resolved"


def test_unknown_rule_and_bad_spec(tmp_path):
    with pytest.raises(ClaimsError, match="unknown verdict rule 'bogus'"):
        verdict({"rule": "bogus"}, {})
    bad = tmp_path / "c.yaml"
    bad.write_text(yaml.safe_dump({"claims": [{"id": "x", "claim": "c", "quote": "q", "section": "s", "test": "t",
                                               "verdict": {"rule": "greater", "diff": "d"},
                                               "measure": [{"id": "d", "kind": "nope"}]}]}))  # fmt: skip
    with pytest.raises(ClaimsError, match="kind 'nope'"):
        claims.load_spec(bad)
    out = tmp_path / "out"
    assert claims.main([f"results_dir={MINI}", f"out_dir={out}", f"spec={bad}"]) == 1
    assert claims.main([f"results_dir={MINI}", f"out_dir={out}", "colour=red"]) == 2
    assert not out.exists()  # nothing written on bad input


def _cell_true_acc(path: Path) -> float:
    cell = json.loads(path.read_text())
    rows = cell["per_prompt"]
    return sum(r["true_correct"] for r in rows) / sum(r["n"] for r in rows)


def test_compare_recomputes_from_the_cells(tmp_path):
    """Claim numbers come from the per-prompt rows: the seed-paired held-out difference, by hand."""
    spec = tmp_path / "spec.yaml"
    measure = {"id": "h", "kind": "compare", "a": {"method": "pspo", "dataset": "synthetic_heldout"},
               "b": {"method": "clip", "dataset": "synthetic_heldout"}}  # fmt: skip
    spec.write_text(yaml.safe_dump({"claims": [{
        "id": "k", "claim": "c", "quote": "q", "section": "s", "test": "t", "test_short": "t", "key": "h",
        "measure": [measure], "verdict": {"rule": "greater", "diff": "h"},
    }]}))  # fmt: skip
    res = claims.evaluate(claims.Records.read(MINI), claims.load_spec(spec))[0]
    by_hand = []
    for seed in (0, 1, 2):
        a = _cell_true_acc(MINI / f"eval/mini_sft/pspo/seed{seed}/synthetic_heldout/T0.0.json")
        b = _cell_true_acc(MINI / f"eval/mini_sft/clip/seed{seed}/synthetic_heldout/T0.0.json")
        by_hand.append(a - b)
    iv = t_interval(by_hand)
    m = res["measured"]["h"]
    assert (
        m.value == pytest.approx(iv.mean)
        and m.low == pytest.approx(iv.low)
        and m.high == pytest.approx(iv.high)
    )
    assert res["verdict_text"] == (
        "supported" if iv.low > 0 else "contradicted" if iv.high < 0 else "not resolved"
    )
    assert claims.write(MINI, tmp_path / "o", spec)[0].read_text().count("| 1 |") == 1


@pytest.mark.skipif(not (STUDY / "claims.md").is_file(), reason="results/study has no claims table yet")
def test_committed_claims_table_is_what_the_records_give(tmp_path):
    """results/study/claims.md is regenerated from the committed runs and cells, byte for byte."""
    claims.write(STUDY, tmp_path, CONF_DIR / "claims.yaml")
    assert (tmp_path / "claims.md").read_text() == (STUDY / "claims.md").read_text()
    assert (tmp_path / "claims.csv").read_text() == (STUDY / "claims.csv").read_text()
