"""Reward functions for training, behind a registry; each has TRL's reward-function signature.

TRL calls ``fn(prompts=..., completions=..., completion_ids=..., **columns)`` where ``columns`` are the
dataset's other columns repeated per completion (here ``answer`` and ``answer_kind``) plus TRL's own
keywords (``trainer_state``, ``log_extra``, ``log_metric``), and expects one float per completion.
The scoring itself lives in ``pspo_repro.scoring.grading`` (shared with evaluation), which bounds math-verify's
time on any thread (its signal-based timeouts only work on the main thread). No torch/TRL imports here.
"""

from __future__ import annotations

import re
import zlib
from collections.abc import Callable
from typing import Any

from pspo_repro.common.names import did_you_mean
from pspo_repro.scoring import grading
from pspo_repro.scoring.authors_reward import authors_gsm8k_reward

RewardFn = Callable[..., list[float]]
REWARDS: dict[str, RewardFn] = {}

# The answer line the paper's system prompt asks for: "#### <final numeric answer only>".
_FORMAT_RE = re.compile(r"^\s*####\s*\S.*$", re.M)


# Rewards that grade one final number (GSM8K's answers): a LaTeX gold (MATH's \frac{1}{2}, \sqrt{2}) scores 0.
NUMBER_ONLY = frozenset({"gsm8k_numeric", "authors_gsm8k"})


def register_reward(name: str) -> Callable[[RewardFn], RewardFn]:
    """Decorator adding a reward under ``name``; a duplicate name raises (no silent overwrite)."""

    def decorator(fn: RewardFn) -> RewardFn:
        if name in REWARDS:
            raise ValueError(f"reward {name!r} is already registered")
        fn.__name__ = name  # TRL logs rewards/<__name__>/mean
        REWARDS[name] = fn
        return fn

    return decorator


def list_rewards() -> list[str]:
    """Sorted names of the registered rewards."""
    return sorted(REWARDS)


def get_reward(name: str) -> RewardFn:
    """The reward registered as ``name``; an unknown name raises a one-line ValueError listing the options."""
    if name not in REWARDS:
        raise ValueError(
            f"unknown reward {name!r}; {did_you_mean(name, list_rewards())}valid rewards: {', '.join(list_rewards())}"
        )
    return REWARDS[name]


def completion_text(completion: Any) -> str:
    """The assistant text of one completion: a string, or TRL's conversational ``[{"role", "content"}]``."""
    if isinstance(completion, str):
        return completion
    return "".join(m.get("content") or "" for m in completion if m.get("role", "assistant") == "assistant")


def _kinds(answer_kind: list[str] | None, n: int) -> list[str]:
    return list(answer_kind) if answer_kind is not None else ["numeric"] * n


@register_reward("gsm8k_numeric")
def gsm8k_numeric(prompts, completions, answer, **kwargs) -> list[float]:
    """Our corrected version of the authors' reward (last '####', exact numbers; values {0, 0.05, 1}):
    1 if the final number is right, +0.05 for the '####' format. ``authors_gsm8k`` is theirs as it ran."""
    return [
        grading.gsm8k_numeric_reward(completion_text(c), g) for c, g in zip(completions, answer, strict=True)
    ]


@register_reward("authors_gsm8k")
def authors_gsm8k(prompts, completions, answer, **kwargs) -> list[float]:
    """The authors' reward bug for bug (``pspo_repro.scoring.authors_reward``): the paper experiments train with it."""
    return [authors_gsm8k_reward(completion_text(c), g) for c, g in zip(completions, answer, strict=True)]


@register_reward("math_verify")
def math_verify(prompts, completions, answer, answer_kind=None, **kwargs) -> list[float]:
    """1.0 if the final answer is equivalent to the gold (exact numbers; math-verify for LaTeX), else 0.0."""
    kinds = _kinds(answer_kind, len(completions))
    return [
        float(grading.reward_correct(completion_text(c), g, k))
        for c, g, k in zip(completions, answer, kinds, strict=True)
    ]


@register_reward("format")
def format_reward(prompts, completions, **kwargs) -> list[float]:
    """1.0 if the response has a final-answer line '#### <answer>' (the system prompt's format), else 0.0."""
    return [float(bool(_FORMAT_RE.search(completion_text(c)))) for c in completions]


@register_reward("smoke_length")
def smoke_length(prompts, completions, **kwargs) -> list[float]:
    """Test-only shaping: min(characters, 64) / 64. A random tiny model never solves a problem, so smoke
    tests need a reward that varies within a group (non-zero advantages) to move the parameters."""
    return [min(len(completion_text(c)), 64) / 64 for c in completions]


@register_reward("smoke_hash")
def smoke_hash(prompts, completions, **kwargs) -> list[float]:
    """Test-only: a deterministic pseudo-random score in [0, 1) from the text's CRC32, so any two different
    completions (almost surely) differ. For precision checks on random weights, whose completions all
    run to the length limit (``smoke_length`` then gives every one 1.0 and no gradient)."""
    return [(zlib.crc32(completion_text(c).encode()) % 1000) / 1000 for c in completions]
