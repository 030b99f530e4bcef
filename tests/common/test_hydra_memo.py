"""The test processes' memo of Hydra's config loads (tests/hydra_memo.py) composes what Hydra composes."""

from __future__ import annotations

import hydra_memo
import pytest
from omegaconf import OmegaConf

from pspo_repro.common.cli import compose_config
from pspo_repro.common.paths import CONF_DIR

CASES = [(name, []) for name in ("train", "evaluate", "sft", "aggregate", "mini", "scale", "explore")] + [
    ("mini", ["pipeline=study"]),
    ("mini", ["pipeline=leaderboard"]),
    ("mini", ["pipeline=scale_rung"]),
    ("train", ["experiment=paper_qwen2p5_0p5b", "method=clip", "hparams_search=pspo"]),
    ("train", ["model=tiny", "method=sapo", "reward=math_verify_format", "+method.note=x"]),
    ("evaluate", ["eval=math", "temperatures=[0.0,0.8]", "hydra/launcher=slurm"]),
]


def _yaml(config_dir, name, overrides):
    return OmegaConf.to_yaml(compose_config(config_dir, name, overrides, return_hydra_config=True))


@pytest.fixture
def plain_hydra():
    """Hydra's own loads for the test; the memo's state as it was afterwards."""
    was = hydra_memo.installed()
    hydra_memo.uninstall()
    yield
    hydra_memo.uninstall()
    if was:
        hydra_memo.install()


def test_every_entry_config_composes_the_same_with_the_memo(plain_hydra):
    plain = [_yaml(CONF_DIR, name, ov) for name, ov in CASES]
    hydra_memo.install()
    first = [_yaml(CONF_DIR, name, ov) for name, ov in CASES]  # the memo fills
    again = [_yaml(CONF_DIR, name, ov) for name, ov in CASES]  # every load from the memo
    assert first == plain and again == plain
    assert len(hydra_memo._MEMO) > 20  # the entry configs and their groups


def test_an_edited_file_is_read_again(plain_hydra, tmp_path):
    hydra_memo.install()
    path = tmp_path / "app.yaml"
    path.write_text("lr: 1.0\n")
    assert OmegaConf.to_container(compose_config(tmp_path, "app", [])) == {"lr": 1.0}
    path.write_text("lr: 0.25\nsteps: 3\n")
    assert OmegaConf.to_container(compose_config(tmp_path, "app", [])) == {"lr": 0.25, "steps": 3}
