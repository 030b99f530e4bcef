"""The commands in README.md and docs/*.md run, so the docs cannot drift from the code.

Convention (for README.md and docs/*.md):
- a fenced ```bash block whose previous line is exactly ``<!-- doctest -->`` is run by this test;
  ``<!-- doctest: slow -->`` puts the block in the ``slow`` tier (training, evaluation);
- each non-empty line not starting with ``#`` is one command (a line ending in ``\\`` continues on the next),
  run with ``bash -c`` from the project root, in order, stopping at the first non-zero exit status;
- the environment: ``.venv/bin`` first on PATH (``python`` is the project's), ``PSPO_RESULTS_DIR`` and
  ``PSPO_LOG_DIR`` a fresh temp folder per block (shared by its commands, so train-then-evaluate works),
  ``PSPO_DATA_DIR`` the offline data, ``HF_*_OFFLINE=1``, ``WANDB_MODE=disabled``;
- a block has ``FAST_TIMEOUT_S`` in all (``SLOW_TIMEOUT_S`` when slow): keep doctest blocks on the tiny
  model, a few steps, or ``dry_run=true``.
Untagged blocks are not run (cluster jobs, full reproductions), but every ``python -m pspo_repro.<name>``
anywhere in them must name a runnable module, and every ``scripts/<file>`` must exist.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import time
from pathlib import Path

import pytest
import yaml

from pspo_repro.common.cli import compose_config, compose_error
from pspo_repro.common.paths import CONF_DIR, PROJECT_ROOT

FAST_TIMEOUT_S = 180
SLOW_TIMEOUT_S = 900
DOCS = [PROJECT_ROOT / "README.md", *sorted((PROJECT_ROOT / "docs").glob("*.md"))]
BLOCK = re.compile(r"^<!-- doctest(?P<slow>: slow)? -->\n```bash\n(?P<body>.*?)^```", re.M | re.S)


def doctest_blocks() -> list[tuple[str, bool, list[str]]]:
    """``(id, slow, commands)`` for every tagged block of README.md and docs/*.md."""
    found = []
    for doc in DOCS:
        if not doc.is_file():
            continue
        text = doc.read_text()
        for m in BLOCK.finditer(text):
            line = text.count("\n", 0, m.start()) + 1
            body = re.sub(r"\\\n\s*", " ", m.group("body"))
            commands = [c.strip() for c in body.splitlines() if c.strip() and not c.strip().startswith("#")]
            found.append((f"{doc.relative_to(PROJECT_ROOT)}:{line}", bool(m.group("slow")), commands))
    return found


def doc_env(tmp: Path) -> dict[str, str]:
    """The environment every documented command runs in (see the module docstring)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PSPO_")}
    env.update(
        PATH=f"{PROJECT_ROOT / '.venv' / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}",
        PSPO_RESULTS_DIR=str(tmp / "results"),
        PSPO_LOG_DIR=str(tmp / "logs"),
        PSPO_DATA_DIR=os.environ.get("PSPO_DATA_DIR", ""),
        HF_HUB_OFFLINE="1",
        HF_DATASETS_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
        WANDB_MODE="disabled",
        TOKENIZERS_PARALLELISM="false",
    )
    if "PSPO_CACHE_DIR" in os.environ:  # the tiny model's cache: reuse it, building it is slow
        env["PSPO_CACHE_DIR"] = os.environ["PSPO_CACHE_DIR"]
    return env


def run_commands(commands: list[str], tmp: Path, timeout_s: float) -> list[subprocess.CompletedProcess]:
    """Run ``commands`` in order from the project root; fail on the first non-zero exit or the time limit."""
    env, deadline, done = doc_env(tmp), time.monotonic() + timeout_s, []
    for cmd in commands:
        left = deadline - time.monotonic()
        if left <= 0:
            pytest.fail(f"block ran past {timeout_s:.0f} s before: {cmd}")
        try:
            proc = subprocess.run(
                ["bash", "-c", cmd], cwd=PROJECT_ROOT, env=env, capture_output=True, text=True, timeout=left
            )
        except subprocess.TimeoutExpired:
            pytest.fail(f"block ran past {timeout_s:.0f} s in: {cmd}")
        if proc.returncode != 0:
            tail = (proc.stdout[-1500:] + "\n" + proc.stderr[-3000:]).strip()
            pytest.fail(f"exit {proc.returncode}: {cmd}\n{tail}")
        done.append(proc)
    return done


BLOCKS = doctest_blocks()


@pytest.mark.parametrize(
    "commands,slow",
    [
        pytest.param(cmds, slow, id=ident, marks=[pytest.mark.slow] if slow else [])
        for ident, slow, cmds in BLOCKS
    ],
)
def test_doctest_block(commands, slow, tmp_path, data_dir):
    assert commands, "an empty doctest block"
    run_commands(commands, tmp_path, SLOW_TIMEOUT_S if slow else FAST_TIMEOUT_S)


def test_harness_finds_blocks():
    """The convention is in use (docs/adding_a_method.md has one) and no tag is misspelt or misplaced."""
    assert any(ident.startswith("docs/adding_a_method.md:") for ident, _, _ in BLOCKS)
    for doc in DOCS:
        if not doc.is_file():
            continue
        text = doc.read_text()
        tags = len(re.findall(r"<!-- *doctest", text))
        assert tags == len(BLOCK.findall(text)), f"{doc.name}: a doctest tag not followed by a ```bash block"


def _all_doc_text() -> str:
    return "\n".join(d.read_text() for d in DOCS if d.is_file())


def test_every_documented_module_runs_with_python_m():
    names = sorted(set(re.findall(r"python -m pspo_repro\.([A-Za-z_][\w.]*\w)", _all_doc_text())))
    assert "train" in names
    for name in names:
        path = PROJECT_ROOT / "pspo_repro" / Path(*name.split("."))
        if path.is_dir():
            assert (path / "__main__.py").is_file(), f"pspo_repro.{name} is a package without __main__.py"
        else:
            source = path.with_suffix(".py")
            assert source.is_file(), f"python -m pspo_repro.{name}: no such module"
            assert '__name__ == "__main__"' in source.read_text(), f"pspo_repro.{name} has no main guard"


def test_every_documented_script_exists():
    for rel in sorted(set(re.findall(r"(?<![\w/])(scripts/[\w./-]*\w)", _all_doc_text()))):
        assert (PROJECT_ROOT / rel).exists(), rel


def test_train_help_and_cfg_job(tmp_path):
    helped, job = run_commands(
        ["python -m pspo_repro.train --help", "python -m pspo_repro.train --cfg job method=sapo"],
        tmp_path,
        FAST_TIMEOUT_S,
    )
    groups = dict(re.findall(r"^(\w+): (.+)$", helped.stdout.split("== Config ==")[0], re.M))
    assert {"pspo", "clip", "noclip", "kimi15", "kimi_k25"} <= set(groups["method"].split(", ")), (
        helped.stdout[:2000]
    )
    assert "tiny" in groups["model"].split(", ")
    cfg = yaml.safe_load(job.stdout)
    assert cfg["method"]["name"] == "sapo" and cfg["dry_run"] is False and "trainer" in cfg


# ---------------------------------------------------------------- docs/methods.md's overrides


def methods_doc_overrides() -> list[str]:
    """Every backticked ``method=...`` override of docs/methods.md (its ``select:`` lines)."""
    text = (PROJECT_ROOT / "docs" / "methods.md").read_text()
    return sorted(set(re.findall(r"`(method=[^`]+)`", text)))


def test_methods_doc_shows_overrides():
    assert len(methods_doc_overrides()) >= 10


@pytest.mark.parametrize("override", methods_doc_overrides())
def test_methods_doc_override_composes_and_validates(override, results_root):
    """What the CLI checks before training, in process: group choices, composition, method parameters."""

    from pspo_repro.training import grpo as train

    ov = shlex.split(override)
    train.check_group_choices(ov)
    assert compose_error(CONF_DIR, "train", ov) is None
    method = train.validate(compose_config(CONF_DIR, "train", ov))
    for item in ov[1:]:  # method.<key>=<value>: the value reaches the method's parameters
        key, value = item.split("=", 1)
        name = key.removeprefix("method.")
        if name in ("loss_agg", "num_iterations"):  # method settings, not loss parameters
            assert str(getattr(method, name)) == value, item
            continue
        # a loss parameter is a number, or null where its rule allows it (e.g. a bypass_* estimator switched off)
        assert method.params[name] == (None if value == "null" else float(value)), item


@pytest.fixture(scope="module")
def dry_runs(tmp_path_factory, data_dir):
    """Every documented override through ``python -m pspo_repro.train ... dry_run=true``, all in one
    interpreter (tests/cli_dry_runs.py): one import of the stack instead of one per override."""
    tmp = tmp_path_factory.mktemp("dry_runs")
    out = tmp / "dry_runs.json"
    overrides = methods_doc_overrides()
    proc = subprocess.run(
        [str(PROJECT_ROOT / ".venv" / "bin" / "python"), str(Path(__file__).parent / "cli_dry_runs.py"), str(out),
         *overrides],
        cwd=PROJECT_ROOT, env=doc_env(tmp), capture_output=True, text=True, timeout=FAST_TIMEOUT_S + 5 * len(overrides),
    )  # fmt: skip
    assert proc.returncode == 0 and out.is_file(), proc.stderr[-3000:]
    return json.loads(out.read_text())


@pytest.mark.slow
@pytest.mark.xdist_group("docs_dry_runs")  # one worker runs them all: the fixture's interpreter starts once
@pytest.mark.parametrize("override", methods_doc_overrides())
def test_methods_doc_override_dry_runs(override, dry_runs):
    result = dry_runs[override]
    assert result["code"] == 0, f"exit {result['code']}: {override}\n{result['stderr'][-3000:]}"
    assert "run folder: " in result["stdout"]
