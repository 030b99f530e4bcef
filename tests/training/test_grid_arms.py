"""The paper grids' arms (conf/experiment/*.yaml, conf/hparams_search/*.yaml): every command written in their
comments expands into jobs (Hydra's own sweep expansion, scripts/sweep_to_lines.py) that compose and validate
without running, and the arms the PSPO = noclip-with-2-passes result needs are there with the values it needs:
noclip with 2 passes at PSPO's lr, clip/noclip at PSPO's lr, and alpha with gradient-norm clipping off."""

from __future__ import annotations

import functools
import importlib.util
import re
import shlex
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from pspo_repro.common.cli import UsageError, compose_config
from pspo_repro.common.paths import CONF_DIR, PROJECT_ROOT
from pspo_repro.common.run_dir import tag_from_overrides
from pspo_repro.training import grpo as train

# One worker for the module: its tests share the composed sweeps (``jobs``).
pytestmark = pytest.mark.xdist_group("grid_arms")

# A command runs to the line end or to a run of 2+ spaces (a note after it: "seed=0,1,2     (multirun by itself)")
COMMAND = re.compile(r"^#\s+python -m pspo_repro\.train (?P<args>.+?)(?:\s{2,}.*)?$", re.M)
PAPER = ["paper_qwen2p5_0p5b", "paper_qwen2p5_1p5b", "paper_qwen2_math_1p5b"]
# The paper's grids (the mini's experiment files train from a local SFT model and are tested with the mini)
GRID_FILES = [CONF_DIR / "experiment" / f"{name}.yaml" for name in [*PAPER, "alpha_ablation"]] + sorted(
    (CONF_DIR / "hparams_search").glob("*.yaml")
)


