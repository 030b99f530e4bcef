"""Dataset loaders: benchmarks and training splits as ``Problem`` records.

Rows come from ``PSPO_DATA_DIR`` (the offline layout of ``../shared/data/README.md``) when it is set,
else from the Hugging Face hub through ``datasets``. Each dataset is one entry of ``DATASETS``; another
module can add one with ``register_dataset``. The record types live in ``problems``; the synthetic task's
spec comes from ``synthetic`` and is registered here, so neither of those imports this module.

Errors are ``DataError`` (a ``ValueError``) with a one-line message naming what was tried.
"""

from __future__ import annotations

import contextlib
import json
import logging
import re
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import numpy as np

from pspo_repro.common.hub import offline_unless_reachable
from pspo_repro.common.names import did_you_mean
from pspo_repro.common.paths import data_dir, data_dir_hint
from pspo_repro.data import synthetic
from pspo_repro.data.problems import DataError, DatasetSpec, Problem, RowFn, list_items, numeric_gold
from pspo_repro.data.prompts import CHOICE_LETTERS, multiple_choice_question, yes_no_question

log = logging.getLogger(__name__)

DATASETS: dict[str, DatasetSpec] = {}


def register_dataset(name: str, spec: DatasetSpec) -> DatasetSpec:
    """Add a dataset to the registry; a duplicate name is an error (no silent overwrite)."""
    if name in DATASETS:
        raise ValueError(f"dataset {name!r} is already registered")
    DATASETS[name] = spec
    return spec


def get_spec(name: str) -> DatasetSpec:
    """The registry entry for ``name``; an unknown name lists the allowed ones."""
    if name not in DATASETS:
        raise DataError(
            f"unknown dataset {name!r}; {did_you_mean(name, DATASETS)}allowed: {', '.join(sorted(DATASETS))}"
        )
    return DATASETS[name]


# ---------------------------------------------------------------- gold-answer helpers


def _field(row: dict[str, Any], key: str, source: str, line: int, text: bool = True) -> Any:
    """``row[key]``, present and non-blank; ``text``: it must be a string (a number or a list there is a
    malformed row, named with its file and line, not a TypeError later)."""
    value = row.get(key)
    if value is None or (isinstance(value, str) and not value.strip()):
        raise DataError(f"{source}:{line}: row has no {key!r} field")
    if text and not isinstance(value, str):
        raise DataError(
            f"{source}:{line}: {key!r} must be a string, got {type(value).__name__} {value!r:.40}"
        )
    return value


def last_boxed(text: str) -> str | None:
    """Content of the last ``\\boxed{...}`` (or ``\\fbox{...}``) in ``text``, with brace matching.

    ``\\boxed 2`` (no braces, a few MATH train rows) yields the token after it.
    """
    best = None
    for m in re.finditer(r"\\(?:boxed|fbox)(?:\s*\{|\s+([^\s$]+))", text):
        if m.group(1) is not None:
            best = m.group(1)
            continue
        depth, i = 1, m.end()
        while i < len(text) and depth:
            depth += {"{": 1, "}": -1}.get(text[i], 0)
            i += 1
        if depth == 0:
            best = text[m.end() : i - 1]
    return best.strip() if best is not None else None


_ASDIV_NUM = re.compile(r"^\s*([-+]?[\d,]*\.?\d+(?:/\d+)?)\s*(?:\(.*\))?\s*$")
# A sign before a value in parentheses: "-(1/3)" is -1/3 (one ASDiv row; stripping "(1/3)" as a unit left "-").
_ASDIV_SIGNED = re.compile(r"^\s*([-+])\s*\(\s*(\d+(?:\.\d+)?(?:/\d+)?)\s*\)\s*$")
# A trailing unit: words in parentheses ("(years old)"); parentheses holding a digit are a value, not a unit.
_ASDIV_UNIT = re.compile(r"\s*\([^()\d]*\)\s*$")


# A MATH gold that is a list of answers ("Enter all the solutions, separated by commas": ``70,110``, ``-4, 4``)
# is graded as a list (``answer_kind`` "list": the same answers in any order), never as one number. The one
# ambiguous writing, digits grouped in threes after a comma (``70,110``, ``58,500``), is a list only where
# the problem asks for several answers separated by commas; an ordered pair or triple written without
# brackets stays one LaTeX answer (math-verify, order kept).
_THOUSANDS_GOLD = re.compile(r"^-?(?:\\\$)?\d{1,3}(?:,\d{3})+(?:\.\d+)?$")
_ASKS_FOR_LIST = re.compile(r"separated by commas?|comma-separated|\bcomma\b", re.I)
_ORDERED = re.compile(r"\bordered\b", re.I)


