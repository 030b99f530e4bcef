"""Benchmark: a pipeline's stage jobs started in fresh interpreters against warm starts (forked from the
preloaded server of pspo_repro/pipelines/warm_start.py), the same jobs side by side in one run.

    PSPO_DATA_DIR=../shared/data .venv/bin/python scripts/bench_warm_start.py [--jobs 4] [--limit 4]

Each job is a small evaluation of the tiny model (``python -m pspo_repro.evaluate model=tiny eval=gsm8k
eval.limit=<limit> temperatures=[0.0] max_new_tokens=16``, its cell deleted after each job, so each does
the work), one at a time, one torch thread, as the mini pipeline's smoke runs start them. Prints each
mode's wall and CPU seconds per job (warm: the server's imports included, once) and the ratios.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

from pspo_repro.common.paths import PROJECT_ROOT
from pspo_repro.pipelines import warm_start


def run(mode: str, n_jobs: int, limit: int, scratch: Path) -> tuple[float, float]:
    """Run ``n_jobs`` evaluations one after another; (wall s, CPU s) in all."""
    out = scratch / mode
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false",
           "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1",
           "PSPO_RESULTS_DIR": str(out)}  # fmt: skip
    warm_start.configure(env if mode == "warm" else None)
    wall0, cpu0 = time.perf_counter(), warm_start.children_cpu()
    try:
        for i in range(n_jobs):
            out.mkdir(parents=True, exist_ok=True)
            log = out / f"job{i}.log"
            log.write_text("")
            cmd = [sys.executable, "-m", "pspo_repro.evaluate", "model=tiny", "eval=gsm8k", f"eval.limit={limit}",
                   "temperatures=[0.0]", "max_new_tokens=16", "backend=hf", f"hydra.run.dir={out / 'hydra'}"]  # fmt: skip
            job = warm_start.start(cmd, PROJECT_ROOT, env, log)
            if (mode == "warm") != isinstance(job, warm_start.WarmJob):
                raise SystemExit(f"{mode} job {i} started as {type(job).__name__}")
            if job.wait() != 0:
                raise SystemExit(f"{mode} job {i} failed; log {log}:\n{log.read_text()[-2000:]}")
            if "wrote " not in log.read_text():
                raise SystemExit(f"{mode} job {i} evaluated nothing; log {log}")
            shutil.rmtree(out / "eval")  # the next job evaluates again
        cpu = warm_start.children_cpu() - cpu0
    finally:
        warm_start.stop()
    return time.perf_counter() - wall0, cpu


def main() -> None:
    """Time both modes on the same jobs and print the figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=4)
    parser.add_argument("--limit", type=int, default=4, help="GSM8K test prompts per job")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        scratch = Path(tmp)
        run("cold", 1, args.limit, scratch / "warm-up")  # the tiny model's cache and the OS file cache
        results = {mode: run(mode, args.jobs, args.limit, scratch) for mode in ("cold", "warm")}
    print(f"jobs={args.jobs} (one at a time) eval.limit={args.limit} threads=1")
    for mode, (wall, cpu) in results.items():
        print(f"{mode}: {wall / args.jobs:6.2f} s wall/job  {cpu / args.jobs:6.2f} s CPU/job  "
              f"({wall:.1f} s wall, {cpu:.1f} s CPU in all)")  # fmt: skip
    (cw, cc), (ww, wc) = results["cold"], results["warm"]
    print(f"warm vs cold: {cw / ww:.2f}x wall, {cc / wc:.2f}x CPU")


if __name__ == "__main__":
    main()
