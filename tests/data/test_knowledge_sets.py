"""The knowledge sets outside math (MMLU, BoolQ): loaded from a local file of the hub's own schema (jsonl or
parquet, written here), from PSPO_DATA_DIR and from a hub id (``datasets.load_dataset`` replaced by a recorder:
no network here); graded by the letter or yes/no the response ends with; evaluated and aggregated into the same
tables as the math sets."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pspo_repro.data.datasets import load_benchmark, load_problems
from pspo_repro.data.problems import DataError
from pspo_repro.scoring.grading import choice_label, final_answer_key, grade

# cais/mmlu's schema: question, subject, choices (list of strings), answer (the right choice's 0-based index)
MMLU_ROWS = [
    {"question": "What is the capital of France?", "subject": "geography",
     "choices": ["Berlin", "Paris", "Rome", "Madrid"], "answer": 1},
    {"question": "Which gas do plants take in?", "subject": "biology",
     "choices": ["Oxygen", "Nitrogen", "Carbon dioxide", "Helium"], "answer": 2},
    {"question": "Who wrote Hamlet?", "subject": "literature",
     "choices": ["Shakespeare", "Dickens", "Austen", "Tolstoy"], "answer": 0},
]  # fmt: skip
# google/boolq's schema: question (lower case, no "?"), answer (a boolean), passage
BOOLQ_ROWS = [
    {"question": "is paris the capital of france", "answer": True,
     "passage": "Paris is the capital and largest city of France."},
    {"question": "do penguins live at the north pole", "answer": False,
     "passage": "Penguins live almost exclusively in the Southern Hemisphere."},
]  # fmt: skip


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def write_parquet(path: Path, rows: list[dict]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows), path)
    return path


@pytest.mark.parametrize("writer", [write_jsonl, write_parquet], ids=["jsonl", "parquet"])
def test_mmlu_from_a_local_file(tmp_path, writer):
    path = writer(tmp_path / f"mmlu.{'jsonl' if writer is write_jsonl else 'parquet'}", MMLU_ROWS)
    problems = load_benchmark("mmlu", source=str(path))
    assert [p.id for p in problems] == ["mmlu/geography/0", "mmlu/biology/1", "mmlu/literature/2"]
    assert [(p.answer, p.answer_kind) for p in problems] == [
        ("B", "choice"),
        ("C", "choice"),
        ("A", "choice"),
    ]
    q = problems[0].question
    assert q.startswith("What is the capital of France?\n\nA. Berlin\nB. Paris\nC. Rome\nD. Madrid\n\n")
    assert q.endswith("'#### <letter>'")
    assert [p.id for p in load_benchmark("mmlu", limit=2, source=str(path))] == [p.id for p in problems[:2]]


@pytest.mark.parametrize("writer", [write_jsonl, write_parquet], ids=["jsonl", "parquet"])
def test_boolq_from_a_local_file(tmp_path, writer):
    path = writer(tmp_path / f"boolq.{'jsonl' if writer is write_jsonl else 'parquet'}", BOOLQ_ROWS)
    problems = load_benchmark("boolq", source=str(path))
    assert [(p.id, p.answer, p.answer_kind) for p in problems] == [
        ("boolq/0", "yes", "choice"),
        ("boolq/1", "no", "choice"),
    ]
    assert "Question: Is paris the capital of france?\n\n" in problems[0].question
    assert problems[0].question.startswith("Paris is the capital")
    assert problems[0].question.endswith("'#### <yes or no>'")


def test_default_file_under_the_data_folder(tmp_path, monkeypatch):
    monkeypatch.setenv("PSPO_DATA_DIR", str(tmp_path))
    with pytest.raises(
        DataError, match=r"mmlu/test.jsonl .*; or name a local file or hub id with eval.sources.mmlu$"
    ):
        load_problems("mmlu")
    write_jsonl(tmp_path / "mmlu" / "test.jsonl", MMLU_ROWS)
    write_jsonl(tmp_path / "boolq" / "validation.jsonl", BOOLQ_ROWS)
    assert len(load_problems("mmlu")) == 3 and len(load_problems("boolq")) == 2


@pytest.fixture
def hub(monkeypatch):
    """``datasets.load_dataset`` replaced by a recorder that serves the rows above (no network here)."""
    import datasets

    calls = []

    def load_dataset(path, name=None, split=None):
        calls.append((path, name, split))
        return {"cais/mmlu": MMLU_ROWS, "google/boolq": BOOLQ_ROWS}[path]

    monkeypatch.setattr(datasets, "load_dataset", load_dataset)
    return calls


def test_from_a_hub_id(hub, monkeypatch):
    assert [p.answer for p in load_problems("mmlu", source="cais/mmlu:all")] == ["B", "C", "A"]
    assert [p.answer for p in load_problems("boolq", source="google/boolq")] == ["yes", "no"]
    assert hub == [("cais/mmlu", "all", "test"), ("google/boolq", None, "validation")]
    monkeypatch.setenv("PSPO_DATA_DIR", "")  # no data folder: the registered hub ids
    assert len(load_problems("mmlu")) == 3 and len(load_problems("boolq")) == 2
    assert hub[2:] == [("cais/mmlu", "all", "test"), ("google/boolq", None, "validation")]


@pytest.mark.parametrize(
    ("name", "row", "match"),
    [
        ("mmlu", {**MMLU_ROWS[0], "answer": 4}, r"x.jsonl:1: 'answer' must be the index of the right choice, 0 to 3, got 4$"),
        ("mmlu", {**MMLU_ROWS[0], "answer": "B"}, r"'answer' must be the index .* got 'B'$"),
        ("mmlu", {**MMLU_ROWS[0], "answer": True}, r"'answer' must be the index .* got True$"),
        ("mmlu", {**MMLU_ROWS[0], "choices": "Paris"}, r"'choices' must be a list of 2 to 10 strings"),
        ("mmlu", {**MMLU_ROWS[0], "question": ""}, r"x.jsonl:1: row has no 'question' field$"),
        ("boolq", {**BOOLQ_ROWS[0], "answer": "true"}, r"x.jsonl:1: 'answer' must be true or false, got 'true'$"),
        ("boolq", {"question": "q", "answer": True}, r"row has no 'passage' field$"),
    ],
)  # fmt: skip
def test_bad_rows_name_the_file_and_line(tmp_path, name, row, match):
    path = write_jsonl(tmp_path / "x.jsonl", [row])
    with pytest.raises(DataError, match=match):
        load_problems(name, source=str(path))


@pytest.mark.parametrize(
    ("source", "match"),
    [
        ("/no/such/file.parquet", r"^source file not found: /no/such/file.parquet$"),
        ("just words", r"^source 'just words' is neither a local .jsonl/.parquet file nor a hub id"),
    ],
)
def test_bad_sources_are_one_line_errors(source, match):
    with pytest.raises(DataError, match=match):
        load_problems("mmlu", source=source)


def test_a_local_file_of_another_type_is_refused(tmp_path):
    path = tmp_path / "mmlu.csv"
    path.write_text("question,answer\n")
    with pytest.raises(DataError, match=r"a local file must be .jsonl or .parquet$"):
        load_problems("mmlu", source=str(path))


# ---------------------------------------------------------------- grading


@pytest.mark.parametrize(
    ("span", "label"),
    [
        ("B", "B"), ("(B)", "B"), ("B.", "B"), ("B) Paris", "B"), ("**B**", "B"), ("Option B", "B"),
        (r"\text{(B)}", "B"), ("$C$", "C"), ("Yes", "yes"), ("no, because", "no"), ("True", "yes"),
        # words, not labels
        ("b", None), ("A city", None), ("I think", None), ("B is right", None), ("Nothing", None), (None, None),
    ],
)  # fmt: skip
def test_choice_label(span, label):
    assert choice_label(span) == label


@pytest.mark.parametrize(
    ("response", "gold", "reward", "true"),
    [
        ("The capital of France is Paris.\n#### B", "B", True, True),
        ("#### (B) Paris", "B", True, True),
        ("B) Paris", "B", True, True),  # a bare answer: the response's start
        ("A. no wait, the answer is B.", "B", True, True),
        ("#### C", "B", False, False),
        ("Paris is choice B in the list. #### 5", "B", False, False),  # a letter in the text is no answer
        ("The answer is B.\n#### C", "B", False, True),  # true accuracy: some answer span says B
        ("Yes, the passage says so.", "yes", True, True),
        ("It says Paris is the capital.\n#### Yes", "yes", True, True),
        ("#### no", "yes", False, False),
        ("#### False", "no", True, True),
    ],
)
def test_choice_grading(response, gold, reward, true):
    g = grade(response, gold, "choice")
    assert (g.reward_correct, g.true_correct) == (reward, true)


def test_choice_votes_group_the_same_label():
    assert {final_answer_key(r, "choice") for r in ("#### B", "(B) Paris", "The answer is B.")} == {"B"}
    assert final_answer_key("I do not know.", "choice") is None


def test_a_gold_that_is_no_label_is_an_error():
    with pytest.raises(ValueError, match=r"choice gold answer must be a letter A-J, yes or no: 'Paris'"):
        grade("#### B", "Paris", "choice")


# ---------------------------------------------------------------- evaluated into the same tables


@pytest.mark.slow
def test_evaluated_and_aggregated_with_the_math_sets(results_root, tmp_path, tiny_model_dir):
    from pspo_repro.analysis import aggregate
    from pspo_repro.common.cli import compose_config
    from pspo_repro.common.paths import CONF_DIR
    from pspo_repro.evaluation import cells
    from pspo_repro.evaluation import evaluator as ev

    mmlu = write_parquet(tmp_path / "data" / "mmlu.parquet", MMLU_ROWS)
    boolq = write_jsonl(tmp_path / "data" / "boolq.jsonl", BOOLQ_ROWS)
    cfg = ev.compose_config(
        ["model=tiny", "eval=knowledge", f"eval.sources.mmlu={mmlu}", f"eval.sources.boolq={boolq}",
         "temperatures=[0.0]", "max_new_tokens=4", "backend=hf", "prompt_template=none"]
    )  # fmt: skip
    results = ev.evaluate(cfg)
    assert [(r["dataset"], r["num_prompts"], r["source"]) for r in results] == [
        ("mmlu", 3, str(mmlu)),
        ("boolq", 2, str(boolq)),
    ]
    for r in results:
        assert set(r["metrics"]) >= {"true_acc", "reward_acc"}
        assert r["grader"] == cells.GRADER_VERSION
    aggregate.run(compose_config(CONF_DIR, "aggregate", [f"results_dir={results_root}"]))
    table = (results_root / "tables" / "main_true_acc.md").read_text()
    assert "| MMLU | BoolQ |" in table
    rerun = ev.evaluate(cfg)  # done already: the same cells, nothing regenerated
    assert rerun == results
