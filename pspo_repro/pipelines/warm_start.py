"""Warm starts for a pipeline's stage jobs: ``python -m pspo_repro.<entry> ...`` forked from an interpreter that
has already imported the ML stack (``warm_start: true`` in conf/mini.yaml, the default).

A stage job in a fresh interpreter spends most of its seconds in a small run importing torch, transformers and
TRL (docs/benchmarks.md measures it). The standard library's forkserver (``multiprocessing`` start
method ``forkserver``, ``set_forkserver_preload``) imports them once, in a clean process started for this
pipeline run with the jobs' own environment, and forks a copy of itself per job. The copy runs the job's
entry point as ``python -m`` would: the same module as ``__main__``, arguments, environment, working folder,
log file and exit status. Every job starts from the server's state right after its imports, never from
another job's, so a job computes what it computes in a fresh interpreter (the end-to-end test of
tests/pipelines/test_mini.py recomputes its pipeline in fresh interpreters and compares, bit for bit).

A job starts warm when its command is ``<this python> -m <module> ...`` or ``<this python> <script>.py ...`` and its
environment is the configured one but for ``PSPO_*`` variables: only this project's modules read those, and each
job imports them itself, after its environment is in place (so one server serves, say, runs that differ in their
results folder). Any other difference (``sft.threads`` other than ``threads``: the thread count is read when
torch loads) or any other command runs in a fresh interpreter.
"""

from __future__ import annotations

import atexit
import multiprocessing
import os
import runpy
import subprocess
import sys
from multiprocessing import forkserver
from pathlib import Path
from typing import Any

# What every stage's entry point imports and takes seconds to: imported once, in the server. Only other
# people's packages: our own modules are imported by each job, as in a fresh interpreter.
PRELOAD = (
    "torch",
    "transformers.models.auto.modeling_auto",
    "transformers.models.auto.tokenization_auto",
    "transformers.models.qwen2.modeling_qwen2",
    "trl.trainer.grpo_trainer",
    "datasets",
    "hydra",
    "omegaconf",
    "pandas",
    "math_verify",
    "matplotlib.pyplot",
    "scipy.stats",
)

try:
    _context = multiprocessing.get_context("forkserver")
except ValueError:  # a platform without it (Windows): every job starts fresh
    _context = None
_env: dict[str, str] | None = None  # the environment a job needs to start warm (configure); None: none does
_server_env: dict[str, str] | None = None  # the environment the running server was started with
_server_running = False
# CPU of the warm jobs ended under the running server (its children, not ours, until it ends)
_cpu_seconds = 0.0


class WarmJob:
    """A forked job seen through the calls the pipeline makes on a ``subprocess.Popen``."""

    def __init__(self, process: Any, cpu_pipe: Any) -> None:
        self._process = process
        self._cpu_pipe = cpu_pipe
        self.returncode: int | None = None

    @property
    def pid(self) -> int:
        """The job's process id."""
        return self._process.pid

    def poll(self) -> int | None:
        """The exit status once the job has ended (a signal's: minus its number), else None."""
        if self.returncode is None and self._process.exitcode is not None:
            self.returncode = self._process.exitcode
            self._collect_cpu()
        return self.returncode

    def terminate(self) -> None:
        """SIGTERM to the job, as ``Popen.terminate``."""
        self._process.terminate()

    def send_signal(self, sig: int) -> None:
        """Send ``sig`` to the job, as ``Popen.send_signal`` (nothing once it has ended)."""
        if self.poll() is None:
            os.kill(self.pid, sig)

    def kill(self) -> None:
        """SIGKILL to the job, as ``Popen.kill``."""
        self._process.kill()

    def wait(self, timeout: float | None = None) -> int:
        """Wait for the job to end; its exit status. ``subprocess.TimeoutExpired`` after ``timeout`` seconds."""
        self._process.join(timeout)
        if self.poll() is None:
            raise subprocess.TimeoutExpired(self._process.name, timeout)
        return self.returncode

    def _collect_cpu(self) -> None:
        global _cpu_seconds
        try:
            if self._cpu_pipe.poll():
                _cpu_seconds += float(self._cpu_pipe.recv())
        except (EOFError, OSError):  # killed before it could say
            pass
        finally:
            self._cpu_pipe.close()


def children_cpu() -> float:
    """CPU seconds (user + system) of this process's finished children, the warm jobs that have ended (their
    own children included) and the running server (its imports) counted among them, as fresh interpreters
    would have been. Once the server is stopped and reaped, it and its jobs are in ``os.times()``'s children."""
    t = os.times()
    pid = forkserver._forkserver._forkserver_pid
    server = 0.0
    if _server_running and pid is not None:
        try:  # /proc/<pid>/stat: utime and stime are the 14th and 15th fields, in clock ticks
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            server = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        except (OSError, ValueError, IndexError):  # no /proc: the server's imports go uncounted
            server = 0.0
    return t.children_user + t.children_system + _cpu_seconds + server


