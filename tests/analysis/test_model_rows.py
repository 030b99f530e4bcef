"""Issue 36: runs of another model merged into a row. Runs under one method folder that name different base
models are refused by the one reader, naming both files (aggregate, regime, the leaderboard and the claims
alike); a second model in its own folder keeps rows of its own where a table has a model column (aggregate,
regime) and is refused by the one-model commands (leaderboard, claims)."""

from __future__ import annotations

import json
import sys

import pandas as pd
import pytest
import toy_records

from pspo_repro.analysis import aggregate, claims_report, leaderboard, regime


def _edit_run(root, method, seed, edit) -> str:
    path = root / "runs" / "tiny" / method / f"seed{seed}" / "run.json"
    info = json.loads(path.read_text())
    edit(info)
    path.write_text(json.dumps(info))
    return str(path)


def _aggregate(root, out, monkeypatch) -> int:
    monkeypatch.setattr(sys, "argv", ["pspo_repro.aggregate", f"results_dir={root}", f"out_dir={out}"])
    try:
        aggregate.main()
    except SystemExit as exc:
        return int(exc.code)
    return 0


def _run_command(command, root, out, monkeypatch, tmp_path) -> int:
    args = [f"results_dir={root}", f"out_dir={out}"]
    if command == "aggregate":
        return _aggregate(root, out, monkeypatch)
    if command == "regime":
        return regime.main(args)
    if command == "claims":
        return claims_report.main([*args, f"spec={toy_records.spec(tmp_path / 'spec.yaml')}"])
    return leaderboard.main(args)


COMMANDS = ["aggregate", "regime", "leaderboard", "claims"]


def _other_path(info):
    info["config"]["model"]["path"] = "/models/another-base"


def _other_hub(info):
    info["config"]["model"]["hub_id"] = "Qwen/Qwen2.5-0.5B"


def _random_init(info):
    info["config"]["model"]["random_init"] = True


@pytest.mark.parametrize("command", COMMANDS)
@pytest.mark.parametrize(
    ("edit", "needle"),
    [(_other_path, "config.model.path '/models/tiny' vs '/models/another-base'"),
     (_other_hub, "config.model.hub_id None vs 'Qwen/Qwen2.5-0.5B'"),
     (_random_init, "config.model.random_init None vs True")],
)  # fmt: skip
def test_runs_of_another_base_model_in_one_method_folder_are_refused_naming_both_files(
    command, edit, needle, tmp_path, monkeypatch, capsys
):
    """They used to be averaged into one row as seeds of one method, without a word."""
    root, out = toy_records.build(tmp_path / "records"), tmp_path / "out"
    edited = _edit_run(root, "pspo", 1, edit)
    code = _run_command(command, root, out, monkeypatch, tmp_path)
    err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error:")]
    assert code == (2 if command == "aggregate" else 1) and len(err) == 1, err
    first = str(root / "runs" / "tiny" / "pspo" / "seed0" / "run.json")
    assert (
        err[0].startswith(f"error: {first} and {edited}: runs of different base models") and needle in err[0]
    )
    assert not out.exists()


@pytest.mark.parametrize("command", COMMANDS)
def test_a_model_name_that_disagrees_with_its_folder_is_refused(command, tmp_path, monkeypatch, capsys):
    root, out = toy_records.build(tmp_path / "records"), tmp_path / "out"
    edited = _edit_run(root, "clip", 2, lambda info: info["config"]["model"].update(name="qwen2p5_0p5b"))
    assert _run_command(command, root, out, monkeypatch, tmp_path) != 0
    err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error:")]
    assert err == [f"error: {edited}: config.model.name 'qwen2p5_0p5b' disagrees with the run's model 'tiny' "
                   "(its folder runs/<model>/): runs of another model would be merged into this model's rows"]  # fmt: skip


@pytest.mark.parametrize("command", COMMANDS)
def test_config_model_that_is_not_a_mapping_is_refused(command, tmp_path, monkeypatch, capsys):
    root, out = toy_records.build(tmp_path / "records"), tmp_path / "out"
    edited = _edit_run(root, "noclip", 0, lambda info: info["config"].update(model="tiny"))
    assert _run_command(command, root, out, monkeypatch, tmp_path) != 0
    err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error:")]
    assert err == [f"error: {edited}: config.model must be a mapping, got str 'tiny'"]


