"""Training entry point: bad input fails fast, in one line, before any model loads, writing nothing."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import trl
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra

from pspo_repro.common.cli import UsageError
from pspo_repro.common.paths import CONF_DIR, PROJECT_ROOT
from pspo_repro.training import grpo as train

ROOT = PROJECT_ROOT


def test_trl_version_is_the_one_the_override_mirrors():
    from pspo_repro.training.trainer import MIRRORS_TRL

    assert trl.__version__ == MIRRORS_TRL == "1.16.0"


def _compose(overrides):
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        return compose("train", overrides=list(overrides))


@pytest.fixture
def no_model_load(monkeypatch):
    """Fail the test if anything tries to load a model."""

    def boom(*a, **k):
        raise AssertionError("a model was loaded")

    import pspo_repro.training.models as models

    monkeypatch.setattr(models, "load_model", boom)
    monkeypatch.setattr(models, "load_tokenizer", boom)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["method.alpha=2.0"], r"method 'pspo': parameter alpha=2.0 is invalid"),
        (["+method.bogus=1"], r"unknown parameter\(s\) bogus"),
        (["method.loss_agg=mean"], r"loss_agg='mean' is invalid"),
        (["reward.funcs=[nope]"], r"unknown reward 'nope'; valid rewards: "),
        (["data.name=nope"], r"unknown dataset 'nope'; allowed: "),
        (["trainer.save_steps=3"], r"save_steps=3 must equal trainer.eval_steps=10"),
        # a multiple is not enough: a best validation between two saves would have no checkpoint
        (["trainer.save_steps=20"], r"save_steps=20 must equal trainer.eval_steps=10: every validation"),
    ],
)
def test_invalid_input_fails_before_model(results_root, no_model_load, overrides, message):
    cfg = _compose(["model=tiny", *overrides])
    with pytest.raises(UsageError, match=message):
        train.run(cfg, overrides)
    assert not results_root.exists()


def test_missing_data_names_path_and_env(results_root, no_model_load, tmp_path, monkeypatch):
    monkeypatch.setenv("PSPO_DATA_DIR", str(tmp_path / "empty"))
    cfg = _compose(["model=tiny"])
    with pytest.raises(UsageError) as err:
        train.run(cfg, [])
    msg = str(err.value)
    assert str(tmp_path / "empty" / "gsm8k" / "train.jsonl") in msg and "PSPO_DATA_DIR" in msg
    assert not results_root.exists()


def test_a_hub_model_offline_names_model_path(results_root, monkeypatch):
    """``model=qwen2_math_1p5b`` with no hub and no local copy: one line naming the hub id and
    ``model.path=<local folder>``, before the run folder exists; no network try where HF_HUB_OFFLINE is set."""
    from pspo_repro.common import hub

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(hub, "_reachable", lambda *a: pytest.fail("the hub was tried although offline"))
    with pytest.raises(UsageError) as err:
        train.run(_compose(["model=qwen2_math_1p5b"]), [])
    msg = str(err.value)
    assert msg.startswith("cannot load the tokenizer of Qwen/Qwen2-Math-1.5B: ") and "\n" not in msg
    assert msg.endswith("and pass model.path=<local folder>") and "hf download Qwen/Qwen2-Math-1.5B" in msg
    assert not results_root.exists()


def test_dry_run_writes_nothing(results_root, no_model_load, capsys):
    assert train.run(_compose(["model=tiny", "dry_run=true"]), []) is None
    assert "run folder:" in capsys.readouterr().out
    assert not results_root.exists()


def test_a_finished_run_is_reported_before_the_tokenizer_loads(results_root, no_model_load, capsys):
    """Rerunning a finished grid: each job reads run.json and stops before the tokenizer and TRL load (the
    ~5 s of imports a job would spend); another configuration in the folder is refused there too; a run in
    any other state goes on to the tokenizer (here: no_model_load's AssertionError)."""
    from pspo_repro.common.redact import redact
    from pspo_repro.common.run_folder import RunFolder

    cfg = _compose(["model=tiny"])
    plan = train._plan_run(cfg, [])
    record = {"identity": redact(plan.identity), "run_dir": str(plan.folder), "final_step": 4}
    plan.folder.mkdir(parents=True)
    RunFolder(plan.folder).write({**record, "status": "finished"})
    assert train.run(_compose(["model=tiny"]), []) == plan.folder
    assert capsys.readouterr().out.startswith(f"finished already: {plan.folder} (step 4")
    RunFolder(plan.folder).write({**record, "status": "finished", "identity": {"other": 1}})
    with pytest.raises(UsageError, match="holds a run with a different configuration"):
        train.run(_compose(["model=tiny"]), [])
    RunFolder(plan.folder).write({**record, "status": "running"})
    with pytest.raises(AssertionError, match="a model was loaded"):
        train.run(_compose(["model=tiny"]), [])


def _cli(args, results_root, **env):
    full_env = {
        **os.environ,
        "PSPO_RESULTS_DIR": str(results_root),
        "PSPO_LOG_DIR": str(results_root.parent / "o"),
    }
    full_env.update(env)
    return subprocess.run(
        [sys.executable, "-m", "pspo_repro.train", *args],
        cwd=ROOT,
        env=full_env,
        capture_output=True,
        text=True,
    )


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (
            ["method=nope"],
            "error: unknown method 'nope'; options: archer, aspo, bapo, bypass_seq_max_rs, bypass_seq_mean_rs, bypass_token_rs, ce_gppo, cispo, clip,",
        ),
        (["model=gpt9"], "error: unknown model 'gpt9'; options: mini_sft, qwen2_math_1p5b, qwen2p5_0p5b"),
        (["reward=nope"], "error: unknown reward 'nope'; options: "),
        (["data=nope"], "error: unknown data 'nope'; options: gsm8k, math"),
        (["model=tiny", "method.alpha=-1"], "error: method 'pspo': parameter alpha=-1 is invalid"),
    ],
)
def test_cli_one_line_error_exit_2(results_root, args, expected):
    proc = _cli(args, results_root)
    assert proc.returncode == 2, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith(expected), proc.stderr
    assert "Traceback" not in proc.stderr
    assert not results_root.exists()


