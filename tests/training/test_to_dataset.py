"""``to_dataset``'s ``max_prompt_length`` filter counts the prompt's tokens (with the tiny tokenizer).

Under transformers 5 ``apply_chat_template(..., tokenize=True)`` returns a BatchEncoding, whose ``len`` is
its number of keys (2): the filter compared 2 with the limit and never dropped a row.
"""

from __future__ import annotations

import logging

import pytest

from pspo_repro.data.problems import Problem
from pspo_repro.data.prompts import build_messages
from pspo_repro.training import grpo as train


@pytest.fixture(scope="module")
def tokenizer(tiny_model_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_model_dir)


def _problem(pid: str, question: str) -> Problem:
    return Problem(id=pid, question=question, answer="4", answer_kind="numeric")


def _prompt_tokens(tokenizer, question: str) -> int:
    text = tokenizer.apply_chat_template(build_messages(question, "paper"), add_generation_prompt=True,
                                         tokenize=False)  # fmt: skip
    return len(tokenizer(text, add_special_tokens=False)["input_ids"])


def test_prompts_over_the_limit_are_dropped_and_counted(tokenizer, caplog):
    short, long = "What is 2 + 2?", "How many apples are left? " * 40
    limit = _prompt_tokens(tokenizer, short)
    assert limit > 2 and _prompt_tokens(tokenizer, long) > limit  # the bug compared 2 with the limit
    problems = [_problem("short", short), _problem("long", long), _problem("short2", short)]
    with caplog.at_level(logging.WARNING, logger="pspo_repro.train"):
        ds = train.to_dataset(problems, tokenizer, "paper", limit)  # a prompt of exactly `limit` is kept
    assert ds["id"] == ["short", "short2"]
    assert f"dropped 1 prompts longer than {limit} tokens" in caplog.text


def test_no_limit_and_a_roomy_limit_keep_every_row(tokenizer, caplog):
    problems = [_problem("a", "What is 2 + 2?"), _problem("b", "How many apples are left? " * 40)]
    with caplog.at_level(logging.WARNING, logger="pspo_repro.train"):
        assert train.to_dataset(problems, tokenizer, "paper", None)["id"] == ["a", "b"]
        assert train.to_dataset(problems, tokenizer, "paper", 100_000)["id"] == ["a", "b"]
    assert "dropped" not in caplog.text
