"""Hydra's Slurm launcher for this project (``hydra/launcher=slurm``, conf/hydra/launcher/slurm.yaml).

hydra-submitit-launcher 1.2.0's ``SlurmLauncher`` with two changes to how the driver waits:
- the stock launcher collects results in job order (``[j.results()[0] for j in jobs]``), so a job that
  died is only noticed after every job before it has ended, and submitit's Slurm watcher asks ``sacct``
  at most every 600 s. Here all jobs are polled together (``sacct`` at most every ``POLL_S``) and the first
  failure stops the driver at once, naming the overrides, the Slurm job id and state, and the log files;
- submission errors (no Slurm reachable, an unknown partition) are re-raised with the ``sbatch`` message
  and the settings that were used.
Jobs still running when the driver stops keep running: their results land in the same deterministic
folders, so the rerun of the same command skips or resumes them.

Requeue and resume: submitit calls ``checkpoint()`` (inherited: resubmit the same call) on the preemption
or time-limit signal and requeues the job; ``scontrol requeue`` and Slurm's own ``--requeue`` rerun the
same pickled call. Either way the task function runs again with the same overrides, so an entry point whose
output folder is a function of its overrides (``pspo_repro.train``) resumes instead of starting over.
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from hydra.core.singleton import Singleton
from hydra.core.utils import JobReturn, JobStatus, filter_overrides
from hydra_plugins.hydra_submitit_launcher.config import BaseQueueConf
from hydra_plugins.hydra_submitit_launcher.submitit_launcher import SlurmLauncher as _StockSlurmLauncher
from omegaconf import OmegaConf

from pspo_repro.common.cli import check_number

log = logging.getLogger(__name__)


def _seconds(name: str, default: str) -> float:
    """The environment's ``name`` as seconds >= 0 (``check_number``'s one-line UsageError otherwise)."""
    value: Any = os.environ.get(name, default)
    try:
        value = float(value)
    except ValueError:
        pass  # refused below, named as given
    return check_number(name, value, low=0)


# How often the driver asks Slurm about jobs whose result file is not there yet (seconds).
POLL_S = _seconds("PSPO_SLURM_POLL_S", "15")
# How long the driver waits for the result file of a job Slurm reports ended (seconds): a shared filesystem
# may show it late. submitit's default, 15 s, is also how long a job that died (killed, over memory) takes to
# be reported, since it never writes one; on one machine's disk (the local test cluster) the file is there at once.
RESULT_WAIT_S = _seconds("PSPO_SLURM_RESULT_WAIT_S", "15")


class SlurmJobFailed(RuntimeError):
    """A job of the sweep failed or died; the message names its overrides and log files."""


def _job_logs(job: Any) -> str:
    paths = job.paths
    return f"stdout {paths.stdout}, stderr {paths.stderr}"


def _preflight() -> None:
    """Fail in seconds, with the reason, where sbatch would retry for a minute or print little."""
    conf = os.environ.get("SLURM_CONF")
    hint = "For the local test cluster: scripts/slurm_local.sh start && source scripts/slurm_env.sh"
    if shutil.which("sbatch") is None:
        raise SlurmJobFailed(f"no Slurm here: `sbatch` is not on PATH. {hint}")
    if conf and not Path(conf).is_file():
        raise SlurmJobFailed(f"SLURM_CONF={conf} does not exist. {hint}")
    try:
        ping = subprocess.run(["scontrol", "ping"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise SlurmJobFailed(f"cannot ask Slurm whether its controller is up ({e}). {hint}") from e
    if ping.returncode != 0 or "DOWN" in ping.stdout:
        raise SlurmJobFailed(
            f"the Slurm controller is not reachable (SLURM_CONF={conf or '<default>'}): "
            f"{(ping.stdout + ping.stderr).strip()}. {hint}"
        )


class SlurmLauncher(_StockSlurmLauncher):
    """hydra-submitit-launcher's Slurm launcher with fail-fast polling of all jobs together."""

    def launch(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> Sequence[JobReturn]:
        """Submit one Slurm job per override list and wait, stopping at the first failure.

        A failure ends the driver with exit status 1 and ``error: <what failed, where its logs are>`` as the
        last lines of stderr, without the stack trace Hydra prints for a launcher's exception.
        """
        try:
            return self._launch(job_overrides, initial_job_idx)
        except SlurmJobFailed as exc:
            print(f"error: {exc}", file=sys.stderr, flush=True)
            raise SystemExit(1) from None

    def _launch(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> Sequence[JobReturn]:
        import submitit
        from submitit.slurm.slurm import SlurmJob

        assert self.config is not None
        assert len(job_overrides) > 0
        # Same executor set-up as hydra-submitit-launcher 1.2.0's BaseSubmititLauncher.launch.
        init_keys = {"submitit_folder", "max_num_timeout"}
        baseparams = set(OmegaConf.structured(BaseQueueConf).keys())
        params = {
            (k if k in baseparams else f"slurm_{k}"): v for k, v in self.params.items() if k not in init_keys
        }
        _preflight()
        sweep_dir = Path(str(self.config.hydra.sweep.dir))
        sweep_dir.mkdir(parents=True, exist_ok=True)
        folder = self.params["submitit_folder"]
        executor = submitit.AutoExecutor(
            cluster="slurm", folder=folder, slurm_max_num_timeout=self.params["max_num_timeout"]
        )
        executor.update_parameters(**params)

        log.info(f"Submitit 'slurm' sweep output dir : {sweep_dir}")
        job_params = []
        for idx, overrides in enumerate(job_overrides, start=initial_job_idx):
            log.info(f"\t#{idx} : {' '.join(filter_overrides(overrides))}")
            job_params.append(
                (list(overrides), "hydra.sweep.dir", idx, f"job_id_for_{idx}", Singleton.get_state())
            )
        try:
            jobs = executor.map_array(self, *zip(*job_params, strict=True))
        except Exception as e:  # re-raised with context
            settings = {
                k: self.params.get(k) for k in ("partition", "account", "qos", "gpus_per_node", "mem_gb")
            }
            raise SlurmJobFailed(
                f"sbatch refused the array of {len(job_params)} jobs: {str(e).strip()}\n"
                f"  settings: {settings}; SLURM_CONF={os.environ.get('SLURM_CONF', '<unset>')}; "
                f"submitit folder: {Path(str(folder)).parent}"
            ) from e
        log.info(f"Submitted Slurm array {jobs[0].job_id.split('_')[0]} ({len(jobs)} jobs); logs in {folder}")

        SlurmJob.watcher._delay_s = POLL_S  # class-level watcher shared by all jobs; default 600 s
        for job in jobs:  # submitit's wait for a late result file (its class default: 15 s)
            job._results_timeout_s = RESULT_WAIT_S
        results: list[JobReturn | None] = [None] * len(jobs)
        pending = dict(enumerate(jobs))
        while pending:
            for i, job in list(pending.items()):
                if not job.done():
                    continue
                del pending[i]
                overrides = " ".join(filter_overrides(job_overrides[i]))
                try:
                    ret = job.results()[0]
                except Exception as e:  # job died (SIGKILL, over memory, time limit)
                    raise SlurmJobFailed(self._failure(job, overrides, e, pending)) from e
                if ret.status == JobStatus.FAILED:  # the task function raised inside the job
                    err = ret._return_value
                    raise SlurmJobFailed(self._failure(job, overrides, err, pending, raised=True)) from err
                results[i] = ret
            if pending:
                time.sleep(1.0)
        return results  # type: ignore[return-value]

    @staticmethod
    def _failure(job: Any, overrides: str, err: BaseException, pending: dict, raised: bool = False) -> str:
        if raised:
            how = "the task raised"
        else:
            try:
                how = (
                    f"it died without a result, Slurm state {job.watcher.get_state(job.job_id, mode='force')}"
                )
            except Exception:  # the state is only informative here
                how = "it died without a result"
        lines = [
            f"Slurm job {job.job_id} [{overrides}] failed ({how}): {type(err).__name__}: {err}",
            f"  job log: {_job_logs(job)}",
        ]
        if pending:
            ids = [j.job_id for j in pending.values()]
            arrays = {i.split("_")[0] for i in ids}
            stop = " ".join(sorted(arrays)) if len(arrays) == 1 else " ".join(ids)  # one array: its id
            lines.append(
                f"  {len(ids)} other job(s) of the sweep keep running ({' '.join(ids[:8])}"
                f"{' ...' if len(ids) > 8 else ''}); they write to their own run folders. "
                f"Let them finish (squeue) before rerunning the same command, or stop them: scancel {stop}"
            )
        return "\n".join(lines)
