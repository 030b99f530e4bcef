"""A researcher's own data set (issue 58, item 1): a local file, a dataset folder or a hub id, read by
``datasets``, with a column map and an answer kind, checked like the built-in sets; trained on and evaluated."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from pspo_repro.data.problems import DataError
from pspo_repro.data.user_sets import UserSet, default_name, load_user_problems, looks_like_source, train_val

ROWS = {
    "problem": [f"What is {i} plus {i + 1}?" for i in range(8)],
    "solution": [str(2 * i + 1) for i in range(8)],
}


def _parquet(path: Path, rows: dict) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    pd.DataFrame(rows).to_parquet(path)
    return path


def _user(source, **kw) -> UserSet:
    section = {"source": str(source), "columns": {"question": "problem", "answer": "solution", "id": None},
               "answer_kind": "numeric", **kw}  # fmt: skip
    return UserSet.from_config(section, "data", kw.pop("split", "train"))


def test_a_parquet_file_with_a_column_map(tmp_path):
    problems = load_user_problems(_user(_parquet(tmp_path / "mine.parquet", ROWS)), "data")
    assert [p.id for p in problems[:2]] == ["mine/0", "mine/1"]
    assert (problems[3].question, problems[3].answer, problems[3].answer_kind) == (
        "What is 3 plus 4?",
        "7",
        "numeric",
    )


@pytest.mark.parametrize("suffix", [".jsonl", ".json", ".csv"])
def test_every_file_format(tmp_path, suffix):
    frame = pd.DataFrame(ROWS)
    path = tmp_path / f"set{suffix}"
    if suffix == ".csv":
        frame.to_csv(path, index=False)
    elif suffix == ".jsonl":
        frame.to_json(path, orient="records", lines=True)
    else:
        path.write_text(json.dumps(frame.to_dict(orient="records")))
    problems = load_user_problems(_user(path), "data")
    assert len(problems) == 8 and problems[7].answer == "15"


def test_a_dataset_folder_stands_in_for_a_hub_id(tmp_path):
    # a hub repository's layout (what load_dataset("owner/name") downloads), and save_to_disk's
    _parquet(tmp_path / "owner_set" / "data" / "test-00000-of-00001.parquet", ROWS)
    hub = _user(tmp_path / "owner_set", split="test")
    assert hub.name == "owner_set" and len(load_user_problems(hub, "eval")) == 8
    import datasets

    datasets.DatasetDict({"test": datasets.Dataset.from_dict(ROWS)}).save_to_disk(str(tmp_path / "saved"))
    assert len(load_user_problems(_user(tmp_path / "saved", split="test"), "eval")) == 8
    with pytest.raises(DataError, match=r"saved: no split 'train'; splits: test"):
        load_user_problems(_user(tmp_path / "saved", split="train"), "eval")


def test_answer_kinds_and_an_id_column(tmp_path):
    rows = {"q": ["Pick one: A. x B. y", "Is it?"], "gold": ["B", "Yes"], "key": ["k1", "k2"]}
    section = {"source": str(_parquet(tmp_path / "c.parquet", rows)), "answer_kind": "choice",
               "columns": {"question": "q", "answer": "gold", "id": "key"}}  # fmt: skip
    problems = load_user_problems(UserSet.from_config(section, "eval", "test"), "eval")
    assert [(p.id, p.answer, p.answer_kind) for p in problems] == [
        ("c/k1", "B", "choice"),
        ("c/k2", "yes", "choice"),
    ]
    section = {**section, "answer_kind": "number"}  # the plain word for numeric
    assert UserSet.from_config(section, "eval", "test").answer_kind == "numeric"


@pytest.mark.parametrize(
    "rows, kw, match",
    [
        (ROWS, {"columns": {"question": "question", "answer": "solution"}},
         r"mine.parquet: no column 'question' \(data.columns.question\); columns: problem, solution"),
        ({"problem": ["a", "b"], "solution": ["1", "one"]}, {},
         r"mine.parquet:2: mine row mine/1: gold 'one' is not a finite number"),
        ({"problem": ["a", " "], "solution": ["1", "2"]}, {},
         r"mine.parquet:2: the question column 'problem' is empty"),
        ({"problem": ["a", "b"], "solution": ["1", None]}, {},
         r"mine.parquet:2: the answer column 'solution' is empty"),
        ({"problem": ["a"], "solution": ["maybe"]}, {"answer_kind": "choice"},
         r"mine.parquet:1: gold 'maybe' in 'solution' is not a choice \(a letter A-J, yes or no\)"),
        ({"problem": pd.Series([], dtype=str), "solution": pd.Series([], dtype=str)}, {},
         r"mine.parquet: the data set is empty \(no rows\)"),
    ],
    ids=["missing-column", "unparsable-gold", "blank-question", "blank-gold", "not-a-choice", "empty"],
)  # fmt: skip
def test_a_users_rows_get_the_built_in_checks(tmp_path, rows, kw, match):
    path = _parquet(tmp_path / "mine.parquet", rows)
    section = {"source": str(path), "columns": {"question": "problem", "answer": "solution"},
               "answer_kind": "numeric", **kw}  # fmt: skip
    with pytest.raises(DataError, match=match):
        load_user_problems(UserSet.from_config(section, "data", "train"), "data")


@pytest.mark.parametrize(
    "kw, match",
    [
        ({"answer_kind": "numbr"}, r"data.answer_kind must be one of numeric, number, .*, got 'numbr'; did you mean number\?"),
        ({"columns": {"question": "q", "answr": "a"}}, r"data.columns.answr is not a column role; did you mean answer\?"),
        ({"columns": {"question": "q"}}, r"data.columns.answer must be a column name, got None"),
        ({"source": ""}, r"data.source must be a file, a dataset folder or a hub id, got ''"),
    ],
)  # fmt: skip
def test_bad_settings_are_one_line(kw, match):
    section = {
        "source": "x.parquet",
        "columns": {"question": "q", "answer": "a"},
        "answer_kind": "numeric",
        **kw,
    }
    with pytest.raises(DataError, match=match):
        UserSet.from_config(section, "data", "train")


def test_bad_sources_are_one_line(tmp_path):
    with pytest.raises(DataError, match=r"data file not found: .*nofile.parquet"):
        load_user_problems(_user(tmp_path / "nofile.parquet"), "data")
    (tmp_path / "rows.txt").write_text("a\n")
    with pytest.raises(DataError, match=r"rows.txt: a data file must be .jsonl, .json, .parquet, .csv"):
        load_user_problems(_user(tmp_path / "rows.txt"), "data")
    (tmp_path / "broken.jsonl").write_text('{"problem": "a", "solution": "1"}\n{not json\n')
    with pytest.raises(DataError, match=r"cannot read .*broken.jsonl: "):
        load_user_problems(_user(tmp_path / "broken.jsonl"), "data")


def test_names_and_what_counts_as_a_source(tmp_path):
    assert default_name("/x/my set.parquet") == "myset" and default_name("openai/gsm8k:main") == "gsm8k"
    assert looks_like_source("openai/gsm8k") and looks_like_source("mine.csv") and looks_like_source("./x")
    assert not looks_like_source("gsm8k") and not looks_like_source("synthetic")


def test_train_and_validation_rows(tmp_path):
    problems = load_user_problems(_user(_parquet(tmp_path / "mine.parquet", ROWS)), "data")
    train, val = train_val(problems, 0, None, 2, "mine.parquet")
    assert len(train) == 6 and len(val) == 2 and not {p.id for p in train} & {p.id for p in val}
    assert train_val(problems, 0, None, 2, "m") == (train, val)  # the seed fixes the split
    with pytest.raises(
        DataError, match=r"mine.parquet: n_train=8 and n_val=2 need at least 10 rows; the set has 8"
    ):
        train_val(problems, 0, 8, 2, "mine.parquet")


def test_command_lines_name_a_set_by_its_source():
    from pspo_repro.evaluation.evaluator import rewrite_overrides
    from pspo_repro.training.settings import user_data_args

    assert user_data_args(["data=/d/mine.parquet", "seed=1"]) == [
        "data=user",
        "data.source='/d/mine.parquet'",
        "seed=1",
    ]
    assert user_data_args(["data=math"]) == ["data=math"]  # a config stays a config
    assert rewrite_overrides(["eval=owner/set", "model=tiny"]) == [
        "eval=user",
        "eval.source='owner/set'",
        "model_ref=tiny",
    ]
    assert rewrite_overrides(["eval=gsm8k"]) == ["eval=gsm8k"]


@pytest.mark.slow
def test_train_two_steps_then_evaluate_on_a_users_sets(results_root, tmp_path, tiny_model_dir):
    """Training on a user's parquet file with a column map, then evaluating the run on that file and on a
    local dataset folder standing in for a hub id."""
    from pspo_repro.common.cli import compose_config
    from pspo_repro.common.paths import CONF_DIR
    from pspo_repro.evaluation import evaluator as ev
    from pspo_repro.training import grpo as train
    from pspo_repro.training.settings import user_data_args

    mine = _parquet(tmp_path / "data" / "mine.parquet", ROWS)
    ov = user_data_args([
        "model=tiny", "logger=none", "method=clip", "reward=smoke_length", f"data={mine}",
        "data.columns.question=problem", "data.columns.answer=solution", "trainer.max_steps=2",
        "trainer.max_completion_length=12", "trainer.eval_steps=null", "trainer.save_steps=2",
        "trainer.disable_tqdm=true",
    ])  # fmt: skip
    folder = train.run(compose_config(CONF_DIR, "train", ov), ov)
    assert folder.name.startswith("seed0-data_mine")  # never the folder of a gsm8k run
    run = json.loads((folder / "run.json").read_text())
    assert run["status"] == "finished" and run["final_step"] == 2
    assert run["config"]["data"]["source"] == str(mine)

    hub = tmp_path / "data" / "owner_set"
    _parquet(hub / "data" / "test-00000-of-00001.parquet", {"q": ["What is 2 plus 2?"], "a": [4]})
    common = [f"run={folder}", "checkpoint=checkpoint-2", "temperatures=[0.0]", "max_new_tokens=4",
              "backend=hf", "prompt_template=none"]  # fmt: skip
    a = ev.evaluate(ev.compose_config([*common, f"eval={mine}", "eval.columns.question=problem",
                                        "eval.columns.answer=solution", "eval.limit=2"]))  # fmt: skip
    b = ev.evaluate(
        ev.compose_config([*common, f"eval={hub}", "eval.columns.question=q", "eval.columns.answer=a"])
    )
    assert [(r["dataset"], r["num_prompts"], r["source"]) for r in a + b] == [
        ("mine", 2, str(mine)),
        ("owner_set", 1, str(hub)),
    ]
    for r in a + b:
        assert set(r["metrics"]) >= {"true_acc", "reward_acc"}
