"""Token counts of chat prompts, kept on disk by content: what every training run's prompt-length filter reads.

A run drops the prompts longer than ``trainer.max_prompt_length`` tokens, so it counts the tokens of its whole
training set before it starts: for GSM8K's 7,000 prompts and the tiny model that takes longer than a short
run's training steps (docs/benchmarks.md). The counts depend on nothing but the tokenizer and the
rendered prompts, so they are kept in ``cache_dir()/prompt_lengths/<sha256 of both>.json`` and read back by
each later run with the same pair (another seed, method or learning rate). The key covers the tokenizer's whole
serialised state (vocabulary, merges, added tokens, normaliser), its class, the transformers and tokenizers
versions and every rendered prompt: a change to any of them is a new key, counted afresh.

A file that does not hold one non-negative count per prompt (edited, cut short) is not used: the prompts are
counted again and the file replaced. A cache folder that cannot be written is reported in a warning, and the
run goes on with the counts it computed. A tokenizer that cannot be serialised (a custom Python component) is
counted every time.
"""

from __future__ import annotations

import hashlib
import json
import logging
from pathlib import Path
from typing import Any

from pspo_repro.common.atomic import write_text
from pspo_repro.common.paths import cache_dir

log = logging.getLogger(__name__)

FORMAT = "prompt-lengths/1"  # a new layout of the key or the file gets a new name here


def prompt_lengths(tokenizer: Any, chats: list[list[dict]], folder: Path | None = None) -> list[int]:
    """The number of tokens of each chat as a generation prompt (``apply_chat_template(...,
    add_generation_prompt=True, tokenize=True)``), read from ``folder`` (default ``cache_dir()/prompt_lengths``)
    when counted before with the same tokenizer, else counted and kept there."""
    if not chats:
        return []
    texts = tokenizer.apply_chat_template(chats, add_generation_prompt=True, tokenize=False)
    key = _key(tokenizer, texts)
    if key is None:  # no serialisable backend: nothing to key on, counted each time
        return count(tokenizer, texts)
    path = (folder if folder is not None else cache_dir() / "prompt_lengths") / f"{key}.json"
    kept = _read(path, len(chats))
    if kept is not None:
        return kept
    lengths = count(tokenizer, texts)
    try:
        write_text(
            path, json.dumps({"format": FORMAT, "n": len(lengths), "lengths": lengths}, separators=(",", ":"))
        )
    except OSError as exc:
        log.warning("prompt token counts not kept (each run will count them again): %s", exc)
    return lengths


def count(tokenizer: Any, texts: list[str]) -> list[int]:
    """The tokens of each rendered prompt, counted as ``apply_chat_template(..., tokenize=True)`` counts them:
    it renders, then calls the tokenizer on the texts without special tokens (transformers 5.17). One batched
    call, on the texts already rendered for the key (so a miss does not render them twice)."""
    return [len(ids) for ids in tokenizer(texts, add_special_tokens=False)["input_ids"]]


def _key(tokenizer: Any, texts: list[str]) -> str | None:
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None or not hasattr(backend, "to_str"):
        return None
    try:
        state = backend.to_str()
    except Exception:  # a custom (Python) component refuses to serialise: nothing to key on
        return None
    import tokenizers
    import transformers

    h = hashlib.sha256()
    head = (FORMAT, transformers.__version__, tokenizers.__version__, type(tokenizer).__qualname__,
            str(getattr(backend, "encode_special_tokens", None)), state)  # fmt: skip
    for part in (*head, *texts):  # each part with its length first: no two lists of parts hash alike
        data = part.encode("utf-8", "surrogatepass")
        h.update(len(data).to_bytes(8, "little"))
        h.update(data)
    return h.hexdigest()


def _read(path: Path, n: int) -> list[int] | None:
    """The counts kept in ``path`` when it holds ``n`` of them, each a non-negative int; else None."""
    try:
        with open(path, encoding="utf-8") as fh:
            kept = json.load(fh)
    except (OSError, ValueError):  # missing, unreadable, not JSON or not UTF-8
        return None
    if not isinstance(kept, dict) or kept.get("format") != FORMAT or kept.get("n") != n:
        return None
    lengths = kept.get("lengths")
    if not isinstance(lengths, list) or len(lengths) != n:
        return None
    if not all(type(x) is int and x >= 0 for x in lengths):
        return None
    return lengths
