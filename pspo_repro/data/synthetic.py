"""Synthetic GSM8K-style word problems for the CPU mini-reproduction.

One- and two-step arithmetic over small numbers, written with the words the tiny model's tokenizer was
trained on (``tiny_model._WORDS``), so a worked solution is 14-40 tokens. Rows have GSM8K's layout:
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
from pspo_repro.data.problems import DataError, DatasetSpec, Problem

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
    # Small ranges keep the arithmetic learnable by the SFT model in ~3 CPU minutes: with 12/6 it reaches
    # ~34% greedy validation accuracy (with 30/9: 10%), leaving RL room to improve.
    max_number: int = 12  # operands of + and - are in [1, max_number]
    max_factor: int = 6  # operands of * and / are in [2, max_factor]


# A template draws numbers and words from ``rng`` and returns (question, solution, gold answer).
Template = Callable[[random.Random, SyntheticConfig], tuple[str, str, int]]


def _who(rng: random.Random) -> tuple[str, str, str, str]:
    """A name, its pronoun, a different name (the friend) and an item."""
    name, other = rng.sample(sorted(_NAMES), 2)
    return name, _NAMES[name], other, rng.choice(_ITEMS)


def _add(rng: random.Random, cfg: SyntheticConfig) -> tuple[str, str, int]:
    n, p, _, x = _who(rng)
    a, b = rng.randint(1, cfg.max_number), rng.randint(1, cfg.max_number)
    c = a + b
    q = f"{n} has {a} {x}. {p} buys {b} more {x}. How many {x} does {n} have now?"
    return q, f"{n} has {a} + {b} = {c} {x} now.\n#### {c}", c


def _sub(rng: random.Random, cfg: SyntheticConfig) -> tuple[str, str, int]:
    n, p, o, x = _who(rng)
    a = rng.randint(2, cfg.max_number)
    b = rng.randint(1, a - 1)
    c = a - b
    q = f"{n} has {a} {x}. {p} gives {b} {x} to {o}. How many {x} does {n} have left?"
    return q, f"{n} has {a} - {b} = {c} {x} left.\n#### {c}", c


def _mul(rng: random.Random, cfg: SyntheticConfig) -> tuple[str, str, int]:
    n, _, _, x = _who(rng)
    a, b = rng.randint(2, cfg.max_factor), rng.randint(2, cfg.max_factor)
    c = a * b
    q = f"{n} buys {a} bags. Each bag has {b} {x}. How many {x} does {n} buy in total?"
    return q, f"{n} buys {a} * {b} = {c} {x}.\n#### {c}", c


def _div(rng: random.Random, cfg: SyntheticConfig) -> tuple[str, str, int]:
    n, _, _, x = _who(rng)
    b, c = rng.randint(2, cfg.max_factor), rng.randint(2, cfg.max_factor)
    a = b * c  # exact division: the gold answer is an integer
    q = f"{n} has {a} {x} and puts them in bags of {b}. How many bags does {n} make?"
    return q, f"{n} makes {a} / {b} = {c} bags.\n#### {c}", c


def _add_sub(rng: random.Random, cfg: SyntheticConfig) -> tuple[str, str, int]:
    n, p, o, x = _who(rng)
    a, b = rng.randint(1, cfg.max_number), rng.randint(1, cfg.max_number)
    d = a + b
    c = rng.randint(1, d - 1)
    e = d - c
    q = f"{n} has {a} {x}. {p} finds {b} more and then gives {c} to {o}. How many {x} does {n} have left?"
    s = f"{n} has {a} + {b} = {d} {x}.\nThen {d} - {c} = {e} {x} are left.\n#### {e}"
    return q, s, e


def _mul_add(rng: random.Random, cfg: SyntheticConfig) -> tuple[str, str, int]:
    n, _, _, x = _who(rng)
    a, b = rng.randint(2, cfg.max_factor), rng.randint(2, cfg.max_factor)
    c = rng.randint(1, cfg.max_number)
    d = a * b
    e = d + c
    q = f"{n} has {a} boxes with {b} {x} each and {c} more {x}. How many {x} does {n} have altogether?"
    s = f"The boxes have {a} * {b} = {d} {x}.\n{n} has {d} + {c} = {e} {x} altogether.\n#### {e}"
    return q, s, e


# Four one-step shapes and two two-step shapes: the two-step ones are what a small SFT model gets
# wrong most often, which leaves RL something to improve.
TEMPLATES: dict[str, Template] = {
    "add": _add,
    "sub": _sub,
    "mul": _mul,
    "div": _div,
    "add_sub": _add_sub,
    "mul_add": _mul_add,
}


def _bucket(question: str) -> int:
    """Stable split bucket in [0, 10) from the question text (sha256: same on every machine)."""
    return int.from_bytes(hashlib.sha256(question.encode()).digest()[:8], "big") % 10


def _stream(cfg: SyntheticConfig) -> Iterator[tuple[str, str, int]]:
    """An endless seeded stream of distinct (question, solution, answer) triples."""
    rng = random.Random(f"pspo-synthetic/{cfg.seed}")  # a string seed hashes the same on every platform
    names = sorted(TEMPLATES)
    seen: set[str] = set()
    misses = 0
    while True:
        q, s, a = TEMPLATES[rng.choice(names)](rng, cfg)
        if q in seen:
            misses += 1
            if misses > 100_000:  # the number range is too small for the sizes asked for
                raise ValueError(f"synthetic generator ran out of distinct questions ({len(seen)} drawn)")
            continue
        seen.add(q)
        yield q, s, a


def generate(
    sizes: dict[str, int] | None = None, cfg: SyntheticConfig | None = None
) -> dict[str, list[Problem]]:
    """Problems per split (``train``/``validation``/``test``), ``sizes`` rows each (default 2000/200/200)."""
    sizes = {**DEFAULT_SIZES, **(sizes or {})}
    unknown = set(sizes) - set(SPLITS)
    if unknown:
        raise ValueError(f"unknown synthetic split(s) {sorted(unknown)}; allowed: {list(SPLITS)}")
    cfg = cfg or SyntheticConfig()
    out: dict[str, list[Problem]] = {split: [] for split in SPLITS}
    stream = _stream(cfg)
    while any(len(out[s]) < sizes[s] for s in SPLITS):
        q, sol, ans = next(stream)
        b = _bucket(q)
        split = next(s for s in SPLITS if b in _BUCKETS[s])
        rows = out[split]
        if len(rows) < sizes[split]:
            rows.append(Problem(f"synthetic/{split}/{len(rows)}", q, str(ans), "numeric", sol))
    return out


def load_split(split: str, n: int | None = None, seed: int = 0, **kwargs: Any) -> list[Problem]:
    """One split (default size if ``n`` is None); ``kwargs`` go to ``SyntheticConfig``."""
    if split not in SPLITS:
        raise ValueError(f"unknown synthetic split {split!r}; allowed: {list(SPLITS)}")
    sizes = {s: 0 for s in SPLITS}
    sizes[split] = DEFAULT_SIZES[split] if n is None else n
    return generate(sizes, SyntheticConfig(seed=seed, **kwargs))[split]


def to_row(problem: Problem) -> dict[str, str]:
    """A GSM8K-layout row: ``question`` and ``answer`` (the worked solution ending ``#### N``)."""
    return {"question": problem.question, "answer": problem.solution or f"#### {problem.answer}"}


def write_jsonl(
    out_dir: str | os.PathLike, sizes: dict[str, int] | None = None, cfg: SyntheticConfig | None = None
) -> dict[str, Path]:
    """Write ``train.jsonl``, ``validation.jsonl``, ``test.jsonl`` (GSM8K layout) into ``out_dir``.

    Point ``PSPO_DATA_DIR`` at the parent of a folder named ``synthetic`` to load them through
    ``pspo_repro.data`` (``write_jsonl(Path(os.environ["PSPO_DATA_DIR"]) / "synthetic")``).
    """
    out_dir = Path(out_dir)
    paths = {}
    for split, problems in generate(sizes, cfg).items():
        paths[split] = out_dir / f"{split}.jsonl"
        with atomic_open(paths[split], "w", encoding="utf-8") as fh:
            for p in problems:
                fh.write(json.dumps(to_row(p)) + "\n")
    return paths


# ---------------------------------------------------------------- the dataset registry's entry


def _row_fn(split: str) -> Callable[[dict[str, Any], str, int], Problem]:
    """Row converter for the jsonl files: GSM8K fields, ids ``synthetic/{split}/{index}``."""

    def row_fn(row: dict[str, Any], source: str, line: int) -> Problem:
        question, solution = row.get("question"), row.get("answer")
        if not question or not solution or "####" not in solution:
            raise DataError(f"{source}:{line}: synthetic row needs 'question' and an 'answer' with '####'")
        gold = solution.rsplit("####", 1)[1].strip().replace(",", "")
        return Problem(f"synthetic/{split}/{line - 1}", question, gold, "numeric", solution)

    return row_fn


def _generated_rows(split: str) -> Callable[[], list[dict[str, str]]]:
    """The registry's no-network source: the default-size split generated in memory (seed 0)."""
    return lambda: [to_row(p) for p in load_split(split)]


def dataset_spec() -> DatasetSpec:
    """The registry entry of ``synthetic`` (registered by ``pspo_repro.data.datasets``)."""
    return DatasetSpec(
        files={s: f"synthetic/{s}.jsonl" for s in SPLITS},
        rows={s: _row_fn(s) for s in SPLITS},
        hub={s: _generated_rows(s) for s in SPLITS},
        hub_names={s: f"pspo_repro.data.synthetic (seed 0, {DEFAULT_SIZES[s]} rows)" for s in SPLITS},
        generated=True,  # no synthetic/*.jsonl under PSPO_DATA_DIR: generate the split in memory
        val_split="validation",  # RL validates on rows SFT never saw
    )
