"""Issue 36: the twin of the random cell edits (test_recomputed_cells.py) for run records. Seeded random edits
of one run's run.json or metrics.jsonl (any field, any value, deleted, nudged; lines deleted, repeated, torn,
blanked, swapped) are read by aggregate (its runs tables), regime and the leaderboard. For each edit and each
command the numbers are either those of the unedited tree, or the command stops with an error naming the file,
or it names the run in a warning (a run left out, a share read without its setting). Never a changed number
without a word, except for the edits that are indistinguishable from data (a finite number replaced by
another, a metric or a line removed): those are counted, and listed in docs/reliability.md as the limit.
"""

from __future__ import annotations

import contextlib
import copy
import io
import json
import math
import os
import random
from pathlib import Path

import pandas as pd
import pytest
import toy_records

from pspo_repro.analysis import leaderboard, regime
from pspo_repro.analysis.measures import Records
from pspo_repro.analysis.results_io import load_runs

TARGET = ("pspo", 1)
VALUES = [0, 1, -1, 2, 0.5, 1e9, float("nan"), float("inf"), "", "x", "clip", "10", None, True, False, [], {},
          {"a": 1}]  # fmt: skip


def _finite(x) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x)


def _leaves(obj, prefix=()):
    yield prefix
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield from _leaves(v, (*prefix, k))


def edit_info(info: dict, rng: random.Random) -> tuple[str, bool]:
    """Change one thing in a run.json; returns (what, plausible): plausible when a finite number became
    another (a setting the run could have had)."""
    path = rng.choice([p for p in _leaves(info) if p])
    parent = info
    for key in path[:-1]:
        parent = parent[key]
    old = parent[path[-1]]
    if rng.random() < 0.2:
        del parent[path[-1]]
        return f"delete {path}", False
    new = (
        rng.choice([old * 2, old + 1, old / 2]) if _finite(old) and rng.random() < 0.4 else rng.choice(VALUES)
    )
    parent[path[-1]] = new
    return f"set {path} = {new!r}", _finite(old) and _finite(new) and path[-1] not in ("seed",)


def edit_lines(lines: list[dict], rng: random.Random) -> tuple[str, bool]:
    """Change one thing in metrics.jsonl's rows (in place; a ``str`` entry is written as it is); returns
    (what, plausible): plausible when a finite value became another, or a metric or a whole line was
    removed (a run that logged less)."""
    op = rng.random()
    i = rng.randrange(len(lines))
    if op < 0.08:
        del lines[i]
        return f"delete line {i + 1}", True
    if op < 0.14:
        lines.insert(i, copy.deepcopy(lines[i]))
        return f"repeat line {i + 1}", False
    if op < 0.2:
        lines.insert(i, "")
        return f"blank line before {i + 1}", False
    if op < 0.26:
        lines[-1] = json.dumps(lines[-1])[:-7]
        return "tear the last line", False
    if op < 0.32 and i + 1 < len(lines):
        lines[i], lines[i + 1] = lines[i + 1], lines[i]
        return f"swap lines {i + 1} and {i + 2}", False
    key = rng.choice(list(lines[i]))
    old = lines[i][key]
    if op < 0.45:
        del lines[i][key]
        return f"delete {key} of line {i + 1}", key != "step"
    new = rng.choice([old * 2, old + 1, old / 2, -old]) if _finite(old) and op < 0.7 else rng.choice(VALUES)
    lines[i][key] = new
    return f"set {key} of line {i + 1} = {new!r}", _finite(old) and (_finite(new) or new is None)


def _numbers(root: Path) -> dict[str, object]:
    """Per command: its numbers (a frame or rows), or the error; and every warning line it printed."""
    out: dict[str, object] = {}
    for command in ("aggregate", "regime", "leaderboard"):
        err = io.StringIO()
        try:
            with contextlib.redirect_stderr(err):
                if command == "aggregate":
                    left: list[str] = []
                    runs, long = load_runs(root, {"alpha": ["method.alpha"]}, left)
                    print("\n".join(f"warning: {x}" for x in left), file=err)
                    # status is read by the alpha ablation only, which names each run it leaves out
                    got = (runs.drop(columns=["run_dir", "status"]), long.drop(columns=["run_dir"]))
                elif command == "regime":
                    got = pd.DataFrame(regime.collect(root))
                else:
                    reg = leaderboard.regime_rows(Records.read(root), "", "clip", 0.95, 0.05)
                    # the knob columns show config.method as the runs recorded it (text, not a number)
                    got = pd.DataFrame(leaderboard.csv_rows([reg])).drop(
                        columns=["hyperparameters", "knobs", "at_foreign_defaults"]
                    )
        except ValueError as exc:  # ResultsError, ClaimsError: a one-line refusal
            got = f"error: {exc}"
        out[command] = (got, [line for line in err.getvalue().splitlines() if line.startswith("warning:")])
    return out


def _same(a, b) -> bool:
    if isinstance(a, tuple):
        return all(_same(x, y) for x, y in zip(a, b, strict=True))
    if list(a.columns) != list(b.columns) or len(a) != len(b):
        return False
    for col in a.columns:
        x, y = a[col], b[col]
        if pd.api.types.is_numeric_dtype(x) and pd.api.types.is_numeric_dtype(y):
            if not ((x - y).abs().fillna(0) < 1e-12).all() or not (x.isna() == y.isna()).all():
                return False
        elif x.astype(str).tolist() != y.astype(str).tolist():
            return False
    return True


