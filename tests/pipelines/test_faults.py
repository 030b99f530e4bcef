"""Fault injection: SIGKILL mid-training / mid-sweep / mid-aggregation, corrupted checkpoints, a racing
second evaluator, failing writes and non-finite losses. The promise: no finished work is lost and no
number is reported that was not computed.

Kill points are drawn from ``random.Random(FAULT_SEED)``; CI can vary them with ``PSPO_FAULT_SEED``.
"""

from __future__ import annotations

import errno
import gzip
import json
import logging
import os
import random
import signal
import sys
import time
from pathlib import Path

import pytest
import warm_cli

from pspo_repro.common import atomic
from pspo_repro.common.paths import PROJECT_ROOT

PROJECT = PROJECT_ROOT
FAULT_SEED = int(os.environ.get("PSPO_FAULT_SEED", "0"))

# Tiny training: noclip reuses no rollout, so every step is a resume boundary (save_steps=1).
TRAIN = [
    "model=tiny",
    "method=noclip",
    "logger=none",
    "reward=smoke_length",
    "trainer.max_steps=4",
    "trainer.max_completion_length=16",
    "trainer.eval_steps=null",
    "trainer.save_steps=1",
    "trainer.disable_tqdm=true",
]


def _env(results: Path, **extra) -> dict[str, str]:
    return {
        **os.environ,
        "PSPO_RESULTS_DIR": str(results),
        "PSPO_LOG_DIR": str(results.parent / "hydra"),
        "OMP_NUM_THREADS": "1",  # as the in-process reference (conftest sets one torch thread)
        **extra,
    }


def _compose_train(overrides):
    from pspo_repro.common.cli import compose_config
    from pspo_repro.common.paths import CONF_DIR

    return compose_config(CONF_DIR, "train", list(overrides))


def _train_in_process(overrides, results: Path) -> Path:
    from pspo_repro.training import grpo as train

    ov = [*overrides, f"paths.results_dir={results}"]
    return train.run(_compose_train(ov), ov)


def _weights(ckpt: Path):
    from safetensors.torch import load_file

    return load_file(str(ckpt / "model.safetensors"))


def _assert_same_weights(a: Path, b: Path) -> None:
    import torch

    wa, wb = _weights(a), _weights(b)
    assert wa.keys() == wb.keys()
    for k in wa:
        assert torch.equal(wa[k], wb[k]), k


# Wall-clock keys TRL/HF log; everything else in metrics.jsonl must match exactly.
_TIMING = ("runtime", "per_second", "step_time", "time")


def _metrics(folder: Path) -> list[dict]:
    rows = [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines()]
    return [{k: v for k, v in r.items() if not any(t in k for t in _TIMING)} for r in rows]


@pytest.fixture(scope="module")
def straight_run(tmp_path_factory, tiny_model_dir):
    """The uninterrupted reference run (in this process)."""
    return _train_in_process(TRAIN, tmp_path_factory.mktemp("straight") / "results")


def _wait_for(pred, proc, timeout=120.0, poll=0.01) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if pred():
            return True
        if proc.poll() is not None:
            return False
        time.sleep(poll)
    return False


# ---------------------------------------------------------------- training


@pytest.mark.xdist_group("warm_cli")  # one worker: the module fixtures run once, one warm server
@pytest.mark.slow
def test_sigkill_during_training_resumes_to_the_same_weights_and_metrics(tmp_path, straight_run):
    results = tmp_path / "results"
    cmd = [sys.executable, "-m", "pspo_repro.train", *TRAIN]
    k = random.Random(FAULT_SEED).randint(1, 3)
    folder = results / "runs" / "tiny" / "noclip" / straight_run.name  # same overrides, same folder
    proc = warm_cli.popen(cmd, cwd=PROJECT, env=_env(results), out=tmp_path / "killed.log")
    try:
        # As soon as checkpoint-k appears (often mid-save): a real SIGKILL, no clean-up of any kind.
        assert _wait_for(lambda: (folder / f"checkpoint-{k}").exists(), proc), "run ended before the kill"
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == -signal.SIGKILL
    assert json.loads((folder / "run.json").read_text())["status"] == "running"

    again = warm_cli.run(cmd, cwd=PROJECT, env=_env(results), timeout=300)
    assert again.returncode == 0, again.stdout + again.stderr
    run = json.loads((folder / "run.json").read_text())
    assert run["status"] == "finished" and run["final_step"] == 4
    _assert_same_weights(straight_run / "checkpoint-4", folder / "checkpoint-4")
    assert _metrics(folder) == _metrics(straight_run)  # steps 1-4, once each, same values


