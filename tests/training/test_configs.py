"""Every config composes: each method x model, the experiments and the hyperparameter grids."""

from __future__ import annotations

import pytest

from pspo_repro.common.cli import compose_config
from pspo_repro.common.paths import CONF_DIR
from pspo_repro.methods import list_methods, method_aliases
from pspo_repro.training.grpo import UsageError, apply_per_method, check_group_choices
from pspo_repro.training.settings import group_options

MODELS = group_options("model")
METHODS = group_options("method")


@pytest.fixture
def compose_train():
    return lambda overrides=(): compose_config(CONF_DIR, "train", list(overrides), return_hydra_config=True)


def test_groups_match_registries():
    assert METHODS == sorted(
        [*list_methods(), *method_aliases()]
    )  # conf/method/ also holds the aliases' files
    assert set(MODELS) == {"tiny", "mini_sft", "qwen2p5_0p5b", "qwen2p5_1p5b", "qwen2_math_1p5b"}


@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("method", METHODS)
def test_method_x_model_composes(compose_train, model, method):
    cfg = compose_train([f"model={model}", f"method={method}"])
    assert cfg.model.name == model and cfg.method.name == method_aliases().get(method, method)
    # model=tiny picks the CPU trainer preset; the real models get the paper's settings
    assert cfg.trainer.max_completion_length == (32 if model == "tiny" else 128)


def test_tiny_preset_can_be_overridden(compose_train):
    assert compose_train(["model=tiny", "trainer=default"]).trainer.max_completion_length == 128


def test_real_architecture_numbers(compose_train):
    arch = compose_train(["model=qwen2p5_0p5b"]).model.arch
    assert (arch.hidden_size, arch.num_hidden_layers, arch.num_attention_heads, arch.num_key_value_heads) == (
        896,
        24,
        14,
        2,
    )
    assert (arch.intermediate_size, arch.vocab_size, arch.tie_word_embeddings) == (4864, 151936, True)


@pytest.mark.parametrize("experiment", group_options("experiment"))
def test_experiments_compose(compose_train, experiment):
    cfg = compose_train([f"experiment={experiment}"])
    assert cfg.model.name != "tiny"
    for method in ("clip", "noclip", "pspo"):
        c = compose_train([f"experiment={experiment}", f"method={method}"])
        apply_per_method(c, [])
        assert c.trainer.learning_rate > 0


def test_paper_settings(compose_train):
    c = compose_train(["experiment=paper_qwen2p5_0p5b", "method=clip"])
    apply_per_method(c, [])
    assert (c.method.eps_low, c.trainer.learning_rate, c.trainer.token_budget) == (0.1, 1e-6, 150_000_000)
    c = compose_train(["experiment=paper_qwen2p5_0p5b", "method=clip", "trainer.learning_rate=5e-6"])
    apply_per_method(c, ["trainer.learning_rate=5e-6"])  # the command line wins over per_method
    assert c.trainer.learning_rate == 5e-6
    c = compose_train(["experiment=paper_qwen2_math_1p5b", "method=pspo"])
    apply_per_method(c, [])
    assert (c.method.alpha, c.trainer.token_budget, c.trainer.num_generations) == (0.1, 75_000_000, 4)
    a = compose_train(["experiment=alpha_ablation"])
    assert a.method.name == "pspo" and a.trainer.max_steps == 250
    assert a.hydra.sweeper.params["method.alpha"] == "0.1,0.2,0.3,0.4,0.5"


@pytest.mark.parametrize("search", group_options("hparams_search"))
def test_hparams_search_composes(compose_train, search):
    cfg = compose_train(["experiment=paper_qwen2p5_0p5b", f"hparams_search={search}"])
    params = cfg.hydra.sweeper.params
    assert "trainer.learning_rate" in params
    assert cfg.method.name == search
    for key in params:  # every swept method key is a real parameter of the method
        if key.startswith("method."):
            assert key.split(".", 1)[1] in cfg.method


def test_unknown_group_choice_lists_options():
    with pytest.raises(
        UsageError,
        match=r"unknown method 'nope'; options: archer, aspo, bapo, bypass_seq_max_rs, bypass_seq_mean_rs, bypass_token_rs, ce_gppo, cispo, clip, ",
    ):
        check_group_choices(["method=clip,nope"])
    with pytest.raises(UsageError, match="unknown model 'gpt9'"):
        check_group_choices(["model=gpt9"])
    check_group_choices(["method=clip,pspo", "seed=0,1", "trainer.max_steps=5"])
