"""The prompt-length filter's counts, kept on disk by content (``training.prompt_lengths``): read back only for
the same tokenizer and prompts, always equal to counting afresh, and a damaged file is counted again."""

from __future__ import annotations

import json
import logging

import pytest

from pspo_repro.data.problems import Problem
from pspo_repro.data.prompts import build_messages
from pspo_repro.training import grpo
from pspo_repro.training import prompt_lengths as pl

QUESTIONS = [
    "What is 2 + 2?",
    "How many apples are left? " * 40,
    "Ünïcödé: 3 × 4 = ? ≈ π",
    "",
    "A line\nand another\x00with a NUL",
]


@pytest.fixture(scope="module")
def tokenizer(tiny_model_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_model_dir)


def _chats(template="paper", questions=QUESTIONS):
    return [build_messages(q, template) for q in questions]


def _fresh(tokenizer, chats):
    """What the filter counted before the cache: one tokenization of each rendered prompt."""
    texts = tokenizer.apply_chat_template(chats, add_generation_prompt=True, tokenize=False)
    return [len(tokenizer(t, add_special_tokens=False)["input_ids"]) for t in texts]


def _no_counting(monkeypatch):
    def refuse(*_a, **_k):
        raise AssertionError("counted again although the counts were kept")

    monkeypatch.setattr(pl, "count", refuse)


def test_counts_are_kept_and_read_back_without_counting(tokenizer, tmp_path, monkeypatch):
    chats = _chats()
    first = pl.prompt_lengths(tokenizer, chats, tmp_path)
    assert first == _fresh(tokenizer, chats)
    # ... and what the filter counted before the cache, through the library's own tokenize path
    ids = tokenizer.apply_chat_template(chats, add_generation_prompt=True, tokenize=True, return_dict=False)
    assert first == [len(x) for x in ids]
    [kept] = tmp_path.iterdir()
    assert json.loads(kept.read_text())["lengths"] == first
    _no_counting(monkeypatch)
    assert pl.prompt_lengths(tokenizer, chats, tmp_path) == first


@pytest.mark.parametrize("change", ["one prompt", "template", "order", "tokenizer"])
def test_another_tokenizer_or_prompt_set_is_counted_afresh(change, tiny_model_dir, tmp_path):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    chats = _chats()
    pl.prompt_lengths(tok, chats, tmp_path)
    if change == "one prompt":
        chats = _chats(questions=[*QUESTIONS[:-1], QUESTIONS[-1] + " more words"])
    elif change == "template":
        chats = _chats("none")
    elif change == "order":
        chats = chats[::-1]
    else:  # one more token in the vocabulary: the same text may now split otherwise
        assert tok.add_tokens(["apples"]) == 1
    got = pl.prompt_lengths(tok, chats, tmp_path)
    assert got == _fresh(tok, chats)
    assert len(list(tmp_path.iterdir())) == 2
    if change == "tokenizer":
        assert got != _fresh(AutoTokenizer.from_pretrained(tiny_model_dir), chats)  # it did change a count


@pytest.mark.parametrize(
    "damage",
    [
        "not json {",
        "\xff\xfe",
        "[1, 2, 3]",
        '{"format": "prompt-lengths/1", "n": 5, "lengths": [1, 2, 3, 4]}',
        '{"format": "prompt-lengths/1", "n": 5, "lengths": [1, 2, 3, 4, 5, 6]}',
        '{"format": "prompt-lengths/1", "n": 5, "lengths": [1, 2, 3, 4, "5"]}',
        '{"format": "prompt-lengths/1", "n": 5, "lengths": [1, 2, 3, 4, -5]}',
        '{"format": "prompt-lengths/1", "n": 5, "lengths": [1, 2, 3, 4, true]}',
        '{"format": "prompt-lengths/1", "n": 5, "lengths": [1, 2, 3, 4, 5.0]}',
        '{"format": "prompt-lengths/0", "n": 5, "lengths": [1, 2, 3, 4, 5]}',
        '{"n": 5, "lengths": [1, 2, 3, 4, 5]}',
    ],
)
def test_a_damaged_file_is_counted_again_and_replaced(damage, tokenizer, tmp_path):
    chats = _chats()
    right = pl.prompt_lengths(tokenizer, chats, tmp_path)
    [kept] = tmp_path.iterdir()
    kept.write_bytes(damage.encode("latin-1"))
    assert pl.prompt_lengths(tokenizer, chats, tmp_path) == right
    assert json.loads(kept.read_text())["lengths"] == right


def test_an_unwritable_cache_is_reported_and_the_counts_still_used(tokenizer, tmp_path, caplog):
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("a file where the cache folder should be")
    chats = _chats()
    with caplog.at_level(logging.WARNING, logger=pl.__name__):
        assert pl.prompt_lengths(tokenizer, chats, blocker / "prompt_lengths") == _fresh(tokenizer, chats)
    assert "prompt token counts not kept" in caplog.text and str(blocker) in caplog.text


def test_to_dataset_from_kept_counts_is_the_dataset_counted_afresh(tokenizer, tmp_path, monkeypatch):
    """The filter's rows (which prompts a run trains on, and so their order) do not depend on the cache."""
    monkeypatch.setenv("PSPO_CACHE_DIR", str(tmp_path))
    problems = [
        Problem(id=str(i), question=q, answer="4", answer_kind="numeric") for i, q in enumerate(QUESTIONS)
    ]
    limit = sorted(_fresh(tokenizer, _chats()))[2]  # keeps three of the five
    counted = grpo.to_dataset(problems, tokenizer, "paper", limit)
    assert len(list((tmp_path / "prompt_lengths").iterdir())) == 1
    _no_counting(monkeypatch)
    again = grpo.to_dataset(problems, tokenizer, "paper", limit)
    assert again.to_list() == counted.to_list() and len(again) == 3


class _Unserialisable:
    """The tiny tokenizer behind a backend that cannot be written out (a custom Python component), or none."""

    def __init__(self, tokenizer, backend):
        self._tokenizer, self.backend_tokenizer = tokenizer, backend

    def apply_chat_template(self, *args, **kwargs):
        return self._tokenizer.apply_chat_template(*args, **kwargs)

    def __call__(self, *args, **kwargs):
        return self._tokenizer(*args, **kwargs)


class _RefusingBackend:
    def to_str(self):
        raise Exception("Custom PreTokenizer cannot be serialized")


@pytest.mark.parametrize("backend", [None, _RefusingBackend()], ids=["no backend", "refuses to serialise"])
def test_a_tokenizer_without_a_key_is_counted_every_time_and_nothing_kept(backend, tokenizer, tmp_path):
    chats = _chats()
    assert pl.prompt_lengths(_Unserialisable(tokenizer, backend), chats, tmp_path) == _fresh(tokenizer, chats)
    assert not tmp_path.exists() or not any(tmp_path.iterdir())
