"""Issue 36: one door in and one door out. Each analysis command (aggregate, regime, claims, leaderboard) is
run on a small results tree while every file open, low-level open and rename of the process is watched:

- every open of a run record (``run.json``, ``metrics.jsonl``) happens inside the one reader,
  ``pspo_repro/analysis/run_records.py``, and every run of the tree is read there;
- every write under the output folder (a file opened for writing, a temp file, a rename into place) happens
  inside the one writer, ``atomic.write_set``; nothing is written anywhere else in the test's folders.

A static pass over the analysis modules backs it up for branches the small tree does not reach: no module
but the reader opens a path naming a run record, and no command imports a writer other than ``write_set``.
Either fails when a command opens a run record or writes an output on its own.
"""

from __future__ import annotations

import ast
import builtins
import io
import os
import sys
import traceback
from pathlib import Path

import pytest
import toy_records

from pspo_repro.analysis import aggregate, claims_report, leaderboard, regime
from pspo_repro.common.paths import PROJECT_ROOT

READER = "pspo_repro/analysis/run_records.py"
WRITER = ("pspo_repro/common/atomic.py", "write_set")
RECORD_NAMES = ("run.json", "metrics.jsonl")
WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC


class Watch:
    """Records every open and rename under ``root``, with the call stack that made it."""

    def __init__(self, root: Path, out: Path):
        self.root, self.out = root.resolve(), out.resolve()
        self.reads: list[tuple[Path, list[traceback.FrameSummary]]] = []
        self.writes: list[tuple[str, Path, list[traceback.FrameSummary]]] = []

    def _under(self, path) -> Path | None:
        if isinstance(path, int):
            return None
        try:
            p = Path(os.fsdecode(path)).absolute()
        except TypeError:
            return None
        return p if p.is_relative_to(self.root) else None

    def saw_open(self, path, writing: bool) -> None:
        p = self._under(path)
        if p is None:
            return
        stack = traceback.extract_stack()[:-2]
        if writing:
            self.writes.append(("open", p, stack))
        elif p.name in RECORD_NAMES:
            self.reads.append((p, stack))

    def saw_rename(self, src, dst) -> None:
        for p in (self._under(src), self._under(dst)):
            if p is not None:
                self.writes.append(("rename", p, traceback.extract_stack()[:-2]))

    def install(self, monkeypatch) -> None:
        real_open, real_os_open = builtins.open, os.open
        real_replace, real_rename = os.replace, os.rename

        def watched_open(file, mode="r", *args, **kwargs):
            self.saw_open(file, any(c in mode for c in "wax+"))
            return real_open(file, mode, *args, **kwargs)

        def watched_os_open(path, flags, *args, **kwargs):
            self.saw_open(path, bool(flags & WRITE_FLAGS))
            return real_os_open(path, flags, *args, **kwargs)

        def watched_replace(src, dst, *args, **kwargs):
            self.saw_rename(src, dst)
            return real_replace(src, dst, *args, **kwargs)

        def watched_rename(src, dst, *args, **kwargs):
            self.saw_rename(src, dst)
            return real_rename(src, dst, *args, **kwargs)

        monkeypatch.setattr(builtins, "open", watched_open)
        monkeypatch.setattr(io, "open", watched_open)  # pathlib's read_text / write_text / open
        monkeypatch.setattr(os, "open", watched_os_open)  # tempfile.mkstemp, atomic's folder lock
        monkeypatch.setattr(os, "replace", watched_replace)
        monkeypatch.setattr(os, "rename", watched_rename)


def _where(stack) -> str:
    ours = [f for f in stack if "/pspo_repro/" in f.filename]
    f = ours[-1] if ours else stack[-1]
    return f"{Path(f.filename).relative_to(PROJECT_ROOT) if ours else f.filename}:{f.lineno} ({f.name})"


def _through_reader(stack) -> bool:
    return any(f.filename.endswith(READER) for f in stack)


def _through_writer(stack) -> bool:
    return any(f.filename.endswith(WRITER[0]) and f.name == WRITER[1] for f in stack)


def _run(command: str, root: Path, out: Path, spec: Path, monkeypatch) -> None:
    args = [f"results_dir={root}", f"out_dir={out}"]
    if command == "aggregate":
        monkeypatch.setattr(sys, "argv", ["pspo_repro.aggregate", *args])
        aggregate.main()
    elif command == "regime":
        assert regime.main(args) == 0
    elif command == "claims":
        assert claims_report.main([*args, f"spec={spec}"]) == 0
    else:
        assert leaderboard.main(args) == 0


@pytest.fixture
def tree(tmp_path):
    root = toy_records.tuned(toy_records.build(tmp_path / "records"))
    spec = toy_records.spec(tmp_path / "spec.yaml", frontier=True, tuning=True)
    return root, spec


