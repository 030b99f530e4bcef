"""One wandb run per training job (issue 58, item 2): named after the run folder, grouped by the grid,
project ``pspo-repro`` unless set, finished when the job ends; a local ``-m`` grid makes one run per job."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from omegaconf import OmegaConf

from pspo_repro.common.cli import compose_config
from pspo_repro.common.paths import CONF_DIR, PROJECT_ROOT
from pspo_repro.training import grpo as train
from pspo_repro.training.tracking import grid_group, tracker_run, wandb_init_kwargs


def _cfg(**logger):
    return OmegaConf.create({"run_tag": "", "logger": {"name": "wandb", "project": "p", "mode": "offline",
                                                       "entity": None, "group": None, **logger}})  # fmt: skip


def test_the_group_is_the_grid():
    cfg = _cfg()
    assert grid_group(cfg) is None  # a lone run (no Hydra multirun here), untagged
    cfg.run_tag = "offpolicy-alpha"
    assert grid_group(cfg) == "offpolicy-alpha"
    cfg.logger.group = "mine"
    assert grid_group(cfg) == "mine"


def test_project_is_pspo_repro_unless_set(monkeypatch, tmp_path):
    monkeypatch.delenv("WANDB_PROJECT", raising=False)
    monkeypatch.delenv("WANDB_RUN_GROUP", raising=False)
    cfg = compose_config(CONF_DIR, "train", ["model=tiny"])
    assert cfg.logger.project == "pspo-repro" and cfg.logger.group is None
    kwargs = wandb_init_kwargs(cfg, tmp_path / "run", "tiny/pspo/seed0")
    assert kwargs["project"] == "pspo-repro" and kwargs["name"] == "tiny/pspo/seed0"
    assert kwargs["dir"] == str(tmp_path / "run")
    # TRL's logged config names the same project (TrainingArguments' own default: "huggingface")
    args = train._grpo_config(cfg, tmp_path / "runs" / "tiny" / "pspo" / "seed0", train.validate(cfg), False)
    assert args.project == "pspo-repro" and args.run_name == "tiny/pspo/seed0"
    monkeypatch.setenv("WANDB_PROJECT", "theirs")
    monkeypatch.setenv("WANDB_RUN_GROUP", "grid-a")
    cfg = compose_config(CONF_DIR, "train", ["model=tiny"])
    assert (cfg.logger.project, cfg.logger.group) == ("theirs", "grid-a")
    cfg = compose_config(CONF_DIR, "train", ["model=tiny", "logger.project=key"])
    assert cfg.logger.project == "key"


class _FakeWandb:
    """Records wandb.init / wandb.finish calls."""

    def __init__(self):
        self.calls = []

    def init(self, **kwargs):
        self.calls.append(("init", kwargs))

    def finish(self, exit_code=None):
        self.calls.append(("finish", exit_code))


def test_each_job_finishes_its_run(monkeypatch, tmp_path):
    fake = _FakeWandb()
    monkeypatch.setitem(sys.modules, "wandb", fake)
    with tracker_run(_cfg(), tmp_path, "tiny/pspo/seed0", main_process=True):
        assert [c[0] for c in fake.calls] == ["init"]
    assert fake.calls[-1] == ("finish", 0)
    with pytest.raises(RuntimeError), tracker_run(_cfg(), tmp_path, "tiny/clip/seed0", main_process=True):
        raise RuntimeError("the job failed")
    assert fake.calls[-1] == ("finish", 1)  # a failed job's run is marked failed, and still finished
    assert fake.calls[2][1]["name"] == "tiny/clip/seed0"
    fake.calls.clear()
    with tracker_run(_cfg(), tmp_path, "x", main_process=False):  # only the main process logs
        pass
    with tracker_run(_cfg(name="none"), tmp_path, "x", main_process=True):
        pass
    assert fake.calls == []


@pytest.mark.slow
def test_a_local_grid_makes_one_run_per_job(tmp_path, tiny_model_dir):
    """A 2-job ``-m`` grid (Hydra's basic launcher: both jobs in one process), wandb offline: 2 runs, each
    in its own run folder, named after it, grouped by the sweep folder, in project pspo-repro."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("WANDB_")}
    env.update(
        PYTHONPATH=str(PROJECT_ROOT), PSPO_RESULTS_DIR=str(tmp_path / "results"),
        PSPO_LOG_DIR=str(tmp_path / "logs"), WANDB_MODE="offline", WANDB_DIR=str(tmp_path / "wandb"),
        WANDB_CONFIG_DIR=str(tmp_path / "wandb_config"), WANDB_CACHE_DIR=str(tmp_path / "wandb_cache"),
        WANDB_DATA_DIR=str(tmp_path / "wandb_data"), HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1",
    )  # fmt: skip
    args = ["-m", "method=pspo,clip", "model=tiny", "logger=wandb", "reward=smoke_length",
            "trainer.max_steps=2", "trainer.max_completion_length=12", "trainer.eval_steps=null",
            "trainer.save_steps=2", "trainer.disable_tqdm=true", "data.n_train=64",
            f"hydra.sweep.dir={tmp_path / 'logs' / 'my-grid'}"]  # fmt: skip
    proc = subprocess.run([sys.executable, "-m", "pspo_repro.train", *args], env=env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=600)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    runs = sorted((tmp_path / "results" / "runs").glob("tiny/*/*/wandb/offline-run-*/run-*.wandb"))
    assert len(runs) == 2, runs
    for method in ("clip", "pspo"):
        (path,) = [p for p in runs if p.parents[3].name == method]
        folder = path.parents[2]
        data = path.read_bytes()  # protobuf records: the run's strings are stored as they are
        assert f"tiny/{method}/{folder.name}".encode() in data  # named after the run folder
        assert b"my-grid" in data and b"pspo-repro" in data and b"huggingface" not in data
    assert not (tmp_path / "wandb").exists() or not any((tmp_path / "wandb").rglob("*.wandb"))
