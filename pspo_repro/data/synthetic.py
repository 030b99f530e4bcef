"""Synthetic GSM8K-style word problems for the CPU mini-reproduction.

Two tasks over small numbers, written with the words the tiny model's tokenizer was trained on
(``tiny_model._WORDS``): ``synthetic``, the rewarded task, two-step problems whose worked solution is
29-36 tokens; ``synthetic_heldout``, a held-out skill ("how many more ... than ..." comparisons, one
step, 19-22 tokens) that the SFT base learns and RL never trains on. Rows have GSM8K's layout:
``question`` (the user message) and ``answer`` (worked solution lines, then ``#### N``).

Splits are fixed and disjoint by construction. One seeded stream of distinct questions is drawn; each
question goes to a split by a stable hash of its text (10% test, 10% validation, 80% train), and each
split keeps the first ``n`` questions assigned to it. So a split depends only on the seed and its own
size: asking for more training rows never changes the validation or test rows, and no question text
appears in two splits.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pspo_repro.common.atomic import atomic_open
from pspo_repro.common.names import did_you_mean, did_you_mean_each
from pspo_repro.data.problems import DataError, DatasetSpec, Problem, numeric_gold

SPLITS = ("train", "validation", "test")
DEFAULT_SIZES = {"train": 2000, "validation": 200, "test": 200}
# Hash buckets out of 10 per split: test 0, validation 1, train 2-9.
_BUCKETS = {"test": {0}, "validation": {1}, "train": set(range(2, 10))}

# Names and items are single tokens (or nearly) of the tiny tokenizer; pronoun per name.
_NAMES = {
    "Tom": "He", "Anna": "She", "Ben": "He", "Mia": "She", "Sam": "He", "Lily": "She", "Jack": "He",
    "Emma": "She", "Noah": "He", "Zoe": "She", "John": "He", "Mary": "She", "James": "He", "Sarah": "She",
}  # fmt: skip
_ITEMS = ("apples", "oranges", "books", "pencils", "cookies", "marbles", "cars")


@dataclass(frozen=True)
class SyntheticConfig:
    """What fixes the generated problems: the seed and the number range (sizes are per call)."""

    seed: int = 0
    # Small ranges keep the arithmetic learnable by the mini's short SFT: with 12/6 it reaches ~34% greedy
    # validation accuracy (with 30/9: 10%), leaving RL room to improve.
    max_number: int = 9  # operands of + and - are in [1, max_number] (a second step's too)
    max_factor: int = 5  # operands of * are in [2, max_factor]


# A template draws numbers and words from ``rng`` and returns (question, solution, gold answer).
Template = Callable[[random.Random, SyntheticConfig], tuple[str, str, int]]


def _who(rng: random.Random) -> tuple[str, str, str, str]:
    """A name, its pronoun, a different name (the friend) and an item."""
    name, other = rng.sample(sorted(_NAMES), 2)
    return name, _NAMES[name], other, rng.choice(_ITEMS)


# ---- the rewarded task (dataset ``synthetic``): two-step problems only.
# Every solution is two worked lines, ``first result`` then ``gold``, and the gold differs from every
# number the question states and from the first line's result. So a response that stops after the
# first line (the SFT habit, training/sft.py ``premature_answer``) does not contain the gold anywhere:
# it is wrong under true accuracy too, and only the second line's computation can make it right.


def _two_step(
    rng: random.Random, draw: Callable[[random.Random], tuple[int, int, int, int, int]]
) -> tuple[int, int, int, int, int]:
    """``draw(rng)`` -> (a, b, d, c, e) redrawn until the gold ``e`` is none of a, b, c, d."""
    while True:
        a, b, d, c, e = draw(rng)
        if e not in (a, b, c, d):
            return a, b, d, c, e


def _add_sub(rng: random.Random, cfg: SyntheticConfig) -> tuple[str, str, int]:
    n, p, o, x = _who(rng)

    def draw(r):
        a, b = r.randint(1, cfg.max_number), r.randint(1, cfg.max_number)
        c = r.randint(1, min(cfg.max_number, a + b - 1))
        return a, b, a + b, c, a + b - c

    a, b, d, c, e = _two_step(rng, draw)
    q = f"{n} has {a} {x}. {p} finds {b} more and then gives {c} to {o}. How many {x} does {n} have left?"
    s = f"{n} has {a} + {b} = {d} {x}.\nThen {d} - {c} = {e} {x} are left.\n#### {e}"
    return q, s, e


def _sub_add(rng: random.Random, cfg: SyntheticConfig) -> tuple[str, str, int]:
    n, p, o, x = _who(rng)

    def draw(r):
        a = r.randint(2, cfg.max_number)
        b = r.randint(1, a - 1)
        c = r.randint(1, cfg.max_number)
        return a, b, a - b, c, a - b + c

    a, b, d, c, e = _two_step(rng, draw)
    q = f"{n} has {a} {x}. {p} gives {b} to {o} and then buys {c} more. How many {x} does {n} have now?"
    s = f"{n} has {a} - {b} = {d} {x} left.\nThen {d} + {c} = {e} {x} now.\n#### {e}"
    return q, s, e


def _mul_add(rng: random.Random, cfg: SyntheticConfig) -> tuple[str, str, int]:
    n, _, _, x = _who(rng)

    def draw(r):
        a, b = r.randint(2, cfg.max_factor), r.randint(2, cfg.max_factor)
        c = r.randint(1, cfg.max_number)
        return a, b, a * b, c, a * b + c

    a, b, d, c, e = _two_step(rng, draw)
    q = f"{n} has {a} boxes with {b} {x} each and {c} more {x}. How many {x} does {n} have altogether?"
    s = f"The boxes have {a} * {b} = {d} {x}.\n{n} has {d} + {c} = {e} {x} altogether.\n#### {e}"
    return q, s, e


def _mul_sub(rng: random.Random, cfg: SyntheticConfig) -> tuple[str, str, int]:
    n, _, o, x = _who(rng)

    def draw(r):
        a, b = r.randint(2, cfg.max_factor), r.randint(2, cfg.max_factor)
        c = r.randint(1, min(cfg.max_number, a * b - 1))
        return a, b, a * b, c, a * b - c

    a, b, d, c, e = _two_step(rng, draw)
    q = f"{n} buys {a} bags with {b} {x} each and gives {c} {x} to {o}. How many {x} does {n} have left?"
    s = f"{n} buys {a} * {b} = {d} {x}.\nThen {d} - {c} = {e} {x} are left.\n#### {e}"
    return q, s, e


# Four two-step shapes (+ then -, - then +, * then +, * then -).
TEMPLATES: dict[str, Template] = {
    "add_sub": _add_sub,
    "sub_add": _sub_add,
    "mul_add": _mul_add,
    "mul_sub": _mul_sub,
}


# ---- the held-out skill (dataset ``synthetic_heldout``): "how many more" comparisons, one step.
# The SFT base learns it (without any habit) next to the rewarded task; RL never sees its prompts, so
# its accuracy before and after RL measures what RL preserves of knowledge it does not reward.


def _compare(rng: random.Random, cfg: SyntheticConfig) -> tuple[str, str, int]:
    n, _, o, x = _who(rng)
    while True:
        a = rng.randint(3, cfg.max_number)
        b = rng.randint(1, a - 1)
        if a - b != b:  # the gold is neither number of the question
            break
    c = a - b
    q = f"{n} has {a} {x} and {o} has {b} {x}. How many more {x} does {n} have than {o}?"
    return q, f"{n} has {a} - {b} = {c} more {x} than {o}.\n#### {c}", c


HELDOUT_TEMPLATES: dict[str, Template] = {"compare": _compare}

# Task name -> (its templates, the dataset name: ids and the file folder under PSPO_DATA_DIR).
TASKS: dict[str, dict[str, Template]] = {"synthetic": TEMPLATES, "synthetic_heldout": HELDOUT_TEMPLATES}


def _bucket(question: str) -> int:
    """Stable split bucket in [0, 10) from the question text (sha256: same on every machine)."""
    return int.from_bytes(hashlib.sha256(question.encode()).digest()[:8], "big") % 10


def _templates(task: str) -> dict[str, Template]:
    if task not in TASKS:
        raise ValueError(
            f"unknown synthetic task {task!r}; {did_you_mean(task, TASKS)}allowed: {sorted(TASKS)}"
        )
    return TASKS[task]


def _stream(cfg: SyntheticConfig, task: str = "synthetic") -> Iterator[tuple[str, str, int]]:
    """An endless seeded stream of distinct (question, solution, answer) triples of one task."""
    rng = random.Random(f"pspo-{task}/{cfg.seed}")  # a string seed hashes the same on every platform
    templates = _templates(task)
    names = sorted(templates)
    seen: set[str] = set()
    misses = 0
    while True:
        q, s, a = templates[rng.choice(names)](rng, cfg)
        if q in seen:
            misses += 1
            if misses > 100_000:  # the number range is too small for the sizes asked for
                raise ValueError(f"synthetic generator ran out of distinct questions ({len(seen)} drawn)")
            continue
        seen.add(q)
        yield q, s, a


def generate(
    sizes: dict[str, int] | None = None, cfg: SyntheticConfig | None = None, task: str = "synthetic"
) -> dict[str, list[Problem]]:
    """Problems per split (``train``/``validation``/``test``), ``sizes`` rows each (default 2000/200/200).

    ``task``: ``synthetic`` (the rewarded two-step problems) or ``synthetic_heldout`` (the comparison
    skill SFT teaches and RL never sees); ids are ``{task}/{split}/{index}``.
    """
    sizes = {**DEFAULT_SIZES, **(sizes or {})}
    unknown = set(sizes) - set(SPLITS)
    if unknown:
        hint = did_you_mean_each(sorted(unknown), SPLITS)
        raise ValueError(f"unknown synthetic split(s) {sorted(unknown)}; {hint}allowed: {list(SPLITS)}")
    cfg = cfg or SyntheticConfig()
    out: dict[str, list[Problem]] = {split: [] for split in SPLITS}
    stream = _stream(cfg, task)
    while any(len(out[s]) < sizes[s] for s in SPLITS):
        q, sol, ans = next(stream)
        b = _bucket(q)
        split = next(s for s in SPLITS if b in _BUCKETS[s])
        rows = out[split]
        if len(rows) < sizes[split]:
            rows.append(Problem(f"{task}/{split}/{len(rows)}", q, str(ans), "numeric", sol))
    return out


def load_split(
    split: str, n: int | None = None, seed: int = 0, task: str = "synthetic", **kwargs: Any
) -> list[Problem]:
    """One split of ``task`` (default size if ``n`` is None); ``kwargs`` go to ``SyntheticConfig``."""
    if split not in SPLITS:
        raise ValueError(
            f"unknown synthetic split {split!r}; {did_you_mean(split, SPLITS)}allowed: {list(SPLITS)}"
        )
    sizes = {s: 0 for s in SPLITS}
    sizes[split] = DEFAULT_SIZES[split] if n is None else n
    return generate(sizes, SyntheticConfig(seed=seed, **kwargs), task)[split]


def to_row(problem: Problem) -> dict[str, str]:
    """A GSM8K-layout row: ``question`` and ``answer`` (the worked solution ending ``#### N``)."""
    return {"question": problem.question, "answer": problem.solution or f"#### {problem.answer}"}


def write_jsonl(
    out_dir: str | os.PathLike,
    sizes: dict[str, int] | None = None,
    cfg: SyntheticConfig | None = None,
    task: str = "synthetic",
) -> dict[str, Path]:
    """Write ``train.jsonl``, ``validation.jsonl``, ``test.jsonl`` (GSM8K layout) into ``out_dir``.

    Point ``PSPO_DATA_DIR`` at the parent of a folder named ``synthetic`` to load them through
    ``pspo_repro.data`` (``write_jsonl(Path(os.environ["PSPO_DATA_DIR"]) / "synthetic")``; the held-out
    task's folder is ``synthetic_heldout``).
    """
    out_dir = Path(out_dir)
    paths = {}
    for split, problems in generate(sizes, cfg, task).items():
        paths[split] = out_dir / f"{split}.jsonl"
        with atomic_open(paths[split], "w", encoding="utf-8") as fh:
            for p in problems:
                fh.write(json.dumps(to_row(p)) + "\n")
    return paths


# ---------------------------------------------------------------- the dataset registry's entry


def _row_fn(split: str, task: str = "synthetic") -> Callable[[dict[str, Any], str, int], Problem]:
    """Row converter for the jsonl files: GSM8K fields, ids ``{task}/{split}/{index}``."""

    def row_fn(row: dict[str, Any], source: str, line: int) -> Problem:
        question, solution = row.get("question"), row.get("answer")
        if not question or not solution or "####" not in solution:
            raise DataError(f"{source}:{line}: synthetic row needs 'question' and an 'answer' with '####'")
        pid = f"{task}/{split}/{line - 1}"
        gold = numeric_gold(solution.rsplit("####", 1)[1].strip().replace(",", ""), pid, source, line)
        return Problem(pid, question, gold, "numeric", solution)

    return row_fn


def _generated_rows(split: str, task: str = "synthetic") -> Callable[[], list[dict[str, str]]]:
    """The registry's no-network source: the default-size split generated in memory (seed 0)."""
    return lambda: [to_row(p) for p in load_split(split, task=task)]


def dataset_spec(task: str = "synthetic") -> DatasetSpec:
    """The registry entry of ``task`` (``synthetic`` or ``synthetic_heldout``; registered by
    ``pspo_repro.data.datasets``)."""
    _templates(task)
    return DatasetSpec(
        files={s: f"{task}/{s}.jsonl" for s in SPLITS},
        rows={s: _row_fn(s, task) for s in SPLITS},
        hub={s: _generated_rows(s, task) for s in SPLITS},
        hub_names={s: f"pspo_repro.data.synthetic {task} (seed 0, {DEFAULT_SIZES[s]} rows)" for s in SPLITS},
        generated=True,  # no synthetic/*.jsonl under PSPO_DATA_DIR: generate the split in memory
        val_split="validation",  # RL validates on rows SFT never saw
    )
