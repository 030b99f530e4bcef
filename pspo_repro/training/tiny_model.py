"""A tiny Qwen2-architecture model with a locally trained tokenizer, built once with no network.

It stands in for the paper's Qwen models on CPU machines: the same architecture class, chat template
and special tokens, so training, the hf backend and the vLLM backend all run the code paths used at
scale. Head dimension is 64 because vLLM's CPU attention requires it.

Tokenizer pitfall (transformers 5.x): ``AutoTokenizer`` on a ``qwen2`` folder builds ``Qwen2Tokenizer``,
which re-installs Qwen2's pre-tokenizer regex. We train the BPE with exactly that pre-tokenizer and
normaliser, so token ids survive a save/load round trip.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import random
import shutil
import tempfile
from pathlib import Path

from pspo_repro.common.paths import cache_dir
from pspo_repro.data.prompts import PAPER_SYSTEM_PROMPT

TINY_ARCH = {
    "hidden_size": 64,
    "intermediate_size": 256,
    "num_hidden_layers": 2,
    "num_attention_heads": 1,
    "num_key_value_heads": 1,
    "head_dim": 64,
    "max_position_embeddings": 2048,
    "rope_theta": 10000.0,
    "tie_word_embeddings": True,
}
TINY_VOCAB_SIZE = 2048
SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
# Qwen2.5's chat template, less its tool-calling branches (we never pass tools).
CHAT_TEMPLATE = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)
_BUILD_VERSION = "1"  # bump when anything above changes: it is part of the cache key

_WORDS = (
    "the a an and of to in is are was were has have had each every total how many much more less than "
    "left after before gives gave buys bought sells sold makes made eats ate finds found per day week "
    "hour minute dollars cents apples oranges books pencils cookies marbles students friends boxes bags "
    "cars miles times twice half double she he they it her his their them we you there then so if what "
    "Tom Anna Ben Mia Sam Lily Jack Emma Noah Zoe John Mary James Sarah cost costs price pays paid spent "
    "spend earns earned saves saved money number numbers step steps answer final first second third "
    "add plus minus subtract multiply divide equals sum difference product quotient remaining altogether "
    "Let us compute We need to find Therefore The So Thus"
).split()


def _corpus(seed: int = 0, n: int = 3000) -> list[str]:
    """Deterministic training text for the BPE: the system prompt, arithmetic and word-problem shapes."""
    rng = random.Random(seed)
    lines = [PAPER_SYSTEM_PROMPT] * 20
    for _ in range(n):
        a, b = rng.randint(0, 999), rng.randint(0, 999)
        op = rng.choice(["+", "-", "*", "/"])
        words = " ".join(rng.choice(_WORDS) for _ in range(rng.randint(4, 14)))
        lines.append(f"{words} {a} {op} {b} = {a + b}.\n#### {rng.randint(0, 9999)}")
        lines.append(f"{rng.choice(_WORDS).capitalize()} has {a} {rng.choice(_WORDS)}. {words}?")
    return lines


def _build_tokenizer():
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, normalizers, pre_tokenizers, trainers
    from tokenizers.models import BPE
    from transformers import PreTrainedTokenizerFast
    from transformers.models.qwen2.tokenization_qwen2 import PRETOKENIZE_REGEX

    tok = Tokenizer(BPE(unk_token=None, continuing_subword_prefix="", end_of_word_suffix="", fuse_unk=False))
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(PRETOKENIZE_REGEX), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=TINY_VOCAB_SIZE,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(_corpus(), trainer=trainer)
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in SPECIAL_TOKENS])
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        unk_token=None,
        chat_template=CHAT_TEMPLATE,
        padding_side="left",
        model_max_length=TINY_ARCH["max_position_embeddings"],
    )


def _key(seed: int) -> str:
    blob = json.dumps([_BUILD_VERSION, TINY_ARCH, TINY_VOCAB_SIZE, SPECIAL_TOKENS, CHAT_TEMPLATE, seed])
    return hashlib.sha256(blob.encode()).hexdigest()[:12]


def build_tiny_model(out_dir: str | os.PathLike, seed: int = 0) -> Path:
    """Train the tokenizer, build a randomly initialised tiny Qwen2 model, save both to ``out_dir``."""
    import torch
    from transformers import AutoTokenizer, GenerationConfig, Qwen2Config, Qwen2ForCausalLM

    out_dir = Path(out_dir)
    tokenizer = _build_tokenizer()
    config = Qwen2Config(
        vocab_size=len(tokenizer),
        bos_token_id=None,
        eos_token_id=tokenizer.convert_tokens_to_ids("<|im_end|>"),
        pad_token_id=tokenizer.pad_token_id,
        **TINY_ARCH,
    )
    torch.manual_seed(seed)
    model = Qwen2ForCausalLM(config)
    model.generation_config = GenerationConfig(
        eos_token_id=[config.eos_token_id, tokenizer.convert_tokens_to_ids("<|endoftext|>")],
        pad_token_id=tokenizer.pad_token_id,
    )
    model.save_pretrained(out_dir, safe_serialization=True)
    tokenizer.save_pretrained(out_dir)
    # The round-trip check the pitfall calls for: reload through AutoTokenizer and compare ids.
    reloaded = AutoTokenizer.from_pretrained(out_dir)
    probe = PAPER_SYSTEM_PROMPT + " Tom has 12 apples, 3.5 cents!\n#### 1,234"
    if (
        reloaded(probe)["input_ids"] != tokenizer(probe)["input_ids"]
        or reloaded.decode(reloaded(probe)["input_ids"]) != probe
    ):
        raise RuntimeError(f"tiny tokenizer does not survive a save/load round trip in {out_dir}")
    return out_dir


def tiny_model_path(seed: int = 0) -> Path:
    """Path of the cached tiny model, building it first if needed (safe across concurrent processes)."""
    root = cache_dir() / "models"
    target = root / f"tiny-{_key(seed)}"
    if (target / "model.safetensors").exists():
        return target
    root.mkdir(parents=True, exist_ok=True)
    with open(root / ".tiny.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (target / "model.safetensors").exists():
            tmp = Path(tempfile.mkdtemp(prefix=".tiny-", dir=root))
            try:
                build_tiny_model(tmp, seed=seed)
                with contextlib.suppress(FileNotFoundError):
                    shutil.rmtree(target)
                os.replace(tmp, target)
            finally:
                shutil.rmtree(tmp, ignore_errors=True)
    return target


if __name__ == "__main__":
    print(tiny_model_path())
