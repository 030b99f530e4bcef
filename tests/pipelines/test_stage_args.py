"""Settings pass between stages as data (issue 59, item 1): every pipeline's stage command is built by
``common.overrides``, so a value holding override syntax (quotes, commas, ``=``, brackets, braces,
``${...}``, backslashes, spaces) arrives as the one value it was, read back by Hydra's own parser, and no
extra override appears; a value a stage cannot take is refused in one line where it enters."""

from __future__ import annotations

import json
import re

import pytest
from omegaconf import OmegaConf

from pspo_repro.common.cli import compose_config
from pspo_repro.common.overrides import override, render, sweep
from pspo_repro.common.paths import PROJECT_ROOT
from pspo_repro.pipelines import grid
from pspo_repro.pipelines import ladder as ladder_pipeline
from pspo_repro.pipelines.jobs import StageError
from tests.pipelines.stage_args import parsed

NASTY = [
    "plain",
    "a'b",
    'a"b',
    'it\'s "both"',
    "64','out_dir=/tmp/x','y",  # the ladder's injection (issue 59)
    '64","out_dir=/tmp/x","y',
    "a,b",
    "k=v",
    "[1,2]",
    "{a: 1}",
    "${oc.env:HOME}",
    "\\${oc.env:HOME}",
    "$ {x} ${",
    "back\\slash",
    "ends\\",
    "\\'",
    "with space  ",
    " lead",
    "a:b(c)",
    "ünïcode",
    "",
]
# The values a pipeline passes on (an empty tag or prefix means "none", so it is not passed at all).
PASSED = [v for v in NASTY if v not in ("plain", "")]


def _literal(text: str) -> str:
    """``text`` as a config value OmegaConf reads back as this text (its own ``\\${`` escape)."""
    return re.sub(r"(\\*)\$\{", lambda m: m.group(1) * 2 + "\\${", text)


def _mini(**values):
    """conf/mini.yaml's grid with ``values`` (dotted keys) set as literal text."""
    cfg = compose_config(PROJECT_ROOT / "conf", "mini", [])
    for key, value in values.items():
        OmegaConf.update(cfg, key, _literal(value) if isinstance(value, str) else value, force_add=True)
    return cfg


@pytest.mark.parametrize("value", NASTY)
def test_one_value_renders_and_parses_back_as_itself(value):
    for v in (value, [value, "x", 3], {"k": value, "n": [value]}, 0.0001, -3, True, None):
        assert parsed([override("a.b", v)]) == {"a.b": v}
    assert parsed([sweep("a.b", [value, 1.5])]) == {"a.b": [value, 1.5]}


def test_bad_keys_and_values_are_refused():
    for key in ("a b", "a=b", "a,b", "", "x'"):
        with pytest.raises(ValueError, match="override key"):
            override(key, 1)
    with pytest.raises(ValueError, match="dict key"):
        render({"a b": 1})
    with pytest.raises(ValueError, match="cannot be an override value"):
        render(object())


def _same_keys(cmd, plain_cmd):
    """The keys of ``cmd`` and of the same builder's command with plain values agree (no extra override)."""
    args, plain = parsed(cmd[3:], unique=False), parsed(plain_cmd[3:], unique=False)
    assert sorted(args) == sorted(plain) and len(cmd) == len(plain_cmd)
    return args


@pytest.mark.parametrize("value", PASSED)
def test_sft_and_table_commands_carry_values_as_data(value, tmp_path):
    root, plain_root = tmp_path / f"r{value}", tmp_path / "plain"
    cfg = _mini(prompt_template=value, **{"aggregate.ablation_tag_prefix": value,
                                          "aggregate.leaderboard": {"tag": "x", "offpolicy_tag": "y"}})  # fmt: skip
    OmegaConf.update(cfg, "aggregate.leaderboard.tag", _literal(value))
    OmegaConf.update(cfg, "aggregate.regime", {"t": _literal(value)}, merge=False)
    plain = _mini(prompt_template="none", **{"aggregate.ablation_tag_prefix": "p",
                                             "aggregate.leaderboard": {"tag": "x", "offpolicy_tag": "y"}})  # fmt: skip
    OmegaConf.update(plain, "aggregate.regime", {"t": "tag"}, merge=False)

    sft = _same_keys(grid.sft_cmd(cfg, root), grid.sft_cmd(plain, plain_root))
    assert sft["prompt_template"] == value and sft["out_dir"] == str(root / "work" / "sft")
    agg = _same_keys(grid.aggregate_cmd(cfg, root), grid.aggregate_cmd(plain, plain_root))
    assert agg["results_dir"] == agg["out_dir"] == str(root) and agg["ablation.tag_prefix"] == value
    (regime,) = grid.regime_cmds(cfg, root)
    (plain_regime,) = grid.regime_cmds(plain, plain_root)
    assert _same_keys(regime.cmd, plain_regime.cmd)["tag"] == value
    (board,) = grid.leaderboard_cmds(cfg, root)
    (plain_board,) = grid.leaderboard_cmds(plain, plain_root)
    assert _same_keys(board.cmd, plain_board.cmd)["tag"] == value
    spec = root / "claims.yaml"
    spec.parent.mkdir(parents=True)
    spec.write_text("claims: []\n")
    (claims,) = grid.claims_cmds(_mini(**{"aggregate.claims": str(spec)}), root)
    assert parsed(claims.cmd[3:]) == {"results_dir": str(root), "out_dir": str(root), "spec": str(spec)}


