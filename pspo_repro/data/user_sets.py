"""A researcher's own data set, named as TRL and lm-eval name one: a local file, a dataset folder or a hub id.

``UserSet`` is one such set: its ``source`` (a ``.jsonl``/``.json``/``.parquet``/``.csv`` file, a folder
``datasets`` loads - a hub repository's layout or ``Dataset.save_to_disk``'s - or a hub id
``owner/name[:config]``), the column map (which column holds the question, the gold answer and, optionally, a
row id) and the answer kind the gold is graded as (``numeric``, also spelt ``number``; ``latex``; ``list``;
``choice``: a letter A-J, yes or no; ``text``). Every source is read by ``datasets`` itself
(``load_dataset``, or ``load_from_disk`` for a saved folder), so what loads in TRL loads here.

A user's rows get the checks the built-in readers make: a missing column (named with the columns the set
has), an empty set, a blank question and a gold its kind cannot read are each one ``DataError`` line naming
the source and the row (numbered from 1). ``train`` uses it for ``data=<source>`` (conf/data/user.yaml),
``evaluate`` for ``eval=<source>`` (conf/eval/user.yaml); docs/evaluation_sets.md, "Your own data".
"""

from __future__ import annotations

import contextlib
import logging
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pspo_repro.common.names import did_you_mean
from pspo_repro.data.problems import DataError, Problem, list_items, numeric_gold
from pspo_repro.data.prompts import CHOICE_LETTERS

# datasets' builder for each file suffix (``load_dataset(<builder>, data_files=...)``).
FILE_FORMATS = {".jsonl": "json", ".json": "json", ".parquet": "parquet", ".csv": "csv"}
# The answer kinds a user may name -> the grader's kind (scoring.grading.KINDS).
ANSWER_KINDS = {"numeric": "numeric", "number": "numeric", "latex": "latex", "list": "list",
                "choice": "choice", "text": "text"}  # fmt: skip
COLUMN_ROLES = ("question", "answer", "id")  # id: optional (null: the row number)
_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+(?::[\w.-]+)?$")
_NAME_CHARS = re.compile(r"[^A-Za-z0-9_.+-]")


def looks_like_source(value: Any) -> bool:
    """Whether a ``data=``/``eval=`` value names a source rather than a config: a path that exists, a data
    file's suffix, a path separator (a hub id's ``/``) or a leading ``.``/``~``. Config names have none."""
    if not isinstance(value, str) or not value:
        return False
    return (
        "/" in value
        or value.startswith((".", "~"))
        or Path(value).suffix in FILE_FORMATS
        or Path(value).expanduser().exists()
    )


def default_name(source: str) -> str:
    """The set's name in results (folder tags, eval cells) when none is given: the file's stem, the folder's
    name or the hub id's dataset part, with characters a folder name may not hold dropped."""
    path = Path(source.split(":", 1)[0] if _HUB_ID.match(source) else source).expanduser()
    stem = path.stem if path.suffix in FILE_FORMATS else path.name
    return _NAME_CHARS.sub("", stem) or "user"