def math_answer_kind(question: str, answer: str) -> str:
    """``list`` for a MATH gold that holds several answers (``list_items``), else ``latex``."""
    if len(list_items(answer)) < 2 or _ORDERED.search(question):
        return "latex"
    if _THOUSANDS_GOLD.match(answer.strip()) and not _ASKS_FOR_LIST.search(question):
        return "latex"  # 58,500: one number written with a thousands separator
    return "list"


# ---------------------------------------------------------------- row converters


def _gsm8k_row(split: str) -> RowFn:
    def row_fn(row: dict[str, Any], source: str, line: int) -> Problem:
        question = _field(row, "question", source, line)
        solution = _field(row, "answer", source, line)
        if "####" not in solution:
            raise DataError(f"{source}:{line}: 'answer' field has no '####' final answer")
        pid = f"gsm8k/{split}/{line - 1}"
        gold = numeric_gold(solution.rsplit("####", 1)[1].strip().replace(",", ""), pid, source, line)
        return Problem(pid, question, gold, "numeric", solution)

    return row_fn


def _math_row(prefix: str, skip_unanswered: bool = False) -> RowFn:
    # skip_unanswered: MATH train has an upstream row whose solution ends in an empty \boxed{}
    # (line 5342); a training split drops such rows with a warning, an evaluation split never does.
    def row_fn(row: dict[str, Any], source: str, line: int) -> Problem | None:
        problem = _field(row, "problem", source, line)
        solution = row.get("solution") or None
        answer = row.get("answer")
        if answer is None or not str(answer).strip():
            answer = last_boxed(solution) if solution else None
            if not answer:
                if skip_unanswered and solution:
                    log.warning("%s:%d: no gold answer in 'solution'; row skipped", source, line)
                    return None
                raise DataError(
                    f"{source}:{line}: row has no 'answer' field and no \\boxed{{}} in 'solution'"
                )
        # unique_id is null on a few MATH train rows: the line number is the fallback id.
        uid = row.get("unique_id") or f"line{line}"
        answer = str(answer).strip()
        return Problem(f"{prefix}/{uid}", problem, answer, math_answer_kind(problem, answer), solution)

    return row_fn


def _svamp_row(row: dict[str, Any], source: str, line: int) -> Problem:
    body = _field(row, "Body", source, line)
    question = _field(row, "Question", source, line)
    answer = _field(row, "Answer", source, line, text=False)
    rid = row.get("ID") or f"line{line}"
    return Problem(
        f"svamp/{rid}",
        f"{body.strip()} {question.strip()}",
        numeric_gold(answer, f"svamp/{rid}", source, line),
        "numeric",
        row.get("Equation"),
        authors_gold=str(answer),
    )


def _svamp_paper_row(row: dict[str, Any], source: str, line: int) -> Problem:
    """ChilleD/SVAMP test (300 rows) as the authors' code reads it: prompt ``question_concat``."""
    p = _svamp_row(row, source, line)
    question = row.get("question_concat") or p.question
    return Problem(p.id.replace("svamp/", "svamp_paper/"), question, p.answer, "numeric", p.solution,
                   authors_gold=p.authors_gold)  # fmt: skip


def _asdiv_row(row: dict[str, Any], source: str, line: int) -> Problem:
    body = _field(row, "body", source, line)
    question = _field(row, "question", source, line)
    raw = str(_field(row, "answer", source, line, text=False))
    rid = row.get("idx", row.get("id", line - 1))
    m = _ASDIV_NUM.match(raw)
    signed = _ASDIV_SIGNED.match(raw)
    # "9 (apples)" -> numeric 9. About 6% of ASDiv answers (123 of 2215) are not numbers ("Yes", "3:30 p.m.",
    # "Mrs. Hilt"); they are kept (so the set has all its rows) and graded as text (grading: normalised
    # words, never math-verify, which would read "3:30" as a ratio and "6th" as 6*t*h).
    if m:
        answer, kind = m.group(1).replace(",", ""), "numeric"
    elif signed:
        answer, kind = signed.group(1).replace("+", "") + signed.group(2), "numeric"
    else:
        answer, kind = _ASDIV_UNIT.sub("", raw).strip(), "text"
        if not any(c.isalnum() for c in answer):  # nothing left to grade against: a reader bug, not a gold
            raise DataError(f"{source}:{line}: answer {raw!r} has no value once its unit is removed")
    return Problem(
        f"asdiv/{rid}",
        f"{body.strip()} {question.strip()}",
        answer,
        kind,
        row.get("formula"),
        authors_gold=raw,
    )


