"""No credential from the environment ends up in a results file or a log."""

from __future__ import annotations

import gzip
import json

import pytest

from pspo_repro.common.paths import CONF_DIR
from pspo_repro.common.redact import REDACTED, redact

FAKE = {
    "WANDB_API_KEY": "wandbFAKEkey0123456789abcdef",
    "HF_TOKEN": "hf_FAKEtoken0123456789",
    "HUGGING_FACE_HUB_TOKEN": "hf_FAKEhubtoken9876543210",
    "OPENAI_API_KEY": "sk-FAKEopenai0123456789",
}


def test_redact_keys_and_values(monkeypatch):
    for k, v in FAKE.items():
        monkeypatch.setenv(k, v)
    rec = {
        "trainer": {"token_budget": 5, "max_new_tokens": 3},  # ordinary settings survive
        "logger": {"api_key": "anything", "entity": f"team-{FAKE['HF_TOKEN']}"},
        "overrides": [f"+note={FAKE['WANDB_API_KEY']}"],
        "hub_token": None,
    }
    out = redact(rec)
    assert out["trainer"] == rec["trainer"] and out["hub_token"] is None
    assert out["logger"] == {"api_key": REDACTED, "entity": f"team-{REDACTED}"}
    assert out["overrides"] == [f"+note={REDACTED}"]


def _leaks(root, secrets) -> list[str]:
    found = []
    for p in sorted(root.rglob("*")):
        if not p.is_file():
            continue
        data = p.read_bytes()
        if p.suffix == ".gz":
            data = gzip.decompress(data)
        found += [f"{p}: {name}" for name, value in secrets.items() if value.encode() in data]
    return found


@pytest.mark.slow
def test_no_secret_in_run_or_eval_files_or_logs(results_root, monkeypatch, capfd, caplog, tiny_model_dir):
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    from pspo_repro.evaluation import evaluator as ev
    from pspo_repro.training import grpo as train

    for k, v in FAKE.items():
        monkeypatch.setenv(k, v)
    # The worst case: the config pulls secrets in through interpolations and a literal override.
    overrides = [
        "model=tiny",
        "method=noclip",
        "logger=none",
        "reward=smoke_length",
        "trainer.max_steps=2",
        "trainer.max_completion_length=8",
        "trainer.eval_steps=null",
        "trainer.save_steps=1",
        "trainer.disable_tqdm=true",
        "+logger.api_key=${oc.env:WANDB_API_KEY}",
        "+notes=${oc.env:HF_TOKEN}",
        f"+comment={FAKE['HUGGING_FACE_HUB_TOKEN']}",
    ]
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        cfg = compose("train", overrides=overrides)
    GlobalHydra.instance().clear()
    folder = train.run(cfg, overrides)
    ev.evaluate(
        ev.compose_config(
            [f"run={folder}", "checkpoint=checkpoint-2", "eval.limit=2", "temperatures=[0.0]",
             "max_new_tokens=4", "backend=hf", "+notes=${oc.env:OPENAI_API_KEY}"]
        )
    )  # fmt: skip
    run = json.loads((folder / "run.json").read_text())
    assert run["config"]["logger"]["api_key"] == REDACTED and run["config"]["notes"] == REDACTED
    (cell,) = (results_root / "eval").rglob("T0.0.json")
    assert json.loads(cell.read_text())["config"]["notes"] == REDACTED
    assert _leaks(results_root, FAKE) == []
    out, err = capfd.readouterr()
    logs = out + err + caplog.text
    assert [k for k, v in FAKE.items() if v in logs] == []