@pytest.mark.parametrize("command", COMMANDS)
def test_the_same_base_from_two_checkouts_of_the_results_is_one_model(command, tmp_path, monkeypatch):
    """The committed runs were trained in several checkouts: the SFT base under each one's results root is
    the same base (the mini checks its hash), so it is not refused."""
    root, out = toy_records.build(tmp_path / "records"), tmp_path / "out"
    for seed, checkout in enumerate(("/work/a/results", "/work/b/results", "/srv/c/results")):

        def edit(info, checkout=checkout, seed=seed):
            info["run_dir"] = f"{checkout}/runs/tiny/pspo/seed{seed}"
            info["config"]["model"]["path"] = f"{checkout}/work/sft/model"

        _edit_run(root, "pspo", seed, edit)
    assert _run_command(command, root, out, monkeypatch, tmp_path) == 0


def _second_model(root):
    """pspo runs and cells of another model, in that model's own folders (runs/other/, eval/other/)."""
    for dataset in toy_records.DATASETS:
        toy_records.cell(root, "baseline", 0, dataset, [1] * toy_records.PROMPTS, model="other")
    for seed in (0, 1):
        toy_records.run(root, "pspo", seed, model="other", model_path="/models/other")
        for dataset in toy_records.DATASETS:
            toy_records.cell(root, "pspo", seed, dataset, [1, 1, 1, 1, 1, 0], model="other")


def test_aggregate_and_regime_keep_another_models_runs_as_rows_of_their_own(tmp_path, monkeypatch):
    root = toy_records.build(tmp_path / "records")
    assert _aggregate(root, tmp_path / "before", monkeypatch) == 0
    regime.write(root, tmp_path / "before")
    _second_model(root)
    assert _aggregate(root, tmp_path / "after", monkeypatch) == 0
    regime.write(root, tmp_path / "after")
    before = pd.read_csv(tmp_path / "before" / "main_true_acc.csv")
    after = pd.read_csv(tmp_path / "after" / "main_true_acc.csv")
    assert len(after) == len(before) + 4  # other's baseline and pspo rows, on both datasets
    kept = after[after["Model"] != "other"].reset_index(drop=True)
    assert set(after["Model"]) == {"Tiny", "other"} and kept.equals(before)  # tiny's rows: not a number moved
    reg_before = pd.read_csv(tmp_path / "before" / "regime.csv")
    reg_after = pd.read_csv(tmp_path / "after" / "regime.csv")
    assert list(reg_after["model"]) == ["other", *["tiny"] * 3]
    assert reg_after[reg_after["model"] == "tiny"].reset_index(drop=True).equals(reg_before)
    assert reg_after[reg_after["model"] == "other"]["n_seeds"].tolist() == [2]
    runs = pd.read_csv(tmp_path / "after" / "long_runs.csv")
    assert sorted(set(zip(runs["model"], runs["method"], strict=True))) == [
        ("other", "pspo"), ("tiny", "clip"), ("tiny", "noclip"), ("tiny", "pspo")]  # fmt: skip


@pytest.mark.parametrize("command", ["leaderboard", "claims"])
def test_the_one_model_commands_refuse_a_second_model_naming_a_file_of_each(command, tmp_path, monkeypatch,
                                                                           capsys):  # fmt: skip
    """The leaderboard keyed its rows by method alone: another model's pspo seeds were averaged into pspo's."""
    root, out = toy_records.build(tmp_path / "records"), tmp_path / "out"
    _second_model(root)
    assert _run_command(command, root, out, monkeypatch, tmp_path) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert (
        len(err) == 1
        and "compares the methods of one model, but" in err[0]
        and "holds 2: other (e.g. " in err[0]
    )
    assert str(root / "eval" / "other") in err[0] and str(root / "eval" / "tiny") in err[0]
    assert not out.exists()