@pytest.mark.slow
def test_kill_after_the_budget_checkpoint_finishes_without_another_step(tmp_path, tiny_model_dir):
    """A kill between the token budget's final checkpoint and run.json's "finished": the rerun takes no
    step past the budget; it marks the run finished from that checkpoint's trainer state."""
    results = tmp_path / "results"
    ov = [*TRAIN, "trainer.token_budget=1"]
    folder = _train_in_process(ov, results)
    run = json.loads((folder / "run.json").read_text())
    assert (run["status"], run["stop_reason"], run["final_step"]) == ("finished", "token_budget", 1)
    metrics = (folder / "metrics.jsonl").read_text()
    (folder / "run.json").write_text(json.dumps({**run, "status": "running"}))  # as if killed before this

    assert _train_in_process(ov, results) == folder
    again = json.loads((folder / "run.json").read_text())
    assert (again["status"], again["stop_reason"], again["final_step"]) == ("finished", "token_budget", 1)
    assert again["num_tokens"] == run["num_tokens"]
    assert sorted(p.name for p in folder.glob("checkpoint-*")) == ["checkpoint-1"]
    assert (folder / "metrics.jsonl").read_text() == metrics


# A command that SIGKILLs itself at the n-th call of a function (training: inside a checkpoint's save;
# aggregation: at an atomic replace), started warm like the others.
KILL_AT = Path(__file__).with_name("kill_at.py")

# Validation before the first step and at every step, a checkpoint at every step.
TRAIN_EVAL = [
    *(o for o in TRAIN if not o.startswith("trainer.eval_steps=")),
    "trainer.max_steps=3",
    "trainer.eval_steps=1",
    "trainer.eval_limit=1",
    "trainer.eval_on_start=true",
]


def _eval_steps(folder: Path) -> list[int]:
    return [r["step"] for r in _metrics(folder) if any(k.startswith("eval/") for k in r)]


@pytest.fixture(scope="module")
def straight_eval_run(tmp_path_factory, tiny_model_dir):
    """The uninterrupted reference run with validation (in this process)."""
    return _train_in_process(TRAIN_EVAL, tmp_path_factory.mktemp("straight_eval") / "results")


@pytest.mark.xdist_group("warm_cli")  # one worker: the module fixtures run once, one warm server
@pytest.mark.slow
@pytest.mark.parametrize("n", [1, 2])
def test_kill_during_a_checkpoint_save_logs_each_validation_once(tmp_path, straight_eval_run, n):
    """Issue 25 item 8: a SIGKILL inside the first checkpoint's save used to leave the step-0 validation in
    metrics.jsonl and the fresh start logged it again (steps 0, 0, 1, 2, 3); inside the second one the
    run resumes from checkpoint-1. Either way every step's validation is there once, in order, with the
    uninterrupted run's values."""
    results = tmp_path / "results"
    killed = warm_cli.run(
        [sys.executable, str(KILL_AT), "marker", str(n), *TRAIN_EVAL],
        cwd=PROJECT,
        env=_env(results),
        timeout=300,
    )
    assert killed.returncode == -signal.SIGKILL, killed.stdout + killed.stderr
    folder = next((results / "runs" / "tiny" / "noclip").iterdir())
    assert 0 in _eval_steps(folder)  # the step-0 validation was logged before the kill
    again = warm_cli.run(
        [sys.executable, "-m", "pspo_repro.train", *TRAIN_EVAL], cwd=PROJECT, env=_env(results), timeout=300
    )
    assert again.returncode == 0, again.stdout + again.stderr
    assert json.loads((folder / "run.json").read_text())["status"] == "finished"
    assert [r["step"] for r in _metrics(folder)] == [0, 1, 2, 3]
    assert _eval_steps(folder) == [0, 1, 2, 3]
    assert _metrics(folder) == _metrics(straight_eval_run)