@dataclass(frozen=True)
class UserSet:
    """One user data set: where it is, which columns hold what, and how its gold is graded."""

    source: str
    question: str = "question"
    answer: str = "answer"
    answer_kind: str = "numeric"
    id: str | None = None
    split: str = "train"  # a hub id's or dataset folder's split; a single file is its one split
    name: str = ""

    @classmethod
    def from_config(cls, section: Mapping[str, Any], key: str, split: str) -> UserSet:
        """The set a config section describes (``key``: its name in messages, ``data`` or ``eval``); a bad
        entry is one DataError line naming the key, the value and what is allowed."""
        source = section.get("source")
        if not isinstance(source, str) or not source.strip():
            raise DataError(f"{key}.source must be a file, a dataset folder or a hub id, got {source!r}")
        columns = section.get("columns") or {}
        if not isinstance(columns, Mapping):
            raise DataError(f"{key}.columns must be a mapping of {', '.join(COLUMN_ROLES)} to column names")
        extra = sorted(set(columns) - set(COLUMN_ROLES))
        if extra:
            raise DataError(
                f"{key}.columns.{extra[0]} is not a column role; {did_you_mean(extra[0], COLUMN_ROLES)}"
                f"roles: {', '.join(COLUMN_ROLES)}"
            )
        for role in COLUMN_ROLES:
            value = columns.get(role)
            if not (value is None and role == "id") and (not isinstance(value, str) or not value):
                raise DataError(f"{key}.columns.{role} must be a column name, got {value!r}")
        kind = section.get("answer_kind")
        if kind not in ANSWER_KINDS:
            raise DataError(
                f"{key}.answer_kind must be one of {', '.join(ANSWER_KINDS)}, got {kind!r}"
                f"{'; ' + did_you_mean(kind, ANSWER_KINDS).rstrip() if did_you_mean(kind, ANSWER_KINDS) else ''}"
            )
        name = section.get("name") or default_name(source.strip())
        if not isinstance(name, str) or _NAME_CHARS.search(name):
            raise DataError(f"{key}.name must be letters, digits and _.+- only, got {name!r}")
        return cls(source.strip(), columns["question"], columns["answer"], ANSWER_KINDS[kind],
                   columns.get("id"), str(split), name)  # fmt: skip


def _empty_file(path: Path) -> bool:
    """A file with no bytes, or a parquet file of no rows (datasets' parquet reader refuses one)."""
    if path.stat().st_size == 0:
        return True
    if path.suffix != ".parquet":
        return False
    import pyarrow.parquet as pq

    try:
        return pq.ParquetFile(path).metadata.num_rows == 0
    except Exception:  # not parquet at all: datasets' own error names it
        return False


@contextlib.contextmanager
def _quiet_datasets() -> Iterator[None]:
    """datasets' progress bars and log lines off while a user set loads: a bad set's error stays one line."""
    import datasets

    bars_were_off = datasets.is_progress_bar_enabled() is False
    logger = logging.getLogger("datasets")
    level = logger.level
    datasets.disable_progress_bars()
    logger.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        logger.setLevel(level)
        if not bars_were_off:
            datasets.enable_progress_bars()


def _read(source: str, split: str) -> tuple[Any, str]:
    """The rows of ``source`` as a ``datasets.Dataset`` and a name for messages."""
    with _quiet_datasets():
        return _read_loud(source, split)


def _read_loud(source: str, split: str) -> tuple[Any, str]:
    """``_read`` with datasets' own output on."""
    import datasets  # lazy: only a user set needs it here

    path = Path(source).expanduser()
    try:
        if path.is_file():
            if path.suffix not in FILE_FORMATS:
                raise DataError(f"{source}: a data file must be {', '.join(FILE_FORMATS)}")
            label = str(path)
            if _empty_file(path):  # datasets fails on these with a generic message
                raise DataError(f"{path}: the data set is empty (no rows)")
            rows = datasets.load_dataset(FILE_FORMATS[path.suffix], data_files=str(path), split="train")
        elif path.is_dir():
            label = str(path)
            if (path / "dataset_dict.json").is_file() or (path / "state.json").is_file():
                rows = datasets.load_from_disk(str(path))  # Dataset.save_to_disk's layout
                if isinstance(rows, datasets.DatasetDict):
                    if split not in rows:
                        raise DataError(f"{path}: no split {split!r}; splits: {', '.join(rows)}")
                    rows = rows[split]
            else:  # a hub repository's layout (data files, README card): what load_dataset(<hub id>) reads
                rows = datasets.load_dataset(str(path), split=split)
        elif path.suffix in FILE_FORMATS or source.startswith(("/", ".", "~")):
            raise DataError(f"data file not found: {source}")
        elif _HUB_ID.match(source):
            from pspo_repro.data.datasets import hub_errors

            hub_id, _, config = source.partition(":")
            with hub_errors(source):
                return datasets.load_dataset(hub_id, config or None, split=split), source
        else:
            raise DataError(
                f"{source!r} is neither a data file ({', '.join(FILE_FORMATS)}), a dataset folder nor a hub "
                "id (owner/name or owner/name:config)"
            )
    except DataError:
        raise
    except Exception as exc:  # datasets' and pyarrow's many error types: one line naming the source
        cause = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise DataError(f"cannot read {source}: {cause}") from None
    return rows, label


