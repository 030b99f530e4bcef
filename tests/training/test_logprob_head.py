"""trainer.logprob_head: the plain head computes TRL's fused-head log-probs, entropies and gradients."""

from __future__ import annotations

import contextlib
from types import MethodType, SimpleNamespace

import pytest
import torch
from omegaconf import OmegaConf
from transformers import Qwen2Config, Qwen2ForCausalLM
from trl import GRPOTrainer
from trl.trainer.utils import add_fused_lm_head

from pspo_repro.common.run_dir import INFRA_TRAINER_KEYS
from pspo_repro.training.grpo import PLAIN_HEAD_MAX_BYTES, plain_head_bytes, resolve_logprob_head
from pspo_repro.training.settings import UsageError, validate_flags
from pspo_repro.training.trainer import MethodGRPOTrainer

TEMPERATURE = 0.8


def _model() -> Qwen2ForCausalLM:
    torch.manual_seed(0)
    cfg = Qwen2Config(
        vocab_size=97,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=2,
        head_dim=16,
        max_position_embeddings=64,
        tie_word_embeddings=True,
    )
    model = Qwen2ForCausalLM(cfg)
    add_fused_lm_head(model, temperature=TEMPERATURE, outputs=("log_probs", "entropy"))
    return model


def _batch():
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(3, 97, (6, 14), generator=g)
    mask = torch.ones_like(ids)
    mask[0, :3] = 0  # left-padded prompts
    mask[1, :1] = 0
    mask[2, -3:] = 0  # completions that stopped early (padding after EOS)
    mask[4, -1:] = 0
    return ids, mask


def _host(bf16: bool, head: str):
    autocast = (lambda: torch.autocast("cpu", dtype=torch.bfloat16)) if bf16 else contextlib.nullcontext
    accelerator = SimpleNamespace(autocast=autocast, is_main_process=True)
    host = SimpleNamespace(
        accelerator=accelerator, temperature=TEMPERATURE, logprob_head=head, _skip_rollout_old_logps=False
    )
    host._completion_logits = MethodType(MethodGRPOTrainer._completion_logits, host)
    return host


def _run(model, head: str, bf16: bool, keep: int, batch_size: int | None):
    ids, mask = _batch()
    model.zero_grad()
    fn = (
        GRPOTrainer._get_per_token_logps_and_entropies
        if head == "fused"
        else (MethodGRPOTrainer._get_per_token_logps_and_entropies)
    )
    logps, ent, aux = fn(
        _host(bf16, head), model, ids, mask, keep, batch_size=batch_size, compute_entropy=True
    )
    weights = torch.linspace(-1, 1, logps.numel()).view_as(logps) * mask[:, -keep:]
    (logps * weights).sum().backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters()}
    return logps.detach(), ent.detach(), aux, grads


@pytest.mark.parametrize("bf16", [False, True], ids=["fp32", "bf16-autocast"])
@pytest.mark.parametrize("batch_size", [None, 4])
def test_plain_head_matches_trls_fused_head(bf16, batch_size):
    model = _model()
    keep = 5
    f_logps, f_ent, _, f_grads = _run(model, "fused", bf16, keep, batch_size)
    p_logps, p_ent, p_aux, p_grads = _run(model, "plain", bf16, keep, batch_size)
    tol = dict(atol=2e-2, rtol=2e-2) if bf16 else dict(atol=1e-5, rtol=1e-5)
    assert p_aux is None
    assert p_logps.shape == f_logps.shape == (6, keep)
    torch.testing.assert_close(p_logps, f_logps, **tol)
    torch.testing.assert_close(p_ent, f_ent, **tol)
    assert (p_logps[2, -3:] == 0).all() and (p_ent[2, -3:] == 0).all()  # padding reads 0, as TRL's head
    for name, g in f_grads.items():
        torch.testing.assert_close(
            p_grads[name], g, **(dict(atol=5e-2, rtol=5e-2) if bf16 else tol), msg=name
        )
    assert any(g.abs().sum() > 0 for g in p_grads.values())


def test_plain_head_entropies_carry_no_gradient():
    ids, mask = _batch()
    _, ent, _ = MethodGRPOTrainer._get_per_token_logps_and_entropies(
        _host(False, "plain"), _model(), ids, mask, 4, compute_entropy=True
    )
    assert not ent.requires_grad


def test_auto_resolves_by_device_and_logits_size():
    assert resolve_logprob_head("auto", use_cuda=False) == "plain"
    assert resolve_logprob_head("auto", use_cuda=True) == "fused"
    assert resolve_logprob_head("fused", use_cuda=False) == "fused"
    assert resolve_logprob_head("plain", use_cuda=True) == "plain"
    mini = SimpleNamespace(config=Qwen2Config(vocab_size=2048))
    qwen = SimpleNamespace(config=Qwen2Config(vocab_size=151_936))
    t_mini = OmegaConf.create({"per_device_train_batch_size": 128, "max_completion_length": 48})
    t_paper = OmegaConf.create(
        {"per_device_train_batch_size": 8, "per_device_eval_batch_size": 64, "max_completion_length": 512}
    )
    assert (
        plain_head_bytes(mini, t_mini) == 128 * 48 * 2048 * 12
    )  # ~0.15 GB: the CPU mini takes the plain head
    assert resolve_logprob_head("auto", False, plain_head_bytes(mini, t_mini)) == "plain"
    assert plain_head_bytes(qwen, t_paper) > PLAIN_HEAD_MAX_BYTES  # Qwen's vocabulary at batch 64: fused
    assert resolve_logprob_head("auto", False, plain_head_bytes(qwen, t_paper)) == "fused"
    assert "logprob_head" in INFRA_TRAINER_KEYS  # the same numbers: not part of a run's identity


def test_bad_logprob_head_is_refused_in_one_line():
    cfg = OmegaConf.create({"trainer": {"logprob_head": "fast", "eval_steps": None}})
    with pytest.raises(UsageError, match="trainer.logprob_head must be auto, fused or plain, got 'fast'"):
        validate_flags(cfg)
