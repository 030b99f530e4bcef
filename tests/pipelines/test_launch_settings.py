"""The Slurm launcher's two waits (pspo_repro/pipelines/launch.py), read from the environment: the poll of
``sacct`` and the wait for a late result file; a bad value is one error naming the variable and the value."""

from __future__ import annotations

import pytest

from pspo_repro.pipelines import launch


@pytest.mark.parametrize(("value", "seconds"), [("0", 0.0), ("2.5", 2.5), ("15", 15.0)])
def test_seconds_from_the_environment(monkeypatch, value, seconds):
    monkeypatch.setenv("PSPO_SLURM_RESULT_WAIT_S", value)
    assert launch._seconds("PSPO_SLURM_RESULT_WAIT_S", "15") == seconds


def test_default_is_submitits_fifteen_seconds(monkeypatch):
    monkeypatch.delenv("PSPO_SLURM_RESULT_WAIT_S", raising=False)
    assert launch._seconds("PSPO_SLURM_RESULT_WAIT_S", "15") == 15.0


@pytest.mark.parametrize("value", ["abc", "-1", "nan", ""])
def test_a_bad_value_names_the_variable_and_the_value(monkeypatch, value):
    monkeypatch.setenv("PSPO_SLURM_POLL_S", value)
    with pytest.raises(ValueError) as exc:
        launch._seconds("PSPO_SLURM_POLL_S", "15")
    assert str(exc.value) == f"PSPO_SLURM_POLL_S={value!r}: a number of seconds >= 0 is allowed"
