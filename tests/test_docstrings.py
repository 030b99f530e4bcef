"""Every public function, class and method of ``pspo_repro`` has a docstring.

Public: no leading underscore, at module level or in a public class (nested functions are private by
nature). Property setters/deleters share their getter's docstring. ``main`` entry points count too.
"""

from __future__ import annotations

import ast
from pathlib import Path

from pspo_repro.common.paths import PROJECT_ROOT

PACKAGE = PROJECT_ROOT / "pspo_repro"
Def = ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef


def _is_accessor(node: ast.AST) -> bool:
    return any(isinstance(d, ast.Attribute) and d.attr in ("setter", "deleter") for d in node.decorator_list)


def missing_docstrings(path: Path, root: Path = PROJECT_ROOT) -> list[str]:
    """``file:line name`` (file relative to ``root``) of each public definition without a docstring."""
    found: list[str] = []

    def visit(body: list[ast.stmt], prefix: str) -> None:
        for node in body:
            if not isinstance(node, Def) or node.name.startswith("_") or _is_accessor(node):
                continue
            if ast.get_docstring(node) is None:
                found.append(f"{path.relative_to(root)}:{node.lineno} {prefix}{node.name}")
            if isinstance(node, ast.ClassDef):
                visit(node.body, f"{prefix}{node.name}.")

    visit(ast.parse(path.read_text(encoding="utf-8")).body, "")
    return found


def test_public_definitions_have_docstrings():
    files = sorted(PACKAGE.rglob("*.py"))
    assert len(files) > 20
    missing = [m for f in files for m in missing_docstrings(f)]
    assert not missing, "missing docstrings:\n" + "\n".join(missing)


def test_the_check_sees_what_it_should(tmp_path):
    path = tmp_path / "probe.py"
    path.write_text(
        """
def public(): pass
def _private(): pass
class Public:
    \"\"\"Doc.\"\"\"
    def method(self): pass
    def _helper(self): pass
    @property
    def value(self):
        \"\"\"Doc.\"\"\"
    @value.setter
    def value(self, v): pass
class _Private:
    def method(self): pass
def documented():
    \"\"\"Doc.\"\"\"
    def inner(): pass
"""
    )
    assert missing_docstrings(path, tmp_path) == ["probe.py:2 public", "probe.py:6 Public.method"]