_LINES = {
    "v0": '{"step": 0, "eval/reward": 0.1}',
    "t1": '{"step": 1, "train/loss": 0.5}',
    "v2": '{"step": 2, "eval/reward": 0.2, "train/loss": 0.4}',
    "t3": '{"step": 3, "train/loss": 0.3}',
    "cut": '{"step": 4, "train/lo',
    "v0b": '{"step": 0, "eval/reward": 0.9}',
    "text": '{"step": "2", "train/loss": 1}',
    "list": "[1, 2]",
}


@pytest.mark.parametrize(
    ("lines", "max_step", "kept"),
    [
        (["v0"], None, []),  # killed in the first save: the fresh start validates step 0 again
        (["v0", "t1", "cut"], None, []),
        (["v0", "t1", "v2", "t3", "cut"], 2, ["v0", "t1", "v2"]),  # resumed from checkpoint-2
        (["v0", "t1", "v2"], 0, ["v0"]),
        (["v0", "v0b", "t1"], 1, ["v0", "t1"]),  # a step twice (a file from before the fix): once
        (["v0", "text", "list", "t1"], 2, ["v0", "t1"]),
    ],
    ids=["first-save", "first-save-cut-line", "resume-2", "resume-0", "duplicate-step", "not-a-step"],
)
def test_truncate_metrics_keeps_each_step_once_up_to_the_resume_step(tmp_path, lines, max_step, kept):
    """The metrics.jsonl a resumed (or restarted) run appends to holds each step at most once, and no
    step the run will log again."""
    from pspo_repro.common.run_dir import truncate_metrics

    path = tmp_path / "metrics.jsonl"
    path.write_text("".join(_LINES[k] + "\n" for k in lines))
    truncate_metrics(path, max_step)
    assert path.read_text().splitlines() == [_LINES[k] for k in kept]


def _ckpt_with_marker(folder: Path, step: int, tensor_value: float = 1.0) -> Path:
    import torch
    from safetensors.torch import save_file

    from pspo_repro.common.run_dir import write_checkpoint_marker

    ckpt = folder / f"checkpoint-{step}"
    ckpt.mkdir(parents=True)
    save_file({"w": torch.full((64,), tensor_value)}, str(ckpt / "model.safetensors"))
    (ckpt / "trainer_state.json").write_text(json.dumps({"global_step": step}))
    (ckpt / "optimizer.pt").write_bytes(b"x" * 100)
    write_checkpoint_marker(ckpt, step)
    return ckpt


