"""Every command starts through ``common/cli.run_command`` and is a Hydra app: ``--help`` prints Hydra's help
and exits 0 (in this process: the entry modules' own ``main``)."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "pspo_repro"
# The precision probe takes an output file and the train command's overrides (scripts/gpu_check.py runs it so).
NOT_HYDRA = {"precision"}
COMMANDS = sorted(p.stem for p in PACKAGE.glob("*.py") if p.stem != "__init__" and p.stem not in NOT_HYDRA)


def _main_calls_run_command(module: Path) -> bool:
    tree = ast.parse(module.read_text())
    mains = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "main"]
    return any(isinstance(c, ast.Call) and getattr(c.func, "id", "") == "run_command"
               for m in mains for c in ast.walk(m))  # fmt: skip


@pytest.mark.parametrize("command", [*COMMANDS, "explore"])
def test_every_command_is_a_hydra_app_with_help(command, entry_main, monkeypatch, capsys):
    if command == "explore":
        from pspo_repro.explore.__main__ import main
    else:
        main = entry_main(command)
    assert _main_calls_run_command(Path(sys.modules[main.__module__].__file__)), f"{command}: no run_command"
    monkeypatch.setattr(sys, "argv", [f"pspo_repro.{command}", "--help"])
    with pytest.raises(SystemExit) as exc:
        main()
    assert exc.value.code == 0
    assert "== Config ==" in capsys.readouterr().out


def test_the_check_sees_a_main_without_run_command(tmp_path):
    module = tmp_path / "m.py"
    module.write_text("def main():\n    return 0\n")
    assert not _main_calls_run_command(module)


@pytest.mark.parametrize(
    ("module", "args"),
    [
        ("pspo_repro.analysis.leaderboard", ["tag=a", "tag=b"]),
        ("pspo_repro.analysis.leaderboard", ["offpolicy_tag=x", "+offpolicy_tag=y"]),
        ("pspo_repro.analysis.regime", ["tag=a", "tag="]),
        ("pspo_repro.analysis.claims_report", ["spec=a.yaml", "spec=b.yaml"]),
    ],
)
def test_a_table_commands_key_given_twice_is_one_line(module, args, tmp_path, capsys):
    """Issue 59, item 5: the last value used to win without a word (a leaderboard ``tag`` given twice)."""
    import importlib

    main = importlib.import_module(module).main
    assert main([f"results_dir={tmp_path}", f"out_dir={tmp_path / 'out'}", *args]) == 2
    err = capsys.readouterr().err.strip()
    key = args[0].split("=")[0]
    assert err.splitlines() == [err] and err.startswith(f"error: {key} given twice")
    assert not (tmp_path / "out").exists()
