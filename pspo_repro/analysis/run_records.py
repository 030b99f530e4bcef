"""The one reader of training run records (``run.json``, ``metrics.jsonl``) for every analysis command.

aggregate (through ``results_io.load_runs``), regime, claims and the leaderboard (through ``claims.Records``,
which keeps each ``RunRecord`` for their per-run statistics, knobs and step norms) and the tuning selection
(``tuning.select``) read runs here and nowhere else, so each gets the same checks, as evaluation cells get
``results_io.cell_problem``'s (tests/analysis/test_one_door.py watches every command's opens). The files are
untrusted (hand-edited, cut by a kill, written by another version): a problem that would change a table
number without a word raises :class:`~pspo_repro.analysis.results_io.ResultsError` in one line naming the
file (and line) and the field:

- metrics.jsonl: a line that is blank, not JSON (a torn line: tolerated as the last line of a run that is
  not finished, and named), or not an object; a ``step`` missing, not an integer, negative, repeated or
  lower than the line before's (training appends in step order; the tables read first and last values by
  line); a ``num_tokens`` that falls (a running total); a value that is not a finite number or null
  (``NaN``, ``Infinity``, text, a boolean, a list: training writes a non-finite value as null, so a NaN
  gradient norm is an edit, never "not clipped");
- run.json: an identity that disagrees with its folder (``run_dir.identity_problem``), a seed that is not
  an integer, a ``status`` other than running / finished / failed, a ``config``, ``config.method`` or
  ``config.trainer`` that is not a mapping, a ``config.trainer`` setting the tables read that training
  would refuse (``max_grad_norm`` negative, null, text or not finite; ``learning_rate`` not a number > 0;
  ``eval_steps`` not an integer >= 1 or null);
- a method folder that names no registered method (``conf/method/<name>.yaml``, the registry's names);
- a ``config.method.name`` that disagrees with the method folder;
- runs of another model merged into a row: a ``config.model`` that is not a mapping or whose ``name``
  disagrees with the model folder, or two runs under one ``runs/{model}/{method}/`` folder whose
  ``config.model`` names different base models (``model_key``: name, hub id, path, random init). They are
  refused, naming both files, rather than kept as rows of their own: every table keys a row by the model
  folder, so a second model has its own folder (``runs/{model}/``) and its own rows there.

A run whose status is ``failed`` is left out of every table (its runs row and its metrics alike, so seed
counts agree) and named in one line. A run.json that records no ``config.trainer.max_grad_norm`` (none is
written by training without one) is read as clipping off; the tables that read it name the run
(``RunRecord.norm_note``).
"""

from __future__ import annotations

import json
import math
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pspo_repro.analysis.result_files import ResultsError, checked_files
from pspo_repro.common.paths import CONF_DIR
from pspo_repro.common.run_folder import RunFolder, run_json
from pspo_repro.common.safe_paths import tree_files

RUN_STATUSES = ("running", "finished", "failed")
RUN_DIR_RE = re.compile(r"^seed(?P<seed>\d+)(?:-(?P<tag>.+))?$")


@dataclass(frozen=True)
class RunRecord:
    """One training run as read and checked: where it is, its identity, run.json and metrics lines."""

    folder: Path
    model: str
    method: str
    seed: int
    tag: str
    status: str  # "unknown" when there is no run.json (or it records none)
    info: dict[str, Any]  # run.json ({} when absent)
    rows: list[dict[str, Any]]  # metrics.jsonl, one checked object per line

    @property
    def max_grad_norm(self) -> float:
        """The gradient-norm clipping threshold it trained with (``inf``: no clipping, as 0 means, or none
        recorded)."""
        return max_grad_norm(self.info)

    def norm_note(self) -> str | None:
        """One line naming the run when its run.json records no ``config.trainer.max_grad_norm`` (read as no
        clipping: a norm-clipped share from it is a guess), else None."""
        if "max_grad_norm" in ((self.info.get("config") or {}).get("trainer") or {}):
            return None
        return (f"{run_json(self.folder)}: records no config.trainer.max_grad_norm; its norm-clipped share "
                "is read as clipping off")  # fmt: skip


