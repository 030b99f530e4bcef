"""Test commands started warm (the fault tests', the bad-input cases run as processes): ``python -m <module>`` or
``python <script>.py`` forked from the server of pspo_repro/pipelines/warm_start.py (the ML stack imported once
per test process), as ``subprocess.run`` / ``subprocess.Popen`` would start them, output captured the same way.

The tests that use it share one xdist group (``warm_cli``): one worker, one server. Each command is still a
process of its own, killed for real where a test kills it, and it imports this project's modules itself, with
its own environment: only the third-party imports (~4 of a tiny training command's ~5.5 CPU s) are shared.
That a forked job computes what a fresh interpreter computes is tests/pipelines/test_mini.py's bitwise
comparison; a command the server cannot run (another interpreter, another environment but for ``PSPO_*``
variables) runs in a fresh interpreter, as before."""

from __future__ import annotations

import subprocess
import tempfile
from pathlib import Path

from pspo_repro.pipelines import warm_start


def _env(env: dict[str, str]) -> dict[str, str]:
    # pytest names the running test in the environment: no command reads it, and it differs per test.
    return {k: v for k, v in env.items() if k != "PYTEST_CURRENT_TEST"}


def popen(
    cmd: list[str], *, cwd: Path, env: dict[str, str], out: Path, err: Path | None = None
) -> warm_start.WarmJob | subprocess.Popen:
    """Start ``cmd`` with its output appended to ``out`` (its error stream to ``err``, if given, else to ``out``)."""
    env = _env(env)
    warm_start.configure(env)
    return warm_start.start(cmd, cwd, env, out, err)


def run(cmd: list[str], *, cwd: Path, env: dict[str, str], timeout: float) -> subprocess.CompletedProcess:
    """``subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)``, started warm when it can be."""
    env = _env(env)
    warm_start.configure(env)
    with tempfile.TemporaryDirectory(prefix="warm_cli") as tmp:
        out, err = Path(tmp) / "stdout", Path(tmp) / "stderr"
        job = warm_start.start(cmd, cwd, env, out, err)
        try:
            code = job.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            job.kill()
            job.wait()
            raise subprocess.TimeoutExpired(cmd, timeout, out.read_text(), err.read_text()) from None
        return subprocess.CompletedProcess(cmd, code, out.read_text(), err.read_text())