def _asdiv_paper_row(row: dict[str, Any], source: str, line: int) -> Problem:
    """EleutherAI/asdiv validation as the authors' code reads it: prompt ``body + " " + question`` (not
    stripped: 153 rows differ from ``asdiv``'s), all 2305 rows. A multi-answer row ("5 (years old); 15
    (years old); 20 (years old)", 90 rows) is graded against its LAST number, as their reward does with
    that gold string (their extractor takes the last number of a text without '####')."""
    p = _asdiv_row(row, source, line)
    raw = str(row["answer"])
    question = f"{row['body']} {row['question']}"
    if ";" in raw:
        numbers = re.findall(r"[-+]?\d[\d,]*(?:\.\d+)?(?:/\d+)?", raw)
        if numbers:
            return Problem(p.id.replace("asdiv/", "asdiv_paper/"), question, numbers[-1].replace(",", ""),
                           "numeric", p.solution, authors_gold=raw)  # fmt: skip
    return Problem(p.id.replace("asdiv/", "asdiv_paper/"), question, p.answer, p.answer_kind, p.solution,
                   authors_gold=raw)  # fmt: skip


def _gsm_hard_row(row: dict[str, Any], source: str, line: int) -> Problem:
    question = _field(row, "input", source, line)
    target = row.get("target")
    if target is None:
        raise DataError(f"{source}:{line}: row has no 'target' field")
    pid = f"gsm_hard/{line - 1}"
    return Problem(pid, question, numeric_gold(target, pid, source, line), "numeric", row.get("code"))


def _mmlu_row(row: dict[str, Any], source: str, line: int) -> Problem:
    """cais/mmlu's schema: ``question``, ``subject``, ``choices`` (2-10 strings), ``answer`` (the choice's index,
    0-based). The gold is the choice's letter; the prompt lists the lettered choices."""
    question = _field(row, "question", source, line)
    choices = row.get("choices")
    if (
        not isinstance(choices, list | tuple)
        or not 2 <= len(choices) <= len(CHOICE_LETTERS)
        or not all(isinstance(c, str) for c in choices)
    ):
        raise DataError(f"{source}:{line}: 'choices' must be a list of 2 to 10 strings, got {choices!r:.60}")
    answer = row.get("answer")
    if isinstance(answer, bool) or not isinstance(answer, int) or not 0 <= answer < len(choices):
        raise DataError(
            f"{source}:{line}: 'answer' must be the index of the right choice, 0 to {len(choices) - 1}, got {answer!r:.40}"
        )
    subject = str(row.get("subject") or "none")
    pid = f"mmlu/{subject}/{line - 1}"
    return Problem(pid, multiple_choice_question(question, list(choices)), CHOICE_LETTERS[answer], "choice")


def _boolq_row(row: dict[str, Any], source: str, line: int) -> Problem:
    """google/boolq's schema: ``question``, ``passage``, ``answer`` (a boolean). The gold is "yes" or "no"."""
    question = _field(row, "question", source, line)
    passage = _field(row, "passage", source, line)
    answer = row.get("answer")
    if not isinstance(answer, bool):
        raise DataError(f"{source}:{line}: 'answer' must be true or false, got {answer!r:.40}")
    return Problem(
        f"boolq/{line - 1}", yes_no_question(passage, question), "yes" if answer else "no", "choice"
    )


# ---------------------------------------------------------------- hub loaders (need network; untested here)


def _hub(path: str, name: str | None, split: str) -> Callable[[], Iterable[dict[str, Any]]]:
    def load() -> Iterable[dict[str, Any]]:
        import datasets  # lazy: only the hub path needs it

        return datasets.load_dataset(path, name, split=split)

    return load