def same_imports(a: dict[str, str], b: dict[str, str]) -> bool:
    """Whether environments ``a`` and ``b`` differ at most in ``PSPO_*`` variables, which no preloaded package
    reads (a job forked from a server started with ``a`` may run with ``b``)."""
    return {k: v for k, v in a.items() if not k.startswith("PSPO_")} == {
        k: v for k, v in b.items() if not k.startswith("PSPO_")
    }


def configure(env: dict[str, str] | None) -> None:
    """Jobs with this environment (but for ``PSPO_*`` variables) start warm from now on (None: none does); the
    server starts, with it, when the first of them does. A running server started with another environment
    is stopped first; one started with this environment but for ``PSPO_*`` variables serves on."""
    global _env
    if env is None or _server_env is None or not same_imports(env, _server_env):
        stop()
    _env = dict(env) if env is not None else None


def start(
    cmd: list[str], cwd: Path, env: dict[str, str], log: Path, err: Path | None = None
) -> WarmJob | subprocess.Popen:
    """Start ``cmd`` with its output appended to ``log`` (its error stream to ``err``, if given): forked from the
    server when the job can be (the configured environment but for ``PSPO_*`` variables; ``<this python> -m
    <module>`` or ``<this python> <script>.py``), else as a fresh interpreter (``subprocess.Popen``)."""
    how = None
    if len(cmd) > 2 and cmd[0] == sys.executable and cmd[1] == "-m":
        how, what, args = "-m", cmd[2], cmd[3:]
    elif len(cmd) > 1 and cmd[0] == sys.executable and cmd[1].endswith(".py") and not cmd[1].startswith("-"):
        how, what, args = "script", cmd[1], cmd[2:]
    if how is not None and _context is not None and _env is not None and same_imports(env, _env):
        return _start_warm(how, what, args, cwd, env, log, err)
    with open(log, "a") as out:
        if err is None:
            return subprocess.Popen(cmd, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT)
        with open(err, "a") as err_out:
            return subprocess.Popen(cmd, cwd=cwd, env=env, stdout=out, stderr=err_out)


def stop() -> None:
    """Stop the server, if one runs (the end of a pipeline run), and warm starts with it."""
    global _env, _server_env, _server_running, _cpu_seconds
    if _server_running:
        forkserver._forkserver._stop()  # the only way to stop it; the stdlib's own tests use it
        _server_running = False
        _cpu_seconds = 0.0  # reaped: the server's and its jobs' CPU are now in os.times()'s children
    _env = _server_env = None


def _start_warm(
    how: str, what: str, args: list[str], cwd: Path, env: dict[str, str], log: Path, err: Path | None
) -> WarmJob:
    if not _server_running:
        _start_server(env)
    receive, send = _context.Pipe(duplex=False)
    process = _context.Process(
        target=_run_module,
        args=(how, what, args, str(cwd), env, str(log), str(err) if err is not None else None, send),
        name=f"warm:{what}",
    )
    process.start()
    send.close()  # the child holds its own end
    return WarmJob(process, receive)


def _start_server(env: dict[str, str]) -> None:
    """Start the forkserver with ``env`` as its environment (what the preloaded packages read as they load)."""
    global _server_env, _server_running
    forkserver._forkserver._stop()  # one started elsewhere in this process would have another environment
    _context.set_forkserver_preload(list(PRELOAD))
    saved = dict(os.environ)
    os.environ.clear()
    os.environ.update(env)
    try:
        forkserver.ensure_running()
    finally:
        os.environ.clear()
        os.environ.update(saved)
    _server_env = dict(env)
    _server_running = True


def _run_module(
    how: str,
    what: str,
    args: list[str],
    cwd: str,
    env: dict[str, str],
    log: str,
    err: str | None,
    cpu_pipe: Any,
) -> None:
    """In the forked child: become ``python -m <what> <args>`` (``how`` "-m") or ``python <what> <args>`` (``how``
    "script") in ``cwd`` with ``env``, output to ``log`` (and the error stream to ``err``, if given)."""
    os.environ.clear()
    os.environ.update(env)
    os.chdir(cwd)
    # `python -m` puts the working folder first on the path, `python <script>` the script's folder
    first = cwd if how == "-m" else os.path.dirname(os.path.abspath(what))
    if first not in sys.path:
        sys.path.insert(0, first)
    sys.stdout.flush()
    sys.stderr.flush()
    for target, stream in ((log, 1), (err if err is not None else log, 2)):
        fd = os.open(target, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        os.dup2(fd, stream)
        os.close(fd)
    sys.argv = [what, *args]
    try:
        if how == "-m":
            runpy.run_module(what, run_name="__main__", alter_sys=True)
        else:
            runpy.run_path(what, run_name="__main__")
    finally:
        # What a fresh interpreter does on its way out (multiprocessing ends the child with os._exit).
        atexit._run_exitfuncs()
        sys.stdout.flush()
        sys.stderr.flush()
        t = os.times()
        try:
            cpu_pipe.send(t.user + t.system + t.children_user + t.children_system)
        except OSError:
            pass