def run_dirs(root: Path) -> list[Path]:
    """Training run folders under ``root/runs``: those holding a ``metrics.jsonl``; ResultsError when a
    name on the way is not UTF-8 or a symlink on the way leads out of ``root`` (``safe_paths.tree_files``)."""
    return checked_files(lambda: sorted(p.parent for p in tree_files(root, root / "runs", "metrics.jsonl")))


def registered_methods() -> list[str]:
    """The method names a run folder may have: ``conf/method/<name>.yaml`` (equal to the registry's keys,
    ``tests/methods/test_method_configs.py``), read without importing torch."""
    return sorted(p.stem for p in (CONF_DIR / "method").glob("*.yaml"))


def _is_num(x: Any) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x)


def info_problem(info: dict[str, Any]) -> str | None:
    """Why a run.json's fields cannot be read into a table (None: they can); the identity is
    ``run_dir.identity_problem``'s."""
    seed = info.get("seed")
    if seed is not None and (
        isinstance(seed, bool) or not (isinstance(seed, int) or (isinstance(seed, str) and seed.isdigit()))
    ):
        return f"seed must be a non-negative integer, got {seed!r}"
    status = info.get("status")
    if status is not None and status not in RUN_STATUSES:
        return f"status must be one of {', '.join(RUN_STATUSES)}, got {status!r}"
    config = info.get("config")
    if config is None:
        return None
    if not isinstance(config, dict):
        return f"config must be a mapping, got {type(config).__name__} {config!r}"
    for key in ("model", "method", "trainer"):
        if key in config and not isinstance(config[key], dict):
            return f"config.{key} must be a mapping, got {type(config[key]).__name__} {config[key]!r}"
    trainer = config.get("trainer") or {}
    norm = trainer.get("max_grad_norm", 0)
    if not (_is_num(norm) and norm >= 0):
        return f"config.trainer.max_grad_norm={norm!r} is not what training takes (a finite number >= 0)"
    lr = trainer.get("learning_rate", 1)
    if not (_is_num(lr) and lr > 0):
        return f"config.trainer.learning_rate={lr!r} is not what training takes (a finite number > 0)"
    every = trainer.get("eval_steps")
    if every is not None and (isinstance(every, bool) or not isinstance(every, int) or every < 1):
        return f"config.trainer.eval_steps={every!r} is not what training takes (an integer >= 1 or null)"
    return None


MODEL_KEYS = ("name", "hub_id", "path", "random_init")  # what tells one base model from another


def model_key(info: dict[str, Any], folder: Path) -> dict[str, Any] | None:
    """The base model a run trained from, as its run.json's ``config.model`` names it (``MODEL_KEYS``;
    None when it records none). A ``path`` inside the results root the run was trained under (run.json's
    ``run_dir``, else this folder's) is written ``<results root>/...``, so the same SFT base of runs made in
    two checkouts of the results compares equal (as ``run_dir.portable_identity`` does for a reopened run)."""
    model = (info.get("config") or {}).get("model")
    if not isinstance(model, dict) or not model:
        return None
    key = {k: model.get(k) for k in MODEL_KEYS}
    path = key["path"]
    if isinstance(path, str):
        trained = info.get("run_dir")
        for place in ([Path(trained)] if isinstance(trained, str) else []) + [folder]:
            if len(place.parents) >= 4 and place.parents[2].name == "runs":
                try:
                    key["path"] = f"<results root>/{Path(path).relative_to(place.parents[3]).as_posix()}"
                    break
                except ValueError:
                    continue
    return key


