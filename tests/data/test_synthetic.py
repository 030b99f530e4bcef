"""The synthetic task: seeded and fixed, disjoint splits, correct gold answers, short solutions."""

from __future__ import annotations

import re

import pytest

from pspo_repro.data import datasets as data
from pspo_repro.data import synthetic
from pspo_repro.data.problems import Problem
from pspo_repro.data.synthetic import SPLITS, SyntheticConfig, generate
from pspo_repro.scoring import grading

EQUATION = re.compile(r"(\d+) ([-+*/]) (\d+) = (\d+)")
OPS = {"+": lambda a, b: a + b, "-": lambda a, b: a - b, "*": lambda a, b: a * b, "/": lambda a, b: a / b}


@pytest.fixture(scope="module")
def splits():
    return generate()


def test_same_seed_same_problems_other_seed_different(splits):
    assert generate() == splits
    other = generate(cfg=SyntheticConfig(seed=1))
    assert [p.question for p in other["train"]] != [p.question for p in splits["train"]]


def test_default_sizes_unique_ids_and_kind(splits):
    assert {s: len(v) for s, v in splits.items()} == {"train": 2000, "validation": 200, "test": 200}
    ids = [p.id for v in splits.values() for p in v]
    assert len(set(ids)) == len(ids)
    assert splits["test"][0].id == "synthetic/test/0"
    assert all(isinstance(p, Problem) and p.answer_kind == "numeric" for v in splits.values() for p in v)


def test_splits_are_disjoint(splits):
    questions = {s: {p.question for p in v} for s, v in splits.items()}
    assert len(questions["train"]) == 2000  # no duplicates inside a split either
    for i, a in enumerate(SPLITS):
        for b in SPLITS[i + 1 :]:
            assert not questions[a] & questions[b], (a, b)


def test_split_does_not_depend_on_the_other_sizes(splits):
    # Evaluation rows stay fixed when the training set grows or shrinks.
    small = generate({"train": 10, "validation": 50, "test": 0})
    assert small["validation"] == splits["validation"][:50]
    assert small["train"] == splits["train"][:10]
    assert synthetic.load_split("test", 20) == splits["test"][:20]


def test_every_template_is_used(splits):
    shapes = {len(EQUATION.findall(p.solution)) for p in splits["train"]}
    assert shapes == {2}  # the rewarded task is two-step problems only
    firsts = {
        EQUATION.findall(p.solution)[0][1] + EQUATION.findall(p.solution)[1][1] for p in splits["train"]
    }
    assert firsts == {"+-", "-+", "*+", "*-"}


def test_gold_is_no_number_of_the_question_nor_the_first_result(splits):
    # So the premature habit (stop after the first line) never contains the gold by coincidence.
    from pspo_repro.training.sft import premature_answer

    for p in (p for v in splits.values() for p in v):
        assert p.answer not in re.findall(r"\d+", p.question), p
        habit = premature_answer(p.solution)
        assert habit != p.solution and p.answer not in re.findall(r"\d+", habit), p
        assert not grading.true_correct(habit, p.answer, "numeric"), p


@pytest.fixture(scope="module")
def heldout():
    return generate(task="synthetic_heldout")


def test_heldout_task_is_one_step_comparisons_disjoint_from_the_rewarded_task(splits, heldout):
    assert {s: len(v) for s, v in heldout.items()} == {"train": 2000, "validation": 200, "test": 200}
    assert heldout["test"][0].id == "synthetic_heldout/test/0"
    main_questions = {p.question for v in splits.values() for p in v}
    for rows in heldout.values():
        for p in rows:
            steps = EQUATION.findall(p.solution)
            assert len(steps) == 1 and steps[0][1] == "-" and "How many more" in p.question, p
            a, _, b, c = steps[0]
            assert int(a) - int(b) == int(c) and c == p.answer and c not in (a, b), p
            assert p.question not in main_questions
    questions = {s: {p.question for p in v} for s, v in heldout.items()}
    assert not questions["train"] & questions["test"] and not questions["validation"] & questions["test"]


def test_heldout_registered_and_written(tmp_path, monkeypatch, heldout):
    paths = synthetic.write_jsonl(tmp_path / "synthetic_heldout", task="synthetic_heldout")
    monkeypatch.setenv("PSPO_DATA_DIR", str(tmp_path))
    assert data.load_benchmark("synthetic_heldout", "test") == heldout["test"]
    assert paths["test"].name == "test.jsonl"
    monkeypatch.delenv("PSPO_DATA_DIR")
    assert data.load_benchmark("synthetic_heldout", "validation", limit=5) == heldout["validation"][:5]
    with pytest.raises(ValueError, match="allowed"):
        generate(task="nope")


def test_gold_answers_are_correct_and_parse(splits):
    for p in (p for v in splits.values() for p in v):
        steps = EQUATION.findall(p.solution)
        assert steps, p
        for a, op, b, c in steps:
            assert OPS[op](int(a), int(b)) == int(c), p
        # The first operands come from the question; the last step's result is the gold answer.
        assert steps[0][0] in re.findall(r"\d+", p.question), p
        assert steps[-1][3] == p.answer and p.solution.endswith(f"\n#### {p.answer}"), p
        assert int(p.answer) >= 0
        assert grading.reward_correct(p.solution, p.answer, "numeric"), p
        assert grading.true_correct(p.solution, p.answer, "numeric"), p
        assert not grading.reward_correct(p.solution, str(int(p.answer) + 1), "numeric"), p


def test_solution_token_length_bound(splits, tiny_model_dir):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    lengths = [len(tok(p.solution + "<|im_end|>")["input_ids"]) for v in splits.values() for p in v]
    assert max(lengths) <= 40  # RL can use max_completion_length 48 without truncating a correct answer
    assert min(lengths) >= 10


def test_write_jsonl_loads_through_the_registry(tmp_path, monkeypatch, splits):
    paths = synthetic.write_jsonl(tmp_path / "synthetic")
    assert sorted(paths) == sorted(SPLITS)
    line = paths["train"].read_text().splitlines()[0]
    assert line.startswith('{"question": ') and '"answer": ' in line and "####" in line  # GSM8K layout
    monkeypatch.setenv("PSPO_DATA_DIR", str(tmp_path))
    for split in SPLITS:
        assert data.load_benchmark("synthetic", split) == splits[split]


def test_registry_generates_without_files(monkeypatch, splits):
    monkeypatch.delenv("PSPO_DATA_DIR", raising=False)
    assert "synthetic" in data.DATASETS
    assert data.load_benchmark("synthetic", "validation", limit=7) == splits["validation"][:7]
    spec = data.get_spec("synthetic")  # registered by the loaders from synthetic's own spec
    assert spec.generated and spec.val_split == synthetic.dataset_spec().val_split == "validation"


def test_unknown_split_is_an_error():
    with pytest.raises(ValueError, match="allowed"):
        synthetic.load_split("dev")
    with pytest.raises(ValueError, match="allowed"):
        generate({"dev": 3})
