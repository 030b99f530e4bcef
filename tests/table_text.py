"""Comparing a regenerated table with its committed copy.

Markdown tables print rounded numbers and must match byte for byte. A CSV keeps every float's full repr, whose
last digits depend on the machine (numpy and scipy pick SIMD kernels by CPU: the committed copy and a rerun on
another CPU family differ around the 15th significant digit), so a CSV matches when its cells are equal as text
or, both being numbers, within a relative 1e-9.
"""

from __future__ import annotations

import csv
import io
import math


def _cells_match(a: str, b: str) -> bool:
    if a == b:
        return True
    try:
        x, y = float(a), float(b)
    except ValueError:
        return False
    if math.isnan(x) or math.isnan(y):
        return math.isnan(x) and math.isnan(y)
    return math.isclose(x, y, rel_tol=1e-9, abs_tol=1e-12)


def assert_csv_matches(got: str, want: str, name: str = "csv") -> None:
    """``got`` has ``want``'s rows and columns, each cell equal as text or as a number within 1e-9."""
    a, b = list(csv.reader(io.StringIO(got))), list(csv.reader(io.StringIO(want)))
    assert len(a) == len(b), f"{name}: {len(a)} rows, the committed copy has {len(b)}"
    for i, (ra, rb) in enumerate(zip(a, b, strict=True)):
        assert len(ra) == len(rb), f"{name} row {i}: {len(ra)} cells, the committed copy has {len(rb)}"
        bad = [(j, x, y) for j, (x, y) in enumerate(zip(ra, rb, strict=True)) if not _cells_match(x, y)]
        assert not bad, f"{name} row {i}: cells differ (column, got, committed): {bad[:5]}"