def _hub_math_full(split: str) -> Callable[[], Iterable[dict[str, Any]]]:
    subjects = [
        "algebra",
        "counting_and_probability",
        "geometry",
        "intermediate_algebra",
        "number_theory",
        "prealgebra",
        "precalculus",
    ]

    def load() -> Iterable[dict[str, Any]]:
        import datasets

        for subject in subjects:
            yield from datasets.load_dataset("EleutherAI/hendrycks_math", subject, split=split)

    return load


register_dataset(
    "gsm8k",
    DatasetSpec(
        files={"test": "gsm8k/test.jsonl", "train": "gsm8k/train.jsonl"},
        rows={"test": _gsm8k_row("test"), "train": _gsm8k_row("train")},
        hub={"test": _hub("openai/gsm8k", "main", "test"), "train": _hub("openai/gsm8k", "main", "train")},
        hub_names={"test": "openai/gsm8k", "train": "openai/gsm8k"},
    ),
)
register_dataset(
    "math500",
    DatasetSpec(
        files={"test": "math/math500_test.jsonl"},
        rows={"test": _math_row("math500")},
        hub={"test": _hub("HuggingFaceH4/MATH-500", None, "test")},
        hub_names={"test": "HuggingFaceH4/MATH-500"},
    ),
)
register_dataset(
    "math",
    DatasetSpec(
        files={"test": "math/math_test_full.jsonl", "train": "math/math_train_full.jsonl"},
        rows={"test": _math_row("math"), "train": _math_row("math", skip_unanswered=True)},
        hub={"test": _hub_math_full("test"), "train": _hub_math_full("train")},
        hub_names={"test": "EleutherAI/hendrycks_math", "train": "EleutherAI/hendrycks_math"},
    ),
)
register_dataset(
    "svamp",
    DatasetSpec(
        files={"test": "svamp/test.jsonl"},
        rows={"test": _svamp_row},
        # The hub copy is ChilleD/SVAMP (300 test rows); the offline file is the full 1000.
        hub={"test": _hub("ChilleD/SVAMP", None, "test")},
        hub_names={"test": "ChilleD/SVAMP"},
    ),
)
register_dataset(
    "asdiv",
    DatasetSpec(
        files={"test": "asdiv/test.jsonl"},
        rows={"test": _asdiv_row},
        # The hub copy (EleutherAI/asdiv validation, 2305 rows) is the authors' choice; offline is 2215.
        hub={"test": _hub("EleutherAI/asdiv", None, "validation")},
        hub_names={"test": "EleutherAI/asdiv"},
    ),
)
# The authors' exact evaluation sets (../shared/data/README.md): compare with the paper's SVAMP and ASDiv
# columns on these; ``svamp`` (1000 rows) and ``asdiv`` (2215 rows) stay the default for our own numbers.
register_dataset(
    "svamp_paper",
    DatasetSpec(
        files={"test": "svamp/svamp_chilled_test.jsonl"},
        rows={"test": _svamp_paper_row},
        hub={"test": _hub("ChilleD/SVAMP", None, "test")},
        hub_names={"test": "ChilleD/SVAMP"},
    ),
)
register_dataset(
    "asdiv_paper",
    DatasetSpec(
        files={"test": "asdiv/asdiv_eleuther_validation.jsonl"},
        rows={"test": _asdiv_paper_row},
        hub={"test": _hub("EleutherAI/asdiv", None, "validation")},
        hub_names={"test": "EleutherAI/asdiv"},
    ),
)
register_dataset(
    "gsm_hard",
    DatasetSpec(
        files={"test": "gsm_hard/gsmhardv2.jsonl"},
        rows={"test": _gsm_hard_row},
        hub={"test": _hub("reasoning-machines/gsm-hard", None, "train")},
        hub_names={"test": "reasoning-machines/gsm-hard"},
    ),
)

