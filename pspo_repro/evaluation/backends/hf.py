"""transformers ``generate`` backend: batched, left-padded, KV cache, CPU or GPU, seeded per sub-batch."""

from __future__ import annotations

import logging
from itertools import groupby
from typing import Any

from pspo_repro.evaluation.backends import Completion, Request, stop_token_ids

log = logging.getLogger(__name__)


class HFBackend:
    """Generation with ``model.generate``; requests sharing (temperature, n) are batched together.

    ``batch_size`` counts sequences per forward (prompts x samples). Each sub-batch reseeds torch with
    the seed of its first request, so output depends only on the request list and ``batch_size``, not on
    what ran before (a resumed sweep regenerates exactly what an uninterrupted one would). Unlike vLLM's
    per-request seeds, a sampled completion depends on its batch partners: ``batch_size`` and
    ``chunk_size`` are part of an hf cell's settings.
    """

    name = "hf"

    def __init__(
        self,
        model_path: str,
        batch_size: int = 64,
        device: str = "auto",
        dtype: str = "auto",
        attn_implementation: str | None = None,
        **_: Any,
    ):
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig

        if device == "auto":
            device = "cuda" if torch.cuda.is_available() else "cpu"
        self.device = torch.device(device)
        torch_dtype = {
            "auto": None,
            "float32": torch.float32,
            "bfloat16": torch.bfloat16,
            "float16": torch.float16,
        }[dtype]
        if torch_dtype is None:
            torch_dtype = torch.bfloat16 if self.device.type == "cuda" else torch.float32
        self.tokenizer = AutoTokenizer.from_pretrained(model_path)
        self.model = (
            # safetensors only: a pickled checkpoint (pytorch_model.bin) could run code when loaded
            AutoModelForCausalLM.from_pretrained(
                model_path,
                dtype=torch_dtype,
                use_safetensors=True,
                # null: transformers' default (sdpa); eager: on CPU under bf16, its matmuls beat the sdpa kernel
                **({"attn_implementation": attn_implementation} if attn_implementation else {}),
            )
            .to(self.device)
            .eval()
        )
        try:
            gen_cfg = GenerationConfig.from_pretrained(model_path)
        except OSError:
            gen_cfg = None
        self.stop_ids = stop_token_ids(self.tokenizer, gen_cfg)
        if not self.stop_ids:
            raise ValueError(f"{model_path}: tokenizer and generation config define no eos/pad token")
        self.pad_id = (
            self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else self.stop_ids[0]
        )
        self.batch_size = max(1, int(batch_size))
        # transformers fills every field a call leaves unset from model.generation_config, so a checkpoint's
        # generation_config.json (repetition_penalty, top_k, no_repeat_ngram_size, ...) would change the
        # sampled distribution. A default config here keeps it to temperature, top_p and top_k, as vLLM samples.
        self.model.generation_config = GenerationConfig(eos_token_id=self.stop_ids, pad_token_id=self.pad_id)

    def generate(
        self, requests: list[Request], max_new_tokens: int, top_p: float, top_k: int | None = None
    ) -> list[list[Completion]]:
        """``n`` completions per request, in request order; ``top_k`` None: no top-k filter."""
        out: list[list[Completion] | None] = [None] * len(requests)
        indexed = list(enumerate(requests))
        for (temperature, n), group in groupby(indexed, key=lambda ir: (ir[1].temperature, ir[1].n)):
            group = list(group)
            per_batch = max(1, self.batch_size // n)
            for start in range(0, len(group), per_batch):
                chunk = group[start : start + per_batch]
                results = self._generate_batch(
                    [r for _, r in chunk], temperature, n, max_new_tokens, top_p, top_k
                )
                for (i, _), res in zip(chunk, results, strict=True):
                    out[i] = res
        return out  # type: ignore[return-value]

    def _generate_batch(
        self,
        requests: list[Request],
        temperature: float,
        n: int,
        max_new_tokens: int,
        top_p: float,
        top_k: int | None = None,
    ) -> list[list[Completion]]:
        import torch
        from transformers import GenerationConfig

        width = max(len(r.prompt_ids) for r in requests)
        ids = torch.full((len(requests), width), self.pad_id, dtype=torch.long)
        mask = torch.zeros_like(ids)
        for row, r in enumerate(requests):  # left padding: the last prompt token sits at the same column
            ids[row, width - len(r.prompt_ids) :] = torch.tensor(r.prompt_ids)
            mask[row, width - len(r.prompt_ids) :] = 1
        sample = temperature > 0
        # An explicit config over the neutral model.generation_config set in __init__: the checkpoint's own
        # generation defaults must not leak in, so hf and vLLM sample the same distribution.
        cfg = GenerationConfig(
            do_sample=sample,
            temperature=temperature if sample else None,
            top_p=top_p if sample else None,
            # 0 disables transformers' top-k filter (its default would be 50); the authors' evaluation left
            # that default in place, which eval.top_k=50 reproduces.
            top_k=(top_k or 0) if sample else None,
            max_new_tokens=max_new_tokens,
            num_return_sequences=n,
            eos_token_id=self.stop_ids,
            pad_token_id=self.pad_id,
            use_cache=True,
        )
        from pspo_repro.training.sampling import cpu_sampling

        torch.manual_seed(requests[0].seed)
        # top_p < 1 (eval.top_p): transformers' filter, the same mask without its full sort; its own token draw
        # (training.sampling: only the top-p shortcut is exact)
        with torch.no_grad(), cpu_sampling("multinomial"):
            seqs = self.model.generate(
                input_ids=ids.to(self.device), attention_mask=mask.to(self.device), generation_config=cfg
            )
        new = seqs[:, width:].tolist()
        stops = set(self.stop_ids)
        results: list[list[Completion]] = []
        for row in range(len(requests)):
            samples = []
            for toks in new[row * n : (row + 1) * n]:
                cut = next(
                    (j + 1 for j, t in enumerate(toks) if t in stops), len(toks)
                )  # keep the stop token
                toks = toks[:cut]
                samples.append(Completion(self.tokenizer.decode(toks, skip_special_tokens=True), tuple(toks)))
            results.append(samples)
        return results
