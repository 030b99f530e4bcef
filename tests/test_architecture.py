"""The package's layout is its architecture: imports point down the stages or into shared plumbing.

Stages in the order data flows through them (docs/architecture.md): ``common`` (plumbing) < ``data`` and
``methods`` < ``scoring`` < ``training`` < ``evaluation`` < ``analysis`` and ``explore`` < ``pipelines`` <
the thin entry modules (``pspo_repro/<command>.py``). A module may import its own subpackage or a lower
rank, never a sibling of equal rank or a later stage; and no chain of imports, lazy ones inside functions
included, may come back to where it started. Read from the source with ``ast``: nothing is imported.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "pspo_repro"
# Subpackage -> rank. Equal ranks may not import each other.
RANKS = {
    "common": 0,
    "data": 1,
    "methods": 1,
    "scoring": 2,
    "training": 3,
    "evaluation": 4,
    "analysis": 5,
    "explore": 5,
    "pipelines": 6,
}
ENTRY_RANK = 7  # pspo_repro/<command>.py: each only runs one stage's main
ROOT_RANK = 1  # pspo_repro/__init__.py: may import common only (it makes PSPO_*_DIR absolute at import)


def module_name(path: Path, package: Path) -> str:
    parts = list(path.relative_to(package.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def modules(package: Path) -> dict[str, Path]:
    """Every module of the package by dotted name (a package by its ``__init__``)."""
    return {module_name(p, package): p for p in sorted(package.rglob("*.py"))}


def imports(path: Path, name: str, known: dict[str, Path]) -> set[str]:
    """The package's modules that ``path`` imports anywhere in its body (lazy imports included)."""
    root = next(iter(known)).split(".")[0]
    is_pkg = path.name == "__init__.py"
    found: set[str] = set()

    def add(dotted: str) -> None:
        # The longest known module the name starts with (``a.b.c`` where ``c`` is a function -> ``a.b``).
        parts = dotted.split(".")
        for i in range(len(parts), 0, -1):
            candidate = ".".join(parts[:i])
            if candidate in known:
                if candidate != name:
                    found.add(candidate)
                return

    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == root:
                    add(alias.name)
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: resolve against this module's package
                base = name.split(".") if is_pkg else name.split(".")[:-1]
                base = base[: len(base) - (node.level - 1)]
                target = ".".join([*base, node.module] if node.module else base)
            else:
                target = node.module or ""
            if target.split(".")[0] != root:
                continue
            for alias in node.names:  # ``from pkg import submodule`` is an edge to the submodule
                if f"{target}.{alias.name}" in known:
                    add(f"{target}.{alias.name}")
                else:
                    add(target)
    return found


def graph(package: Path) -> dict[str, set[str]]:
    known = modules(package)
    return {name: imports(path, name, known) for name, path in known.items()}


def rank(name: str, package: Path) -> tuple[str, int]:
    """(layer, rank) of a module: its subpackage, an entry module, or the package root."""
    parts = name.split(".")
    if len(parts) == 1:
        return "<root>", ROOT_RANK
    if len(parts) == 2 and (package / f"{parts[1]}.py").is_file():
        return "<entry>", ENTRY_RANK
    if parts[1] not in RANKS:
        raise AssertionError(f"{name}: subpackage {parts[1]!r} has no rank in RANKS (add it, and to docs)")
    return parts[1], RANKS[parts[1]]


def back_edges(package: Path) -> list[str]:
    """Imports that point up the stages or across to an equal-rank sibling."""
    bad = []
    for src, targets in sorted(graph(package).items()):
        src_layer, src_rank = rank(src, package)
        for dst in sorted(targets):
            dst_layer, dst_rank = rank(dst, package)
            if dst_layer == src_layer and src_layer not in ("<entry>", "<root>"):
                continue  # inside one subpackage
            if dst_rank >= src_rank:
                bad.append(f"{src} ({src_layer}) imports {dst} ({dst_layer})")
    return bad


