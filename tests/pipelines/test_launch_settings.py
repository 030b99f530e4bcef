"""The Slurm launcher's two waits (pspo_repro/pipelines/launch.py), read from the environment: the poll of
``sacct`` and the wait for a late result file; a bad value is one error naming the variable and the value."""

from __future__ import annotations

import pytest

from pspo_repro.common.cli import UsageError
from pspo_repro.pipelines import launch


@pytest.mark.parametrize(("value", "seconds"), [("0", 0.0), ("2.5", 2.5), ("15", 15.0)])
def test_seconds_from_the_environment(monkeypatch, value, seconds):
    monkeypatch.setenv("PSPO_SLURM_RESULT_WAIT_S", value)
    assert launch._seconds("PSPO_SLURM_RESULT_WAIT_S", "15") == seconds


def test_default_is_submitits_fifteen_seconds(monkeypatch):
    monkeypatch.delenv("PSPO_SLURM_RESULT_WAIT_S", raising=False)
    assert launch._seconds("PSPO_SLURM_RESULT_WAIT_S", "15") == 15.0


@pytest.mark.parametrize(
    ("value", "shown"), [("abc", "'abc'"), ("-1", "-1.0"), ("nan", "nan"), ("inf", "inf"), ("", "''")]
)
def test_a_bad_value_names_the_variable_and_the_value(monkeypatch, value, shown):
    monkeypatch.setenv("PSPO_SLURM_POLL_S", value)
    with pytest.raises(UsageError) as exc:  # the project's one-line error (common.cli.check_number)
        launch._seconds("PSPO_SLURM_POLL_S", "15")
    assert str(exc.value) == f"PSPO_SLURM_POLL_S must be a number in [0, inf), got {shown}"
