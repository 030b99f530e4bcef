"""The authors' evaluation sets and their paper-comparable column (authors' reward > 0.5)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from pspo_repro.common.paths import CONF_DIR
from pspo_repro.data.datasets import load_benchmark
from pspo_repro.evaluation import cells
from pspo_repro.evaluation import evaluator as ev
from pspo_repro.evaluation.metrics import cell_metrics


def _done(text):
    return SimpleNamespace(text=text, token_ids=[1, 2])


@pytest.mark.usefixtures("data_dir")
def test_paper_sets_have_the_authors_rows_and_prompts():
    svamp = load_benchmark("svamp_paper")
    asdiv = load_benchmark("asdiv_paper")
    assert len(svamp) == 300 and len(asdiv) == 2305
    assert len({p.id for p in svamp} & {p.id.replace("svamp_paper/", "svamp/") for p in svamp}) == 0
    full = {p.id.split("/", 1)[1] for p in load_benchmark("svamp")}
    assert {p.id.split("/", 1)[1] for p in svamp} <= full  # ChilleD test rows are a subset of the 1000
    multi = [p for p in asdiv if ";" in p.authors_gold]
    assert len(multi) == 90
    # "5 (years old); 15 (years old); 20 (years old)": graded on the last number, as the authors' reward does
    first = multi[0]
    assert first.authors_gold.startswith("5 (years old); 15") and first.answer == "20"
    assert first.answer_kind == "numeric"
    # Prompts as their code builds them: body + " " + question, not stripped.
    assert sum(p.question != p.question.strip() or "  " in p.question for p in asdiv) > 0


@pytest.mark.usefixtures("data_dir")
def test_multi_answer_row_both_columns_agree_with_the_authors():
    first = next(p for p in load_benchmark("asdiv_paper") if ";" in p.authors_gold)
    rec = ev.grade_samples(first, [_done("#### 20"), _done("#### 5")])
    assert [s["reward"] for s in rec["samples"]] == [1.0, 0.0]
    assert [s["reward_correct"] for s in rec["samples"]] == [1, 0]


def test_authors_column_differs_from_ours_where_the_authors_differ():
    from pspo_repro.data.problems import Problem

    p = Problem("gsm8k/x", "q", "25", "numeric")
    rec = ev.grade_samples(
        p, [_done("#### 25%"), _done("#### 18\nNext question.\n#### 25"), _done("#### 25")]
    )
    row = cells.per_prompt_row(rec)
    assert row["reward_correct"] == 3 and row["authors_correct"] == 1
    m = cell_metrics([row])
    assert m["authors_acc"] == pytest.approx(1 / 3) and m["reward_acc"] == 1.0
    assert m["authors_pass@2"] == pytest.approx(1 - 1 / 3)  # 1 - C(2,2)/C(3,2)


def test_old_rows_without_the_authors_column_give_no_authors_metrics():
    row = {"id": "p", "n": 1, "reward_correct": 1, "true_correct": 1, "reward_maj": 1, "true_maj": 1,
           "mean_length": 3.0}  # fmt: skip
    m = cell_metrics([row])
    assert "authors_acc" not in m and m["reward_acc"] == 1.0


def test_eval_paper_is_the_four_benchmarks_on_the_authors_rows():
    from omegaconf import OmegaConf

    assert list(OmegaConf.load(CONF_DIR / "eval" / "paper.yaml").datasets) == [
        "gsm8k", "math500", "svamp_paper", "asdiv_paper",
    ]  # fmt: skip
    for name in ("svamp_paper", "asdiv_paper"):
        assert list(OmegaConf.load(CONF_DIR / "eval" / f"{name}.yaml").datasets) == [name]