def _gold(value: Any, kind: str, pid: str, label: str, row: int, column: str) -> str:
    """The gold of one row as the grader reads it, or a DataError naming the source, the row and the value."""
    if value is None or (isinstance(value, str) and not value.strip()):
        raise DataError(f"{label}:{row}: the answer column {column!r} is empty")
    if kind == "numeric":
        return numeric_gold(value, pid, label, row)
    if kind == "choice":
        if isinstance(value, bool):
            return "yes" if value else "no"
        text = str(value).strip()
        if (len(text) == 1 and text in CHOICE_LETTERS) or text.lower() in ("yes", "no"):
            return text if len(text) == 1 else text.lower()
        raise DataError(
            f"{label}:{row}: gold {value!r:.40} in {column!r} is not a choice (a letter A-J, yes or no)"
        )
    if not isinstance(value, str | int | float) or isinstance(value, bool):
        raise DataError(f"{label}:{row}: gold in {column!r} must be text, got {type(value).__name__}")
    text = str(value).strip()
    if kind == "list" and not list_items(text):
        raise DataError(f"{label}:{row}: gold {text!r:.40} in {column!r} holds no answer of a list")
    return text


def load_user_problems(user: UserSet, key: str) -> list[Problem]:
    """Every row of ``user`` as a Problem, in the source's order (``key``: ``data`` or ``eval``, for the
    column map's name in messages); each problem the module doc lists is one DataError line."""
    rows, label = _read(user.source, user.split)
    present = list(rows.column_names)
    for role in COLUMN_ROLES:
        column = getattr(user, role)
        if column is not None and column not in present:
            raise DataError(
                f"{label}: no column {column!r} ({key}.columns.{role}); {did_you_mean(column, present)}"
                f"columns: {', '.join(present) or 'none'}"
            )
    if not len(rows):
        raise DataError(f"{label}: the data set is empty (split {user.split!r})")
    problems, seen = [], set()
    for i, row in enumerate(rows, start=1):
        question = row[user.question]
        if not isinstance(question, str) or not question.strip():
            raise DataError(f"{label}:{i}: the question column {user.question!r} is empty or not text")
        pid = f"{user.name}/{row[user.id] if user.id else i - 1}"
        if pid in seen:
            raise DataError(f"{label}:{i}: id {pid!r} ({key}.columns.id={user.id!r}) is used twice")
        seen.add(pid)
        gold = _gold(row[user.answer], user.answer_kind, pid, label, i, user.answer)
        problems.append(Problem(pid, question, gold, user.answer_kind))  # type: ignore[arg-type]
    return problems


def train_val(problems: list[Problem], seed: int, n_train: int | None, n_val: int | None, label: str):
    """Training and validation rows of a user set: the rows shuffled with ``seed`` (the permutation of
    ``datasets.Dataset.shuffle(seed=...)``, as for the built-in sets), the first ``n_train`` train, the next
    ``n_val`` (null: 0) validate; ``n_train`` null takes every row the validation leaves."""
    import numpy as np

    n_val = int(n_val or 0)
    n_train = len(problems) - n_val if n_train is None else int(n_train)
    if n_train < 1 or n_train + n_val > len(problems):
        raise DataError(
            f"{label}: n_train={n_train} and n_val={n_val} need at least {max(n_train, 1) + n_val} rows; "
            f"the set has {len(problems)}"
        )
    order = np.random.default_rng(seed).permutation(len(problems))
    shuffled = [problems[i] for i in order]
    return shuffled[:n_train], shuffled[n_train : n_train + n_val]
