"""The trainer node's schema (training/trainer_schema.py) and conf/trainer/ agree: every key declared once,
the keys passed through to TRL are TRL's own, and the checks read their ranges from it."""

from __future__ import annotations

import dataclasses

import pytest
from omegaconf import OmegaConf

from pspo_repro.common.cli import UsageError, compose_config
from pspo_repro.common.paths import CONF_DIR
from pspo_repro.training import trainer_schema
from pspo_repro.training.settings import BOOL_KEYS, validate_trainer


def test_the_schema_declares_every_key_of_the_trainer_node_and_no_other():
    yaml_keys = [k for k in OmegaConf.load(CONF_DIR / "trainer" / "default.yaml") if k != "defaults"]
    assert list(trainer_schema.KEYS) == yaml_keys  # the same keys, in the yaml's order
    for preset in (CONF_DIR / "trainer").glob("*.yaml"):
        extra = set(OmegaConf.load(preset)) - {"defaults"} - set(trainer_schema.KEYS)
        assert not extra, f"{preset.name}: keys without a schema field: {sorted(extra)}"


def test_the_keys_passed_to_trl_are_grpo_config_fields():
    from trl import GRPOConfig

    trl_fields = {f.name for f in dataclasses.fields(GRPOConfig)}
    passed = [k for k, m in trainer_schema.KEYS.items() if m["trl"]]
    assert set(passed) <= trl_fields, sorted(set(passed) - trl_fields)
    cfg = compose_config(CONF_DIR, "train", ["model=tiny"])
    kwargs = trainer_schema.trl_kwargs(cfg.trainer)
    assert "max_prompt_length" not in kwargs and "token_budget" not in kwargs  # ours, not TRL's
    assert "steps_per_generation" not in kwargs  # null: TRL's default (when_set)
    assert kwargs["learning_rate"] == cfg.trainer.learning_rate


def test_flags_and_ranges_come_from_the_schema():
    assert "trainer.use_vllm" in BOOL_KEYS and "trainer.skip_nonfinite" in BOOL_KEYS
    cfg = compose_config(CONF_DIR, "train", ["model=tiny", "trainer.num_generations=1"])
    with pytest.raises(UsageError, match=r"trainer.num_generations must be an integer in \[2, inf\), got 1"):
        validate_trainer(cfg)
