"""The ladder's driver (pspo_repro.pipelines.ladder): its config, the rungs it builds and the commands it runs,
bad settings refused before anything runs, and a failed rung named with its logs."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from pspo_repro.common.cli import compose_config
from pspo_repro.common.paths import PROJECT_ROOT
from pspo_repro.pipelines import grid
from pspo_repro.pipelines import ladder as ladder_pipeline
from pspo_repro.training.sft import num_parameters
from tests.pipelines.stage_args import parsed


def _compose(overrides=()):
    return compose_config(PROJECT_ROOT / "conf", "scale", list(overrides))


def test_ladder_spans_ten_times_in_parameters():
    ladder = ladder_pipeline.bases(_compose())
    sizes = [num_parameters(ladder_pipeline.full_arch(b.arch)) for b in ladder if not b.general_of]
    assert len(sizes) >= 3 and sizes == sorted(sizes) and sizes[-1] / sizes[0] >= 10
    # the middle rung is the mini's own SFT model: the arch conf/sft.yaml gives it
    assert num_parameters(ladder_pipeline.full_arch({})) == sizes[1]
    general = [b for b in ladder if b.general_of]
    assert len(general) == 1 and general[0].general_of == "h128_l2"
    assert general[0].sft == {"data.n_train": 500, "data.heldout_n_train": 2000}


def test_parameter_count_on_a_fresh_cache_builds_the_tiny_model_first(tmp_path, monkeypatch):
    """On a fresh clone the tiny model (the config every rung starts from) is not built yet: counting a rung's
    parameters builds it, outside the meta device (under it, saving the weights failed: CI, session 14)."""
    monkeypatch.setenv("PSPO_CACHE_DIR", str(tmp_path / "cache"))
    # the mini's SFT model (results/scale/scale.md)
    assert num_parameters(ladder_pipeline.full_arch({})) == 446_464
    assert list((tmp_path / "cache").rglob("model.safetensors"))


def test_rung_command(tmp_path):
    cfg = _compose(["rung_args=['parallel=1']"])
    general = ladder_pipeline.bases(cfg)[-1]
    cmd = ladder_pipeline.rung_cmd(cfg, tmp_path, general)
    assert cmd[1:3] == ["-m", "pspo_repro.mini"]
    args = parsed(cmd[3:-1])
    assert args["pipeline"] == "scale_rung" and args["reuse_committed"] is False
    assert args["root"] == str(tmp_path / "h128_l2_general")
    sft = parsed(args["sft.overrides"])
    assert sft["++model.arch.hidden_size"] == 128
    assert sft["data.n_train"] == 500 and sft["data.heldout_n_train"] == 2000
    assert cmd[-1] == "parallel=1"


def test_rung_config_runs_the_headline_grid():
    cfg = compose_config(PROJECT_ROOT / "conf", "mini", ["pipeline=scale_rung", "root=/tmp/x"])
    runs = grid.rl_runs(cfg, unresolved=True)
    tune = [r for r in runs if r[1].startswith("tune-")]
    assert len(tune) == 12 and {s for *_, s in tune} == {100}  # 4 arms x 3 lrs x 1 selection seed
    assert sorted((m, s) for m, t, s in runs if t == "offpolicy") == [
        (m, s) for m in ("clip", "pspo") for s in (0, 1, 2)
    ]
    assert len(runs) == 12 + 6  # the tuned arms come once their sweep has chosen: 4 x seeds 0-2
    tuned = [g for g in cfg.rl.groups if g.get("select")]
    assert sum(len(grid.sweep_points(g)) * len(grid.group_seeds(cfg, g)) for g in tuned) == 4 * 3


def test_every_rl_run_of_the_ladder_trains_under_bf16_autocast():
    # The paper's numerics (fp32 master weights, bf16 matmuls) in every RL job, as the mini's own experiments since
    # issue 53 (with eager attention: the CPU's bf16 sdpa kernel is the slow one).
    cfg = compose_config(PROJECT_ROOT / "conf", "mini", ["pipeline=scale_rung", "root=/tmp/x"])
    experiments = {str(g.get("experiment") or cfg.rl.experiment) for g in cfg.rl.groups}
    assert experiments == {"scale", "scale_offpolicy"}
    for name, base in (("scale", "mini"), ("scale_offpolicy", "mini_offpolicy")):
        run = compose_config(PROJECT_ROOT / "conf", "train", [f"experiment={name}"])
        ref = compose_config(PROJECT_ROOT / "conf", "train", [f"experiment={base}"])
        assert run.trainer.bf16 is True and run.model.attn_implementation == "eager"
        assert run == ref  # the ladder's regime is the mini's


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("rungs=[]", "rungs must be a list of at least 2"),
        ("rungs=[{name: a, arch: {}}, {name: a, arch: {}}]", "rung names must be distinct"),
        (
            "rungs=[{name: '../x', arch: {}}, {name: b, arch: {}}]",
            "rung name='../x' cannot name a results folder",
        ),
        ("rungs=[{name: a}, {name: b, arch: {}}]", "rung 'a': arch must be a mapping"),
        ("specialisation.rung=nope", "specialisation.rung='nope': not a rung"),
        ("only=[h64_l2,nope]", "only="),
        # issue 59, item 7: an arch value a field cannot take (they used to fail with a traceback)
        (
            "rungs=[{name: a, arch: {hidden_size: 64.5}}, {name: b, arch: {}}]",
            "rung 'a': arch.hidden_size must be an integer in [1, inf), got 64.5",
        ),
        (
            "rungs=[{name: a, arch: {hidden_size: sixty}}, {name: b, arch: {}}]",
            "rung 'a': arch.hidden_size must be an integer in [1, inf), got 'sixty'",
        ),
        (
            "rungs=[{name: a, arch: {num_hidden_layers: true}}, {name: b, arch: {}}]",
            "arch.num_hidden_layers must be an integer in [1, inf), got True",
        ),
        (
            "rungs=[{name: a, arch: {hidden_size: 0}}, {name: b, arch: {}}]",
            "arch.hidden_size must be an integer in [1, inf), got 0",
        ),
        (
            """rungs=[{name: a, arch: {hidden_act: "silu','out_dir=/x'"}}, {name: b, arch: {}}]""",
            "arch.hidden_act is not a size the ladder sets; allowed: hidden_size",
        ),
        (
            "rungs=[{name: a, arch: {rope_theta: nan}}, {name: b, arch: {}}]",
            "arch.rope_theta is not a size the ladder sets",
        ),
        # issue 59, item 5: names present, counts > 0
        ("rungs=[{arch: {}}, {name: b, arch: {}}]", "rungs[0].name is required"),
        ("rungs=[{name: null, arch: {}}, {name: b, arch: {}}]", "rungs[0].name is required"),
        ("rungs=[5, {name: b, arch: {}}]", "rungs[0] must be a mapping {name, arch}, got 5"),
        ("specialisation.name=null", "specialisation.name is required"),
        (
            "specialisation.sft={data.n_train: -5}",
            "specialisation.sft.data.n_train must be an integer in [1, inf), got -5",
        ),
        (
            "specialisation.sft={data.heldout_n_train: -1}",
            "specialisation.sft.data.heldout_n_train must be an integer in [0, inf), got -1",
        ),
        (
            "specialisation.sft={data.n_train: 2.5}",
            "specialisation.sft.data.n_train must be an integer in [1, inf), got 2.5",
        ),
    ],
)
def test_bad_settings(override, message):
    with pytest.raises(ladder_pipeline.ScaleError, match=re.escape(message)):
        ladder_pipeline.bases(_compose([override]))


def test_a_habit_share_outside_zero_to_one_is_refused():
    from omegaconf import open_dict

    cfg = _compose()
    with open_dict(cfg):
        cfg.specialisation.sft = {"data.habit_frac": 1.5}
    with pytest.raises(
        ladder_pipeline.ScaleError, match=r"data.habit_frac must be a number in \[0, 1\], got 1.5"
    ):
        ladder_pipeline.bases(cfg)


def test_specialisation_changes_the_mix_only():
    from omegaconf import open_dict

    cfg = _compose()
    with open_dict(cfg):
        cfg.specialisation.sft = {"model.arch.hidden_size": 8}
    with pytest.raises(ladder_pipeline.ScaleError, match="give the SFT mix, keys among data.habit_frac"):
        ladder_pipeline.bases(cfg)


def test_bad_setting_exits_2_and_writes_nothing(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "pspo_repro.scale", f"root={tmp_path / 's'}", "rungs=[]"],
                          capture_output=True, text=True, cwd=PROJECT_ROOT)  # fmt: skip
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [proc.stderr.strip()] and "rungs must be" in proc.stderr
    assert not (tmp_path / "s").exists()


@pytest.mark.parametrize("native", [True, False])
def test_ladder_names_emulated_bf16_before_its_rungs(tmp_path, monkeypatch, capsys, native):
    # The ladder's RL runs train under bf16 autocast; a CPU that emulates bf16 is told up front, once.
    monkeypatch.setattr(
        "pspo_repro.training.models.native_bf16_cpu", lambda: native
    )  # imported when the ladder runs
    monkeypatch.setattr(ladder_pipeline.subprocess, "run", lambda *a, **k: subprocess.CompletedProcess(a, 1))
    with pytest.raises(ladder_pipeline.ScaleError, match="rung h64_l2 failed"):
        ladder_pipeline.run_ladder(_compose([f"root={tmp_path / 's'}"]))
    err = capsys.readouterr().err
    assert err.count("without AVX512-BF16 or AMX") == (0 if native else 1), err


def test_agreement_of_a_rung_not_run_now_is_labelled_as_its_record(tmp_path):
    # `only=[a]` recomputes one rung; the others' lines come from their last runs (committed timings.json).
    from pspo_repro.common.atomic import write_json

    report = {"groups": 4, "alpha": 0.05, "disagree": [], "only_one_side": ["x"], "min_p_holm": 1.0}
    for name in ("a", "b"):
        write_json(tmp_path / name / "timings.json", {"vs_committed": {"agreement": report}})
    ladder = [ladder_pipeline.Base(name=n, arch={}) for n in ("a", "b")]
    lines = ladder_pipeline.agreement_lines(tmp_path, ladder, ran={"a"})
    assert lines[0].startswith("  a: does NOT agree") and lines[1].startswith(
        "  b (not run now; the record of its last run): "
    )
    assert all(": does NOT agree" in line for line in ladder_pipeline.agreement_lines(tmp_path, ladder))


def test_failed_rung_is_named_with_its_logs(tmp_path, monkeypatch):
    calls = []

    def fake_run(cmd, env=None):
        calls.append(cmd)
        return subprocess.CompletedProcess(cmd, 1)

    monkeypatch.setattr(ladder_pipeline.subprocess, "run", fake_run)
    with pytest.raises(
        ladder_pipeline.ScaleError, match=r"rung h64_l2 failed \(exit 1\); its logs: .*h64_l2/work/logs"
    ):
        ladder_pipeline.run_ladder(_compose([f"root={tmp_path}"]))
    assert len(calls) == 1  # the ladder stops at the first failed rung


def test_table_without_records_is_one_line(tmp_path):
    """``only=[]`` rebuilds the table from the rungs' records: none there is one error line, exit 1."""
    proc = subprocess.run([sys.executable, "-m", "pspo_repro.scale", f"root={tmp_path / 's'}", "only=[]"],
                          capture_output=True, text=True, cwd=PROJECT_ROOT)  # fmt: skip
    assert proc.returncode == 1, proc.stderr
    assert proc.stderr.strip().splitlines() == [proc.stderr.strip()]
    assert "rung h64_l2: no results folder" in proc.stderr
    assert not (tmp_path / "s" / "scale.md").exists()