def check_one_model(runs: list[RunRecord]) -> None:
    """ResultsError naming two run.json files when runs under one ``runs/{model}/{method}/`` folder name
    different base models (``model_key``): merged into one row, their seeds would be averaged as one
    method's. Runs that record no ``config.model`` are not compared."""
    first: dict[Path, tuple[RunRecord, dict[str, Any]]] = {}
    for run in runs:
        key = model_key(run.info, run.folder)
        if key is None:
            continue
        seen = first.setdefault(run.folder.parent, (run, key))
        if seen[1] != key:
            differ = [k for k in MODEL_KEYS if seen[1][k] != key[k]]
            raise ResultsError(
                f"{run_json(seen[0].folder)} and {run_json(run.folder)}: runs of different base models "
                f"under one method folder ({'; '.join(f'config.model.{k} {seen[1][k]!r} vs {key[k]!r}' for k in differ)}), "
                f"which would be averaged into one row; file each model's runs under runs/<its model name>/"
            )


def max_grad_norm(info: dict[str, Any]) -> float:
    """``config.trainer.max_grad_norm`` of a checked run.json; ``inf`` when 0 or absent (no clipping)."""
    norm = ((info.get("config") or {}).get("trainer") or {}).get("max_grad_norm")
    return float(norm) if norm else math.inf


def read_info(folder: Path) -> dict[str, Any]:
    """The run.json of the run in ``folder``, read (``RunFolder``) and checked (``info_problem``); ResultsError
    naming the file and field."""
    path = run_json(folder)
    try:
        info = RunFolder(folder).load()
    except (OSError, ValueError) as exc:  # ValueError: bad JSON or bytes that are not UTF-8
        raise ResultsError(f"{path}: cannot read JSON ({exc})") from exc
    if not isinstance(info, dict):
        raise ResultsError(f"{path}: expected a JSON object, got {type(info).__name__}")
    if why := info_problem(info):
        raise ResultsError(f"{path}: {why}")
    return info


def _line_problem(obj: Any) -> str | None:
    if not isinstance(obj, dict):
        return f"a JSON {type(obj).__name__}, not an object"
    step = obj.get("step", None)
    if "step" not in obj:
        return "no 'step'"
    if isinstance(step, bool) or not isinstance(step, int) or step < 0:
        return f"step={step!r} is not an integer >= 0"
    tokens = obj.get("num_tokens")
    if tokens is not None and (isinstance(tokens, bool) or not isinstance(tokens, int) or tokens < 0):
        return f"num_tokens={tokens!r} is not an integer >= 0"
    for key, value in obj.items():
        if value is not None and not _is_num(value):
            return f"{key}={value!r} is not a finite number or null (training writes a value it could not compute as null)"
    return None


def read_metrics(path: Path, finished: bool = True, notes: list[str] | None = None) -> list[dict[str, Any]]:
    """The lines of a metrics.jsonl, each checked (module docstring); ResultsError ``<file>:<line>: ...``.

    A torn last line (a kill mid-append) is dropped, with a line in ``notes``, only when the run is not
    ``finished``: a finished run wrote every line whole (printed as a warning when ``notes`` is None)."""
    try:
        lines = path.read_text(encoding="utf-8").split("\n")
    except (OSError, UnicodeDecodeError) as exc:
        raise ResultsError(f"{path}: cannot read ({exc})") from None
    if lines and lines[-1] == "":
        lines.pop()  # the newline that ends the last line
    rows: list[dict[str, Any]] = []
    seen: dict[int, int] = {}
    tokens: int | None = None  # the last num_tokens logged
    for lineno, line in enumerate(lines, 1):
        if not line.strip():
            raise ResultsError(
                f"{path}:{lineno}: a blank line (metrics.jsonl holds one JSON object per line)"
            )
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            if lineno == len(lines) and not finished:
                note = f"{path}:{lineno}: a torn last line (a kill mid-append) of an unfinished run; left out"
                if notes is not None:
                    notes.append(note)
                else:
                    print(f"warning: {note}", file=sys.stderr, flush=True)
                break
            raise ResultsError(f"{path}:{lineno}: bad JSON line ({exc})") from None
        if why := _line_problem(obj):
            raise ResultsError(f"{path}:{lineno}: {why}")
        if obj["step"] in seen:
            raise ResultsError(
                f"{path}:{lineno}: step {obj['step']} repeats line {seen[obj['step']]}'s (each step is logged once)"
            )
        if rows and obj["step"] < rows[-1]["step"]:
            raise ResultsError(f"{path}:{lineno}: step {obj['step']} after step {rows[-1]['step']} (training "
                               "logs its steps in order)")  # fmt: skip
        if obj.get("num_tokens") is not None:
            if tokens is not None and obj["num_tokens"] < tokens:
                raise ResultsError(f"{path}:{lineno}: num_tokens {obj['num_tokens']} below an earlier line's "
                                   f"{tokens} (a running total)")  # fmt: skip
            tokens = obj["num_tokens"]
        seen[obj["step"]] = lineno
        rows.append(obj)
    return rows