def _sweep_lines():
    spec = importlib.util.spec_from_file_location(
        "sweep_to_lines", PROJECT_ROOT / "scripts" / "sweep_to_lines.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.sweep_lines


SWEEP_LINES = _sweep_lines()


def commands(path: Path) -> list[list[str]]:
    """The ``python -m pspo_repro.train`` commands in a config file's comments, as override lists."""
    return [
        [a for a in shlex.split(m.group("args")) if a != "-m"] for m in COMMAND.finditer(path.read_text())
    ]


def jobs(overrides: list[str]) -> list[tuple[list[str], object]]:
    """Each job of a sweep as ``(overrides, composed config)``, per-method settings applied and validated.
    Seeds change no setting, so only the first seed's jobs are composed.

    Composed once per sweep in this process (the tests only read the configs): several tests check the same
    commands, and the module's tests share one xdist worker (``pytestmark``) so that they share the sweeps
    too (Hydra's composition is nearly all of this module's time)."""
    return list(_jobs(tuple(overrides)))


@functools.cache
def _jobs(overrides: tuple[str, ...]) -> tuple[tuple[list[str], object], ...]:
    out, seen = [], set()
    for job in SWEEP_LINES(list(overrides), CONF_DIR, "train"):
        job = [o for o in job if o != "hydra.mode=RUN"]
        key = tuple(o for o in job if not o.startswith("seed="))
        if key in seen:
            continue
        seen.add(key)
        cfg = compose_config(CONF_DIR, "train", job, return_hydra_config=True)
        train.apply_per_method(cfg, job)
        train.validate(cfg)
        out.append((job, cfg))
    return tuple(out)


def test_every_experiment_grid_names_its_commands():
    assert [p.name for p in GRID_FILES if p.parent.name == "experiment" and len(commands(p)) < 3] == []


@pytest.mark.parametrize("path", GRID_FILES, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_commands_in_comments_compose(path):
    for overrides in commands(path):
        assert jobs(overrides), f"{path.name}: {overrides} expands to no job"


def _settings(cfg) -> tuple:
    return (cfg.method.name, cfg.method.num_iterations, cfg.trainer.learning_rate, cfg.trainer.max_grad_norm,
            cfg.method.get("alpha"))  # fmt: skip


@pytest.mark.parametrize("experiment", PAPER)
def test_paper_experiments_have_the_equivalence_arms(experiment):
    path = CONF_DIR / "experiment" / f"{experiment}.yaml"
    pspo_lr = OmegaConf.load(path).per_method.pspo.trainer.learning_rate
    got = {_settings(cfg) for overrides in commands(path) for _, cfg in jobs(overrides)}
    # noclip with 2 passes at PSPO's lr, norm clipping on (the protocol's 1.0) and off
    assert ("noclip", 2, pspo_lr, 1.0, None) in got
    assert ("noclip", 2, pspo_lr, 0, None) in got
    # matched lr: clip and the paper's noclip at PSPO's lr
    assert ("noclip", 1, pspo_lr, 1.0, None) in got
    assert any(s[0] == "clip" and s[2] == pspo_lr and s[3] == 1.0 for s in got)
    # alpha with norm clipping off, at PSPO's lr: more than one alpha, so flatness in alpha can be seen
    alphas = {s[4] for s in got if s[0] == "pspo" and s[3] == 0 and s[2] == pspo_lr}
    assert len(alphas) >= 2


def test_alpha_ablation_has_its_norm_clipping_off_arm_and_reference():
    path = CONF_DIR / "experiment" / "alpha_ablation.yaml"
    got = {_settings(cfg) for overrides in commands(path) for _, cfg in jobs(overrides)}
    table8 = {0.1, 0.2, 0.3, 0.4, 0.5}
    assert {s[4] for s in got if s[0] == "pspo" and s[3] == 1.0} == table8  # Table 8 itself
    assert {s[4] for s in got if s[0] == "pspo" and s[3] == 0} == table8
    assert {s[3] for s in got if s[:3] == ("noclip", 2, 1e-6)} == {0, 1.0}
    # the reference runs the ablation's steps, in folders of their own
    ref = [(o, c) for o in commands(path) for o, c in jobs(o) if c.method.name == "noclip"]
    assert all(c.trainer.max_steps == 250 for _, c in ref)
    tags = {tag_from_overrides(c, o) for o, c in ref}
    assert tags == {
        "alpha_ablation-num_iterations2_max_grad_norm0",
        "alpha_ablation-num_iterations2_max_grad_norm1",
    }


def test_hparams_grids_hold_noclip_with_two_passes_at_pspo_lrs():
    def grid(search, *extra):
        return [cfg for _, cfg in jobs(["experiment=paper_qwen2p5_0p5b", f"hparams_search={search}", *extra])]

    pspo_lrs = {c.trainer.learning_rate for c in grid("pspo")}
    noclip = grid("noclip")
    assert {c.trainer.learning_rate for c in noclip if c.method.num_iterations == 2} == pspo_lrs
    assert {c.trainer.learning_rate for c in noclip if c.method.num_iterations == 1} == pspo_lrs  # matched lr
    assert {c.trainer.learning_rate for c in grid("clip")} == pspo_lrs
    off = grid("pspo", "trainer.max_grad_norm=0")
    assert len(off) == len(pspo_lrs) * 4 and all(c.trainer.max_grad_norm == 0 for c in off)
    assert (
        "hparams_search=pspo trainer.max_grad_norm=0"
        in (CONF_DIR / "hparams_search" / "pspo.yaml").read_text()
    )


def test_norm_clipping_off_reaches_hf_as_zero_and_null_is_refused(tmp_path):
    cfg = compose_config(CONF_DIR, "train", ["model=tiny", "trainer.max_grad_norm=0"])
    args = train._grpo_config(cfg, tmp_path / "runs" / "tiny" / "pspo" / "seed0", train.validate(cfg), False)
    assert args.max_grad_norm == 0  # HF's Trainer clips only when max_grad_norm > 0
    cfg = compose_config(CONF_DIR, "train", ["model=tiny", "trainer.max_grad_norm=null"])
    with pytest.raises(UsageError, match=r"^trainer.max_grad_norm must be a number in \[0, inf\), got null$"):
        train.validate(cfg)


def test_advantage_scaling_switch_reaches_trl(tmp_path):
    """docs/reproduction.md: the paper text's A = R - mean is ``trainer.scale_rewards=none``; TRL's default
    ``group`` (what the authors' code ran) divides by the group's std."""
    folder = tmp_path / "runs" / "tiny" / "pspo" / "seed0"
    default = compose_config(CONF_DIR, "train", ["model=tiny"])
    assert train._grpo_config(default, folder, train.validate(default), False).scale_rewards == "group"
    for value in ("none", "batch"):
        cfg = compose_config(CONF_DIR, "train", ["model=tiny", f"trainer.scale_rewards={value}"])
        assert train._grpo_config(cfg, folder, train.validate(cfg), False).scale_rewards == value
    for bad in ("std", "false"):
        cfg = compose_config(CONF_DIR, "train", ["model=tiny", f"trainer.scale_rewards={bad}"])
        with pytest.raises(
            UsageError, match=r"^trainer.scale_rewards must be one of group, batch, none, got "
        ):
            train.validate(cfg)