@pytest.mark.parametrize("value", PASSED)
def test_rl_and_eval_commands_carry_values_as_data(value, tmp_path):
    root, plain_root = tmp_path / f"r{value}", tmp_path / "plain"
    cfg = _mini(prompt_template=value, **{"rl.experiment": value, "rl.launcher": value})
    OmegaConf.update(cfg, "rl.groups.0.tag", _literal(value), force_add=True)
    plain = _mini(**{"rl.experiment": "mini"})
    OmegaConf.update(plain, "rl.groups.0.tag", "tag", force_add=True)
    pairs = zip(cfg.rl.groups, grid.rl_jobs(cfg, root), grid.rl_jobs(plain, plain_root), strict=True)
    for group, job, plain_job in pairs:
        args = _same_keys(job.cmd, plain_job.cmd)
        assert (
            args["experiment"] == (group.get("experiment") or value) and args["data.prompt_template"] == value
        )
        assert args["hydra/launcher"] == value and args["hydra.sweep.dir"].startswith(str(root))
    first = parsed(grid.rl_jobs(cfg, root)[0].cmd[3:])
    assert first["run_tag"] == value and first["method"] == ["clip", "pspo"] and first["seed"] == [0, 1, 2]

    # evaluation: the run folders (their paths hold the value) arrive one by one
    runs = [grid.run_dir_of(root, m, t, s) for m, t, s in grid.rl_runs(_mini())]
    for folder in runs:
        folder.mkdir(parents=True)
        (folder / "run.json").write_text(json.dumps({"status": "finished"}))
    eval_cfg = _mini(prompt_template=value, **{"parallel": 1, "eval.heldout": []})
    jobs, _ = grid.eval_jobs(eval_cfg, root)
    seen = []
    for job in jobs:
        args = parsed(job.cmd[3:], unique=False)
        assert args["prompt_template"] == value
        got = args.get("run", [])
        seen += [got] if isinstance(got, str) else got
    evaluated = {str(r) for m, t, r in grid._eval_runs(eval_cfg, root)}
    assert sorted(seen) == sorted(evaluated) and evaluated


@pytest.mark.parametrize("value", PASSED)
def test_a_sweep_value_with_override_syntax_is_refused_in_one_line(value):
    if re.fullmatch(r"[A-Za-z0-9_.+\-/]+", value):
        pytest.skip("a plain word")
    cfg = _mini()
    OmegaConf.update(cfg, "rl.groups.0.sweep.method", [_literal(value)], merge=False)
    with pytest.raises(StageError) as exc:
        grid.rl_jobs(cfg, PROJECT_ROOT / "results" / "mini")
    assert "\n" not in str(exc.value) and "sweep.method" in str(exc.value)


@pytest.mark.parametrize("value", PASSED)
def test_a_rung_command_carries_its_sft_overrides_as_one_list(value, tmp_path):
    cfg = compose_config(PROJECT_ROOT / "conf", "scale", [])
    root = tmp_path / f"r{value}"
    base = ladder_pipeline.Base("h64", {"hidden_size": 64, "head_dim": 32}, {"data.note": value}, "h128")
    args = parsed(ladder_pipeline.rung_cmd(cfg, root, base)[3:])
    assert sorted(args) == ["pipeline", "reuse_committed", "root", "sft.overrides"]
    assert args["root"] == str(root / "h64")
    # each list item is one override of the SFT stage, which reads it as the value it was
    assert parsed(args["sft.overrides"]) == {"++model.arch.hidden_size": 64, "++model.arch.head_dim": 32,
                                             "data.note": value}  # fmt: skip


@pytest.mark.parametrize("value", ["64','out_dir=/tmp/x','y", 64.5, "sixty", 0, -1, True, [64]])
def test_a_rung_arch_value_must_be_a_positive_integer(value):
    cfg = compose_config(PROJECT_ROOT / "conf", "scale", [])
    OmegaConf.update(cfg, "rungs.0.arch.hidden_size", value, merge=False)
    with pytest.raises(
        ladder_pipeline.ScaleError, match=r"rung 'h64_l2': arch.hidden_size must be an integer"
    ):
        ladder_pipeline.bases(cfg)


def test_a_rung_arch_key_and_mix_value_are_checked():
    cfg = compose_config(PROJECT_ROOT / "conf", "scale", [])
    OmegaConf.update(cfg, "rungs.0.arch", {"hidden_size": 64, "out_dir": 1}, merge=False)
    with pytest.raises(ladder_pipeline.ScaleError, match="arch.out_dir is not a size the ladder sets"):
        ladder_pipeline.bases(cfg)
    cfg = compose_config(PROJECT_ROOT / "conf", "scale", [])
    OmegaConf.update(cfg, "specialisation.sft", {"data.n_train": "500','out_dir=/x"}, merge=False)
    with pytest.raises(
        ladder_pipeline.ScaleError, match="specialisation.sft.data.n_train must be an integer"
    ):
        ladder_pipeline.bases(cfg)


@pytest.mark.parametrize("value", PASSED)
def test_a_quoted_folder_is_read_as_its_text_when_made_absolute(value, tmp_path, monkeypatch):
    """``paths.absolutize_args`` (every command's first rewrite) reads a quoted folder as the text it is: an
    absolute one is kept, a relative one made absolute, and each still arrives as one value."""
    from pspo_repro.common.paths import absolutize_args

    monkeypatch.chdir(tmp_path)
    absolute = override("out_dir", str(tmp_path / value))
    assert absolutize_args([absolute]) == [absolute]
    (relative,) = absolutize_args([override("out_dir", f"sub/{value}")])
    assert parsed([relative]) == {"out_dir": str(tmp_path / "sub" / value)}
