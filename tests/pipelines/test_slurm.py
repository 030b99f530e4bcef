"""The Slurm launcher (`hydra/launcher=slurm`) against a real one-node cluster (scripts/slurm_local.sh).

Uses the trivial Hydra app in tests/pipelines/slurm_app/ (no torch), so these check the launcher, not training:
a multirun is one array and completes; a job that dies without a result (SIGKILL, over its memory limit)
or whose task raises stops the driver within a minute, naming the job's log; a requeued or preempted job
resumes from its deterministic folder; bad input (unknown partition, no Slurm) fails fast with the reason.
The cluster fixture starts the cluster (installing Slurm if missing, which needs root); if it cannot, the
tests fail with the reason rather than skip.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pspo_repro.common.paths import PROJECT_ROOT

pytestmark = [pytest.mark.slurm, pytest.mark.slow]

ROOT = PROJECT_ROOT
SCRIPT = ROOT / "scripts" / "slurm_local.sh"
APP = ROOT / "tests" / "pipelines" / "slurm_app" / "app.py"
# Resources the local 2-core node can give; partition `debug` is the one slurm_local.sh defines.
LOCAL = [
    "hydra/launcher=slurm",
    "hydra.launcher.partition=debug",
    "hydra.launcher.gpus_per_node=0",
    "hydra.launcher.cpus_per_task=1",
    "hydra.launcher.mem_gb=1",
    "hydra.launcher.timeout_min=5",
]


@pytest.fixture(scope="session")
def slurm_env():
    """Environment for commands that talk to the local cluster; starts it if needed, stops it only then."""
    was_up = subprocess.run(["bash", str(SCRIPT), "status"], capture_output=True).returncode == 0
    t0 = time.monotonic()
    r = subprocess.run(["bash", str(SCRIPT), "start"], capture_output=True, text=True, timeout=1200)
    if r.returncode != 0:
        pytest.fail(
            f"the local Slurm cluster did not start (scripts/slurm_local.sh start):\n{r.stderr[-4000:]}"
        )
    conf = r.stdout.strip().splitlines()[-1].removeprefix("export SLURM_CONF=")
    print(f"[slurm] cluster ready in {time.monotonic() - t0:.1f} s, SLURM_CONF={conf}", file=sys.stderr)
    # One machine's disk: a job's result file is there once Slurm reports the job ended (no 15 s wait for it).
    env = dict(
        os.environ, SLURM_CONF=conf, PYTHONPATH=str(ROOT), PSPO_SLURM_POLL_S="5", PSPO_SLURM_RESULT_WAIT_S="1"
    )
    yield env
    if not was_up:
        subprocess.run(["bash", str(SCRIPT), "stop"], capture_output=True)


def _app_cmd(tmp_path: Path, *overrides: str) -> list[str]:
    return [
        sys.executable,
        str(APP),
        "-m",
        f"out_root={tmp_path / 'out'}",
        f"hydra.sweep.dir={tmp_path / 'multirun'}",
        f"hydra.searchpath=[file://{ROOT / 'conf'}]",
        *LOCAL,
        *overrides,
    ]


def run_app(env: dict, tmp_path: Path, *overrides: str, timeout: float = 180) -> subprocess.CompletedProcess:
    # cwd = project root: the job runs where sbatch was called and imports hydra_plugins from there.
    return subprocess.run(
        _app_cmd(tmp_path, *overrides), cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout
    )


def _attempts(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "attempts.jsonl").read_text().splitlines()]


def test_slurm_tests_share_one_worker(request):
    """Under ``--dist loadgroup`` (``make test``) every Slurm test is in xdist group ``slurm`` (its node id ends
    in ``@slurm``), so they take turns on the one local node; a conftest hook that ran after pytest-xdist's
    read of the marks once split them over the workers by file."""
    grouped = bool(getattr(request.config.option, "loadgroup", False))
    assert request.node.nodeid.endswith("@slurm") == grouped, request.node.nodeid


def test_multirun_is_one_array_and_completes(slurm_env, tmp_path):
    r = run_app(slurm_env, tmp_path, "x=1,2,3")
    assert r.returncode == 0, r.stderr
    for x in (1, 2, 3):
        assert json.loads((tmp_path / "out" / f"x{x}" / "result.json").read_text()) == {
            "x": x,
            "square": x * x,
        }
    # One array: job folders <array>_<task> share one array id, and Slurm accounted each task as COMPLETED.
    folders = sorted(
        p.name for p in (tmp_path / "multirun" / ".submitit").iterdir() if p.is_dir() and "_" in p.name
    )
    arrays = {name.split("_")[0] for name in folders}
    assert len(folders) == 3 and len(arrays) == 1, folders
    # slurmctld sends job records to slurmdbd asynchronously: give accounting a few seconds to catch up.
    deadline = time.monotonic() + 30
    while True:
        states = subprocess.run(
            ["sacct", "-n", "-X", "-P", "-o", "JobID,State", "-j", next(iter(arrays))],
            env=slurm_env,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.split()
        done = len(states) == 3 and all(s.endswith("|COMPLETED") for s in states)
        if done or time.monotonic() > deadline:
            break
        time.sleep(1)
    assert done, states


@pytest.mark.parametrize(
    ("mode", "extra", "expect"),
    [
        ("sigkill", [], "Killed"),
        # 300 MB limit, 600 MB touched: jobacct_gather + OverMemoryKill kill the step (no cgroups here).
        ("oom", ["hydra.launcher.mem_gb=null", "hydra.launcher.mem_per_cpu=300M"], "exceeded memory limit"),
    ],
)
def test_job_dying_without_result_fails_the_driver_fast(slurm_env, tmp_path, mode, extra, expect):
    t0 = time.monotonic()
    r = run_app(slurm_env, tmp_path, "x=7", f"mode={mode}", *extra, timeout=120)
    elapsed = time.monotonic() - t0
    assert r.returncode != 0
    assert elapsed < 60, f"driver took {elapsed:.0f} s to notice the dead job"
    assert "died without a result" in r.stderr and expect in r.stderr, r.stderr[-3000:]
    log_line = next(line for line in r.stderr.splitlines() if "job log: stdout " in line)
    stdout_log = Path(log_line.split("job log: stdout ")[1].split(",")[0])
    assert stdout_log.is_file(), log_line
    assert not (tmp_path / "out" / "x7" / "result.json").exists()


def test_task_exception_is_reported_with_log(slurm_env, tmp_path):
    r = run_app(slurm_env, tmp_path, "x=8", "mode=raise", timeout=120)
    assert r.returncode != 0
    assert "the task raised" in r.stderr and "raising on purpose" in r.stderr, r.stderr[-3000:]
    assert "job log: stdout " in r.stderr


@pytest.mark.parametrize("how", ["scontrol_requeue", "preempt_signal"])
def test_requeued_job_resumes(slurm_env, tmp_path, how):
    """`scontrol requeue` reruns the pickled call; the preemption signal (USR2) goes through submitit's
    checkpoint() (the launcher's: resubmit the same call) and requeue. Both resume from state.json."""
    steps = 40
    driver = subprocess.Popen(
        _app_cmd(tmp_path, "x=9", f"steps={steps}", "step_s=0.3"),
        cwd=ROOT,
        env=slurm_env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    out = tmp_path / "out" / "x9"
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            state = out / "state.json"
            if state.exists() and json.loads(state.read_text())["step"] >= 4:
                break
            time.sleep(0.25)
        else:
            pytest.fail("the job did not reach step 4 within 60 s")
        job_id = _attempts(out)[0]["slurm_job"]
        if how == "scontrol_requeue":
            cmd = ["scontrol", "requeue", job_id]
        else:
            cmd = ["scancel", "--signal=USR2", job_id]
        subprocess.run(cmd, env=slurm_env, check=True, capture_output=True)
        _, err = driver.communicate(timeout=150)
    finally:
        if driver.poll() is None:
            driver.kill()
            subprocess.run(["scancel", "--name=app"], env=slurm_env, capture_output=True)
    assert driver.returncode == 0, err[-3000:]
    attempts = _attempts(out)
    assert len(attempts) == 2, attempts
    assert attempts[1]["slurm_job"] == job_id  # same Slurm job, run again
    assert 4 <= attempts[1]["start_step"] < steps, attempts  # resumed, not started over
    assert json.loads((out / "state.json").read_text())["step"] == steps
    assert (out / "result.json").exists()


def test_unknown_partition_fails_with_sbatch_message(slurm_env, tmp_path):
    r = run_app(slurm_env, tmp_path, "x=1", "hydra.launcher.partition=no_such_partition", timeout=60)
    assert r.returncode == 1
    assert "sbatch refused" in r.stderr and "invalid partition" in r.stderr.lower(), r.stderr[-3000:]
    # the driver's own message, not Hydra's stack trace of the launcher's exception
    assert "Traceback" not in r.stderr and "error: sbatch refused" in r.stderr, r.stderr[-3000:]
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("broken", ["missing_conf", "no_sbatch"])
def test_no_slurm_reachable_fails_fast(slurm_env, tmp_path, broken):
    env = dict(slurm_env)
    if broken == "missing_conf":
        env["SLURM_CONF"] = str(tmp_path / "nowhere" / "slurm.conf")
        expect = "does not exist"
    else:
        env["PATH"] = str(Path(sys.executable).parent)  # python only: no sbatch
        expect = "`sbatch` is not on PATH"
    t0 = time.monotonic()
    r = subprocess.run(
        _app_cmd(tmp_path, "x=1"), cwd=ROOT, env=env, capture_output=True, text=True, timeout=60
    )
    assert r.returncode == 1
    assert expect in r.stderr and "Traceback" not in r.stderr, r.stderr[-3000:]
    assert time.monotonic() - t0 < 20


def test_array_sbatch_runs_each_line_and_requeues_itself_on_usr1(slurm_env, tmp_path):
    """slurm/array.sbatch without submitit: one array task per line; USR1 (what --signal=B:USR1@120 sends
    before the time limit) makes the batch shell requeue the job, and the rerun resumes."""
    lines = tmp_path / "grid.lines"
    subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "sweep_to_lines.py"), "--config-dir", str(APP.parent)]
        + ["--config-name", "config", "--out", str(lines), "x=1,2", f"out_root={tmp_path / 'out'}"]
        + ["steps=30", "step_s=0.3"],
        check=True,
        capture_output=True,
    )
    env = dict(slurm_env, PSPO_CMD=f"{sys.executable} {APP}")
    sub = subprocess.run(
        ["sbatch", "--parsable", "--array=0-1", "-p", "debug", "-c1", "--mem=500M", "--time=5"]
        + ["-o", str(tmp_path / "%A_%a.out"), str(ROOT / "slurm" / "array.sbatch"), str(lines)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    array = sub.stdout.strip()
    out = tmp_path / "out"
    deadline = time.monotonic() + 60
    while not (
        (out / "x1" / "state.json").exists()
        and json.loads((out / "x1" / "state.json").read_text())["step"] >= 4
    ):
        assert time.monotonic() < deadline, "array task 0 did not reach step 4 within 60 s"
        time.sleep(0.25)
    subprocess.run(["scancel", "--signal=USR1", "--batch", f"{array}_0"], env=env, check=True)
    deadline = time.monotonic() + 120
    while not all((out / f"x{x}" / "result.json").exists() for x in (1, 2)):
        assert time.monotonic() < deadline, f"array {array} did not finish: {list(tmp_path.glob('*.out'))}"
        time.sleep(1)
    first = _attempts(out / "x1")
    assert len(first) == 2 and 4 <= first[1]["start_step"] < 30, first
    assert len(_attempts(out / "x2")) == 1
    log0 = next(tmp_path.glob(f"{array}_0.out")).read_text()
    assert "requeueing (restart 1 of 3)" in log0 and "restart 1 on" in log0, log0