@pytest.mark.parametrize("module", ["train", "evaluate", "aggregate"])
def test_a_secret_on_the_command_line_is_refused(module, tmp_path, monkeypatch, capsys, entry_main):
    """Hydra saves overrides in its log folder and wandb records sys.argv, where redaction cannot reach:
    a credential's value on the command line is a one-line error naming the variable, not the value."""
    import sys

    for k, v in FAKE.items():
        monkeypatch.setenv(k, v)
    monkeypatch.setenv("PSPO_RESULTS_DIR", str(tmp_path / "results"))
    monkeypatch.setenv("PSPO_LOG_DIR", str(tmp_path / "logs"))
    monkeypatch.setattr(sys, "argv", [module, f"+comment=x{FAKE['HF_TOKEN']}"])
    with pytest.raises(SystemExit) as exc:
        entry_main(module)()
    err = capsys.readouterr().err.strip().splitlines()
    assert exc.value.code == 2 and len(err) == 1, err
    assert "holds the value of HF_TOKEN" in err[0] and FAKE["HF_TOKEN"] not in err[0]
    assert not (tmp_path / "results").exists() and not (tmp_path / "logs").exists()


# Credentials that the name-only redaction of round four let through (issue 59): names ending in _KEY or
# _PASS, and values of credential shape under an ordinary name.
FAKE_MORE = {
    "OPENAI_KEY": "sk-FAKEopenaikey0123456789",
    "DB_PASS": "fakeDbPassw0rd99",
    "MYSQL_PWD": "fakeMysqlPwd777",
    "HF_TOKEN": "hf_FAKEtoken0123456789abc",
    "MY_SETTING": "hf_FAKEshapeOnly0123456789",
    "RANDOM_BLOB": "Zq7XkP2mW9vR4tY8bN3cL6sD",
}
NOT_SECRETS = {
    "PSPO_TEST_MODEL": "Qwen2.5-Math-1.5B-Instruct",
    "PSPO_TEST_SHA": "0123456789abcdef0123456789abcdef01234567",
    "PSPO_TEST_CACHE_KEY": "/tmp/some/cache/folder",  # a path under a credential-like name
    "TOKENIZERS_PARALLELISM": "false",
}


def test_credentials_by_name_ending_and_by_value_shape(monkeypatch):
    from pspo_repro.common.redact import secret_values

    for k, v in {**FAKE_MORE, **NOT_SECRETS}.items():
        monkeypatch.setenv(k, v)
    found = set(secret_values())
    assert set(FAKE_MORE.values()) <= found
    assert not set(NOT_SECRETS.values()) & found
    text = f"tag {FAKE_MORE['DB_PASS']} in {NOT_SECRETS['PSPO_TEST_CACHE_KEY']} of {NOT_SECRETS['PSPO_TEST_MODEL']}"
    assert redact({"quote": text})["quote"] == (
        f"tag {REDACTED} in {NOT_SECRETS['PSPO_TEST_CACHE_KEY']} of {NOT_SECRETS['PSPO_TEST_MODEL']}"
    )


def test_install_redacts_what_the_process_prints_and_logs(monkeypatch, capsys, tmp_path):
    """``redact.install`` (every command's start): print, stderr and every log record, a log file too."""
    import logging
    import sys

    from pspo_repro.common import redact as redact_module

    monkeypatch.setattr(sys, "stdout", sys.stdout)  # restored after the test, as the record factory below
    monkeypatch.setattr(sys, "stderr", sys.stderr)
    monkeypatch.setattr(logging, "_logRecordFactory", logging.getLogRecordFactory())
    monkeypatch.setattr(redact_module, "_installed", list(redact_module._installed))
    monkeypatch.setenv("WANDB_API_KEY", FAKE["WANDB_API_KEY"])
    redact_module.install()  # an earlier command in this process, with other credentials
    for k, v in FAKE_MORE.items():
        monkeypatch.setenv(k, v)
    redact_module.install()  # this command's: its values are redacted too, and nothing is wrapped twice
    log = logging.getLogger("pspo_repro.test_secrets")
    # only this test's handler: a handler an earlier test left on the root logger may hold a closed stream
    monkeypatch.setattr(log, "propagate", False)
    handler = logging.FileHandler(tmp_path / "x.log")
    log.addHandler(handler)
    try:
        print(f"value {FAKE_MORE['OPENAI_KEY']}")
        print(f"error: got {FAKE_MORE['DB_PASS']!r}", file=sys.stderr)
        log.warning("token %s", FAKE_MORE["HF_TOKEN"])
    finally:
        log.removeHandler(handler)
        handler.close()
    out, err = capsys.readouterr()
    assert out == f"value {REDACTED}\n" and err == f"error: got '{REDACTED}'\n"
    assert (tmp_path / "x.log").read_text() == f"token {REDACTED}\n"
    assert not isinstance(getattr(sys.stdout, "_stream", None), redact_module._RedactingStream)


