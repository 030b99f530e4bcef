"""A trivial Hydra app for the Slurm launcher tests (tests/pipelines/test_slurm.py); no torch, starts in ~1 s.

Output folder ``{out_root}/x{x}/`` is a function of the overrides, like a training run folder, so a rerun
of the same job (``scontrol requeue``, submitit's requeue after a timeout) resumes from ``state.json``.
mode: ok (count to ``steps``, write result.json) | raise | sigkill (dies without a result) | oom.
"""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import hydra
from omegaconf import DictConfig


def _write_json(path: Path, obj: dict) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(obj))
    os.replace(tmp, path)  # atomic: a killed job never leaves a half-written file


@hydra.main(version_base=None, config_path=".", config_name="config")
def main(cfg: DictConfig) -> int:
    out = Path(cfg.out_root) / f"x{cfg.x}"
    out.mkdir(parents=True, exist_ok=True)
    state_file = out / "state.json"
    start = json.loads(state_file.read_text())["step"] if state_file.exists() else 0
    with open(out / "attempts.jsonl", "a") as f:  # one line per (re)start: the tests read it
        f.write(json.dumps({"start_step": start, "slurm_job": os.environ.get("SLURM_JOB_ID")}) + "\n")
    if cfg.mode == "raise":
        raise ValueError(f"x={cfg.x}: raising on purpose")
    if cfg.mode == "sigkill":
        os.kill(os.getpid(), signal.SIGKILL)
    if cfg.mode == "oom":
        hog = bytearray(cfg.oom_mb * 2**20)
        hog[::4096] = b"x" * len(hog[::4096])  # touch every page so RSS really grows
        time.sleep(30)  # the accounting poller (every 2 s) sees it and kills the step
    for step in range(start, cfg.steps):
        time.sleep(cfg.step_s)
        _write_json(state_file, {"step": step + 1})
    _write_json(out / "result.json", {"x": cfg.x, "square": cfg.x * cfg.x})
    return cfg.x * cfg.x


if __name__ == "__main__":
    main()
