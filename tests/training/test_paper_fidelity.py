"""Paper experiments compute what the paper computed: the authors' reward, and an as-run clip variant."""

from __future__ import annotations

import pytest
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra

from pspo_repro.common.cli import UsageError
from pspo_repro.common.paths import CONF_DIR
from pspo_repro.common.run_dir import tag_from_overrides
from pspo_repro.training import grpo as train

PAPER = ["paper_qwen2p5_0p5b", "paper_qwen2p5_1p5b", "paper_qwen2_math_1p5b"]


def _compose(overrides):
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        return compose("train", overrides=list(overrides))


@pytest.mark.parametrize("experiment", [*PAPER, "alpha_ablation"])
def test_paper_experiments_train_with_the_authors_reward(experiment):
    cfg = _compose([f"experiment={experiment}"])
    assert list(cfg.reward.funcs) == ["authors_gsm8k"]


@pytest.mark.parametrize("experiment", [*PAPER, "alpha_ablation"])
def test_paper_experiments_validate_as_the_authors_script(experiment):
    """Their GRPOConfig: validation and a checkpoint every 100 steps (the paper text says 1000), and no
    per_device_eval_batch_size, so HF's default 8."""
    t = _compose([f"experiment={experiment}"]).trainer
    assert (t.per_device_eval_batch_size, t.num_generations_eval) == (8, None)
    assert (t.eval_steps, t.save_steps) == ((50, 50) if experiment == "alpha_ablation" else (100, 100))


@pytest.mark.parametrize("experiment", ["mini", "mini_smoke"])
def test_the_cpu_mini_keeps_our_corrected_reward(experiment):
    assert "authors_gsm8k" not in list(_compose([f"experiment={experiment}"]).reward.funcs)


@pytest.mark.parametrize("experiment", PAPER)
def test_as_run_clip_is_eps_zero_lr_5e7_in_its_own_folder(experiment):
    overrides = [f"experiment={experiment}", "method=clip", "variant=as_run"]
    cfg = _compose(overrides)
    train.apply_per_method(cfg, overrides)
    assert (cfg.method.eps_low, cfg.method.eps_high, cfg.trainer.learning_rate) == (0.0, 0.0, 5e-7)
    assert tag_from_overrides(cfg, overrides) == "as_run"
    intended = _compose([f"experiment={experiment}", "method=clip"])
    train.apply_per_method(intended, [])
    assert intended.method.eps_low > 0 and tag_from_overrides(intended, []) == ""
    train.validate(cfg)  # eps 0.0 is a valid clip range


def test_as_run_command_line_keys_still_win():
    overrides = [
        "experiment=paper_qwen2p5_0p5b",
        "method=clip",
        "variant=as_run",
        "trainer.learning_rate=1e-6",
    ]
    cfg = _compose(overrides)
    train.apply_per_method(cfg, overrides)
    assert cfg.trainer.learning_rate == 1e-6 and cfg.method.eps_low == 0.0
    assert tag_from_overrides(cfg, overrides) == "as_run-learning_rate1e-06"


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["experiment=paper_qwen2p5_0p5b", "method=pspo", "variant=as_run"], r"no values for method 'pspo'.*: clip$"),
        (["method=clip", "variant=as_run"], r"no values for method 'clip'.*none \(choose an experiment=paper_\* file\)$"),
        (["method=clip", "variant=asrun"], r"^unknown variant 'asrun'; did you mean as_run\? options: intended, as_run$"),
    ],
)  # fmt: skip
def test_bad_variant_is_one_line(overrides, message):
    with pytest.raises(UsageError, match=message):
        train.apply_per_method(_compose(overrides), overrides)


def test_paper_reference_names_metric_set_and_the_papers_sentence():
    import pandas as pd
    from omegaconf import OmegaConf

    from pspo_repro.analysis.report import load_reference
    from pspo_repro.data.datasets import DATASETS

    ref = load_reference(CONF_DIR.parent / "results" / "paper_reference.csv")
    metrics = OmegaConf.load(CONF_DIR / "aggregate.yaml").metrics
    assert len(ref) == 8
    for row in ref.to_dict("records"):
        assert row["metric"] in metrics and row["dataset"] in DATASETS
        assert isinstance(row["set"], str) and row["set"] and not pd.isna(row["evidence"])
        assert "true accuracy" in row["evidence"] or "On MATH" in row["evidence"]