def _scan(root, texts, secrets) -> list[str]:
    """Where a secret's value occurs: each file under ``root`` (gzip opened) and each of ``texts``."""
    found = [
        f"{name} in {where}" for where, text in texts.items() for name, v in secrets.items() if v in text
    ]
    return found + _leaks(root, secrets)


def _run(module, args, tmp_path, secrets):
    """``python -m pspo_repro.<module> args`` in ``tmp_path`` with ``secrets`` in its environment."""
    import os
    import subprocess
    import sys

    from pspo_repro.common.paths import PROJECT_ROOT

    env = {**os.environ, **secrets, "PYTHONPATH": str(PROJECT_ROOT), "PSPO_RESULTS_DIR": str(tmp_path / "results"),
           "PSPO_LOG_DIR": str(tmp_path / "logs"), "PSPO_CACHE_DIR": os.environ.get("PSPO_CACHE_DIR", "")}  # fmt: skip
    env = {k: v for k, v in env.items() if v}
    return subprocess.run([sys.executable, "-m", f"pspo_repro.{module}", *args], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=600)  # fmt: skip


# Bad input that reads a credential through an interpolation: each is refused, and neither its error
# line nor anything it wrote holds the value (round four printed the resolved value verbatim).
BAD_WITH_SECRETS = [
    ("train", ["model=tiny", "trainer.logprob_head=${oc.env:DB_PASS}"]),
    ("train", ["model=tiny", "method.rollout_correction=${oc.env:OPENAI_KEY}"]),
    ("train", ["model=tiny", "run_tag=${oc.env:DB_PASS}"]),
    ("aggregate", ["expected_seeds=${oc.env:MYSQL_PWD}"]),
    ("scale", ["only=[${oc.env:HF_TOKEN}]"]),
    ("mini", ["parallel=${oc.env:MY_SETTING}"]),
]


@pytest.mark.slow
def test_bad_input_reading_a_credential_leaks_it_nowhere(tmp_path):
    streams = {}
    for i, (module, args) in enumerate(BAD_WITH_SECRETS):
        proc = _run(module, args, tmp_path, FAKE_MORE)
        assert proc.returncode != 0, (module, args, proc.stdout[-500:])
        assert proc.stderr.strip().splitlines()[-1].startswith("error: "), (module, args, proc.stderr[-500:])
        streams[f"#{i} {module} stdout"], streams[f"#{i} {module} stderr"] = proc.stdout, proc.stderr
    assert _scan(tmp_path, streams, FAKE_MORE) == []


@pytest.mark.slow
def test_tiny_training_with_credentials_interpolated_leaks_none(tmp_path, tiny_model_dir):
    """Two steps of tiny training whose config pulls every fake credential in (top-level notes;
    each value reaches the config): run.json, metrics, checkpoints, Hydra's logs and the console hold none."""
    args = ["model=tiny", "method=noclip", "logger=none", "reward=smoke_length", "trainer.max_steps=2",
            "trainer.max_completion_length=8", "trainer.eval_steps=null", "trainer.save_steps=1",
            "trainer.disable_tqdm=true", "+notes=${oc.env:DB_PASS}", "+key_note=${oc.env:OPENAI_KEY}",
            "+shape_note=${oc.env:MY_SETTING}", "+blob_note=${oc.env:RANDOM_BLOB}",
            "+pwd_note=${oc.env:MYSQL_PWD}"]  # fmt: skip
    proc = _run("train", args, tmp_path, FAKE_MORE)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert list((tmp_path / "results").rglob("run.json"))
    assert _scan(tmp_path, {"stdout": proc.stdout, "stderr": proc.stderr}, FAKE_MORE) == []