# Knowledge outside math (issue 37 item 4): before and after RL on the same prompts, in the same tables. Neither
# ships in the offline data; point the evaluator at a hub id or a local file of the hub's schema with
# ``eval.sources.<name>`` (docs/evaluation_sets.md, "Knowledge outside math").
register_dataset(
    "mmlu",
    DatasetSpec(
        files={"test": "mmlu/test.jsonl"},
        rows={"test": _mmlu_row},
        hub={"test": _hub("cais/mmlu", "all", "test")},  # 14,042 questions, 57 subjects
        hub_names={"test": "cais/mmlu"},
    ),
)
register_dataset(
    "boolq",
    DatasetSpec(
        files={"test": "boolq/validation.jsonl"},
        rows={"test": _boolq_row},
        # BoolQ's test labels are not public: its labelled evaluation rows are the 3,270 of "validation".
        hub={"test": _hub("google/boolq", None, "validation")},
        hub_names={"test": "google/boolq"},
        hub_splits={"test": "validation"},
    ),
)


# ---------------------------------------------------------------- reading


def read_jsonl(path: Path) -> list[tuple[int, dict[str, Any]]]:
    """``(line_number, row)`` for each non-blank line; a malformed line names the file and line."""
    rows = []
    with open(path, "rb") as fh:
        for lineno, raw in enumerate(fh, start=1):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise DataError(f"{path}:{lineno}: not UTF-8 text (byte {exc.start}: {exc.reason})") from None
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as exc:
                raise DataError(f"{path}:{lineno}: malformed JSON row ({exc.msg})") from None
            if not isinstance(row, dict):
                raise DataError(f"{path}:{lineno}: row is not a JSON object")
            rows.append((lineno, row))
    return rows


_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+(?::[\w.-]+)?$")
SOURCE_SUFFIXES = (".jsonl", ".parquet")


def read_parquet(path: Path) -> list[tuple[int, dict[str, Any]]]:
    """``(row_number, row)`` for each row of a parquet file (numbered from 1, as ``read_jsonl``'s lines)."""
    import pyarrow.parquet as pq  # lazy: only a parquet source needs it

    try:
        rows = pq.read_table(path).to_pylist()
    except Exception as exc:  # pyarrow's errors are long and of many types: one line names the file
        raise DataError(f"{path}: not a readable parquet file ({type(exc).__name__})") from None
    return list(enumerate(rows, start=1))


def read_source(spec: DatasetSpec, split: str, source: str) -> tuple[list[tuple[int, dict[str, Any]]], str]:
    """The rows of ``source`` and a name for messages: a local ``.jsonl``/``.parquet`` file of the dataset's
    schema (its rows are the split), or a hub id ``owner/name[:config]`` read with ``datasets.load_dataset``
    (the split the spec maps ``split`` to)."""
    path = Path(source).expanduser()
    if path.is_file():
        if path.suffix not in SOURCE_SUFFIXES:
            raise DataError(f"source {source}: a local file must be .jsonl or .parquet")
        return (read_parquet(path) if path.suffix == ".parquet" else read_jsonl(path)), str(path)
    if path.suffix in SOURCE_SUFFIXES or source.startswith(("/", ".", "~")):
        raise DataError(f"source file not found: {source}")
    if not _HUB_ID.match(source):
        raise DataError(
            f"source {source!r} is neither a local .jsonl/.parquet file nor a hub id (owner/name or owner/name:config)"
        )
    import datasets  # lazy: only the hub path needs it

    hub_id, _, config = source.partition(":")
    with hub_errors(source):
        rows = datasets.load_dataset(hub_id, config or None, split=spec.hub_splits.get(split, split))
        return [(i + 1, dict(row)) for i, row in enumerate(rows)], source


@contextlib.contextmanager
def hub_errors(hub_id: str, hint: str = ""):
    """A hub read that fails (offline, unreachable, no such dataset: ``datasets`` and ``huggingface_hub`` raise
    many types) as one DataError line naming the hub id, the cause and ``hint``; a DataError passes through."""
    offline_unless_reachable()  # no network: fail at once, not after 30 s of retries
    try:
        yield
    except DataError:
        raise
    except Exception as exc:
        cause = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise DataError(f"cannot read {hub_id} from the hub: {cause}{'; ' + hint if hint else ''}") from None