# A few dozen edits, each read by three commands (about 0.4 s an edit); PSPO_EDIT_COUNT raises it.
EDIT_COUNT = int(os.environ.get("PSPO_EDIT_COUNT", "60"))


@pytest.mark.parametrize("file", ["run.json", "metrics.jsonl"])
def test_no_random_run_record_edit_changes_a_number_unless_the_file_is_named(file, tmp_path):
    root = toy_records.build(tmp_path / "records")
    folder = root / "runs" / "tiny" / TARGET[0] / f"seed{TARGET[1]}"
    target = folder / file
    pristine = target.read_text()
    base = _numbers(root)
    for command, (got, warnings) in base.items():
        assert not isinstance(got, str) and warnings == [], (command, got, warnings)
    rng = random.Random(int(os.environ.get("PSPO_FAULT_SEED", "0")) + (file == "run.json"))
    outcomes = {"same": 0, "error": 0, "warned": 0, "plausible": 0}
    for _ in range(EDIT_COUNT):
        if file == "run.json":
            info = json.loads(pristine)
            what, plausible = edit_info(info, rng)
            target.write_text(json.dumps(info))
        else:
            lines = [json.loads(x) for x in pristine.splitlines()]
            what, plausible = edit_lines(lines, rng)
            target.write_text("".join((x if isinstance(x, str) else json.dumps(x)) + "\n" for x in lines))
        for command, (got, warnings) in _numbers(root).items():
            if isinstance(got, str):
                assert str(folder) in got, (what, command, got)
                outcomes["error"] += 1
            elif _same(got, base[command][0]):
                outcomes["same"] += 1
            elif [w for w in warnings if str(folder) in w]:
                outcomes["warned"] += 1
            else:
                assert plausible, (what, command, "numbers changed without a word")
                outcomes["plausible"] += 1
    target.write_text(pristine)
    # the edits reach the outcomes that matter (a test whose edits all land in ignored fields proves nothing)
    assert outcomes["error"] > EDIT_COUNT // 3 and outcomes["same"] > 0, outcomes


# ---------------------------------------------------------------- the edits the property found, one by one


def _lines(root: Path, edit) -> Path:
    path = root / "runs" / "tiny" / "pspo" / "seed1" / "metrics.jsonl"
    rows = [json.loads(x) for x in path.read_text().splitlines()]
    edit(rows)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _info(root: Path, edit) -> Path:
    path = root / "runs" / "tiny" / "pspo" / "seed1" / "run.json"
    info = json.loads(path.read_text())
    edit(info)
    path.write_text(json.dumps(info))
    return path


def _swap(rows):  # rows[0] is the step-0 validation
    rows[2], rows[3] = rows[3], rows[2]


def _tokens_fall(rows):
    rows[3]["num_tokens"] = 50


@pytest.mark.parametrize(
    ("edit", "where", "message"),
    [
        (lambda root: _lines(root, _swap), ":4: ", "step 2 after step 3 (training logs its steps in order)"),
        (lambda root: _lines(root, _tokens_fall), ":4: ", "num_tokens 50 below an earlier line's 200"),
        (lambda root: _info(root, lambda i: i["config"]["trainer"].update(max_grad_norm=None)), ": ",
         "config.trainer.max_grad_norm=None is not what training takes"),
        (lambda root: _info(root, lambda i: i["config"]["trainer"].update(learning_rate="3e-4")), ": ",
         "config.trainer.learning_rate='3e-4' is not what training takes (a finite number > 0)"),
        (lambda root: _info(root, lambda i: i["config"]["trainer"].update(eval_steps=0)), ": ",
         "config.trainer.eval_steps=0 is not what training takes (an integer >= 1 or null)"),
        (lambda root: _info(root, lambda i: i["config"]["method"].update(name="clip")), ": ",
         "config.method.name 'clip' disagrees with the run's method 'pspo'"),
    ],
)  # fmt: skip
@pytest.mark.parametrize("command", ["aggregate", "regime", "leaderboard"])
def test_each_refusal_names_the_file_and_line(edit, where, message, command, tmp_path):
    root = toy_records.build(tmp_path / "records")
    path = edit(root)
    got, _ = _numbers(root)[command]
    assert isinstance(got, str) and got.startswith(f"error: {path}{where}") and message in got, got


@pytest.mark.parametrize("status", ["running", None])
def test_regime_and_the_leaderboard_name_a_run_they_leave_out_as_unfinished(status, tmp_path):
    """An unfinished run (or one whose run.json records no status) used to drop out of their seed counts and
    shares without a word."""
    root = toy_records.build(tmp_path / "records")
    path = _info(root, lambda i: i.update(status=status) if status else i.pop("status"))
    for command in ("regime", "leaderboard"):
        _, warnings = _numbers(root)[command]
        assert warnings == [f"warning: {path.parent}: status {status or 'unknown'}; left out of the "
                            + ("regime table (it reads finished runs only)" if command == "regime" else
                               "leaderboard's run statistics (finished runs only)")], (command, warnings)  # fmt: skip


def test_a_run_that_records_no_max_grad_norm_is_named_where_its_share_is_read(tmp_path):
    root = toy_records.build(tmp_path / "records")
    path = _info(root, lambda i: i["config"]["trainer"].pop("max_grad_norm"))
    note = f"warning: {path}: records no config.trainer.max_grad_norm; its norm-clipped share is read as clipping off"
    for command in ("regime", "leaderboard"):
        assert _numbers(root)[command][1] == [note], command
