"""Training keeps fp32 master weights: the GPU path's precision decisions, rehearsed on CPU.

On CUDA, ``model.dtype: auto`` used to load bf16 parameters for training, and AdamW at lr 1e-6 then
rounds most updates away. Here: the dtype decision with CUDA mocked (training fp32, evaluation bf16), the
one-line refusal of a bf16 training dtype without the opt-in, and a real optimizer step of the tiny model
under bf16 autocast on CPU (``trainer.bf16=true``), the same code path as a GPU run.
"""

from __future__ import annotations

import pytest
import torch
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from omegaconf import OmegaConf

from pspo_repro.common.cli import UsageError
from pspo_repro.common.paths import CONF_DIR
from pspo_repro.training import grpo as train
from pspo_repro.training import settings
from pspo_repro.training.models import load_model, load_tokenizer, resolve_dtype, train_dtype_name
from pspo_repro.training.precision import build_trainer, changed_fraction


def _compose(overrides):
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        return compose("train", overrides=list(overrides))


def _tiny_cfg(**keys):
    cfg = OmegaConf.load(CONF_DIR / "model" / "tiny.yaml")
    cfg.pop("defaults")
    for k, v in keys.items():
        cfg[k] = v
    return cfg


def test_resolve_dtype_training_vs_evaluation():
    assert resolve_dtype("auto", use_cuda=True, training=True) == torch.float32
    assert resolve_dtype("auto", use_cuda=True) == torch.bfloat16  # evaluation may load bf16
    assert resolve_dtype(None, use_cuda=False) == torch.float32
    assert resolve_dtype("bfloat16", use_cuda=True, training=True) == torch.bfloat16  # explicit names kept


@pytest.mark.parametrize("preset", ["qwen2p5_0p5b", "qwen2p5_1p5b", "qwen2_math_1p5b", "tiny", "mini_sft"])
def test_every_preset_trains_fp32(preset):
    cfg = OmegaConf.load(CONF_DIR / "model" / f"{preset}.yaml")
    assert train_dtype_name(cfg) == "float32"


def test_mocked_cuda_loads_fp32_for_training_and_bf16_for_evaluation(tiny_model_dir, monkeypatch):
    """The same decision train.py and the evaluator make from ``torch.cuda.is_available()``."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    cfg = _tiny_cfg(dtype="auto")
    tok = load_tokenizer(cfg)
    use_cuda = torch.cuda.is_available()
    trained = load_model(cfg, tok, use_cuda, training=True)
    assert {p.dtype for p in trained.parameters()} == {torch.float32}
    evaluated = load_model(cfg, tok, use_cuda)
    assert {p.dtype for p in evaluated.parameters()} == {torch.bfloat16}
    opted_in = load_model(_tiny_cfg(dtype="auto", train_dtype="bfloat16"), tok, use_cuda, training=True)
    assert {p.dtype for p in opted_in.parameters()} == {torch.bfloat16}


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_low_precision_training_dtype_is_refused_in_one_line(results_root, dtype, monkeypatch):
    import pspo_repro.training.models as models

    monkeypatch.setattr(models, "load_model", lambda *a, **k: pytest.fail("a model was loaded"))
    cfg = _compose(["model=tiny", f"model.dtype={dtype}"])
    with pytest.raises(
        UsageError,
        match=rf"^model\.dtype={dtype} would train {dtype} parameters.*model\.train_dtype={dtype}$",
    ):
        train.run(cfg, [f"model.dtype={dtype}"])
    assert not results_root.exists()
    with pytest.raises(UsageError, match=r"model\.train_dtype must be null or one of"):
        settings.validate_trainer(_compose(["model=tiny", "model.train_dtype=int8"]))
    settings.validate_trainer(_compose(["model=tiny", f"model.dtype={dtype}", f"model.train_dtype={dtype}"]))


@pytest.mark.slow
def test_bf16_autocast_on_cpu_keeps_fp32_weights_and_moves_them(tiny_model_dir, results_root):
    """``trainer.bf16=true`` on CPU: fp32 parameters in the trainer, bf16 matmuls, and one AdamW step at
    lr 1e-6 changes >= 90% of the weights that got a gradient (bf16 weights: a small fraction)."""
    trainer, probe = build_trainer(["model=tiny", "trainer.bf16=true", "trainer.max_steps=1"], results_root)
    assert trainer.args.bf16 and trainer.args.learning_rate == 1e-6
    assert train.precision_record(trainer) == {
        "param_dtype": "float32",
        "autocast_dtype": "bfloat16",
        "mixed_precision": "bf16",
    }
    trainer.train()
    assert {p.dtype for p in trainer.model.parameters()} == {torch.float32}
    assert torch.bfloat16 in probe.matmul_dtypes  # the forward pass ran under bf16 autocast
    assert probe.grads and probe.after_first is not None
    assert sum(int((g != 0).sum()) for g in probe.grads.values()) > 1000
    fp32 = changed_fraction(probe.before, probe.after_first, probe.grads)
    assert fp32 >= 0.9, f"only {fp32:.1%} of the fp32 weights with a gradient changed"
    # step 1 was a first pass (num_iterations 2 stores old log-probs): on CPU, even under bf16 autocast, the
    # training forward recomputes them bit for bit
    assert trainer.first_pass_max_abs_ratio_dev == 0.0

    # The same step on bf16 weights (the defect this guards against): most updates round away.
    names = list(probe.grads)
    low = {n: probe.before[n].to(torch.bfloat16).requires_grad_() for n in names}
    opt = torch.optim.AdamW(low.values(), lr=1e-6, weight_decay=0.0)
    for n in names:
        low[n].grad = probe.grads[n].to(torch.bfloat16)
    start = {n: t.detach().clone() for n, t in low.items()}
    opt.step()
    bf16 = changed_fraction(start, {n: t.detach() for n, t in low.items()}, probe.grads)
    print(f"changed after one AdamW step at lr 1e-6: fp32 {fp32:.1%}, bf16 {bf16:.1%}")
    assert bf16 < 0.5, f"{bf16:.1%} of bf16 weights changed: the test would not tell the dtypes apart"


@pytest.mark.parametrize(("avx512_bf16", "amx", "machine", "warned"), [
    (False, False, "x86_64", True),    # AVX512 without BF16 (or AVX2): oneDNN emulates bf16, 1.6x slower
    (True, False, "x86_64", False),
    (False, True, "x86_64", False),
    (False, False, "aarch64", False),  # not judged on other architectures
])  # fmt: skip
def test_bf16_autocast_on_a_cpu_without_native_bf16_is_named(tmp_path, monkeypatch, caplog, avx512_bf16, amx, machine,
                                                             warned):  # fmt: skip
    import platform

    monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda: avx512_bf16)
    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: amx)
    monkeypatch.setattr(platform, "machine", lambda: machine)
    folder = tmp_path / "runs" / "tiny" / "pspo" / "seed0"
    for bf16 in (True, False):
        cfg = _compose(["model=tiny", f"trainer.bf16={str(bf16).lower()}"])
        caplog.clear()
        with caplog.at_level("WARNING", logger="pspo_repro.train"):
            args = train._grpo_config(cfg, folder, train.validate(cfg), use_cuda=False)
        assert args.bf16 is bf16  # a warning, never a silent switch to fp32
        assert ("without AVX512-BF16 or AMX" in caplog.text) is (warned and bf16), caplog.text
