"""Issue 36: no secret reaches an output. Everything the analysis commands render from user text (claims'
quotes and captions, table titles and display names, tags, summary.md) goes through ``redact`` on its way
out, with a fake ``HF_TOKEN`` in the environment; figures are drawn from redacted text (their every text
artist is read before it is rasterised)."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest
import toy_records
import yaml

from pspo_repro.analysis import aggregate, claims_report, leaderboard, regime
from pspo_repro.common.paths import PROJECT_ROOT
from pspo_repro.common.redact import REDACTED

TOKEN = "hf_FAKEtoken0123456789"


@pytest.fixture
def drawn(monkeypatch):
    """Every text drawn into a figure saved while the test runs (titles, labels, legends, ticks)."""
    from matplotlib.figure import Figure
    from matplotlib.text import Text

    texts: list[str] = []
    real = Figure.savefig

    def savefig(self, *args, **kwargs):
        texts.extend(t.get_text() for t in self.findobj(Text))
        return real(self, *args, **kwargs)

    monkeypatch.setattr(Figure, "savefig", savefig)
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    return texts


def _no_token(out: Path, drawn: list[str]) -> str:
    """Every file under ``out`` as text (bytes decoded loosely), after checking none holds the token."""
    for path in out.rglob("*"):
        if path.is_file():
            assert TOKEN.encode() not in path.read_bytes(), path
    assert drawn and not [t for t in drawn if TOKEN in t], [t for t in drawn if TOKEN in t]
    return "\n".join(p.read_text(errors="replace") for p in out.rglob("*.md"))


def test_claims_redact_a_pasted_token_and_keep_an_interpolation_as_text(tmp_path, drawn):
    root, out = toy_records.build(tmp_path / "records"), tmp_path / "out"
    spec = toy_records.spec(
        tmp_path / "spec.yaml", quote="${oc.env:HF_TOKEN}", frontier=True, claim=f"PSPO beats clip {TOKEN}",
        section=f"s {TOKEN}", test=f"the test {TOKEN}", reading=f"so {TOKEN}", rule_text=f"rule {TOKEN}",
    )  # fmt: skip
    data = yaml.safe_load(spec.read_text())
    labels = {"acc": f"acc {TOKEN}", "fr": f"frontier {TOKEN}"}
    for m in data["claims"][0]["measure"]:
        if m["id"] in labels:
            m["label"] = labels[m["id"]]
    spec.write_text(yaml.safe_dump(data))
    assert claims_report.main([f"results_dir={root}", f"out_dir={out}", f"spec={spec}"]) == 0
    md = _no_token(out, drawn)
    assert "> ${oc.env:HF_TOKEN}" in md  # the interpolation is text, never the environment's value
    for shown in ("PSPO beats clip", "*s ", "**Test.** the test", "so ", "**Rule.** rule"):
        assert f"{shown}{'' if shown.endswith(' ') else ' '}{REDACTED}" in md, shown
    assert f"frontier {REDACTED}" in drawn and f"acc {REDACTED}" in (out / "claims.csv").read_text()


def test_aggregate_redacts_display_names_labels_and_the_summary(tmp_path, drawn, monkeypatch, capsys):
    root, out = toy_records.build(tmp_path / "records"), tmp_path / "tables"
    monkeypatch.setattr(sys, "argv", ["pspo_repro.aggregate", f"results_dir={root}", f"out_dir={out}",
                                      "names.methods.pspo=${oc.env:HF_TOKEN}",
                                      "names.datasets.synthetic=${oc.env:HF_TOKEN}",
                                      "metrics.true_acc=Accuracy ${oc.env:HF_TOKEN}"])  # fmt: skip
    aggregate.main()
    md = _no_token(out, drawn)
    assert TOKEN not in capsys.readouterr().out  # the summary printed
    assert f"| {REDACTED} |" in (out / "main_true_acc.md").read_text()
    assert f"Accuracy {REDACTED}" in md and REDACTED in " ".join(drawn)


def test_the_leaderboard_and_regime_redact_a_tag(tmp_path, drawn):
    """A tag is user text: it titles a leaderboard table (and its figure panel) and fills a CSV column."""
    root, out = toy_records.build(tmp_path / "records"), tmp_path / "out"
    for method in toy_records.METHODS:
        for seed in toy_records.SEEDS:
            toy_records.run(root, method, seed, tag=TOKEN)
            for dataset in toy_records.DATASETS:
                toy_records.cell(
                    root, method, seed, dataset, toy_records.flags(method, seed, dataset), tag=TOKEN
                )
    assert leaderboard.main([f"results_dir={root}", f"out_dir={out}", f"offpolicy_tag={TOKEN}"]) == 0
    assert regime.main([f"results_dir={root}", f"out_dir={out}", f"tag={TOKEN}", "name=stale"]) == 0
    md = _no_token(out, drawn)
    assert f"### Stale mini-batches (tag {REDACTED})" in md
    assert f"Stale mini-batches (tag {REDACTED})\nreference:" in " ".join(drawn)
    assert REDACTED in (out / "leaderboard.csv").read_text() and REDACTED in (out / "stale.csv").read_text()


COMMANDS = ("aggregate.py", "regime.py", "claims_report.py", "leaderboard.py")


def test_every_output_set_goes_through_redact_files():
    """Statically: each command's every ``write_set(...)`` call writes ``redact_files(...)`` of its set."""
    bad = []
    for name in COMMANDS:
        path = PROJECT_ROOT / "pspo_repro" / "analysis" / name
        calls = [n for n in ast.walk(ast.parse(path.read_text()))
                 if isinstance(n, ast.Call) and getattr(n.func, "id", None) == "write_set"]  # fmt: skip
        assert calls, name
        bad += [f"{name}:{c.lineno}" for c in calls
                if not (isinstance(c.args[0], ast.Call) and getattr(c.args[0].func, "id", "") == "redact_files")]  # fmt: skip
    assert not bad, bad
