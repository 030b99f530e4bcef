"""Dataset loaders: row counts, user-message text, gold answers, splits and one-line errors."""

from __future__ import annotations

import json
import os

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


# ---------------------------------------------------------------- the data folder's default, the hub offline


def test_data_folder_defaults_to_shared_data_beside_the_project(monkeypatch, tmp_path):
    """Unset, PSPO_DATA_DIR is ../shared/data beside the project root (the README's default, as make sets it)
    when that folder exists, else the hub; set empty, it is the hub on purpose."""
    from pspo_repro.common import paths

    assert paths.DEFAULT_DATA_DIR == paths.PROJECT_ROOT.parent / "shared" / "data"
    monkeypatch.delenv("PSPO_DATA_DIR", raising=False)
    monkeypatch.setattr(paths, "DEFAULT_DATA_DIR", tmp_path)
    assert paths.data_dir() == tmp_path.resolve()
    monkeypatch.setattr(paths, "DEFAULT_DATA_DIR", tmp_path / "absent")
    assert paths.data_dir() is None
    assert f"the default {tmp_path / 'absent'} does not exist" in paths.data_dir_hint()
    monkeypatch.setenv("PSPO_DATA_DIR", "")
    assert paths.data_dir() is None and "it is set empty" in paths.data_dir_hint()


def test_an_unreachable_hub_is_one_line_naming_the_data_folder(monkeypatch):
    """No data folder and no hub: one line naming the hub id, the cause and PSPO_DATA_DIR, not a traceback."""
    import datasets

    def offline(*args, **kwargs):
        raise ConnectionError("Couldn't reach 'openai/gsm8k' on the Hub (OfflineModeIsEnabled)\nmore")

    monkeypatch.setenv("PSPO_DATA_DIR", "")
    monkeypatch.setattr(datasets, "load_dataset", offline)
    with pytest.raises(DataError) as err:
        load_benchmark("gsm8k")
    msg = str(err.value)
    assert msg.startswith("cannot read openai/gsm8k from the hub: Couldn't reach") and "\n" not in msg
    assert msg.endswith(
        "set PSPO_DATA_DIR to the offline data folder (the layout of ../shared/data/README.md; it is set empty)"
    )


def test_an_unreachable_hub_switches_the_process_offline(monkeypatch):
    """One TCP try instead of ~50 s of retries: the hub's host takes no connection, so this process (and the
    libraries already imported) go offline; HF_HUB_OFFLINE already set needs no try at all."""
    import datasets.config
    import huggingface_hub.constants

    from pspo_repro.common import hub

    tried = []
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    monkeypatch.delenv("HF_DATASETS_OFFLINE", raising=False)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(hub, "_reachable", lambda *a: tried.append(a) or False)
    assert hub.offline_unless_reachable() is True and tried == [("huggingface.co", 443, 3.0)]
    assert os.environ["HF_HUB_OFFLINE"] == "1" and os.environ["HF_DATASETS_OFFLINE"] == "1"
    assert huggingface_hub.constants.HF_HUB_OFFLINE is True and datasets.config.HF_HUB_OFFLINE is True
    assert hub.offline_unless_reachable() is True and len(tried) == 1  # asked for now: no second try
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    monkeypatch.setattr(hub, "_reachable", lambda *a: True)
    assert hub.offline_unless_reachable() is False
