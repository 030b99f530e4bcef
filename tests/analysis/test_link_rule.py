"""One rule for links in a results tree (issue 59, item 3; docs/reliability.md "One rule for links"): every
reader (aggregate's cells and training curves, regime, claims, the leaderboard, the ladder's rungs) refuses a
symlink whose target lies outside the tree in one line naming the link, and follows one that stays inside."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest
import toy_records

from pspo_repro.analysis import aggregate, claims_report, leaderboard, regime, scale
from pspo_repro.common.safe_paths import UnsafePathError, tree_files

COMMANDS = ("aggregate", "regime", "claims", "leaderboard")
# Where a link may sit: the eval folder, a method folder, a seed folder, a run folder, the runs folder.
LINKS = {
    "eval": "eval",
    "eval-method": "eval/tiny/pspo",
    "eval-seed": "eval/tiny/pspo/seed1",
    "run": "runs/tiny/pspo/seed1",
    "runs": "runs",
}
# Each command with each link it reads through (regime reads training runs only).
CASES = [(c, w) for c in COMMANDS for w in LINKS if c != "regime" or w.startswith("run")]


def _move_and_link(root: Path, rel: str, target_parent: Path) -> Path:
    """Move ``root/rel`` to ``target_parent/<its name>`` and leave a symlink to it at ``root/rel``."""
    link = root / rel
    target = target_parent / rel.replace("/", "_")
    target_parent.mkdir(parents=True, exist_ok=True)
    shutil.move(link, target)
    link.symlink_to(target, target_is_directory=True)
    return link


def _main(command: str, root: Path, out: Path, spec: Path, monkeypatch) -> int:
    args = [f"results_dir={root}", f"out_dir={out}"]
    if command == "aggregate":
        monkeypatch.setattr(sys, "argv", ["pspo_repro.aggregate", *args])
        try:
            return aggregate.main()
        except SystemExit as exc:
            return int(exc.code)
    if command == "regime":
        return regime.main(args)
    if command == "claims":
        return claims_report.main([*args, f"spec={spec}"])
    return leaderboard.main(args)


@pytest.fixture
def tree(tmp_path, monkeypatch):
    monkeypatch.delenv("PSPO_RESULTS_DIR", raising=False)  # the tree alone is the results folder
    root = toy_records.build(tmp_path / "records")
    return root, toy_records.spec(tmp_path / "spec.yaml")


@pytest.mark.parametrize(("command", "where"), CASES)
def test_a_link_out_of_the_tree_is_one_line_naming_it(command, where, tree, tmp_path, monkeypatch, capsys):
    root, spec = tree
    link = _move_and_link(root, LINKS[where], tmp_path / "elsewhere")
    out = tmp_path / "out"
    code = _main(command, root, out, spec, monkeypatch)
    err = capsys.readouterr().err.strip()
    assert code != 0 and len(err.splitlines()) == 1, err
    assert err.startswith("error: ") and f"{link} is a symlink to {tmp_path / 'elsewhere'}" in err
    assert "refusing to read through it" in err
    assert not out.exists() or not any(out.iterdir())  # nothing written


def _outputs(out: Path) -> dict[str, bytes]:
    """Every output but PDFs (they hold the time they were drawn)."""
    return {p.name: p.read_bytes() for p in sorted(out.iterdir()) if p.is_file() and p.suffix != ".pdf"}


@pytest.mark.parametrize(("command", "where"), CASES)
def test_a_link_that_stays_inside_is_followed(command, where, tree, tmp_path, monkeypatch, capsys):
    """The same outputs, byte for byte, as the tree without the link: a linked method folder is in the
    leaderboard, a linked seed folder in the tables, a linked run folder in the training curves."""
    root, spec = tree
    assert _main(command, root, tmp_path / "plain", spec, monkeypatch) == 0, capsys.readouterr().err
    _move_and_link(root, LINKS[where], root / "store")  # inside the tree, beside eval/ and runs/
    assert _main(command, root, tmp_path / "linked", spec, monkeypatch) == 0, capsys.readouterr().err
    plain, linked = _outputs(tmp_path / "plain"), _outputs(tmp_path / "linked")
    if command == "aggregate":  # the summary names its out_dir
        plain.pop("summary.md"), linked.pop("summary.md")
        assert "training_curves.png" in linked
    assert linked == plain


def test_a_relative_link_inside_is_followed_and_a_loop_refused(tmp_path):
    root = tmp_path / "r"
    (root / "eval" / "real").mkdir(parents=True)
    (root / "eval" / "real" / "a.json").write_text("{}")
    (root / "eval" / "alias").symlink_to("real")
    assert tree_files(root, root / "eval", "*.json") == [
        root / "eval/alias/a.json",
        root / "eval/real/a.json",
    ]
    (root / "eval" / "real" / "up").symlink_to("..")
    with pytest.raises(UnsafePathError, match=f"{root / 'eval/alias/up'} is a symlink to .*a loop"):
        tree_files(root, root / "eval", "*.json")


def test_a_cell_file_linked_out_is_refused(tmp_path):
    root = tmp_path / "r"
    (root / "eval" / "m").mkdir(parents=True)
    (tmp_path / "x.json").write_text("{}")
    (root / "eval" / "m" / "T0.0.json").symlink_to(tmp_path / "x.json")
    with pytest.raises(
        UnsafePathError, match=f"^{root / 'eval/m/T0.0.json'} is a symlink to {tmp_path / 'x.json'}"
    ):
        tree_files(root, root / "eval", "*.json")


# ---------------------------------------------------------------- the ladder's rungs


def _rungs(root: Path) -> list[dict]:
    for name in ("a", "b"):
        (root / name).mkdir(parents=True)
    return [{"name": "a", "arch": {}, "params": 1}, {"name": "b", "arch": {}, "params": 2}]


class _Read(Exception):
    """Raised by the stand-in reader: the rung passed the link rule and its records were reached."""


def test_a_rung_linked_out_of_the_ladder_is_refused_naming_it(tmp_path, monkeypatch):
    monkeypatch.delenv("PSPO_RESULTS_DIR", raising=False)
    root = tmp_path / "ladder"
    spec = _rungs(root)
    monkeypatch.setattr(scale.Records, "read", staticmethod(lambda folder: (_ for _ in ()).throw(_Read())))
    link = _move_and_link(root, "b", tmp_path / "elsewhere")
    with pytest.raises(
        UnsafePathError, match=f"^rung b {link} is a symlink to .*refusing to read through it"
    ):
        scale.read_ladder(root, spec)


def test_a_rung_linked_inside_the_ladder_is_read(tmp_path, monkeypatch):
    monkeypatch.delenv("PSPO_RESULTS_DIR", raising=False)
    root = tmp_path / "ladder"
    spec = _rungs(root)
    read = []

    def fake(folder):
        read.append(folder)
        raise _Read()

    monkeypatch.setattr(scale.Records, "read", staticmethod(fake))
    _move_and_link(root, "a", root / "store")
    with pytest.raises(_Read):
        scale.read_ladder(root, spec)
    assert read == [root / "a"]


def test_the_ladder_refuses_a_rung_linked_out_before_any_rung_runs(tmp_path, monkeypatch):
    from pspo_repro.common.cli import compose_config
    from pspo_repro.common.paths import PROJECT_ROOT
    from pspo_repro.pipelines import ladder

    monkeypatch.delenv("PSPO_RESULTS_DIR", raising=False)
    cfg = compose_config(PROJECT_ROOT / "conf", "scale", [f"root={tmp_path / 's'}"])
    first = ladder.bases(cfg)[0].name
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "s").mkdir()
    (tmp_path / "s" / first).symlink_to(tmp_path / "elsewhere")
    monkeypatch.setattr(ladder.subprocess, "run", lambda *a, **k: pytest.fail("a rung ran"))
    with pytest.raises(ladder.ScaleError, match=f"rung {first} .* is a symlink to .*elsewhere"):
        ladder.run_ladder(cfg)


def test_a_folder_that_cannot_be_read_is_one_line(tmp_path, monkeypatch):
    """glob passed over an unreadable folder, so its records left the tables unseen (root reads any mode:
    the refusal is simulated)."""
    import os

    from pspo_repro.common import safe_paths

    (tmp_path / "eval" / "locked").mkdir(parents=True)
    real = os.scandir

    def scandir(path):
        if Path(path) == tmp_path / "eval" / "locked":
            raise PermissionError(13, "Permission denied")
        return real(path)

    monkeypatch.setattr(safe_paths.os, "scandir", scandir)
    with pytest.raises(
        UnsafePathError, match=f"^{tmp_path / 'eval' / 'locked'}: cannot be read \\(Permission denied\\)$"
    ):
        tree_files(tmp_path, tmp_path / "eval", "*.json")
