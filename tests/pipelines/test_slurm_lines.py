"""scripts/sweep_to_lines.py: the lines slurm/array.sbatch runs are the jobs Hydra's own `-m` would run."""

from __future__ import annotations

import shlex
import subprocess
import sys

import yaml

from pspo_repro.common.paths import PROJECT_ROOT

ROOT = PROJECT_ROOT
SCRIPT = ROOT / "scripts" / "sweep_to_lines.py"
APP_DIR = ROOT / "tests" / "pipelines" / "slurm_app"


def lines(*args: str) -> list[list[str]]:
    r = subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return [shlex.split(line) for line in r.stdout.splitlines()]


def test_lines_equal_the_jobs_of_a_hydra_multirun(tmp_path):
    sweep = ["x=1,2,3", "mode=ok", "steps=choice(0,2)", f"out_root={tmp_path / 'out'}"]
    got = lines("--config-dir", str(APP_DIR), "--config-name", "config", *sweep)
    # The same sweep through Hydra's basic launcher; each job records its overrides in .hydra/.
    r = subprocess.run(
        [sys.executable, str(APP_DIR / "app.py"), "-m", *sweep, f"hydra.sweep.dir={tmp_path / 'm'}"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    jobs = sorted((tmp_path / "m").glob("*/.hydra/overrides.yaml"), key=lambda p: int(p.parts[-3]))
    expected = [yaml.safe_load(p.read_text()) for p in jobs]
    assert len(got) == 6 and got == expected


def test_hparams_search_file_params_expand_and_each_line_runs_one_job():
    got = lines("hparams_search=pspo", "seed=0,1")
    assert len(got) == 3 * 4 * 2  # learning rate x alpha from conf/hparams_search/pspo.yaml, x 2 seeds
    assert all(job[-1] == "hydra.mode=RUN" and "hparams_search=pspo" in job for job in got)
    assert len({tuple(job) for job in got}) == len(got)
    alphas = {ov.split("=")[1] for job in got for ov in job if ov.startswith("method.alpha=")}
    assert alphas == {"0.05", "0.1", "0.2", "0.4"}


def test_paper_grid_is_eighteen_lines():
    got = lines("experiment=paper_qwen2p5_1p5b", "method=clip,noclip,pspo,sapo,topr,p3o", "seed=0,1,2")
    assert len(got) == 18 and got[0] == ["experiment=paper_qwen2p5_1p5b", "method=clip", "seed=0"]


def test_bad_sweep_is_one_error_line():
    r = subprocess.run(
        [sys.executable, str(SCRIPT), "method=no_such_method"], capture_output=True, text=True, timeout=120
    )
    assert r.returncode == 2 and r.stderr.startswith("error: ") and "no_such_method" in r.stderr