def cycles(package: Path) -> list[list[str]]:
    """Each strongly connected set of two or more modules (Tarjan), as a sorted list."""
    g = graph(package)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in g[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(g):
        if v not in index:
            visit(v)
    return out


def test_no_import_points_up_the_stages():
    bad = back_edges(PACKAGE)
    assert not bad, "imports against the stage order (docs/architecture.md):\n" + "\n".join(bad)


def test_no_import_cycles():
    found = cycles(PACKAGE)
    assert not found, "import cycles:\n" + "\n".join(" <-> ".join(c) for c in found)


# The reports of analysis/: each stands on the shared modules (readers, statistics, tables, plots), never on
# another report, so one can change without moving the others (issue 54).
REPORTS = ("aggregate", "regime", "claims_report", "leaderboard", "scale")
MAX_ANALYSIS_FLOORS = 7


def floors(package: Path, subpackage: str) -> dict[str, int]:
    """Each module of ``subpackage`` and the floor it stands on: 1 for one that imports no other module of the
    subpackage, else one above the highest module of the subpackage it imports (lazy imports included)."""
    prefix = f"{package.name}.{subpackage}."
    g = {
        m: {t for t in ts if t.startswith(prefix)} for m, ts in graph(package).items() if m.startswith(prefix)
    }
    out: dict[str, int] = {}

    def floor(m: str) -> int:
        if m not in out:
            out[m] = 1 + max((floor(t) for t in g[m]), default=0)
        return out[m]

    for m in g:
        floor(m)
    return out


def test_analysis_stands_on_few_floors_and_no_report_imports_another():
    found = floors(PACKAGE, "analysis")
    top = max(found.values())
    assert top <= MAX_ANALYSIS_FLOORS, sorted(found.items(), key=lambda kv: -kv[1])
    reports = {f"pspo_repro.analysis.{r}" for r in REPORTS}
    assert reports <= set(found), sorted(reports - set(found))
    g = graph(PACKAGE)
    crossing = sorted(f"{r} imports {t}" for r in reports for t in g[r] & reports)
    assert not crossing, "a report imports another report:\n" + "\n".join(crossing)


# Records with one owner module each (issue 54): no other module of the package builds their file names.
CELL_OWNER = "evaluation/cells.py"
CELL_MARKERS = (".partial.jsonl", ".completions.jsonl.gz", "T*.json", ".locks")


def _docstrings(tree: ast.AST) -> set[int]:
    out = set()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr):
            if isinstance(body[0].value, ast.Constant) and isinstance(body[0].value.value, str):
                out.add(id(body[0].value))
    return out


def cell_name_builders(package: Path) -> list[str]:
    """Places outside ``CELL_OWNER`` that build an evaluation cell's file names: a string naming a shard, the
    completions, the lock folder or a cell glob, or an f-string ``T{t:.1f}`` (docstrings aside)."""
    hits = []
    for path in sorted(package.rglob("*.py")):
        rel = path.relative_to(package).as_posix()
        if rel == CELL_OWNER:
            continue
        tree = ast.parse(path.read_text())
        docs = _docstrings(tree)
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs:
                if any(m in node.value for m in CELL_MARKERS):
                    hits.append(f"{rel}:{node.lineno}: {node.value[:60]!r}")
            elif isinstance(node, ast.JoinedStr):
                for a, b in zip(node.values, node.values[1:], strict=False):
                    if (isinstance(a, ast.Constant) and str(a.value).endswith("T")
                            and isinstance(b, ast.FormattedValue) and ".1f" in ast.unparse(b)):  # fmt: skip
                        hits.append(f"{rel}:{node.lineno}: {ast.unparse(node)[:60]}")
    return hits


RUN_JSON_OWNER = "common/run_folder.py"


def run_json_names(package: Path) -> list[str]:
    """Places outside ``RUN_JSON_OWNER`` that name a run.json file to open or build (a string that is the name,
    or a path ending in it; messages about "run.json's fields" are text, not a file)."""
    hits = []
    for path in sorted(package.rglob("*.py")):
        rel = path.relative_to(package).as_posix()
        if rel == RUN_JSON_OWNER:
            continue
        tree = ast.parse(path.read_text())
        docs = _docstrings(tree)
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs:
                if node.value == "run.json" or node.value.endswith("/run.json"):
                    hits.append(f"{rel}:{node.lineno}: {node.value!r}")
    return hits


def test_run_json_has_one_owner():
    hits = run_json_names(PACKAGE)
    assert not hits, f"run.json named outside {RUN_JSON_OWNER}:\n" + "\n".join(hits)


