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
