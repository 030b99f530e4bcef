"""Benchmark: commands whose heavy imports run with the garbage collector paused and are then frozen
(``pspo_repro.common.startup.import_frozen``) against the same commands with that step a no-op, side by side.

    PSPO_DATA_DIR=../shared/data .venv/bin/python scripts/bench_startup.py [--rounds 3]

Each round runs, in alternating order, a four-step training of the tiny model (``python -m pspo_repro.train
model=tiny method=noclip reward=smoke_length trainer.max_steps=4 ...``) and a small evaluation (``python -m
pspo_repro.evaluate model=tiny eval=gsm8k eval.limit=4 temperatures=[0.0,0.8] n_samples=2``), each in a fresh
interpreter with one torch thread, once as shipped and once with ``import_frozen`` replaced by a no-op
(through ``python -c``, the module then run as ``python -m`` would). Every job starts from an empty results
folder, so each does all of its work. Prints the median CPU and wall seconds per command and the ratios, and
checks that both modes computed the same numbers: the final checkpoint's weights and every metrics.jsonl value but
the timings, and each evaluation cell's per-prompt records, byte for byte.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from pspo_repro.common.paths import PROJECT_ROOT

COMMANDS = {
    "train": ["pspo_repro.train", "model=tiny", "method=noclip", "logger=none", "reward=smoke_length",
              "trainer.max_steps=4", "trainer.max_completion_length=16", "trainer.eval_steps=null",
              "trainer.save_steps=1", "trainer.disable_tqdm=true"],
    "evaluate": ["pspo_repro.evaluate", "model=tiny", "eval=gsm8k", "eval.limit=4", "temperatures=[0.0,0.8]",
                 "n_samples=2", "max_new_tokens=16", "backend=hf"],
}  # fmt: skip

# "before": the module run as `python -m` runs it, with the start-up step a no-op.
WITHOUT = (
    "import runpy, sys; import pspo_repro.common.startup as s; s.import_frozen = lambda modules: None; "
    "sys.argv = [sys.argv[1], *sys.argv[2:]]; runpy.run_module(sys.argv[0], run_name='__main__', alter_sys=True)"
)


def run_once(command: str, mode: str, scratch: Path, i: int) -> tuple[float, float]:
    """(CPU s, wall s) of one command in a fresh interpreter, from an empty results folder."""
    module, *args = COMMANDS[command]
    out = scratch / f"{command}-{mode}-{i}"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false",
           "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "WANDB_MODE": "disabled",
           "PSPO_RESULTS_DIR": str(out / "results"), "PSPO_LOG_DIR": str(out / "logs")}  # fmt: skip
    cmd = (
        [sys.executable, "-m", module, *args]
        if mode == "after"
        else [sys.executable, "-c", WITHOUT, module, *args]
    )
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    done = subprocess.run(cmd, cwd=PROJECT_ROOT, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise SystemExit(f"{command} ({mode}) failed:\n{done.stderr[-3000:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return cpu, wall


def numbers(command: str, mode: str, scratch: Path, i: int) -> dict[str, bytes]:
    """What a command computed, by file: weights of every checkpoint, metrics.jsonl without its timing keys,
    each evaluation cell's per-prompt records (the cell's own timing fields left out)."""
    results = scratch / f"{command}-{mode}-{i}" / "results"
    out = {}
    for path in sorted(results.rglob("*")):
        rel = path.relative_to(results).as_posix()
        if path.name == "model.safetensors":
            out[rel] = path.read_bytes()
        elif path.name == "metrics.jsonl":
            rows = [json.loads(line) for line in path.read_text().splitlines()]
            kept = [{k: v for k, v in r.items() if not any(t in k for t in ("runtime", "per_second", "time"))}
                    for r in rows]  # fmt: skip
            out[rel] = json.dumps(kept, sort_keys=True).encode()
        elif rel.startswith("eval/") and path.name.startswith("T") and path.suffix == ".json":
            out[rel] = json.dumps(json.loads(path.read_text())["per_prompt"], sort_keys=True).encode()
    if not out:
        raise SystemExit(f"{command} ({mode}) left nothing to compare under {results}")
    return out


def main() -> None:
    """Run both modes of both commands, alternating, and print the medians and ratios."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    if not os.environ.get("PSPO_DATA_DIR"):
        raise SystemExit("set PSPO_DATA_DIR to the offline data folder (../shared/data)")
    times: dict[tuple[str, str], list[tuple[float, float]]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(args.rounds):
            for command in COMMANDS:
                for mode in ("before", "after") if i % 2 == 0 else ("after", "before"):
                    times.setdefault((command, mode), []).append(run_once(command, mode, Path(tmp), i))
                    cpu, wall = times[command, mode][-1]
                    print(f"round {i}: {command:8s} {mode:6s} {cpu:6.2f} CPU s {wall:6.2f} s", flush=True)
                before, after = (numbers(command, m, Path(tmp), i) for m in ("before", "after"))
                if before != after:
                    differ = sorted(k for k in before.keys() | after.keys() if before.get(k) != after.get(k))
                    raise SystemExit(
                        f"round {i}: {command} computed different numbers in the two modes: {differ}"
                    )
                print(
                    f"round {i}: {command:8s} the same numbers both ways ({len(after)} files compared)",
                    flush=True,
                )
    print(f"\nmedians over {args.rounds} rounds (one torch thread):")
    for command in COMMANDS:
        b_cpu, b_wall = (statistics.median(x[k] for x in times[command, "before"]) for k in (0, 1))
        a_cpu, a_wall = (statistics.median(x[k] for x in times[command, "after"]) for k in (0, 1))
        print(f"  {command:8s} before {b_cpu:6.2f} CPU s {b_wall:6.2f} s | after {a_cpu:6.2f} CPU s {a_wall:6.2f} s"
              f" | {b_cpu / a_cpu:.2f}x CPU, {b_wall / a_wall:.2f}x wall")  # fmt: skip


if __name__ == "__main__":
    main()