@pytest.mark.parametrize(
    "damage, named",
    [
        ("truncate_weights", "model.safetensors"),
        ("drop_marker", "pspo_complete.json"),
        ("drop_state", "trainer_state.json"),
        ("truncate_optimizer", "optimizer.pt"),
        ("flip_header", "model.safetensors"),
        ("flip_data", "model.safetensors"),
        ("zero_optimizer", "optimizer.pt"),
    ],
)
def test_damaged_latest_checkpoint_is_detected_and_set_aside(tmp_path, caplog, damage, named):
    from pspo_repro.common.run_dir import checkpoint_problems, last_checkpoint

    good = _ckpt_with_marker(tmp_path, 2)
    bad = _ckpt_with_marker(tmp_path, 4)
    assert checkpoint_problems(bad) == [] and last_checkpoint(tmp_path) == bad
    w = bad / "model.safetensors"
    if damage == "truncate_weights":
        w.write_bytes(w.read_bytes()[:-10])
    elif damage == "drop_marker":
        (bad / "pspo_complete.json").unlink()
    elif damage == "drop_state":
        (bad / "trainer_state.json").unlink()
    elif damage == "truncate_optimizer":
        (bad / "optimizer.pt").write_bytes(b"x" * 10)
    elif damage == "flip_data":  # same size, valid header, one byte of tensor data flipped
        data = bytearray(w.read_bytes())
        data[-1] ^= 0xFF
        w.write_bytes(bytes(data))
    elif damage == "zero_optimizer":  # same size, zero-filled (a page lost in a crash)
        (bad / "optimizer.pt").write_bytes(b"\0" * 100)
    else:  # same size, a header that no longer describes the data
        data = bytearray(w.read_bytes())
        data[0:8] = (len(data) * 2).to_bytes(8, "little")
        w.write_bytes(bytes(data))
    with caplog.at_level(logging.WARNING, logger="pspo_repro.train"):
        assert last_checkpoint(tmp_path) == good
    assert named in caplog.text and "checkpoint-4" in caplog.text
    assert not bad.exists() and (tmp_path / "bad-checkpoint-4").is_dir()  # kept for inspection