def read_run(folder: Path, root: Path | None = None, notes: list[str] | None = None) -> RunRecord:
    """One run folder (holding ``metrics.jsonl``) read and checked; identity from run.json, else from the
    layout ``runs/{model}/{method}/seed{seed}[-{tag}]`` below ``root``."""
    from pspo_repro.common.run_dir import identity_problem

    info_path = run_json(folder)
    info = read_info(folder) if info_path.is_file() else {}
    if info and (why := identity_problem(folder, info, info_path)):
        raise ResultsError(why)
    match = RUN_DIR_RE.match(folder.name)
    try:
        parts = folder.relative_to(root / "runs").parts if root is not None else folder.parts[-3:]
    except ValueError:
        parts = folder.parts[-3:]
    fallback = {
        "model": parts[0] if len(parts) >= 3 else None,
        "method": parts[1] if len(parts) >= 3 else None,
        "seed": int(match["seed"]) if match else None,
        "tag": (match["tag"] or "") if match else "",
    }
    ident = {k: info.get(k, fallback[k]) for k in ("model", "method", "seed", "tag")}
    if any(ident[k] is None for k in ("model", "method", "seed")):
        raise ResultsError(f"{folder}: cannot tell model/method/seed (no run.json, unexpected layout)")
    named = ((info.get("config") or {}).get("model") or {}).get("name")
    if named is not None and named != ident["model"]:
        raise ResultsError(
            f"{info_path}: config.model.name {named!r} disagrees with the run's model {ident['model']!r} "
            "(its folder runs/<model>/): runs of another model would be merged into this model's rows"
        )
    named = ((info.get("config") or {}).get("method") or {}).get("name")
    if named is not None and named != ident["method"]:
        raise ResultsError(
            f"{info_path}: config.method.name {named!r} disagrees with the run's method {ident['method']!r} "
            "(its folder runs/<model>/<method>/): another method's run would be counted as this one's"
        )
    method_folder = folder.parent.name  # where it is filed (identity_problem: run.json agrees with it)
    known = registered_methods()
    if method_folder not in known:
        raise ResultsError(
            f"{folder}: method folder {method_folder!r} is not a registered method; registered: {', '.join(known)}"
        )
    status = info.get("status") or "unknown"
    rows = read_metrics(folder / "metrics.jsonl", finished=status == "finished", notes=notes)
    return RunRecord(folder, str(ident["model"]), str(ident["method"]), int(ident["seed"]), ident["tag"] or "",
                     status, info, rows)  # fmt: skip


def read_runs(root: Path, left_out: list[str] | None = None) -> list[RunRecord]:
    """Every run under ``root/runs`` (folders holding a metrics.jsonl), read and checked, sorted by folder.

    A ``failed`` run is left out; it and any torn last line dropped are named in ``left_out`` (when given)
    or printed as ``warning:`` lines, never passed over in silence."""
    notes: list[str] = []
    out = []
    for folder in run_dirs(root):
        run = read_run(folder, root, notes)
        if run.status == "failed":
            why = run.info.get("error")
            notes.append(
                f"{folder}: status failed{f' ({why})' if isinstance(why, str) and why else ''}; left out of every table"
            )
            continue
        out.append(run)
    check_one_model(out)
    if left_out is not None:
        left_out.extend(notes)
    else:
        for line in notes:
            print(f"warning: {line}", file=sys.stderr, flush=True)
    return out
