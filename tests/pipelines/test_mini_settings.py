"""Issue 36 item 3 (and item 2 for the mini): the pipeline's settings check covers the claims and leaderboard
tables, the stage records and the output folders, so a bad value is refused before the training stages."""

from __future__ import annotations

import pytest

from pspo_repro.common.cli import compose_config
from pspo_repro.common.paths import PROJECT_ROOT
from pspo_repro.pipelines import cpu_pipeline, markers
from pspo_repro.pipelines import settings as pipeline_settings


def _compose(overrides: list[str]):
    return compose_config(PROJECT_ROOT / "conf", "mini", overrides)


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("aggregate.claims=nope.yaml", "aggregate.claims='nope.yaml': no such file"),
        ("aggregate.claims=/no/such/claims.yaml", "looked at /no/such/claims.yaml"),
        ("aggregate.claims=3", "aggregate.claims must be a spec file (e.g. claims/study.yaml) or null, got 3"),
        ("aggregate.leaderboard=main", "aggregate.leaderboard must be null or a mapping with keys tag, offpolicy_tag"),
        ("aggregate.leaderboard={tga: x}", "aggregate.leaderboard.tga: not a setting; settings: tag, offpolicy_tag"),
        ("aggregate.leaderboard={tag: ../x}", "aggregate.leaderboard.tag='../x' cannot name"),
        ("aggregate.leaderboard={offpolicy_tag: a/b}", "aggregate.leaderboard.offpolicy_tag='a/b' cannot name"),
    ],
)  # fmt: skip
def test_claims_and_leaderboard_settings_are_refused_before_anything_runs(tmp_path, override, message):
    """A bad claims path used to be found in the aggregate stage, after every run had trained."""
    cfg = _compose([f"root={tmp_path / 'r'}", override])
    with pytest.raises(pipeline_settings.SettingsError) as err:
        cpu_pipeline.run_pipeline(cfg)
    assert message in str(err.value) and "\n" not in str(err.value)
    assert not (tmp_path / "r").exists()


def test_good_table_settings_pass():
    for overrides in (
        [],
        ["aggregate.claims=claims/study.yaml", "aggregate.leaderboard={tag: '', offpolicy_tag: offpolicy}"],
    ):
        pipeline_settings.check_table_settings(_compose(overrides))


@pytest.mark.parametrize("name", ["stages/rl.json", "stages/aggregate.json", "../timings.json"])
def test_a_stage_record_that_is_a_folder_is_refused_first(tmp_path, name):
    """A marker or timings.json that is a folder used to end the stage's work in a traceback when written."""
    root = tmp_path / "r"
    (root / "work" / name).mkdir(parents=True)
    cfg = _compose([f"root={root}", "stages=[data]"])
    with pytest.raises(
        pipeline_settings.SettingsError, match=r"is a folder: the pipeline writes its record there"
    ):
        cpu_pipeline.run_pipeline(cfg)
    assert not (root / "work" / "data").exists()


def test_a_stage_record_that_is_a_folder_reads_as_none(tmp_path, capsys):
    (tmp_path / "work" / "stages" / "rl.json").mkdir(parents=True)
    assert markers.stage_done(tmp_path, "rl", "x") is None
    assert "rl.json is not a regular file; ignored" in capsys.readouterr().out


@pytest.mark.parametrize("var", ["PSPO_LOG_DIR", "PSPO_RESULTS_DIR"])
def test_a_log_or_results_folder_that_is_a_file_is_refused(tmp_path, monkeypatch, var):
    (tmp_path / "file").write_text("x")
    monkeypatch.setenv(var, str(tmp_path / "file"))
    with pytest.raises(pipeline_settings.SettingsError, match=rf"{var}=.*file is a file, not a folder"):
        cpu_pipeline.run_pipeline(
            _compose(["stages=[data]"] if var == "PSPO_RESULTS_DIR" else [f"root={tmp_path / 'r'}"])
        )
    assert not (tmp_path / "r").exists()


def test_a_root_that_is_a_file_is_refused(tmp_path):
    (tmp_path / "r").write_text("x")
    with pytest.raises(pipeline_settings.SettingsError, match=r"root=.*r is a file, not a folder"):
        cpu_pipeline.run_pipeline(_compose([f"root={tmp_path / 'r'}"]))


def test_a_bad_claims_spec_is_refused_before_anything_runs(tmp_path):
    """The spec's contents are checked with the settings (file, line, claim, field), not in the aggregate
    stage after every run has trained."""
    spec = tmp_path / "claims.yaml"
    text = (PROJECT_ROOT / "conf" / "claims" / "study.yaml").read_text()
    spec.write_text(text.replace("tolerance: 0.001", "tolerance: tiny", 1))
    cfg = _compose([f"root={tmp_path / 'r'}", f"aggregate.claims={spec}"])
    with pytest.raises(pipeline_settings.SettingsError) as err:
        pipeline_settings.check_settings(
            cfg
        )  # what run_pipeline does first (run_pipeline itself would train on main)
    why = str(err.value)
    assert f"{spec}:" in why and "claim 'gradient_preservation': verdict.tolerance must be a number" in why
    assert "\n" not in str(err.value) and not (tmp_path / "r").exists()


@pytest.mark.parametrize(
    ("pipeline", "override", "message"),
    [
        ("mini", "rl.groups.0.sweep.method='clip,pspo,clip'", "rl.groups[0].sweep.method lists 'clip' twice"),
        ("scale_rung", "rl.groups.0.sweep={method: clip, trainer.learning_rate: '1e-4,0.0001'}",
         "rl.groups[0].sweep.trainer.learning_rate lists '1e-4' and '0.0001' twice"),
        ("mini", "rl.seeds=[0,1,0]", "rl.seeds lists 0 twice"),
        ("mini", "rl.groups.4.seeds=[1,1]", "rl.groups[4].seeds lists 1 twice"),
        ("scale_rung", "rl.groups.5.select.values='1e-4,3e-4,3e-4'", "rl.groups[5].select.values lists '3e-4' twice"),
        # issue 59, item 5: the ladder's selection seed (100) reused as a reported seed
        ("scale_rung", "rl.seeds=[0,1,100]",
         "rl.groups[5] (tuned): select.seeds [100] and the seeds it reports [0, 1, 100] share [100]"),
    ],
)  # fmt: skip
def test_a_value_listed_twice_or_a_selection_seed_reported_is_refused(tmp_path, pipeline, override, message):
    """The settings check (run_pipeline's first step, before any stage: the tests above) refuses them."""
    cfg = _compose([f"pipeline={pipeline}", f"root={tmp_path / 'r'}", override])
    with pytest.raises(pipeline_settings.SettingsError) as err:
        pipeline_settings.check_settings(cfg)
    assert message in str(err.value) and "\n" not in str(err.value)
    assert not (tmp_path / "r").exists()
