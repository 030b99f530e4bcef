"""The error every results reader raises, and the ways it reads the tree: a JSON object, UTF-8 names, and
the files of a results tree found through links that stay inside it (``checked_files``).

Shared by ``results_io`` (evaluation cells) and ``run_records`` (training runs), which import nothing of
each other's but this.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pspo_repro.common.safe_paths import UnsafePathError


class ResultsError(ValueError):
    """A result file is malformed, duplicated or inconsistent with the others in its cell."""


def read_json(path: Path) -> dict[str, Any]:
    """The JSON object in ``path``; ResultsError naming the file when it cannot be read or is no object."""
    try:
        obj = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:  # ValueError: bad JSON or bytes that are not UTF-8
        raise ResultsError(f"{path}: cannot read JSON ({exc})") from exc
    if not isinstance(obj, dict):
        raise ResultsError(f"{path}: expected a JSON object, got {type(obj).__name__}")
    return obj


def utf8_names(paths: list[Path]) -> list[Path]:
    """``paths`` unchanged when every name in them is UTF-8, else ResultsError naming the first that is not
    (its bytes escaped): a name that is not text cannot label a table row or reach a CSV file."""
    for path in paths:
        try:
            str(path).encode("utf-8")
        except UnicodeEncodeError:
            shown = str(path).encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
            raise ResultsError(
                f"{shown}: a folder or file name that is not UTF-8; rename it or move it out of the results folder"
            ) from None
    return paths


def checked_files(files: Callable[[], list[Path]]) -> list[Path]:
    """``files()`` (a walk of a results tree: ``cells.cell_files``, ``safe_paths.tree_files``) with UTF-8
    names; a symlink out of the tree or a name that is not UTF-8 becomes ResultsError, one line naming it."""
    try:
        return utf8_names(files())
    except UnsafePathError as exc:
        raise ResultsError(str(exc)) from None