@pytest.mark.xdist_group("warm_cli")  # one worker: the module fixtures run once, one warm server
@pytest.mark.slow
def test_corrupted_latest_checkpoint_resumes_from_the_previous_one(tmp_path, straight_run, caplog):
    results = tmp_path / "results"
    folder = _train_in_process([*TRAIN, "trainer.stop_after_step=3"], results)
    assert sorted(p.name for p in folder.glob("checkpoint-*")) == ["checkpoint-2", "checkpoint-3"]
    w = folder / "checkpoint-3" / "model.safetensors"
    w.write_bytes(w.read_bytes()[: w.stat().st_size // 2])  # a disk-full / cut copy
    with caplog.at_level(logging.WARNING, logger="pspo_repro.train"):
        _train_in_process(TRAIN, results)
    assert str(w) in caplog.text, "the warning must name the bad file"
    run = json.loads((folder / "run.json").read_text())
    assert run["status"] == "finished" and run["resumed_from"].endswith("checkpoint-2")
    _assert_same_weights(straight_run / "checkpoint-4", folder / "checkpoint-4")
    assert _metrics(folder) == _metrics(straight_run)


@pytest.fixture
def nan_method():
    """A test-only method: noclip whose loss turns NaN on the 3rd call (= optimizer step 3 here)."""
    from pspo_repro.methods import get_method, registry

    noclip = get_method("noclip")
    calls = [0]

    @registry.register_method("test_nan_step3")
    def nan_step3(logp, old_logp, advantages, mask):
        calls[0] += 1
        out = noclip(logp, old_logp, advantages, mask)
        if calls[0] == 3:
            return out._replace(per_token_loss=out.per_token_loss * float("nan"))
        return out

    yield calls
    registry._REGISTRY.pop("test_nan_step3")  # the registry must match conf/method/ for other tests


NAN_RUN = [*TRAIN, "method.name=test_nan_step3"]


@pytest.mark.slow
def test_nonfinite_loss_stops_naming_step_and_last_good_checkpoint(tmp_path, nan_method):
    from pspo_repro.training.grpo import UsageError

    results = tmp_path / "results"
    with pytest.raises(UsageError) as err:
        _train_in_process(NAN_RUN, results)
    (folder,) = (results / "runs" / "tiny" / "test_nan_step3").glob("seed0*")
    msg = str(err.value)
    assert "non-finite loss or gradient at step 3" in msg and str(folder / "checkpoint-2") in msg
    assert "\n" not in msg
    assert not (folder / "checkpoint-3").exists()  # the bad update was never applied nor saved
    run = json.loads((folder / "run.json").read_text())
    assert run["status"] == "failed" and "step 3" in run["error"]


@pytest.mark.slow
def test_skip_nonfinite_skips_and_counts(tmp_path, nan_method):
    import torch

    results = tmp_path / "results"
    folder = _train_in_process(
        [*NAN_RUN, "trainer.skip_nonfinite=true", "trainer.save_total_limit=5"], results
    )
    run = json.loads((folder / "run.json").read_text())
    assert run["status"] == "finished" and run["nonfinite_skipped"] == 1
    assert run["nonfinite_skipped_steps"] == [3]
    rows = {r["step"]: r for r in map(json.loads, (folder / "metrics.jsonl").read_text().splitlines())}
    assert rows[2]["train/nonfinite_skipped"] == 0 and rows[4]["train/nonfinite_skipped"] == 1
    # step 3 changed nothing (no update), step 4 trained again, and every weight is finite
    w2, w3, w4 = (_weights(folder / f"checkpoint-{s}") for s in (2, 3, 4))
    assert all(torch.equal(w2[k], w3[k]) for k in w2)
    assert any(not torch.equal(w3[k], w4[k]) for k in w3)
    assert all(torch.isfinite(v).all() for v in w4.values())


def test_off_by_default():
    cfg = _compose_train(["model=tiny"])
    assert cfg.trainer.skip_nonfinite is False


# ---------------------------------------------------------------- evaluation

SWEEP = [
    "model=tiny",
    "eval.limit=20",
    "temperatures=[0.0,0.8]",
    "n_samples=2",
    "max_new_tokens=8",
    "chunk_size=5",
    "backend=hf",
]


def _cell_files(results: Path) -> dict[str, bytes]:
    cell = results / "eval" / "tiny" / "baseline" / "seed0" / "gsm8k"
    return {p.name: p.read_bytes() for p in sorted(cell.iterdir()) if p.is_file()}


@pytest.fixture(scope="module")
def reference_sweep(tmp_path_factory, tiny_model_dir):
    """The uninterrupted sweep's final files (in this process)."""
    from pspo_repro.evaluation import evaluator as ev

    results = tmp_path_factory.mktemp("ref-sweep") / "results"
    mp = pytest.MonkeyPatch()
    mp.setenv("PSPO_RESULTS_DIR", str(results))
    try:
        ev.evaluate(ev.compose_config(SWEEP))
    finally:
        mp.undo()
    files = _cell_files(results)
    assert sorted(files) == [
        "T0.0.completions.jsonl.gz",
        "T0.0.json",
        "T0.8.completions.jsonl.gz",
        "T0.8.json",
    ]
    return files


def _eval_cmd():
    return [sys.executable, "-m", "pspo_repro.evaluate", *SWEEP]


@pytest.mark.xdist_group("warm_cli")  # one worker: the module fixtures run once, one warm server
@pytest.mark.slow
def test_sigkill_during_sweep_then_rerun_gives_identical_files(tmp_path, reference_sweep):
    results = tmp_path / "results"
    part = results / "eval" / "tiny" / "baseline" / "seed0" / "gsm8k" / "T0.0.partial.jsonl"
    k = random.Random(FAULT_SEED + 1).randint(1, 3)  # chunks finished before the kill
    proc = warm_cli.popen(_eval_cmd(), cwd=PROJECT, env=_env(results), out=tmp_path / "killed.log")
    try:
        lines = lambda: part.read_text().count("\n") if part.exists() else 0  # noqa: E731
        assert _wait_for(lambda: lines() >= 1 + 5 * k, proc, poll=0.002), "sweep ended before the kill"
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == -signal.SIGKILL
    assert not (part.parent / "T0.8.json").exists()
    again = warm_cli.run(_eval_cmd(), cwd=PROJECT, env=_env(results), timeout=300)
    assert again.returncode == 0, again.stderr
    files = _cell_files(results)
    assert files == reference_sweep  # byte-identical: no duplicated, missing or reordered rows
    for t in ("T0.0", "T0.8"):
        ids = [r["id"] for r in json.loads(files[f"{t}.json"])["per_prompt"]]
        assert len(ids) == len(set(ids)) == 20
        assert len(gzip.decompress(files[f"{t}.completions.jsonl.gz"]).splitlines()) == 20


@pytest.mark.xdist_group("warm_cli")  # one worker: the module fixtures run once, one warm server
@pytest.mark.slow
def test_two_processes_on_one_cell_do_the_work_once(tmp_path, reference_sweep):
    results = tmp_path / "results"
    logs = [tmp_path / f"evaluator{i}.log" for i in range(2)]
    procs = [warm_cli.popen(_eval_cmd(), cwd=PROJECT, env=_env(results), out=log) for log in logs]
    for p in procs:
        p.wait(timeout=300)
    outs = [log.read_text() for log in logs]
    assert [p.returncode for p in procs] == [0, 0], outs
    assert _cell_files(results) == reference_sweep
    generated = [o for o in outs if "evaluating " in o]
    assert len(generated) == 1, "exactly one process may generate the cells:\n" + "\n---\n".join(outs)
    other = outs[1 - outs.index(generated[0])]
    assert "done already" in other or "done by another process" in other, other


# ---------------------------------------------------------------- aggregation


def _agg_tree(root: Path, shift: float) -> None:
    for method, base in (("clip", 0.4), ("pspo", 0.5)):
        for seed in range(3):
            acc = base + shift + 0.02 * seed
            per_prompt = [
                {
                    "id": f"p{i}",
                    "n": 1,
                    "true_correct": int(i < acc * 50),
                    "reward_correct": int(i < acc * 40),
                }
                for i in range(50)
            ]
            cell = {
                "schema_version": 1, "model": "tiny", "method": method, "seed": seed, "tag": "", "dataset": "gsm8k",
                "temperature": 0.0, "max_new_tokens": 128, "n_samples": 1, "top_p": 1.0, "prompt_template": "paper",
                "rows_sha256": "abc", "num_prompts": 50, "per_prompt": per_prompt,
                "metrics": {"true_acc": sum(r["true_correct"] for r in per_prompt) / 50,
                            "reward_acc": sum(r["reward_correct"] for r in per_prompt) / 50},
            }  # fmt: skip
            p = root / "eval" / "tiny" / method / f"seed{seed}" / "gsm8k" / "T0.0.json"
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_text(json.dumps(cell))


def _aggregate_in_process(results: Path, out: Path) -> dict[str, bytes]:
    from pspo_repro.analysis import aggregate
    from pspo_repro.common.cli import compose_config

    aggregate.run(compose_config(PROJECT / "conf", "aggregate", [f"results_dir={results}", f"out_dir={out}"]))
    return {p.name: p.read_bytes() for p in out.iterdir() if not p.name.startswith(".")}


def _whole_figure(name: str, data: bytes) -> bool:
    if name.endswith(".png"):
        return data.startswith(b"\x89PNG") and data.endswith(b"IEND\xaeB`\x82")
    if name.endswith(".pdf"):
        return data.startswith(b"%PDF") and data.rstrip().endswith(b"%%EOF")
    return False


@pytest.mark.xdist_group("warm_cli")  # one worker, one warm server
@pytest.mark.slow
def test_sigkill_during_aggregation_leaves_every_output_whole(tmp_path):
    results, out = tmp_path / "results", tmp_path / "tables"
    _agg_tree(results, 0.0)
    old = _aggregate_in_process(results, out)
    _agg_tree(results, 0.1)  # new numbers: every table changes
    new = _aggregate_in_process(results, tmp_path / "expected")
    # os.replace calls: one per staged output, the journal, then one per output in the switch.
    n = random.Random(FAULT_SEED + 2).randint(2, 2 * len(new) + 1)
    proc = warm_cli.run(
        [sys.executable, str(KILL_AT), "replace", str(n), f"results_dir={results}", f"out_dir={out}"],
        cwd=PROJECT, env=_env(results), timeout=300,
    )  # fmt: skip
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    now = {p.name: p.read_bytes() for p in out.iterdir() if not p.name.startswith(".")}
    assert set(now) == set(old)
    for name, data in now.items():
        if name.endswith((".png", ".pdf")):  # matplotlib stamps PDFs with a date: check they are whole
            assert _whole_figure(name, data), name
        else:
            assert data in (old[name], new[name]), f"{name} is neither the old nor the new version"
    # As a set: the next aggregation (here its first step alone) finishes a cut switch or keeps the old set,
    # and removes every temporary the kill left.
    from pspo_repro.analysis.aggregate import OUTPUT_SUFFIXES

    atomic.recover_set(out, OUTPUT_SUFFIXES)
    now = {p.name: p.read_bytes() for p in out.iterdir()}
    version = old if n <= len(new) + 1 else new  # killed before the journal was in place: the old set
    assert set(now) == set(version), sorted(set(now) ^ set(version))  # no hidden file left either
    for name, data in now.items():
        if not name.endswith((".png", ".pdf")):
            assert data == version[name], f"{name} is not from the same aggregation as the others"


# ---------------------------------------------------------------- failing writes


def _disk_full(*a, **k):
    raise OSError(errno.ENOSPC, "No space left on device")


@pytest.mark.parametrize("writer", ["write_json", "write_text", "completions", "aggregate", "run_json"])
def test_failed_write_keeps_previous_file_and_names_path(tmp_path, monkeypatch, writer):
    target = (
        tmp_path
        / "sub"
        / {"completions": "T0.0.completions.jsonl.gz", "run_json": "run.json"}.get(writer, "out.json")
    )
    target.parent.mkdir()
    target.write_bytes(b"previous good content")

    class Failing:
        """A file object whose writes fail half-way (disk full after some bytes)."""

        def __init__(self, fh):
            self.fh = fh

        def write(self, data):
            self.fh.write(data[: len(data) // 2])
            _disk_full()

        def __getattr__(self, name):
            return getattr(self.fh, name)

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return self.fh.__exit__(*exc)

    real_fdopen = os.fdopen
    monkeypatch.setattr(atomic.os, "fdopen", lambda *a, **k: Failing(real_fdopen(*a, **k)))
    with pytest.raises(OSError) as err:
        if writer == "write_json":
            atomic.write_json(target, {"a": 1})
        elif writer == "write_text":
            atomic.write_text(target, "new text")
        elif writer == "completions":
            from pspo_repro.evaluation.cells import write_completions

            write_completions(target, [{"id": "p", "samples": []}])
        elif writer == "aggregate":
            from pspo_repro.analysis.aggregate import Outputs, write_outputs

            write_outputs(Outputs(files={target: "new table"}))
        else:
            from pspo_repro.common.run_folder import RunFolder

            RunFolder(target.parent).write({"status": "running"})
    assert str(target) in str(err.value)
    assert target.read_bytes() == b"previous good content"
    assert [p.name for p in target.parent.iterdir()] == [target.name]  # no temp file left


def test_failed_replace_names_the_target_not_the_temp_file(tmp_path, monkeypatch):
    target = tmp_path / "T0.0.json"
    target.write_text("old")
    monkeypatch.setattr(
        atomic.os, "replace", lambda src, dst: (_ for _ in ()).throw(PermissionError(13, "denied", src))
    )
    with pytest.raises(OSError, match=f"writing {target} failed") as err:
        atomic.write_json(target, {"new": 1})
    assert err.value.filename == str(target)
    assert target.read_text() == "old" and [p.name for p in tmp_path.iterdir()] == ["T0.0.json"]
