"""Backends: vLLM request building without a GPU, seeds, stop tokens, selection, hf determinism."""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass, field

import pytest

from pspo_repro.evaluation.backends import (
    Request,
    make_backend,
    request_seed,
    resolve_backend_name,
    stop_token_ids,
)
from pspo_repro.evaluation.backends.vllm_backend import build_sampling_params


@dataclass
class FakeSamplingParams:
    """Stands in for vllm.SamplingParams: records the keyword arguments it was given."""

    n: int = 1
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1
    max_tokens: int = 16
    seed: int | None = None
    stop_token_ids: list[int] = field(default_factory=list)
    skip_special_tokens: bool = True


def _sampling_params_cls():
    if importlib.util.find_spec("vllm") is not None:
        from vllm import SamplingParams

        return SamplingParams
    return FakeSamplingParams


def test_build_sampling_params_per_request():
    reqs = [
        Request("a", (1, 2), 0.0, 1, request_seed(123, 0.0, "p1")),
        Request("a", (1, 2), 0.8, 16, request_seed(123, 0.8, "p1")),
        Request("b", (3,), 0.4, 16, request_seed(123, 0.4, "p2")),
    ]
    params = build_sampling_params(reqs, 128, 0.9, [7, 5], _sampling_params_cls())
    assert [p.n for p in params] == [1, 16, 16]
    assert [p.temperature for p in params] == [0.0, 0.8, 0.4]
    assert [p.top_p for p in params] == [1.0, 0.9, 0.9]  # greedy ignores top_p; sampled requests carry it
    assert all(p.max_tokens == 128 and list(p.stop_token_ids) == [7, 5] for p in params)
    assert [p.seed for p in params] == [r.seed for r in reqs]
    assert len({p.seed for p in params}) == 3  # distinct per (prompt, temperature)


@pytest.mark.parametrize("top_k, sampled", [(None, -1), (50, 50)])
def test_build_sampling_params_top_k(top_k, sampled):
    """eval.top_k reaches vLLM on sampled requests only; None (and greedy) means every token (-1)."""
    reqs = [Request("a", (1,), 0.0, 1, 1), Request("a", (1,), 0.8, 4, 2)]
    params = build_sampling_params(reqs, 16, 1.0, [7], _sampling_params_cls(), top_k)
    assert [p.top_k for p in params] == [-1, sampled]


def test_request_seed_is_stable_and_distinct():
    assert request_seed(123, 0.8, "gsm8k/test/0") == request_seed(123, 0.8, "gsm8k/test/0")
    seeds = {request_seed(s, t, i) for s in (123, 124) for t in (0.2, 0.8) for i in ("a", "b")}
    assert len(seeds) == 8 and all(0 <= s < 2**31 for s in seeds)


def test_stop_token_ids_from_tokenizer_and_generation_config():
    class Tok:
        eos_token_id = 10
        pad_token_id = 11

    class Gen:
        eos_token_id = [10, 12]

    assert stop_token_ids(Tok(), Gen()) == [10, 11, 12]
    assert stop_token_ids(Tok(), None) == [10, 11]


def test_tiny_model_stop_ids(tiny_model_dir):
    from transformers import AutoTokenizer, GenerationConfig

    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    ids = stop_token_ids(tok, GenerationConfig.from_pretrained(tiny_model_dir))
    assert set(ids) == {tok.convert_tokens_to_ids("<|im_end|>"), tok.convert_tokens_to_ids("<|endoftext|>")}


@pytest.mark.parametrize(
    "has_vllm, has_cuda, expected", [(True, True, "vllm"), (True, False, "hf"), (False, True, "hf")]
)
def test_backend_auto_picks_vllm_only_with_cuda_and_logs_it(
    monkeypatch, caplog, has_vllm, has_cuda, expected
):
    import torch

    import pspo_repro.evaluation.backends as backends

    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        backends.importlib.util,
        "find_spec",
        lambda name, *a: (object() if has_vllm else None) if name == "vllm" else real_find_spec(name, *a),
    )
    monkeypatch.setattr(torch.cuda, "is_available", lambda: has_cuda)
    with caplog.at_level("INFO", logger="pspo_repro.evaluation.backends"):
        assert resolve_backend_name("auto") == expected
    assert f"backend=auto chose {expected}" in caplog.text


