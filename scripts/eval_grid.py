#!/usr/bin/env python
"""Evaluate every finished training run of a grid with one Hydra multirun (any launcher, e.g. Slurm).

    scripts/eval_grid.py 'runs/qwen2p5_1p5b/*/seed*' -- eval=all hydra/launcher=slurm
    scripts/eval_grid.py 'runs/tiny/*/seed*' --aggregate -- eval=gsm8k eval.limit=50 temperatures=[0.0]

Patterns are globs relative to the results folder (PSPO_RESULTS_DIR, else <project>/results) or absolute.
A run is evaluated only when its run.json says ``finished``; the others are listed and left out (a grid
still training is not evaluated half-way). Everything after ``--`` goes to ``python -m pspo_repro.evaluate``
unchanged. Each job is ``run=<folder>``: finished cells are skipped by the evaluator, so a rerun only fills
gaps. With ``--aggregate``, ``python -m pspo_repro.aggregate`` runs after a successful sweep.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import subprocess
import sys
from pathlib import Path

from pspo_repro.common.overrides import override, sweep
from pspo_repro.common.paths import results_dir
from pspo_repro.common.run_folder import RunFolder

ROOT = Path(__file__).resolve().parents[1]


def results_root() -> Path:
    """The results folder the patterns are relative to: the commands' own (``paths.results_dir``)."""
    return results_dir()


def find_runs(patterns: list[str]) -> tuple[list[Path], list[tuple[Path, str]]]:
    """(finished run folders, [(unfinished folder, why)]), each sorted, no duplicates."""
    finished, skipped, seen = [], [], set()
    for pattern in patterns:
        full = pattern if os.path.isabs(pattern) else str(results_root() / pattern)
        for hit in sorted(glob.glob(full)):
            folder = Path(hit).resolve()
            if folder in seen or not folder.is_dir():
                continue
            seen.add(folder)
            try:
                status = RunFolder(folder).load().get("status")
            except FileNotFoundError:
                skipped.append((folder, "no run.json"))
                continue
            except json.JSONDecodeError as e:
                skipped.append((folder, f"run.json unreadable ({e.msg})"))
                continue
            if status == "finished":
                finished.append(folder)
            else:
                skipped.append((folder, f"status {status!r}"))
    return finished, skipped


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    ours, passthrough = (
        (argv[: argv.index("--")], argv[argv.index("--") + 1 :]) if "--" in argv else (argv, [])
    )
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("patterns", nargs="+", help="run folder globs, e.g. 'runs/tiny/*/seed*'")
    ap.add_argument("--aggregate", action="store_true", help="run pspo_repro.aggregate after the sweep")
    ap.add_argument("--dry-run", action="store_true", help="print the command, run nothing")
    a = ap.parse_args(ours)

    runs, skipped = find_runs(a.patterns)
    for folder, why in skipped:
        print(f"[eval_grid] skip {folder}: {why}", file=sys.stderr)
    if not runs:
        print(
            f"error: no finished run matches {' '.join(a.patterns)} under {results_root()}", file=sys.stderr
        )
        return 2
    print(f"[eval_grid] {len(runs)} finished run(s), {len(skipped)} skipped", file=sys.stderr)
    sweep_dir = Path(os.environ.get("PSPO_LOG_DIR", "outputs")) / "eval-multirun"
    # Each run folder one quoted value: commas or brackets in a tag cannot split Hydra's sweep list.
    cmd = [sys.executable, "-m", "pspo_repro.evaluate", "-m", sweep("run", runs)]
    # Our default sweep folder (Slurm logs under .submitit/); a hydra.sweep.dir after `--` wins.
    cmd += [override("hydra.sweep.dir", sweep_dir), *passthrough]
    if a.dry_run:
        print(" ".join(cmd))
        return 0
    rc = subprocess.run(cmd, cwd=ROOT).returncode
    if rc != 0:
        print(
            f"error: the evaluation sweep failed (exit {rc}); finished cells are kept, rerun to fill gaps",
            file=sys.stderr,
        )
        return rc
    if a.aggregate:
        return subprocess.run([sys.executable, "-m", "pspo_repro.aggregate"], cwd=ROOT).returncode
    return 0


if __name__ == "__main__":
    sys.exit(main())
