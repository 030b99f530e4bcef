"""Generation engines for evaluation behind one interface, chosen by name (``hf``, ``vllm``, ``auto``).

A backend takes a list of ``Request`` (one prompt at one temperature with its sample count and seed)
and returns, per request, ``n`` ``Completion`` records. Requests for several temperatures are submitted
together so an engine that can batch across sampling settings (vLLM) does so.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import logging
from dataclasses import dataclass
from typing import Any, Protocol

from pspo_repro.common.names import did_you_mean

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Completion:
    """One sampled continuation: decoded text (special tokens skipped) and its token ids (stop token kept)."""

    text: str
    token_ids: tuple[int, ...]


@dataclass(frozen=True)
class Request:
    """One prompt at one sampling setting. ``temperature == 0`` means greedy (then ``n`` is 1)."""

    prompt: str
    prompt_ids: tuple[int, ...]
    temperature: float
    n: int
    seed: int


class Backend(Protocol):
    """What the evaluator needs from an engine."""

    name: str

    def generate(
        self, requests: list[Request], max_new_tokens: int, top_p: float, top_k: int | None = None
    ) -> list[list[Completion]]:
        """``n`` completions per request, in request order; ``top_k`` None: no top-k filter."""
        ...


# name -> "module:Class", imported lazily so that hf does not pull vLLM and vice versa.
BACKENDS: dict[str, str] = {
    "hf": "pspo_repro.evaluation.backends.hf:HFBackend",
    "vllm": "pspo_repro.evaluation.backends.vllm_backend:VLLMBackend",
}


def request_seed(base_seed: int, temperature: float, prompt_id: str) -> int:
    """A per-(prompt, temperature) seed derived from the sweep seed. vLLM seeds each request with it (its
    samples are independent of batching); the hf backend seeds each sub-batch with its first request's."""
    digest = hashlib.sha256(f"{base_seed}:{temperature:.4f}:{prompt_id}".encode()).digest()
    return int.from_bytes(digest[:4], "little") & 0x7FFFFFFF


def vllm_available() -> bool:
    """True when vLLM is importable and a CUDA device is visible (the official wheels are CUDA-only)."""
    if importlib.util.find_spec("vllm") is None:
        return False
    import torch

    return torch.cuda.is_available()


def resolve_backend_name(name: str) -> str:
    """``auto`` -> ``vllm`` where CUDA and vLLM are available, else ``hf``; other names are checked."""
    if name == "auto":
        chosen = "vllm" if vllm_available() else "hf"
        log.info("backend=auto chose %s", chosen)
        return chosen
    if name not in BACKENDS:
        hint = did_you_mean(name, ["auto", *BACKENDS])
        raise ValueError(f"unknown backend {name!r}; {hint}allowed: auto, {', '.join(sorted(BACKENDS))}")
    return name


def make_backend(name: str, model_path: str, **options: Any) -> Backend:
    """Load the model once into the named engine (``auto`` resolved first)."""
    name = resolve_backend_name(name)
    module, cls = BACKENDS[name].split(":")
    return getattr(importlib.import_module(module), cls)(model_path, **options)


def stop_token_ids(tokenizer: Any, generation_config: Any = None) -> list[int]:
    """Token ids that end a completion: the tokenizer's eos and pad ids plus the generation config's eos ids.

    Read from the tokenizer/config, never inferred from the model's name.
    """
    ids: list[int] = []
    for value in (
        getattr(tokenizer, "eos_token_id", None),
        getattr(tokenizer, "pad_token_id", None),
        getattr(generation_config, "eos_token_id", None) if generation_config is not None else None,
    ):
        if value is None:
            continue
        for v in value if isinstance(value, list | tuple) else [value]:
            if v is not None and int(v) not in ids:
                ids.append(int(v))
    return ids