def test_backend_selection():
    with pytest.raises(ValueError, match="unknown backend 'tgi'; allowed: auto, hf, vllm"):
        resolve_backend_name("tgi")


def _requests(tok, questions, temperature, n):
    from pspo_repro.data.prompts import render_prompt

    out = []
    for i, q in enumerate(questions):
        s = render_prompt(tok, q)
        out.append(
            Request(
                s,
                tuple(tok(s, add_special_tokens=False)["input_ids"]),
                temperature,
                n,
                request_seed(123, temperature, str(i)),
            )
        )
    return out


@pytest.mark.slow
def test_hf_backend_deterministic_and_shaped(tiny_model_dir):
    backend = make_backend("hf", str(tiny_model_dir), batch_size=4, device="cpu")
    reqs = _requests(
        backend.tokenizer, ["Tom has 3 apples.", "Anna has 12 books and buys 5 more?", "How many?"], 0.8, 2
    )
    first = backend.generate(reqs, 6, 1.0)
    assert [len(c) for c in first] == [2, 2, 2]
    assert all(1 <= len(c.token_ids) <= 6 for cs in first for c in cs)
    assert backend.generate(reqs, 6, 1.0) == first  # same requests -> same samples
    greedy = backend.generate(_requests(backend.tokenizer, ["Tom has 3 apples."], 0.0, 1), 6, 1.0)
    assert len(greedy[0]) == 1


@pytest.mark.slow
def test_hf_backend_top_k(tiny_model_dir, monkeypatch):
    """top_k reaches transformers' GenerationConfig on sampled requests (0 = off when None: transformers'
    own default would be 50); top_k = 1 makes T = 0.8 sampling the greedy answer."""
    backend = make_backend("hf", str(tiny_model_dir), batch_size=8, device="cpu")
    prompts = ["Tom has 3 apples.", "Anna has 12 books and buys 5 more?"]
    seen = []
    generate = backend.model.generate

    def spy(*args, **kwargs):
        seen.append(kwargs["generation_config"].top_k)
        return generate(*args, **kwargs)

    monkeypatch.setattr(backend.model, "generate", spy)
    greedy = backend.generate(_requests(backend.tokenizer, prompts, 0.0, 1), 8, 1.0, top_k=50)
    free = backend.generate(_requests(backend.tokenizer, prompts, 0.8, 4), 8, 1.0)
    top1 = backend.generate(_requests(backend.tokenizer, prompts, 0.8, 4), 8, 1.0, top_k=1)
    assert seen == [None, 0, 1]  # greedy: no filter; None: filter off, not transformers' 50
    assert all(c == g[0] for g, cs in zip(greedy, top1, strict=True) for c in cs)
    assert any(c != g[0] for g, cs in zip(greedy, free, strict=True) for c in cs)


@pytest.mark.gpu
@pytest.mark.vllm
def test_vllm_backend_generates(tiny_model_dir):
    import torch

    if importlib.util.find_spec("vllm") is None or not torch.cuda.is_available():
        pytest.skip("needs vLLM and a CUDA GPU")
    backend = make_backend(
        "vllm", str(tiny_model_dir), seed=123, gpu_memory_utilization=0.3, max_model_len=1024
    )
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    reqs = _requests(tok, ["Tom has 3 apples."], 0.0, 1) + _requests(tok, ["Tom has 3 apples."], 0.8, 4)
    out = backend.generate(reqs, 8, 1.0)
    assert [len(c) for c in out] == [1, 4]
    assert backend.generate(reqs, 8, 1.0) == out  # per-request seeds: reproducible
