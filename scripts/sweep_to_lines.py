#!/usr/bin/env python
"""Expand a Hydra sweep into one line of overrides per job, for slurm/array.sbatch (no submitit needed).

    scripts/sweep_to_lines.py experiment=paper_qwen2p5_1p5b method=clip,pspo seed=0,1,2
    scripts/sweep_to_lines.py --out results/slurm/pspo_grid.lines hparams_search=pspo seed=0

The expansion is Hydra's own: the config is composed in MULTIRUN mode (so an hparams_search file's
``hydra.sweeper.params`` count, exactly as under ``-m``), the overrides are parsed by Hydra's override
parser, and BasicSweeper.split_arguments builds the product. Each line therefore holds the same overrides
that ``-m`` would give that job, so it lands in the same run folder. Lines are shell-quoted per override.
"""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def sweep_lines(overrides: list[str], config_dir: Path, config_name: str) -> list[list[str]]:
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
    from hydra._internal.hydra import Hydra
    from hydra._internal.utils import create_config_search_path
    from hydra.core.global_hydra import GlobalHydra
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.types import RunMode

    GlobalHydra.instance().clear()
    hydra = Hydra.create_main_hydra2(
        task_name="sweep_to_lines", config_search_path=create_config_search_path(str(config_dir))
    )
    try:
        cfg = hydra.compose_config(
            config_name, overrides, run_mode=RunMode.MULTIRUN, with_log_configuration=False
        )
        # What BasicSweeper.sweep does: the config's sweeper params first, then the command line.
        params = cfg.hydra.sweeper.get("params") or {}
        args = [f"{k}={v}" for k, v in params.items()] + list(cfg.hydra.overrides.task)
        parsed = OverridesParser.create(config_loader=hydra.config_loader).parse_overrides(args)
        (jobs,) = BasicSweeper.split_arguments(parsed, max_batch_size=None)
    finally:
        GlobalHydra.instance().clear()
    if cfg.hydra.get("mode") is not None and str(cfg.hydra.mode) == "RunMode.MULTIRUN":
        # e.g. hparams_search files set hydra.mode=MULTIRUN: one line must run one job, not a sweep.
        jobs = [job + ["hydra.mode=RUN"] for job in jobs]
    return jobs


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config-dir", type=Path, default=ROOT / "conf")
    ap.add_argument("--config-name", default="train")
    ap.add_argument("--out", type=Path, help="write the lines here (default: stdout)")
    ap.add_argument("overrides", nargs="*", help="Hydra overrides, sweeps as key=a,b,c")
    a = ap.parse_args(argv)
    try:
        jobs = sweep_lines(a.overrides, a.config_dir.resolve(), a.config_name)
    except Exception as e:  # Hydra's errors are long; one line says what is wrong
        print(f"error: {type(e).__name__}: {e}", file=sys.stderr)
        return 2
    text = "".join(shlex.join(job) + "\n" for job in jobs)
    if a.out is None:
        sys.stdout.write(text)
        return 0
    a.out.parent.mkdir(parents=True, exist_ok=True)
    tmp = a.out.with_suffix(a.out.suffix + ".tmp")
    tmp.write_text(text)
    tmp.replace(a.out)
    n = len(jobs)
    print(
        f"{n} jobs -> {a.out}\n  sbatch --array=0-{n - 1} [-p PARTITION -A ACCOUNT] slurm/array.sbatch {a.out}",
        file=sys.stderr,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