def test_tag_is_stable_and_ignores_infra_keys():
    from pspo_repro.common.run_dir import tag_from_overrides

    ov = ["trainer.learning_rate=0.000001", "method.alpha=0.3", "trainer.logging_steps=5", "seed=1"]
    cfg = _compose(["model=tiny", *ov])
    assert tag_from_overrides(cfg, ov) == "alpha0.3_learning_rate1e-06"
    assert tag_from_overrides(
        _compose(["model=tiny", "trainer.learning_rate=1e-6"]), ["trainer.learning_rate=1e-6"]
    ) == ("learning_rate1e-06")
    assert tag_from_overrides(_compose(["model=tiny"]), ["trainer.stop_after_step=2"]) == ""


def test_main_process_is_global_rank_0(monkeypatch):
    monkeypatch.delenv("RANK", raising=False)
    assert train.is_main_process()  # a plain single process
    monkeypatch.setenv("RANK", "0")
    assert train.is_main_process()
    monkeypatch.setenv("RANK", "1")  # another rank of accelerate launch / torchrun: writes nothing
    assert not train.is_main_process()


def test_second_process_on_the_same_run_folder_fails_at_once(results_root, monkeypatch):
    """The lock is taken before the model loads (the tokenizer and TRL's config come first: they are
    checked before anything is written)."""
    import pspo_repro.training.models as models

    def boom(*a, **k):
        raise AssertionError("a model was loaded")

    monkeypatch.setattr(models, "load_model", boom)
    cfg = _compose(["model=tiny"])
    folder = train.run_folder(cfg, "")
    with train.run_folder_lock(folder):  # another job training this folder
        with pytest.raises(UsageError, match=rf"^{folder} is being trained by another process"):
            train.run(cfg, [])
    assert not (folder / "run.json").exists()
    with pytest.raises(AssertionError, match="a model was loaded"):  # released: the next run goes on
        train.run(cfg, [])
    monkeypatch.setenv("RANK", "1")  # a non-main rank of a multi-process launch takes no lock
    with train.run_folder_lock(folder), pytest.raises(AssertionError, match="a model was loaded"):
        train.run(cfg, [])


