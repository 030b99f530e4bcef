"""Where a training run's config travels: the walk of ``cfg`` from ``training.grpo.run`` through the package.

Runs one tiny GRPO run (model=tiny, 1 optimizer step, in a scratch results folder) in this process under
``sys.settrace`` and records every call into a ``pspo_repro`` function that receives a config node (an OmegaConf
``DictConfig`` or ``ListConfig`` argument). Consecutive calls in one file are one *stay*; a stay in a file the walk
already left is a *return* there. Prints the stays, the files, each file's visits and the returns, so two trees
compare side by side (issue 54: "the walk of cfg from training's entry should show half today's returns to
grpo.py and run_dir.py"):

    .venv/bin/python scripts/cfg_walk.py                 # this tree
    (cd <other clone> && <venv>/bin/python <this tree>/scripts/cfg_walk.py)
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import json
import os
import sys
import tempfile
from pathlib import Path

OVERRIDES = [
    "model=tiny",
    "method=pspo",
    "trainer.max_steps=1",
    "trainer.eval_steps=null",
    "trainer.eval_on_start=false",
    "trainer.log_completions=false",
    "trainer.disable_tqdm=true",
    "logger=none",
]


def walk(overrides: list[str]) -> list[str]:
    """The package files, in call order, of every call that received a config node during one tiny run."""
    from omegaconf import DictConfig, ListConfig

    from pspo_repro.common.cli import compose_config
    from pspo_repro.common.paths import CONF_DIR, PROJECT_ROOT
    from pspo_repro.training import grpo

    package = str(PROJECT_ROOT / "pspo_repro")
    calls: list[str] = []

    def tracer(frame, event, arg):
        if event != "call":
            return None
        path = frame.f_code.co_filename
        if path.startswith(package):
            code = frame.f_code
            names = code.co_varnames[: code.co_argcount + code.co_kwonlyargcount]
            if any(isinstance(frame.f_locals.get(n), (DictConfig, ListConfig)) for n in names):
                calls.append(f"{os.path.relpath(path, package)}:{code.co_name}")
        return None

    cfg = compose_config(CONF_DIR, "train", overrides)
    sys.settrace(tracer)
    try:
        with contextlib.redirect_stdout(sys.stderr):  # the run's own prints: stdout is the summary's
            grpo.run(cfg)
    finally:
        sys.settrace(None)
    return calls


def summary(calls: list[str]) -> dict:
    """Stays (runs of consecutive calls in one file), visits per file and returns (stays in a file left before)."""
    files = [c.split(":")[0] for c in calls]
    stays = [f for i, f in enumerate(files) if i == 0 or files[i - 1] != f]
    visits = collections.Counter(stays)
    seen: set[str] = set()
    returns = collections.Counter()
    for f in stays:
        if f in seen:
            returns[f] += 1
        seen.add(f)
    return {
        "calls": len(calls),
        "walk": [c for i, c in enumerate(calls) if i == 0 or calls[i - 1].split(":")[0] != c.split(":")[0]],
        "stays": len(stays),
        "files": len(visits),
        "returns": sum(returns.values()),
        "visits": dict(visits.most_common()),
        "returns_per_file": dict(returns.most_common()),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "overrides", nargs="*", default=OVERRIDES, help="train overrides (default: a 1-step tiny run)"
    )
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="cfg_walk-") as tmp:
        os.environ["PSPO_RESULTS_DIR"] = tmp
        os.environ.setdefault("WANDB_MODE", "disabled")
        calls = walk(args.overrides)
    import pspo_repro

    print(json.dumps({"package": str(Path(pspo_repro.__file__).parent), **summary(calls)}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
