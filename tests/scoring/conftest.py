"""Set-up shared by the scoring tests: math-verify replaced by a slow stand-in."""

from __future__ import annotations

import time

import pytest

from pspo_repro.scoring import grading


@pytest.fixture
def slow_math_verify(monkeypatch):
    """``slow_math_verify(seconds, verdict)``: math-verify takes ``seconds`` per call and answers ``verdict``
    (warm, empty cache), as a pathological input would; undone after the test."""

    def install(seconds: float, verdict: bool) -> None:
        def slow(pred, gold):
            time.sleep(seconds)
            return verdict

        monkeypatch.setattr(grading, "_mv_verify", slow)
        monkeypatch.setattr(grading, "_MV_CACHE", {})
        monkeypatch.setattr(grading, "_warmed", True)

    return install