@pytest.mark.parametrize("command", ["aggregate", "regime", "claims", "leaderboard"])
def test_each_command_reads_runs_through_the_reader_and_writes_through_the_writer(
    command, tree, tmp_path, monkeypatch
):
    root, spec = tree
    out = tmp_path / "out"
    watch = Watch(tmp_path, out)
    watch.install(monkeypatch)
    _run(command, root, out, spec, monkeypatch)
    monkeypatch.undo()

    outside = [f"{p} from {_where(s)}" for p, s in watch.reads if not _through_reader(s)]
    assert not outside, f"{command} opened run records outside the one reader:\n" + "\n".join(outside)
    folders = {p.parent for p, _ in watch.reads}
    runs = {p.parent for p in (root / "runs").glob("*/*/*/metrics.jsonl")}
    # every run of the tree (claims and the leaderboard read all; the tuning runs through the tuned group)
    assert runs <= {f.absolute() for f in folders}, sorted(map(str, runs - folders))

    stray = [f"{kind} {p} from {_where(s)}" for kind, p, s in watch.writes
             if not _through_writer(s) or not p.is_relative_to(out.resolve())]  # fmt: skip
    assert not stray, f"{command} wrote outside the one writer:\n" + "\n".join(stray)
    assert any(p.parent == out.resolve() for _, p, _ in watch.writes)  # it did write, through write_set


def test_the_watch_sees_a_command_that_opens_a_run_record_or_writes_on_its_own(tree, tmp_path, monkeypatch):
    """The watch itself: a leaderboard that reads run.json with json.loads(read_text()) and writes its
    Markdown with write_text is caught on both counts (a test that could not fail would prove nothing)."""
    import json

    root, _ = tree
    out = tmp_path / "out"
    real_write = leaderboard.write

    def rogue_write(results_dir, out_dir, *args, **kwargs):
        json.loads((results_dir / "runs" / "tiny" / "pspo" / "seed0" / "run.json").read_text())
        out_dir.mkdir(parents=True, exist_ok=True)
        (out_dir / "extra.md").write_text("x")
        return real_write(results_dir, out_dir, *args, **kwargs)

    monkeypatch.setattr(leaderboard, "write", rogue_write)
    watch = Watch(tmp_path, out)
    watch.install(monkeypatch)
    assert leaderboard.main([f"results_dir={root}", f"out_dir={out}"]) == 0
    monkeypatch.undo()
    assert [p.name for p, s in watch.reads if not _through_reader(s)] == ["run.json"]
    assert [p.name for _, p, s in watch.writes if not _through_writer(s)] == ["extra.md"]


# ---------------------------------------------------------------- the static pass

ANALYSIS = PROJECT_ROOT / "pspo_repro" / "analysis"
OPENERS = {"open", "read_text", "read_bytes", "load", "loads", "write_text", "write_bytes"}
# The commands' modules may take these from common/atomic.py: the one writer, and what aggregate's set
# needs around it (finishing a switch a kill cut short before reading the previous set's summary).
WRITER_NAMES = {"write_set", "recover_folder", "STALE_DIR"}
COMMANDS = ("aggregate.py", "regime.py", "claims_report.py", "leaderboard.py")


def _names_a_record(node: ast.AST) -> bool:
    return any(isinstance(n, ast.Constant) and n.value in RECORD_NAMES for n in ast.walk(node))


def _direct_record_opens(path: Path) -> list[str]:
    hits = []
    for node in ast.walk(ast.parse(path.read_text())):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
        if name in OPENERS and (_names_a_record(func) or any(_names_a_record(a) for a in node.args)):
            hits.append(f"{path.relative_to(PROJECT_ROOT)}:{node.lineno}: {ast.unparse(node)[:80]}")
    return hits


def _other_writers(path: Path) -> list[str]:
    hits = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module == "pspo_repro.common.atomic":
            hits += [f"{path.name}:{node.lineno}: {a.name}" for a in node.names if a.name not in WRITER_NAMES]
        elif isinstance(node, ast.Import | ast.ImportFrom) and "pspo_repro.common" in (
            getattr(node, "module", "") or ""
        ):
            hits += [f"{path.name}:{node.lineno}: atomic" for a in node.names if a.name == "atomic"]
    return hits


def test_no_analysis_module_but_the_reader_opens_a_run_record():
    hits = [
        h
        for p in sorted(ANALYSIS.glob("*.py"))
        if p.name != "run_records.py"
        for h in _direct_record_opens(p)
    ]
    assert not hits, "run records opened outside analysis/run_records.py:\n" + "\n".join(hits)
    # the pass sees what it looks for: the rogue leaderboard of the test above opens run.json this way
    assert any("run.json" in h for h in _direct_record_opens(Path(__file__)))


def test_the_commands_import_no_writer_but_write_set():
    hits = [h for name in COMMANDS for h in _other_writers(ANALYSIS / name)]
    assert not hits, "writers other than atomic.write_set:\n" + "\n".join(hits)
