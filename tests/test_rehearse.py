"""scripts/rehearse.py (``make rehearse``): its stated overrides, what it reads from a checkpoint, and (slow,
one method on the tiny architecture, ~60 s on an idle machine) a dry run through train, SIGKILL, resume, evaluate
and aggregate. The real-size run is not a test (30+ minutes; docs/benchmarks.md has its figures)."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("rehearse", ROOT / "scripts" / "rehearse.py")
rh = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(rh)

# What the rehearsal may change in the paper config: the model folder, the logger, the run's length,
# gradient accumulation, completion length, validation size, logging, autocast, progress bars.
ALLOWED = {
    "model.path", "logger", "trainer.token_budget", "trainer.max_steps", "trainer.save_steps",
    "trainer.eval_steps", "trainer.gradient_accumulation_steps", "trainer.max_completion_length",
    "trainer.eval_limit", "trainer.per_device_eval_batch_size", "trainer.logging_steps", "trainer.bf16",
    "trainer.disable_tqdm",
}  # fmt: skip


@pytest.mark.parametrize("num_iterations", [1, 2])
def test_overrides_are_the_stated_short_list(num_iterations, tmp_path):
    ov = dict(x.split("=", 1) for x in rh.overrides(rh.MODES["real"], tmp_path, num_iterations))
    assert set(ov) == ALLOWED
    # two checkpoints, each a multiple of num_iterations (resume), each validated (best-checkpoint selection)
    assert int(ov["trainer.max_steps"]) == 2 * int(ov["trainer.save_steps"]) == 2 * num_iterations
    assert ov["trainer.eval_steps"] == ov["trainer.save_steps"]
    assert ov["trainer.gradient_accumulation_steps"] == "1" and ov["trainer.bf16"] == "true"
    assert ov["model.path"] == str(tmp_path)


def test_methods_are_the_four_paper_configs():
    assert rh.METHODS["clip_as_run"] == ["method=clip", "variant=as_run"]
    assert set(rh.METHODS) == {"clip", "noclip", "pspo", "clip_as_run"}
    assert rh.parse_args(["--methods", "pspo", "--big", "none"]).big == ()


def test_bad_method_exits_with_usage(capsys):
    with pytest.raises(SystemExit) as exc:
        rh.parse_args(["--methods", "sapo"])
    assert exc.value.code == 2 and "allowed: clip, noclip, pspo, clip_as_run" in capsys.readouterr().err


@pytest.mark.parametrize("value", [None, "{tmp}/nowhere"])
def test_missing_data_folder_exits_with_usage_before_anything_runs(value, tmp_path, monkeypatch, capsys):
    if value is None:
        monkeypatch.delenv("PSPO_DATA_DIR", raising=False)
    else:
        monkeypatch.setenv("PSPO_DATA_DIR", value.format(tmp=tmp_path))
    with pytest.raises(SystemExit) as exit_:
        rh.parse_args(["--dry-run", "--scratch", str(tmp_path / "scratch")])
    assert exit_.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.startswith("rehearse.py: error: PSPO_DATA_DIR=") and "offline data folder" in err
    assert not (tmp_path / "scratch").exists()


@pytest.mark.parametrize("dry", [True, False])
def test_default_folders_follow_the_results_root(dry, tmp_path, monkeypatch):
    """PSPO_RESULTS_DIR moves the rehearsal's report and scratch folder, as it moves every command's outputs."""
    monkeypatch.setenv("PSPO_RESULTS_DIR", str(tmp_path / "res"))
    args = rh.parse_args([*(["--dry-run"] if dry else []), "--big", "none"])
    base = tmp_path / "res" / "rehearse"
    assert args.scratch == base / ("scratch_dry" if dry else "scratch")
    assert args.out == (args.scratch / "rehearse.json" if dry else base / "rehearse.json")


def test_the_default_report_is_written_under_the_results_root(tmp_path, monkeypatch):
    monkeypatch.setenv("PSPO_RESULTS_DIR", str(tmp_path / "res"))
    r = rh.Rehearsal(rh.parse_args(["--dry-run", "--hard-s", "0", "--big", "none"]))
    r.stage("never", [sys.executable, "-c", "raise SystemExit(3)"])
    assert json.loads((tmp_path / "res/rehearse/scratch_dry/rehearse.json").read_text())["stages"]["never"]


def test_a_default_folder_linked_out_of_the_results_root_is_one_usage_line(tmp_path, monkeypatch, capsys):
    results = tmp_path / "res"
    results.mkdir()
    (tmp_path / "elsewhere").mkdir()
    (results / "rehearse").symlink_to(tmp_path / "elsewhere")
    monkeypatch.setenv("PSPO_RESULTS_DIR", str(results))
    with pytest.raises(SystemExit) as exc:
        rh.parse_args(["--dry-run", "--big", "none"])
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert exc.value.code == 2 and err.startswith("rehearse.py: error: --scratch ")
    assert f"{results / 'rehearse'} is a symlink to {tmp_path / 'elsewhere'}" in err
    assert not any((tmp_path / "elsewhere").iterdir())


@pytest.mark.parametrize("value", ["nan", "inf", "-1", "soon"])
def test_a_hard_limit_that_is_no_finite_number_of_seconds_is_one_usage_line(value, tmp_path, capsys):
    """``nan`` compared false with every time left, so no stage was ever skipped (issue 59, item 5)."""
    with pytest.raises(SystemExit) as exc:
        rh.parse_args(["--dry-run", "--hard-s", value, "--scratch", str(tmp_path / "s")])
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert exc.value.code == 2 and f"--hard-s: {value!r}: allowed a finite number of seconds >= 0" in err
    assert not (tmp_path / "s").exists()


@pytest.mark.parametrize("case", ["scratch_file", "out_read_only", "out_folder", "out_under_file"])
def test_an_output_that_cannot_be_written_is_one_usage_line(case, tmp_path, monkeypatch, capsys):
    """Issue 59, item 7: a --scratch that is a file or an --out in a read-only folder was a traceback (the
    report's only after every stage had run)."""
    from pspo_repro.common import output_dirs

    (tmp_path / "f").write_text("x")
    args, want = {
        "scratch_file": (["--scratch", str(tmp_path / "f")], f"--scratch={tmp_path / 'f'}: {tmp_path / 'f'} is a file"),
        "out_read_only": (["--out", str(tmp_path / "ro" / "r.json")], f"--out={tmp_path / 'ro' / 'r.json'}: {tmp_path / 'ro'} cannot be written"),
        "out_folder": (["--out", str(tmp_path)], f"--out={tmp_path} is a folder; allowed: the report's file path"),
        "out_under_file": (["--out", str(tmp_path / "f" / "r.json")], f"{tmp_path / 'f'} is a file, not a folder"),
    }[case]  # fmt: skip
    (tmp_path / "ro").mkdir()
    real = os.access  # read-only as a non-root user sees a chmod 555 folder (root ignores the mode bits)
    monkeypatch.setattr(output_dirs.os, "access", lambda p, m: Path(p) != tmp_path / "ro" and real(p, m))
    scratch = [] if case == "scratch_file" else ["--scratch", str(tmp_path / "s")]
    with pytest.raises(SystemExit) as exc:
        rh.parse_args(["--dry-run", "--big", "none", *scratch, *args])
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert exc.value.code == 2 and err.startswith("rehearse.py: error: ") and want in err
    assert not (tmp_path / "s").exists()


@pytest.mark.parametrize("argv", [[], ["figures.json"], ["figures.json", "x=1"], ["--", "x=1"], ["", "--"]])
def test_wrap_with_bad_arguments_is_one_line(argv, capsys):
    """``_wrap`` is internal, but bad arguments were an IndexError or ValueError traceback."""
    assert rh.main(["_wrap", *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert err.splitlines() == [err] and "allowed: _wrap FIGURES.json -- <train overrides>" in err


def test_wrap_figures_in_a_folder_that_is_a_file_is_one_line(tmp_path, capsys):
    (tmp_path / "f").write_text("x")
    assert rh.main(["_wrap", str(tmp_path / "f" / "fig.json"), "--", "model=tiny"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.splitlines() == [err] and f"{tmp_path / 'f'} is a file, not a folder" in err


def test_checkpoint_facts_read_the_safetensors_header(tmp_path):
    import torch
    from safetensors.torch import save_file

    save_file({"a": torch.zeros(2, dtype=torch.float32), "b": torch.zeros(3, dtype=torch.bfloat16)},
              str(tmp_path / "model.safetensors"))  # fmt: skip
    (tmp_path / "optimizer.pt").write_bytes(b"x" * 2**20)
    facts = rh.checkpoint_facts(tmp_path)
    assert facts["weight_dtypes"] == {"F32": 1, "BF16": 1}
    assert facts["files_mib"]["optimizer.pt"] == 1.0 and facts["total_mib"] >= 1.0


def test_step_split_takes_generation_inside_steps_only(tmp_path):
    (tmp_path / "m.jsonl").write_text('{"step": 1, "train/step_time": 2.0}\n{"step": 2}\n')
    fig = {"step_s": [2.0, 1.0],
           "profiling_by_mode": {"train": {"transformers.generate": [0.5]},
                                 "eval": {"transformers.generate": [4.0]}}}  # fmt: skip
    split = rh.step_split(tmp_path / "m.jsonl", fig)
    assert split["trl_step_time_s"] == {1: 2.0}
    r = split["resumed_process"]
    assert (r["generation_s"], r["rest_s"], r["validation_generation_s"]) == (0.5, 2.5, 4.0)


def test_interrupt_ends_the_running_stage(tmp_path):
    """Ctrl-C (or SIGTERM, turned into the same) in the parent kills the stage's own session."""
    log = tmp_path / "stage.log"
    cmd = [sys.executable, "-c", "import os, time; print(os.getpid(), flush=True); time.sleep(120)"]

    def interrupt() -> bool:
        if log.read_text().strip():
            raise KeyboardInterrupt
        return False

    with pytest.raises(KeyboardInterrupt):
        rh.run_stage("sleeper", cmd, dict(os.environ), log, timeout=60, kill_when=interrupt)
    with pytest.raises(ProcessLookupError):
        os.kill(int(log.read_text().split()[0]), 0)


def test_stages_past_the_hard_limit_are_skipped_not_cut_short(tmp_path):
    args = rh.parse_args(["--dry-run", "--hard-s", "0", "--scratch", str(tmp_path), "--big", "none"])
    r = rh.Rehearsal(args)
    res = r.stage("never", [sys.executable, "-c", "raise SystemExit(3)"])
    assert res["status"] == "skipped" and r.failed == ["never"]
    assert json.loads(args.out.read_text())["stages"]["never"]["reason"] == "past --hard-s"


@pytest.mark.slow
def test_dry_run_end_to_end(tmp_path, data_dir):
    """One method (noclip: 2 steps) on the tiny architecture: killed after its first checkpoint, resumed,
    evaluated and aggregated, with the figures the real run records."""
    out = tmp_path / "rehearse.json"
    res = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "rehearse.py"), "--dry-run", "--methods", "noclip"]
        + ["--big", "none", "--out", str(out), "--scratch", str(tmp_path / "scratch")],
        cwd=ROOT, capture_output=True, text=True, timeout=900,  # ~60 s alone; a loaded machine stretches it
    )  # fmt: skip
    report = json.loads(out.read_text())
    assert res.returncode == 0, (res.stdout[-2000:], res.stderr[-2000:])
    assert report["finished"] and report["dry_run"] and report["failed_stages"] == []
    stages = report["stages"]
    assert stages["train_noclip_until_kill"]["status"] == "killed"
    assert all(s["peak_rss_mib"] > 0 and s["cpu_s"] > 0 for s in stages.values())
    run = report["runs"]["noclip"]
    assert run["killed_after"] == ["checkpoint-1"] and run["resumed_from"].endswith("checkpoint-1")
    assert (run["status"], run["final_step"], run["best_checkpoint"]) == ("finished", 2, "checkpoint-1")
    assert run["precision"]["param_dtype"] == "float32" and run["precision"]["autocast_dtype"] == "bfloat16"
    assert run["best_checkpoint_facts"]["weight_dtypes"] == {"F32": 26}  # fp32 masters saved
    assert set(run["step_time"]["trl_step_time_s"]) == {"1", "2"}
    assert run["step_time"]["resumed_process"]["generation_s"] > 0
    assert list(run["eval_cells"]) == ["gsm8k/T0.0"]
    assert "GRPO-noclip" in report["tables"]["main_table"]
    assert not list((tmp_path / "scratch").rglob("checkpoint-*"))  # deleted once evaluated
