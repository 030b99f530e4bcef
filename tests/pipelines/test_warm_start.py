"""Warm starts (pspo_repro/pipelines/warm_start.py): a job forked from the preloaded server runs as
``python -m`` would. The server here preloads one small module of the test's own, not the ML stack; that a
warm pipeline computes what a fresh interpreter computes, bit for bit, is test_mini's
test_reduced_pipeline_end_to_end (a warm run, then a recompute with warm_start=false)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from pspo_repro.pipelines import warm_start

PROBE = """
import atexit, json, os, sys, time
atexit.register(print, "atexit ran", flush=True)  # what a fresh interpreter runs on its way out
print(json.dumps({"name": __name__, "argv": sys.argv[1:], "cwd": os.getcwd(), "env": os.environ.get("WARM_PROBE"),
                  "at_import": getattr(sys.modules.get("warm_preloaded"), "SEEN", None), "pid": os.getpid()}), flush=True)
if sys.argv[1:2] == ["busy"]:
    t = time.process_time()
    while time.process_time() - t < 0.3:
        pass
if sys.argv[1:2] == ["sleep"]:
    time.sleep(60)
print("to stderr", file=sys.stderr, flush=True)
sys.exit(int(sys.argv[-1]) if sys.argv[-1].isdigit() else 0)
"""


@pytest.fixture
def probe(tmp_path, monkeypatch):
    """A module to run (``-m warm_probe`` in ``tmp_path``) and a preloaded one that records WARM_PROBE as it loads."""
    (tmp_path / "warm_probe.py").write_text(PROBE)
    (tmp_path / "warm_preloaded.py").write_text("import os\nSEEN = os.environ.get('WARM_PROBE')\n")
    monkeypatch.setattr(warm_start, "PRELOAD", ("warm_preloaded",))
    env = {**os.environ, "WARM_PROBE": "server", "PYTHONPATH": str(tmp_path)}  # the server finds it there
    warm_start.configure(env)
    yield tmp_path, env
    warm_start.stop()


def _run(tmp_path, env, *args):
    log = tmp_path / f"log{len(list(tmp_path.glob('log*')))}.txt"
    log.write_text("$ header\n")
    job = warm_start.start([sys.executable, "-m", "warm_probe", *args], tmp_path, env, log)
    return job, log


def _finish(job, timeout=60.0):
    deadline = time.monotonic() + timeout
    while job.poll() is None:
        assert time.monotonic() < deadline, "job did not finish"
        time.sleep(0.05)
    return job.returncode


def test_a_warm_job_runs_as_python_dash_m(probe):
    tmp_path, env = probe
    job, log = _run(tmp_path, env, "a=1", "b c", "3")
    assert isinstance(job, warm_start.WarmJob)
    assert _finish(job) == 3  # the exit status is the job's
    lines = log.read_text().splitlines()
    assert lines[0] == "$ header" and lines[-2:] == [
        "to stderr",
        "atexit ran",
    ]  # after the header, stderr too
    seen = json.loads(lines[1])
    assert seen["name"] == "__main__" and seen["argv"] == ["a=1", "b c", "3"]
    assert seen["cwd"] == str(tmp_path) and seen["env"] == "server"
    assert seen["at_import"] == "server"  # preloaded in the server, with the jobs' environment
    assert seen["pid"] != os.getpid() and seen["pid"] == job.pid


def test_another_environment_or_command_runs_in_a_fresh_interpreter(probe):
    tmp_path, env = probe
    job, log = _run(tmp_path, {**env, "WARM_PROBE": "other"}, "0")
    assert isinstance(job, subprocess.Popen)
    assert _finish(job) == 0
    seen = json.loads(log.read_text().splitlines()[1])
    assert seen["env"] == "other" and seen["at_import"] is None  # nothing preloaded there
    cold = warm_start.start([sys.executable, "-u", "-m", "warm_probe", "0"], tmp_path, env, log)  # a flag
    assert isinstance(cold, subprocess.Popen)
    _finish(cold)
    warm_start.configure(None)
    assert isinstance(_run(tmp_path, env, "0")[0], subprocess.Popen)


def test_terminate_stops_a_warm_job_and_stop_ends_the_server(probe):
    tmp_path, env = probe
    job, log = _run(tmp_path, env, "sleep")
    deadline = time.monotonic() + 60
    while "pid" not in log.read_text():
        assert time.monotonic() < deadline
        time.sleep(0.05)
    job.terminate()
    assert job.wait() == -15 and job.poll() == -15
    server = warm_start.forkserver._forkserver._forkserver_pid
    os.kill(server, 0)  # running
    warm_start.stop()
    with pytest.raises(ProcessLookupError):
        os.kill(server, 0)


def test_cpu_of_warm_jobs_is_counted_once(probe):
    tmp_path, env = probe
    before = warm_start.children_cpu()
    job, _ = _run(tmp_path, env, "busy")
    assert _finish(job) == 0
    counted = warm_start.children_cpu()
    assert counted - before >= 0.25  # the job's 0.3 s busy loop (not our own CPU)
    warm_start.stop()  # the reaped server brings its jobs' CPU into os.times(): not counted a second time
    assert abs(warm_start.children_cpu() - counted) < 0.15


def test_pspo_variables_may_differ_and_the_job_sees_its_own(probe):
    """Only this project's modules read PSPO_* variables, and each job imports them itself: a job whose
    environment differs from the server's only there starts warm, with its own values; configuring such an
    environment keeps the running server. Any other difference starts a fresh interpreter."""
    tmp_path, env = probe
    job, log = _run(tmp_path, {**env, "PSPO_RESULTS_DIR": "job-a"}, "0")
    assert isinstance(job, warm_start.WarmJob) and _finish(job) == 0
    server = warm_start.forkserver._forkserver._forkserver_pid
    warm_start.configure({**env, "PSPO_RESULTS_DIR": "job-b", "PSPO_LOG_DIR": "x"})
    job, log = _run(tmp_path, {**env, "PSPO_RESULTS_DIR": "job-c"}, "0")
    assert isinstance(job, warm_start.WarmJob) and _finish(job) == 0
    assert warm_start.forkserver._forkserver._forkserver_pid == server  # the same server
    assert isinstance(_run(tmp_path, {**env, "OTHER": "1"}, "0")[0], subprocess.Popen)
    assert warm_start.same_imports({"A": "1", "PSPO_X": "1"}, {"A": "1"})
    assert not warm_start.same_imports({"A": "1"}, {"A": "2", "PSPO_X": "1"})
    assert not warm_start.same_imports({"A": "1"}, {"A": "1", "PSPO": "1"})  # the prefix is PSPO_
    warm_start.configure({**env, "OTHER": "1"})  # another environment: the server is stopped
    with pytest.raises(ProcessLookupError):
        os.kill(server, 0)


def test_a_script_runs_as_python_script_with_its_own_error_stream(probe):
    """``<python> <script>.py args``: the script as __main__, its folder first on the path, argv[0] its path."""
    tmp_path, env = probe
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "beside.py").write_text("WHERE = 'beside the script'\n")
    script = tmp_path / "sub" / "script.py"
    script.write_text(
        "import sys, beside\n"
        "print(__name__, sys.argv, beside.WHERE, sys.path[0])\n"
        "print('err', file=sys.stderr)\n"
        "sys.exit(int(sys.argv[-1]))\n"
    )
    out, err = tmp_path / "out.txt", tmp_path / "err.txt"
    job = warm_start.start([sys.executable, str(script), "a b", "4"], tmp_path, env, out, err)
    assert isinstance(job, warm_start.WarmJob)
    assert job.wait(timeout=60) == 4
    assert out.read_text() == f"__main__ {[str(script), 'a b', '4']} beside the script {script.parent}\n"
    assert err.read_text() == "err\n"
    cold = warm_start.start([sys.executable, str(script), "5"], tmp_path, {**env, "OTHER": "1"}, out, err)
    assert isinstance(cold, subprocess.Popen) and cold.wait(timeout=60) == 5
    assert (
        out.read_text().splitlines()[-1] == f"__main__ {[str(script), '5']} beside the script {script.parent}"
    )
    assert err.read_text() == "err\nerr\n"  # appended, as the warm job's
    code = [sys.executable, "-c", "print(1)"]  # code in an argument: a fresh interpreter
    assert isinstance(warm_start.start(code, tmp_path, env, out), subprocess.Popen)


def test_kill_send_signal_and_wait_timeout_as_popen(probe):
    tmp_path, env = probe
    job, log = _run(tmp_path, env, "sleep")
    with pytest.raises(subprocess.TimeoutExpired):
        job.wait(timeout=0.2)
    job.send_signal(signal.SIGKILL)
    assert job.wait(timeout=30) == -signal.SIGKILL
    job.send_signal(signal.SIGTERM)  # ended: nothing to signal, no error
    job, log = _run(tmp_path, env, "sleep")
    job.kill()
    assert job.wait(timeout=30) == -signal.SIGKILL
