"""docs/adding_a_method.md works as written: its example method registers, passes the doc's own test, its
yaml parses, and the doc's plugin command validates (CLI dry run) and trains the tiny model (slow).

The doc's blocks are found by the line before them: ``<!-- doc-example: method|config|test|command -->``.
Registrations made here are undone after each test (a scratch copy of the registry).
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from pspo_repro.common.cli import UsageError, compose_config, compose_error
from pspo_repro.common.paths import CONF_DIR, PROJECT_ROOT
from pspo_repro.methods import RESERVED_KEYS, get_spec, list_methods, parse_method_config, registry
from pspo_repro.training import grpo as train
from pspo_repro.training import settings

DOC = PROJECT_ROOT / "docs" / "adding_a_method.md"
NAME = "my_spo"
PLUGIN = "my_methods"  # the module name the doc's command imports


def doc_block(kind: str) -> str:
    """The one fenced block preceded by ``<!-- doc-example: <kind> -->``."""
    found = re.findall(rf"^<!-- doc-example: {kind} -->\n```\w+\n(.*?)^```", DOC.read_text(), re.M | re.S)
    assert len(found) == 1, f"{DOC.name}: expected one '{kind}' block, found {len(found)}"
    return found[0]


@pytest.fixture
def scratch_registry(monkeypatch):
    """A copy of the method registry for the test; the plugin module is forgotten afterwards."""
    monkeypatch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))
    yield
    sys.modules.pop(PLUGIN, None)


@pytest.fixture
def user_project(tmp_path, monkeypatch, scratch_registry):
    """A user's folder as the doc describes it: ``my_methods.py`` and ``my_conf/method/my_spo.yaml``."""
    (tmp_path / f"{PLUGIN}.py").write_text(doc_block("method"))
    (tmp_path / "my_conf" / "method").mkdir(parents=True)
    (tmp_path / "my_conf" / "method" / f"{NAME}.yaml").write_text(doc_block("config"))
    monkeypatch.syspath_prepend(str(tmp_path))
    return tmp_path


def command_overrides(folder: Path) -> list[str]:
    """The doc's command, run from ``folder``: its overrides after ``python -m pspo_repro.train``."""
    argv = shlex.split(doc_block("command").strip().replace("$PWD", str(folder)))
    assert argv[:3] == ["python", "-m", "pspo_repro.train"], argv
    return argv[3:]


def _exec(source: str, filename: str) -> dict:
    namespace: dict = {"__name__": "doc_example"}
    exec(compile(source, filename, "exec"), namespace)
    return namespace


def test_method_block_registers_and_passes_the_docs_own_test(scratch_registry):
    assert NAME not in list_methods()
    _exec(doc_block("method"), "<doc method>")
    spec = get_spec(NAME)
    assert spec.defaults == {"eps_low": 0.2, "eps_high": 0.2} and spec.extra_inputs == ()
    tests = {k: v for k, v in _exec(doc_block("test"), "<doc test>").items() if k.startswith("test_")}
    assert tests, "the doc's test block defines no test_ function"
    for fn in tests.values():
        fn()


def test_config_block_matches_the_function(scratch_registry):
    _exec(doc_block("method"), "<doc method>")
    text = doc_block("config")
    cfg = yaml.safe_load(text)
    assert cfg["name"] == NAME
    assert set(cfg) - set(RESERVED_KEYS) == set(get_spec(NAME).defaults)
    parsed = parse_method_config(cfg)
    assert parsed.params == get_spec(NAME).defaults and parsed.num_iterations == 2
    for key in cfg:  # every value says where it comes from, like conf/method/*.yaml
        if key != "name":
            assert re.search(rf"^{key}: .+#", text, re.M), key


def test_plugin_hooks_find_the_users_method_and_config(user_project):
    ov = command_overrides(user_project)
    train.check_group_choices(ov)  # my_spo is an option once the searchpath is given
    with pytest.raises(UsageError, match="unknown method 'my_spo'"):
        train.check_group_choices([o for o in ov if not o.startswith("hydra.searchpath")])
    assert compose_error(CONF_DIR, "train", ov) is None
    assert settings.searchpath_dirs(ov) == (user_project / "my_conf",)
    assert settings.searchpath_dirs(["hydra.searchpath=[pkg://pspo_repro/methods]"]) == (
        PROJECT_ROOT / "pspo_repro" / "methods",
    )
    assert settings.searchpath_dirs(["hydra.searchpath=[pkg://no_such_pkg_xyz.conf]"]) == ()
    with pytest.raises(UsageError, match="plugins: cannot import 'no_such_plugin_xyz'"):
        settings.import_plugins(["no_such_plugin_xyz"])


def test_docs_command_validates_from_the_command_line(user_project, tmp_path):
    """The exact command, as a subprocess from the user's folder, with ``dry_run=true`` appended."""
    env = {
        **os.environ,
        "PATH": f"{PROJECT_ROOT / '.venv' / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}",
        "PYTHONPATH": str(PROJECT_ROOT),  # the package, as an installed one would be
        "PSPO_RESULTS_DIR": str(tmp_path / "results"),
        "PSPO_LOG_DIR": str(tmp_path / "logs"),
    }
    cmd = doc_block("command").strip() + " dry_run=true"
    proc = subprocess.run(
        ["bash", "-c", cmd], cwd=user_project, env=env, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    folder = tmp_path / "results" / "runs" / "tiny" / NAME / "seed0-max_steps2"
    assert f"run folder: {folder}\n" in proc.stdout and str(folder.relative_to(tmp_path)) in DOC.read_text()
    assert "eps_high: 0.2" in proc.stdout and f"- {PLUGIN}" in proc.stdout


@pytest.mark.slow
def test_docs_command_trains_two_steps(user_project, results_root, tiny_model_dir):
    from safetensors.torch import load_file

    fast = [
        "logger=none",
        "reward=smoke_length",  # a reward that varies on a random tiny model
        "trainer.max_completion_length=12",
        "trainer.eval_steps=null",
        "trainer.save_steps=2",
        "trainer.disable_tqdm=true",
    ]
    ov = [*command_overrides(user_project), *fast]
    assert "trainer.max_steps=2" in ov and "model=tiny" in ov
    train.check_group_choices(ov)
    folder = train.run(compose_config(CONF_DIR, "train", ov), ov)
    assert folder.parent == results_root / "runs" / "tiny" / NAME  # seed0-<tag of the trainer overrides>
    run = json.loads((folder / "run.json").read_text())
    assert run["status"] == "finished" and run["final_step"] == 2
    assert run["config"]["plugins"] == [PLUGIN] and run["config"]["method"]["eps_high"] == 0.2
    before, after = (
        load_file(str(tiny_model_dir / "model.safetensors")),
        load_file(str(folder / "checkpoint-2" / "model.safetensors")),
    )
    assert any(not (before[k] == after[k]).all() for k in before), "no parameter moved"
    rows = [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2]
    for r in rows:
        assert {"method/pullback_frac", "method/ratio_mean", "method/ratio_max"} <= set(r), sorted(r)