def test_the_run_json_owner_check_sees_a_reader(tmp_path):
    package = _write(tmp_path, {"common/run_folder.py": 'RUN_JSON = "run.json"\n',
                                "analysis/a.py": 'import json\ndef f(d):\n    return json.loads((d / "run.json").read_text())\n',
                                "analysis/b.py": 'WHY = "run.json\'s status is not finished"\n'})  # fmt: skip
    assert [h.split(":")[0] for h in run_json_names(package)] == ["analysis/a.py"]


def test_the_evaluation_cell_has_one_owner():
    hits = cell_name_builders(PACKAGE)
    assert not hits, f"cell file names built outside {CELL_OWNER}:\n" + "\n".join(hits)


def test_the_cell_owner_check_sees_a_builder(tmp_path):
    package = _write(tmp_path, {"evaluation/cells.py": 'X = ".partial.jsonl"\n',
                                "pipelines/p.py": 'def f(t):\n    """T*.json in a docstring is fine."""\n'
                                                  '    return f"T{t:.1f}.json", "a.partial.jsonl"\n'})  # fmt: skip
    assert [h.split(":")[0] for h in cell_name_builders(package)] == ["pipelines/p.py", "pipelines/p.py"]


def test_every_subpackage_has_a_rank_and_the_top_level_only_entry_modules():
    top = sorted(p.name for p in PACKAGE.iterdir() if p.is_dir() and (p / "__init__.py").is_file())
    assert sorted(RANKS) == top
    for path in PACKAGE.glob("*.py"):
        if path.name == "__init__.py":
            continue
        code = [n for n in ast.parse(path.read_text()).body if not isinstance(n, ast.Expr)]
        # The docstring, then only ``if __name__ == "__main__":``: an entry module defines nothing.
        assert len(code) == 1 and isinstance(code[0], ast.If), f"{path.name} is more than an entry point"


# ---------------------------------------------------------------- the checks themselves can fail


def _write(root: Path, files: dict[str, str]) -> Path:
    package = root / "pkg"
    for rel, text in files.items():
        path = package / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    for sub in {p.parent for p in package.rglob("*.py")}:
        (sub / "__init__.py").touch()
    return package


@pytest.mark.parametrize(
    "files, expect",
    [
        ({"common/a.py": "", "training/t.py": "from pkg.common import a\n"}, []),
        ({"common/a.py": "from pkg.training import t\n", "training/t.py": ""}, ["pkg.common.a (common)"]),
        # a lazy import inside a function counts, and so does ``from pkg.stage import module``
        (
            {"data/d.py": "def f():\n    from pkg.scoring.s import g\n", "scoring/s.py": ""},
            ["pkg.data.d (data)"],
        ),
        ({"data/d.py": "import pkg.methods.m as m\n", "methods/m.py": ""}, ["pkg.data.d (data)"]),
        ({"evaluation/e.py": "from pkg.analysis import x\n", "analysis/x.py": ""}, ["pkg.evaluation.e"]),
    ],
)
def test_back_edge_check_catches_a_back_edge(tmp_path, files, expect):
    found = back_edges(_write(tmp_path, files))
    assert len(found) == len(expect)
    for line, start in zip(found, expect, strict=True):
        assert line.startswith(start), found


def test_floor_count_sees_a_chain(tmp_path):
    files = {"analysis/a.py": "", "analysis/b.py": "from pkg.analysis import a\n",
             "analysis/c.py": "def f():\n    from pkg.analysis.b import x\n", "common/z.py": ""}  # fmt: skip
    found = floors(_write(tmp_path, files), "analysis")
    assert (found["pkg.analysis.a"], found["pkg.analysis.b"], found["pkg.analysis.c"]) == (1, 2, 3)


def test_cycle_check_catches_a_cycle_inside_one_stage(tmp_path):
    package = _write(
        tmp_path,
        {"data/a.py": "from pkg.data import b\n", "data/b.py": "def f():\n    from pkg.data.a import x\n"},
    )
    assert cycles(package) == [["pkg.data.a", "pkg.data.b"]]
    assert back_edges(package) == []  # same stage: only the cycle check sees it