def load_problems(name: str, split: str = "test", source: str | None = None) -> list[Problem]:
    """All rows of ``name``/``split`` as Problems: from ``source`` when given (``read_source``: a local
    file or a hub id), else from PSPO_DATA_DIR when set, else from the hub."""
    spec = get_spec(name)
    if split not in spec.rows:
        raise DataError(f"dataset {name!r} has no split {split!r}; splits: {', '.join(sorted(spec.rows))}")
    row_fn = spec.rows[split]
    root = data_dir()
    if source is not None:
        rows, source = read_source(spec, split, str(source))
        problems = [p for p in (row_fn(row, source, lineno) for lineno, row in rows) if p is not None]
    elif root is not None:
        if split not in spec.files:
            raise DataError(
                f"dataset {name!r} split {split!r} has no offline file under PSPO_DATA_DIR={root}"
            )
        path = root / spec.files[split]
        if path.is_file():
            problems = [row_fn(row, str(path), lineno) for lineno, row in read_jsonl(path)]
            problems = [p for p in problems if p is not None]
            source = str(path)
        elif spec.generated and split in spec.hub:  # defined by code: generate it in memory instead
            source = spec.hub_names.get(split, name)
            problems = [row_fn(dict(row), source, i + 1) for i, row in enumerate(spec.hub[split]())]
        else:
            hint = f"; or name a local file or hub id with eval.sources.{name}" if not spec.generated else ""
            raise DataError(f"dataset file not found: {path} (PSPO_DATA_DIR={root}){hint}")
    else:
        if split not in spec.hub:
            raise DataError(f"dataset {name!r} split {split!r} needs PSPO_DATA_DIR (no hub source)")
        source = spec.hub_names.get(split, name)
        with hub_errors(source, data_dir_hint()):
            problems = [row_fn(dict(row), source, i + 1) for i, row in enumerate(spec.hub[split]())]
        problems = [p for p in problems if p is not None]
    if not problems:
        raise DataError(f"dataset {name!r} split {split!r} is empty: {source}")
    ids = [p.id for p in problems]
    if len(set(ids)) != len(ids):
        raise DataError(f"dataset {name!r} split {split!r} has duplicate problem ids: {source}")
    return problems


def load_benchmark(
    name: str, split: str = "test", limit: int | None = None, source: str | None = None
) -> list[Problem]:
    """The evaluation rows of a benchmark, in file order; ``limit`` takes the first N; ``source`` a local
    file or hub id to read them from (``read_source``)."""
    if limit is not None and limit < 1:
        raise DataError(f"limit must be a positive integer or null, got {limit}")
    problems = load_problems(name, split, source)
    return problems[:limit] if limit is not None else problems


def load_train_val(
    name: str, seed: int, n_train: int = 7000, n_val: int | None = None
) -> tuple[list[Problem], list[Problem]]:
    """Training and validation splits: the train split shuffled with ``seed``, first ``n_train`` rows train.

    Validation is ``range(n_train, len - 1)`` by default, as in the authors' code (472 GSM8K rows: it
    drops the last one); ``n_val`` caps it. The permutation is ``np.random.default_rng(seed)``'s, which
    is what ``datasets.Dataset.shuffle(seed=seed)`` uses, so the split matches the authors' rows.

    A dataset with a fixed validation split (``DatasetSpec.val_split``, e.g. synthetic) takes its
    validation rows from that split in file order (the same rows for every seed) and only shuffles
    the train split, so RL never validates on rows an SFT stage was fitted on.
    """
    problems = load_problems(name, "train")
    spec = get_spec(name)
    if spec.val_split is not None:
        if not 0 < n_train <= len(problems):
            raise DataError(f"n_train={n_train} must be in (0, {len(problems)}] for {name!r}")
        order = np.random.default_rng(seed).permutation(len(problems))
        val = load_problems(name, spec.val_split)
        return [problems[i] for i in order[:n_train]], (val[:n_val] if n_val is not None else val)
    if not 0 < n_train < len(problems) - 1:
        raise DataError(f"n_train={n_train} must be in (0, {len(problems) - 1}) for {name!r}")
    order = np.random.default_rng(seed).permutation(len(problems))
    shuffled = [problems[i] for i in order]
    val = shuffled[n_train : len(shuffled) - 1]
    if n_val is not None:
        val = val[:n_val]
    return shuffled[:n_train], val


# The mini-reproduction's code-defined task (its spec generates the rows when no file is there).
register_dataset("synthetic", synthetic.dataset_spec())
# Its held-out skill: trained in SFT, never in RL, evaluated before and after RL (docs/mini.md).
register_dataset("synthetic_heldout", synthetic.dataset_spec("synthetic_heldout"))
