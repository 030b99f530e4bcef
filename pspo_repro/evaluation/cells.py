"""The evaluation cell, the one record of a (run, dataset, temperature) sweep point: its schema, grader version,
file names and partial shards (docs/architecture.md "Evaluation cell JSON").

``results/eval/{model}/{method}/seed{seed}[-{tag}]/{dataset}/T{t:.1f}.json`` holds the settings header, the
per-prompt rows and the metrics; beside it ``T{t:.1f}.completions.jsonl.gz`` (every sample) and, while the
cell is unfinished, ``T{t:.1f}.partial.jsonl`` (the header, then one finished prompt per line, appended with
fsync). The evaluator writes cells through this module and the tables read them back through it
(``analysis.results_io``); no other module names a cell's files.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import logging
import os
from pathlib import Path
from typing import Any

from pspo_repro.common.atomic import atomic_open
from pspo_repro.common.paths import results_dir
from pspo_repro.common.safe_paths import results_path, seed_folder, tree_files
from pspo_repro.data.problems import Problem

log = logging.getLogger("pspo_repro.evaluation.evaluator")


class CellError(ValueError):
    """A finished cell that cannot be reused: unreadable, or written with other settings (one line)."""


SCHEMA_VERSION = 1
# Bumped whenever grading changes what a sample scores, so a partial shard or final cell graded by another
# version does not match (the header differs) and no cell mixes two graders (docs/evaluation.md, "Grader
# versions", says what each version changed).
GRADER_VERSION = 3
# Only a cell holding a list gold (``answer_kind`` "list", MATH's "70,110") grades differently from
# GRADER_VERSION, so only such a cell carries this one: every other cell, committed ones included, stays valid.
LIST_GRADER_VERSION = 4
# The raw completions beside a cell's JSON (``T0.8.json`` -> ``T0.8.completions.jsonl.gz``); the tables
# read its golds for cells written before per-prompt ``authors_gold`` existed (analysis.results_io).
COMPLETIONS_SUFFIX = ".completions.jsonl.gz"
# The cell files under an ``eval/`` folder: every JSON there is read as a cell (shards and completions are
# .jsonl), so a stray or misnamed file is refused by the readers, never passed over.
CELL_PATTERN = "*.json"


def grader_version(problems: list[Problem]) -> int:
    """The grading version a cell over ``problems`` is graded with (``GRADER_VERSION``, or
    ``LIST_GRADER_VERSION`` when a row's gold is a list)."""
    return LIST_GRADER_VERSION if any(p.answer_kind == "list" for p in problems) else GRADER_VERSION


def cell_name(temperature: float) -> str:
    """A cell's file name stem: ``T0.8`` (one decimal: the settings check refuses a temperature it cannot hold)."""
    return f"T{temperature:.1f}"


def cell_folder(model: str, method: str, seed: int, tag: str, dataset: str) -> Path:
    """``results/eval/{model}/{method}/seed{seed}[-tag]/{dataset}/``: every component checked by
    ``safe_paths``' name rule and the folder proven to lie under ``results/eval`` (UnsafePathError)."""
    return results_path(
        results_dir() / "eval",
        ("model", model),
        ("method", method),
        ("seed folder", seed_folder(seed, tag)),
        ("dataset", dataset),
    )


def cell_paths(folder: Path, temperature: float) -> dict[str, Path]:
    """The final JSON, the completions and the partial shard of one cell."""
    stem = cell_name(temperature)
    return {
        "json": folder / f"{stem}.json",
        "completions": folder / f"{stem}{COMPLETIONS_SUFFIX}",
        "partial": folder / f"{stem}.partial.jsonl",
        # Beside the dataset folder, so the cell folder holds only results; never deleted (unlinking a
        # lock file another process waits on would let a third one take a fresh lock at once).
        "lock": folder.parent / ".locks" / f"{folder.name}.{stem}.lock",
    }


def completions_path(cell_file: str | Path) -> Path:
    """The raw completions beside an evaluation cell (``T0.8.json`` -> ``T0.8.completions.jsonl.gz``)."""
    path = Path(cell_file)
    return path.with_name(f"{path.stem}{COMPLETIONS_SUFFIX}")


def cell_files(eval_root: Path) -> list[Path]:
    """The final cell files under ``eval_root`` (the ``eval/`` folder of a results tree), sorted; a symlink
    out of that tree on the way is refused (``safe_paths.tree_files``: UnsafePathError naming it)."""
    return tree_files(eval_root.parent, eval_root, CELL_PATTERN)


def rows_sha256(problems: list[Problem]) -> str:
    """Hash of the problem ids used, in order: two cells compare only if they used the same rows."""
    return hashlib.sha256("\n".join(p.id for p in problems).encode()).hexdigest()


def n_for(temperature: float, n_samples: int) -> int:
    """One sample at T = 0 (greedy), ``n_samples`` above."""
    return 1 if temperature == 0 else n_samples


def per_prompt_row(record: dict[str, Any]) -> dict[str, Any]:
    """Per-prompt counts and per-sample lists for the result JSON (enough to recompute every metric)."""
    from pspo_repro.evaluation import metrics  # numpy: only where a cell is written
    from pspo_repro.evaluation.metrics import majority_vote

    s = record["samples"]
    keys = [x["answer_key"] for x in s]
    n = len(s)
    row = {
        "id": record["id"],
        "n": n,
        "reward_correct": sum(x["reward_correct"] for x in s),
        "true_correct": sum(x["true_correct"] for x in s),
        # authors_correct: the authors' reward > 0.5, how their evaluation counts a sample correct.
        "authors_correct": sum(float(x["reward"]) > 0.5 for x in s),
        "authors_reward_mean": sum(float(x["reward"]) for x in s) / n,
        # reward_maj: the most frequent final answer (ties: first seen; no answer never wins) is reward-correct.
        "reward_maj": int(majority_vote(keys, [bool(x["reward_correct"]) for x in s])),
        # true_maj: more than half of the samples contain the gold somewhere.
        "true_maj": int(2 * sum(x["true_correct"] for x in s) > n),
        "mean_length": sum(len(x["token_ids"]) for x in s) / n,
        **metrics.sample_lists(s),
        "timeouts": sum(x.get("timed_out", 0) for x in s),
    }
    # The gold string the authors' reward read: tables drop the rows whose gold their extractor cannot
    # parse from the paper-comparable columns, as their maths_plots.py does.
    gold = record.get("authors_gold") or record.get("gold")
    if gold is not None:
        row["authors_gold"] = gold
    errors = sorted({x["grading_error"] for x in s if x.get("grading_error")})
    if errors:
        row["grading_error"] = errors[0]
    return row


# Header keys a cell carries only when they are not the default, so that older cells stay valid; a reuse check
# compares them both ways (absent on both, or equal).
OPTIONAL_HEADER_KEYS = ("source", "numerics")


def cell_header(identity: dict[str, Any], dataset: str, problems: list[Problem], temperature: float,
                settings: dict[str, Any]) -> dict[str, Any]:  # fmt: skip
    """Settings a cell's samples depend on: a partial shard or final file must match them to be reused.
    ``identity``: model, method, seed, tag and checkpoint; ``settings``: split, limit, top_p, top_k,
    max_new_tokens, n_samples (per prompt at T > 0), sampling_seed, prompt_template, backend and the optional
    keys (``OPTIONAL_HEADER_KEYS``), recorded only when set: ``source`` for a cell read from a named source,
    ``numerics`` for a cell of other numerics than its backend's default."""
    return {
        "schema_version": SCHEMA_VERSION,
        "grader": grader_version(problems),
        **{k: identity[k] for k in ("model", "method", "seed", "tag", "checkpoint")},
        "dataset": dataset,
        "split": settings["split"],
        "limit": settings["limit"],
        "num_prompts": len(problems),
        "rows_sha256": rows_sha256(problems),
        "temperature": temperature,
        **{k: settings[k] for k in ("top_p", "top_k", "max_new_tokens")},
        "n_samples": n_for(temperature, settings["n_samples"]),
        **{k: settings[k] for k in ("sampling_seed", "prompt_template", "backend")},
        **{k: settings[k] for k in OPTIONAL_HEADER_KEYS if settings.get(k)},
    }


def final_record(header: dict[str, Any], records: list[dict[str, Any]], **fields: Any) -> dict[str, Any]:
    """A finished cell: its ``header``, the per-prompt rows of its prompt ``records`` (in row order), their
    metrics and the other ``fields`` (run_dir, config, versions, git_sha, and optionally provisional and
    foreign_checkpoint)."""
    from pspo_repro.evaluation import metrics

    per_prompt = [per_prompt_row(r) for r in records]
    return {**header, **fields, "per_prompt": per_prompt, "metrics": metrics.cell_metrics(per_prompt)}


def final_matches(path: Path, header: dict[str, Any]) -> bool:
    """True when the finished cell at ``path`` was written with ``header``'s settings; CellError naming the file
    when it is unreadable or holds other settings."""
    try:
        existing = json.loads(path.read_bytes().decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise CellError(
            f"{path}: unreadable result file ({exc}); delete it to evaluate the cell again"
        ) from None
    if not isinstance(existing, dict):
        raise CellError(f"{path}: not a result file (a JSON {type(existing).__name__}); delete it")
    keys = [*header, *(k for k in OPTIONAL_HEADER_KEYS if k not in header)]
    differing = [k for k in keys if existing.get(k) != header.get(k)]
    if differing:
        raise CellError(
            f"{path} exists with different settings ({', '.join(differing)}); delete it or evaluate under another tag"
        )
    return True


# ---------------------------------------------------------------- partial shards and completions


def read_partial(path: Path, header: dict[str, Any], wanted: set[str]) -> dict[str, dict[str, Any]]:
    """Finished prompt records from a partial shard, deduplicated by id (first wins).

    A shard written under different settings is discarded (it would mix incompatible samples); a torn
    last line (a kill mid-write) is dropped.
    """
    if not path.is_file():
        return {}
    lines = []
    for raw in path.read_bytes().splitlines():
        try:
            lines.append(raw.decode("utf-8"))
        except UnicodeDecodeError:  # damaged bytes: like a torn line, that record is redone
            lines.append("")
    try:
        first = json.loads(lines[0]) if lines else None
    except json.JSONDecodeError:
        first = None
    if not isinstance(first, dict) or first.get("header") != header:
        log.warning("%s: written under other settings or unreadable; starting this cell afresh", path)
        path.unlink()
        return {}
    done: dict[str, dict[str, Any]] = {}
    for line in lines[1:]:
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            continue  # only the last line can be torn: we append whole lines and fsync each chunk
        if isinstance(rec, dict) and rec.get("id") in wanted and rec["id"] not in done:
            done[rec["id"]] = rec
    return done


def append_records(path: Path, header: dict[str, Any], records: list[dict[str, Any]]) -> None:
    """Append finished records in one write and fsync (the header line first for a new shard)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fresh = not path.exists() or path.stat().st_size == 0
    blob = "".join(json.dumps(r, sort_keys=True) + "\n" for r in records)
    if fresh:
        blob = json.dumps({"header": header}, sort_keys=True) + "\n" + blob
    with open(path, "a", encoding="utf-8") as fh:
        if not fresh and fh.tell() > 0:
            # A torn last line from a kill: terminate it so our records start on their own line.
            with open(path, "rb") as rd:
                rd.seek(-1, os.SEEK_END)
                if rd.read(1) != b"\n":
                    blob = "\n" + blob
        fh.write(blob)
        fh.flush()
        os.fsync(fh.fileno())


def write_completions(path: Path, records: list[dict[str, Any]]) -> None:
    """The raw completions as gzip JSONL, byte-deterministic (mtime 0, no file name in the header)."""
    with atomic_open(path, "wb") as raw:
        with gzip.GzipFile(fileobj=raw, mode="wb", mtime=0, filename="") as gz:
            for rec in records:
                gz.write((json.dumps(rec, sort_keys=True) + "\n").encode())


def read_completions(path: Path) -> list[Any]:
    """The lines of a completions file, each parsed (OSError: not gzip; EOFError: cut; ValueError: bad JSON or
    UTF-8)."""
    with gzip.open(path, "rt", encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]
