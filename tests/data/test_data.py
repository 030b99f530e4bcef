"""Dataset loaders: row counts, user-message text, gold answers, splits and one-line errors."""

from __future__ import annotations

import json

import pytest

from pspo_repro.data.datasets import DATASETS, load_benchmark, load_train_val, register_dataset
from pspo_repro.data.problems import DataError, DatasetSpec, Problem


@pytest.mark.parametrize(
    "name, rows",
    [("gsm8k", 1319), ("math500", 500), ("math", 5000), ("svamp", 1000), ("asdiv", 2215), ("gsm_hard", 1319)],
)
def test_benchmark_sizes_and_unique_ids(data_dir, name, rows):
    problems = load_benchmark(name)
    assert len(problems) == rows
    assert len({p.id for p in problems}) == rows
    assert all(p.question and p.answer for p in problems)


def test_user_messages_and_golds(data_dir):
    gsm = load_benchmark("gsm8k", limit=1)[0]
    assert (
        gsm.question.startswith("Janet’s ducks lay 16 eggs")
        and gsm.answer == "18"
        and gsm.answer_kind == "numeric"
    )
    svamp = load_benchmark("svamp", limit=1)[0]
    assert svamp.question.endswith("93 groups How big is each group of bananas?")  # Body + " " + Question
    assert svamp.answer == "145"
    asdiv = load_benchmark("asdiv", limit=1)[0]
    assert (
        asdiv.question
        == "Seven red apples and two green apples are in the basket. How many apples are in the basket?"
    )
    assert asdiv.answer == "9"  # from "9 (apples)"
    m500 = load_benchmark("math500", limit=1)[0]
    assert m500.answer == r"\left( 3, \frac{\pi}{2} \right)" and m500.answer_kind == "latex"
    full = load_benchmark("math", limit=1)[0]
    assert full.answer == "2"  # last \boxed{} of the solution


def test_gsm8k_commas_removed_from_gold(data_dir):
    golds = [p.answer for p in load_benchmark("gsm8k", "train")]
    assert all("," not in g for g in golds)


def test_train_val_split(data_dir):
    train, val = load_train_val("gsm8k", seed=0)
    assert (len(train), len(val)) == (7000, 472)  # range(7000, len - 1), the authors' code
    assert not {p.id for p in train} & {p.id for p in val}
    again, _ = load_train_val("gsm8k", seed=0)
    other, _ = load_train_val("gsm8k", seed=1)
    assert [p.id for p in again] == [p.id for p in train] and [p.id for p in other] != [p.id for p in train]
    mtrain, mval = load_train_val("math", seed=0)
    assert len(mtrain) == 7000 and len(mval) > 0


def test_limit(data_dir):
    assert [p.id for p in load_benchmark("gsm8k", limit=3)] == [p.id for p in load_benchmark("gsm8k")[:3]]


def test_unknown_dataset_lists_allowed():
    with pytest.raises(DataError, match=r"unknown dataset 'nope'; allowed: .*gsm8k.*svamp"):
        load_benchmark("nope")


def _layout(tmp_path, monkeypatch, lines):
    (tmp_path / "gsm8k").mkdir()
    (tmp_path / "gsm8k" / "test.jsonl").write_text("".join(line + "\n" for line in lines))
    monkeypatch.setenv("PSPO_DATA_DIR", str(tmp_path))
    return tmp_path / "gsm8k" / "test.jsonl"


def test_missing_file_names_path_and_env(tmp_path, monkeypatch):
    monkeypatch.setenv("PSPO_DATA_DIR", str(tmp_path))
    with pytest.raises(DataError) as err:
        load_benchmark("gsm8k")
    msg = str(err.value)
    assert str(tmp_path / "gsm8k" / "test.jsonl") in msg and "PSPO_DATA_DIR" in msg and "\n" not in msg


def test_malformed_row_names_file_and_line(tmp_path, monkeypatch):
    good = json.dumps({"question": "q", "answer": "x #### 1"})
    path = _layout(tmp_path, monkeypatch, [good, "{not json", good])
    with pytest.raises(DataError, match=rf"^{path}:2: malformed JSON row"):
        load_benchmark("gsm8k")


def test_missing_answer_names_file_line_field(tmp_path, monkeypatch):
    path = _layout(
        tmp_path,
        monkeypatch,
        [json.dumps({"question": "q", "answer": "x #### 1"}), json.dumps({"question": "q"})],
    )
    with pytest.raises(DataError, match=rf"^{path}:2: row has no 'answer' field$"):
        load_benchmark("gsm8k")


def test_empty_file_is_an_error(tmp_path, monkeypatch):
    _layout(tmp_path, monkeypatch, [])
    with pytest.raises(DataError, match="is empty"):
        load_benchmark("gsm8k")


def test_registry_accepts_new_dataset_and_rejects_duplicates(tmp_path, monkeypatch):
    (tmp_path / "toy.jsonl").write_text(json.dumps({"q": "1+1?", "a": "2"}) + "\n")
    monkeypatch.setenv("PSPO_DATA_DIR", str(tmp_path))
    spec = DatasetSpec(
        files={"test": "toy.jsonl"},
        rows={"test": lambda r, s, n: Problem(f"toy/{n}", r["q"], r["a"], "numeric")},
    )
    monkeypatch.setitem(DATASETS, "toy_test_only", spec)
    assert load_benchmark("toy_test_only")[0].answer == "2"
    with pytest.raises(ValueError, match="already registered"):
        register_dataset("gsm8k", spec)
