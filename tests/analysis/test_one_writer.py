"""Issue 36, one writer: claims and the leaderboard write their outputs as one set, switched whole
(``atomic.write_set``, as aggregate's and regime's are), after the same output-folder checks."""

from __future__ import annotations

import pytest
import toy_records

from pspo_repro.analysis import claims_report, leaderboard, regime
from pspo_repro.common import atomic


def _fail_second_text_write(monkeypatch) -> list:
    """``atomic.write_text`` (each staged text file of a set) fails on its second call: a disk filling up
    in the middle of a set."""
    real, calls = atomic.write_text, []

    def fail_second(path, text):
        calls.append(path)
        if len(calls) == 2:
            raise OSError(28, "No space left on device", str(path))
        real(path, text)

    monkeypatch.setattr(atomic, "write_text", fail_second)
    return calls


def _snapshot(folder):
    return {p.name: p.read_bytes() for p in folder.iterdir()}


def _write_leaderboard(root, out):
    return leaderboard.write(root, out)


def _write_claims(root, out, quote="q"):
    return claims_report.write(root, out, toy_records.spec(out.parent / "spec.yaml", quote=quote))


@pytest.mark.parametrize("command", ["leaderboard", "claims", "regime"])
def test_a_failure_mid_set_leaves_the_previous_set_and_no_half_written_file(command, tmp_path, monkeypatch):
    """The leaderboard and claims used to write file by file: a failure after the first left a new .md
    beside the previous .csv."""
    root, out = toy_records.build(tmp_path / "records"), tmp_path / "out"
    write = {"leaderboard": _write_leaderboard, "claims": _write_claims,
             "regime": lambda r, o: regime.write(r, o)}[command]  # fmt: skip
    paths = write(root, out)
    before = _snapshot(out)
    assert sorted(before) == sorted(p.name for p in paths)
    toy_records.run(root, "pspo", 3)  # the next set differs: a fourth pspo seed with its cells
    for dataset in toy_records.DATASETS:
        toy_records.cell(root, "pspo", 3, dataset, [1, 0, 0, 0, 0, 0])
    calls = _fail_second_text_write(monkeypatch)
    with pytest.raises(OSError, match="No space left on device"):
        write(root, out)
    assert len(calls) == 2
    assert _snapshot(out) == before  # the previous set, byte for byte; no staged file, no journal
    monkeypatch.undo()
    write(root, out)
    after = _snapshot(out)
    assert sorted(after) == sorted(before) and after != before


@pytest.mark.parametrize("command", ["leaderboard", "claims"])
def test_a_full_disk_mid_set_is_one_line_through_the_cli(command, tmp_path, monkeypatch, capsys):
    root, out = toy_records.build(tmp_path / "records"), tmp_path / "out"
    args = [f"results_dir={root}", f"out_dir={out}"]
    if command == "claims":
        args.append(f"spec={toy_records.spec(tmp_path / 'spec.yaml')}")
    main = {"leaderboard": leaderboard.main, "claims": claims_report.main}[command]
    _fail_second_text_write(monkeypatch)
    assert main(args) == 2
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(err) == 1 and err[0].startswith("error: cannot write the outputs: ") and str(out) in err[0]
    assert not out.exists() or not any(out.iterdir())


@pytest.mark.parametrize("command", ["leaderboard", "claims"])
def test_an_out_dir_that_is_a_file_is_refused_before_any_work(command, tmp_path, capsys):
    root = toy_records.build(tmp_path / "records")
    (tmp_path / "file").write_text("x")
    args = [f"results_dir={root}", f"out_dir={tmp_path / 'file' / 'sub'}"]
    if command == "claims":
        args.append(f"spec={toy_records.spec(tmp_path / 'spec.yaml')}")
    main = {"leaderboard": leaderboard.main, "claims": claims_report.main}[command]
    assert main(args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"error: cannot write the outputs under out_dir={tmp_path / 'file' / 'sub'}: "
                   f"{tmp_path / 'file'} is a file, not a folder"]  # fmt: skip
    assert (tmp_path / "file").read_text() == "x"


def test_a_frontier_figure_the_new_claims_set_does_not_draw_is_set_aside(tmp_path):
    """A set is one set: the previous run's claims_frontier.png does not stay beside a claims.md that no
    longer has a frontier; it moves into stale/, as aggregate's extra files do."""
    root, out = toy_records.build(tmp_path / "records"), tmp_path / "out"
    written = claims_report.write(root, out, toy_records.spec(tmp_path / "spec.yaml", frontier=True))
    assert [p.name for p in written] == ["claims.md", "claims.csv", "claims_frontier.png"]
    png = (out / "claims_frontier.png").read_bytes()
    assert png[:4] == b"\x89PNG"
    written = claims_report.write(root, out, toy_records.spec(tmp_path / "spec.yaml"))
    assert [p.name for p in written] == ["claims.md", "claims.csv"]
    assert sorted(p.name for p in out.iterdir()) == ["claims.csv", "claims.md", "stale"]
    assert (out / "stale" / "claims_frontier.png").read_bytes() == png