def test_cli_locked_run_folder_one_line_exit_2(results_root):
    cfg = _compose(["model=tiny"])
    with train.run_folder_lock(train.run_folder(cfg, "")):
        proc = _cli(["model=tiny"], results_root)
    assert proc.returncode == 2, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "is being trained by another process" in lines[0], proc.stderr
    assert lines[0].startswith(f"error: {results_root}/runs/tiny/pspo/seed0 "), proc.stderr


@pytest.mark.parametrize(("launcher", "raises"), [("slurm", True), ("basic", False)])
def test_bad_input_in_a_launcher_job_raises_the_one_line(results_root, no_model_load, launcher, raises):
    """A Slurm job's bad input raises (the driver prints "the task raised: UsageError: <line>"); the
    basic launcher runs jobs in the driver, which keeps the single run's ``error: ...`` + exit 2."""
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode
    from omegaconf import open_dict

    overrides = ["model=tiny", "method.alpha=-1", f"hydra/launcher={launcher}"]
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        cfg = compose("train", overrides=overrides, return_hydra_config=True)
    with open_dict(cfg):
        cfg.hydra.mode = RunMode.MULTIRUN
        cfg.hydra.overrides.task = overrides[:2]
    HydraConfig.instance().set_config(cfg)
    try:
        with open_dict(cfg):
            del cfg["hydra"]  # the task sees the config without it, as under Hydra
        expected = (
            (UsageError, r"^method 'pspo': parameter alpha=-1 is invalid") if raises else (SystemExit, "2")
        )
        with pytest.raises(expected[0], match=expected[1]) as err:
            train._task(cfg)
        if raises:
            assert err.value.__cause__ is None and err.value.__suppress_context__
    finally:
        HydraConfig.instance().cfg = None
        GlobalHydra.instance().clear()


def test_vllm_server_address_reaches_grpo_config_and_not_the_tag(tmp_path):
    from pspo_repro.common.run_dir import identity_config, tag_from_overrides

    ov = ["trainer.vllm_server_host=10.1.2.3", "trainer.vllm_server_port=8123"]
    cfg = _compose(["model=tiny", *ov])
    args = train._grpo_config(cfg, tmp_path / "runs" / "tiny" / "pspo" / "seed0", train.validate(cfg), False)
    assert (args.vllm_server_host, args.vllm_server_port, args.vllm_server_base_url) == (
        "10.1.2.3",
        8123,
        None,
    )
    default = train._grpo_config(
        _compose(["model=tiny"]), tmp_path / "a" / "b" / "c", train.validate(cfg), False
    )
    assert (default.vllm_server_host, default.vllm_server_port) == ("0.0.0.0", 8000)  # TRL's defaults
    assert tag_from_overrides(cfg, ov) == ""  # where the server listens is not what the run learns
    assert "vllm_server_port" not in identity_config({"trainer": dict(cfg.trainer)})["trainer"]


PROBE = """
import runpy, sys
sys.argv = ["pspo_repro.train", *sys.argv[1:]]
try:
    runpy.run_module("pspo_repro.train", run_name="__main__", alter_sys=True)
except SystemExit as exc:
    print(exc.code, "torch" in sys.modules)
"""


@pytest.mark.parametrize(
    "override, message",
    [
        ("seed=abc", "error: seed must be an integer in [0, 4294967295], got 'abc'"),
        (
            "trainer.max_steps=1.5",
            "error: trainer.max_steps must be an integer in [-1, inf) or null, got 1.5",
        ),
        ("trainer.eval_on_start=maybe", "error: trainer.eval_on_start must be true or false, got 'maybe'"),
    ],
)
def test_a_mistyped_setting_is_refused_before_torch_loads(override, message, results_root, tmp_path):
    """The settings' own ranges are checked before the method registry (which imports torch, ~2 s): a typo in
    a seed, a step count or a flag is reported at once, in one line, with nothing written."""
    env = {**os.environ, "PSPO_LOG_DIR": str(tmp_path / "logs")}
    r = subprocess.run([sys.executable, "-c", PROBE, override], cwd=ROOT, env=env, capture_output=True, text=True,
                       timeout=120)  # fmt: skip
    assert r.stdout.split() == ["2", "False"], (r.stdout, r.stderr)
    assert r.stderr.strip().splitlines() == [message]
    assert not results_root.exists()
