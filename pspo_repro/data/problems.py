"""The records every stage shares: ``Problem`` (one question with its gold answer), ``DatasetSpec`` (how
one dataset is read) and ``DataError`` (a one-line loading error). Imports nothing of the package, so
``datasets`` and ``synthetic`` both build on it without importing each other.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Literal

AnswerKind = Literal["numeric", "latex", "text", "list", "choice"]

# "19 \text{ and }43", "6, 8\text{, and }10": a joining word between two answers separates them as a comma does.
_TEXT_AND_RE = re.compile(r"\\text\{\s*,?\s*and\s*\}|\\text\{\s*,\s*\}")
_WORD_AND_RE = re.compile(r"\s+and\s+")
_EDGE_SPACE_RE = re.compile(r"^(?:\s|\\[ ,;:!]|\\q?quad)+|(?:\s|\\[ ,;:!]|\\q?quad)+$")
_THOUSANDS_SEP_RE = re.compile(r"\s*\\!")


def list_items(text: str) -> list[str]:
    """The answers of a list written with commas (``"70, 110"`` -> ``["70", "110"]``), split at commas
    outside brackets and braces only: ``(1, 2)``, ``[0, 1)``, ``\\{1, 2\\}`` and ``10{,}000`` stay whole,
    as do a thousands separator written ``,\\!`` and LaTeX's thin space ``\\,``. "and" between answers
    separates like a comma; empty items are dropped. A text with no such separator is one item."""
    text = _TEXT_AND_RE.sub(",", text)
    items, depth, start, i = [], 0, 0, 0
    while i < len(text):
        c = text[i]
        if c == "\\":  # a command or an escaped character: \{ and \} open and close, \, is a space
            depth = max(depth + {"{": 1, "}": -1}.get(text[i + 1 : i + 2], 0), 0)
            i += 2
            continue
        if c in "([{":
            depth += 1
        elif c in ")]}":
            depth = max(depth - 1, 0)
        elif depth == 0 and c == "," and not _THOUSANDS_SEP_RE.match(text, i + 1):
            items.append(text[start:i])
            start = i + 1
        elif depth == 0 and c.isspace() and (m := _WORD_AND_RE.match(text, i)):
            items.append(text[start:i])
            start = i = m.end()
            continue
        i += 1
    items.append(text[start:])
    return [s for s in (_EDGE_SPACE_RE.sub("", item) for item in items) if s]


class DataError(ValueError):
    """A dataset could not be loaded; the message is one line naming the file/line/field at fault."""


@dataclass(frozen=True)
class Problem:
    """One problem: a stable id, the user-message text, the gold answer and how to compare it."""

    id: str
    question: str
    answer: str
    answer_kind: AnswerKind
    solution: str | None = None
    # The gold string exactly as the authors' code hands it to their reward (ASDiv's "9 (apples)", a
    # multi-answer row's whole "5 (years old); 15 (years old)"); None: ``answer`` (they agree in value).
    authors_gold: str | None = None


def numeric_gold(value: Any, pid: str, source: str, line: int) -> str:
    """A numeric gold as a plain string (145.0 -> '145', 2.5 -> '2.5', ' 7 ' -> '7').

    NaN, infinity, text that is no number, a list or a boolean is refused with a DataError naming the
    file and line, the dataset, the row id and the value: graded as the string 'nan' or '[1, 2]' every
    answer to that row would count as wrong, silently.
    """
    import math

    text = None
    if isinstance(value, int) and not isinstance(value, bool):
        text = str(value)
    elif isinstance(value, float) and math.isfinite(value):
        text = str(int(value)) if value.is_integer() else repr(value)
    elif isinstance(value, str):
        try:
            text = value.strip() if math.isfinite(float(value)) else None
        except ValueError:
            text = None
    if text is None:
        raise DataError(
            f"{source}:{line}: {pid.split('/', 1)[0]} row {pid}: gold {value!r:.40} is not a finite number "
            "(a numeric gold must be a finite number such as 145, 2.5 or '145')"
        )
    return text


# A row reader gets (row, source, line) and returns a Problem (None: skip a documented bad row);
# ``source``/``line`` only feed error messages.
RowFn = Callable[[dict[str, Any], str, int], "Problem | None"]


@dataclass(frozen=True)
class DatasetSpec:
    """How to load one dataset: offline files per split, a hub loader per split, and the row converter."""

    files: dict[str, str]  # split -> path relative to PSPO_DATA_DIR
    rows: dict[str, RowFn]  # split -> row converter
    hub: dict[str, Callable[[], Iterable[dict[str, Any]]]] = field(default_factory=dict)
    hub_names: dict[str, str] = field(default_factory=dict)  # split -> hub id, for messages
    # True: ``hub`` is a local generator (no network), used when PSPO_DATA_DIR lacks the file. Only for
    # datasets that are defined by code (synthetic); a real benchmark's missing file stays an error.
    generated: bool = False
    # A fixed validation split (load_train_val): validation rows come from it, never from ``train``.
    val_split: str | None = None
    # split -> the hub's split holding its rows, where the names differ (BoolQ's labelled evaluation rows are
    # the hub's "validation"); a hub id given as a source (``load_problems(source=...)``) reads the same split.
    hub_splits: dict[str, str] = field(default_factory=dict)