PROBE = """
import runpy, sys
module = sys.argv[1]
sys.argv = [module, *sys.argv[2:]]
try:
    runpy.run_module(module, run_name="__main__", alter_sys=True)
except SystemExit as exc:
    print(exc.code, sorted(m for m in ("torch", "pandas", "scipy") if m in sys.modules))
"""


@pytest.mark.parametrize(
    ("module", "setting", "message"),
    [
        (
            "pspo_repro.scale",
            "rungs=[]",
            "error: rungs must be a list of at least 2 {name, arch} entries, got []",
        ),
        ("pspo_repro.mini", "parallel=0", "error: parallel must be an integer >= 1, got 0"),
    ],
)
def test_a_bad_setting_is_refused_before_the_heavy_imports(tmp_path, module, setting, message):
    """The ladder's and the pipeline's drivers check their settings before torch (the method registry, the
    precision check) or the table's pandas and scipy load: ~0.3 instead of ~3 CPU s for the refusal."""
    proc = subprocess.run(
        [sys.executable, "-c", PROBE, module, f"root={tmp_path / 'r'}", setting],
        capture_output=True, text=True, cwd=PROJECT_ROOT, timeout=120,
    )  # fmt: skip
    assert proc.stdout.split("\n")[0] == "2 []", (proc.stdout, proc.stderr)
    assert proc.stderr.strip().splitlines() == [message]
    assert not (tmp_path / "r").exists()
