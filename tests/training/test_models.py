"""pspo_repro.training.models: a random-init model saved for TRL's colocated vLLM (which loads from name_or_path)."""

from __future__ import annotations

import pytest
import torch
from omegaconf import OmegaConf

from pspo_repro.common.paths import CONF_DIR
from pspo_repro.training.models import RANDOM_INIT_DIR, load_model, load_tokenizer, save_random_init


@pytest.fixture
def random_tiny(tiny_model_dir):
    cfg = OmegaConf.load(CONF_DIR / "model" / "tiny.yaml")
    cfg.pop("defaults")
    cfg.random_init = True
    tok = load_tokenizer(cfg)
    torch.manual_seed(0)
    return load_model(cfg, tok, use_cuda=False), tok


def test_save_random_init_is_loadable_and_named(random_tiny, tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model, tok = random_tiny
    assert not model.name_or_path  # what TRL's colocated vLLM would have been given
    target = save_random_init(model, tok, tmp_path)
    assert target == tmp_path / RANDOM_INIT_DIR and model.name_or_path == str(target)
    assert (target / "model.safetensors").is_file() and (target / "tokenizer_config.json").is_file()
    assert [p.name for p in tmp_path.iterdir()] == [RANDOM_INIT_DIR]  # no temp folder left
    loaded = AutoModelForCausalLM.from_pretrained(target)
    for (name, a), (_, b) in zip(model.state_dict().items(), loaded.state_dict().items(), strict=True):
        assert torch.equal(a, b), name
    assert AutoTokenizer.from_pretrained(target).get_vocab() == tok.get_vocab()


def test_save_random_init_reuses_a_whole_folder(random_tiny, tmp_path):
    model, tok = random_tiny
    target = save_random_init(model, tok, tmp_path)
    before = (target / "model.safetensors").stat().st_mtime_ns
    model.name_or_path = model.config.name_or_path = ""  # a resumed run builds the model again
    assert save_random_init(model, tok, tmp_path) == target
    assert (target / "model.safetensors").stat().st_mtime_ns == before
    assert model.name_or_path == str(target)
