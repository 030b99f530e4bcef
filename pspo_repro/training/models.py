"""Load the policy and its tokenizer from a model config (``conf/model/*.yaml``).

Three sources, in order: ``path`` (a local folder), ``hub_id`` (the hub or its local cache), and for the
tiny model ``pspo_repro.training.tiny_model.tiny_model_path()``. ``random_init: true`` builds the architecture
stored in the yaml (``arch``) with random weights instead: with no hub, it is how real-size runs measure
speed and memory; such a model is never used for accuracy. Its tokenizer is ``tokenizer`` if given, else
the tiny tokenizer (its ids are a subset of Qwen's vocabulary size, so the embedding table stays real-size).
TRL's colocated vLLM builds its engine from ``model.name_or_path``, which a config-built model lacks:
``save_random_init`` stores such a model + tokenizer in the run folder and points ``name_or_path`` there.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

from pspo_repro.common.names import did_you_mean_after
from pspo_repro.training.tiny_model import tiny_model_path


def model_source(model_cfg: Any) -> str:
    """The folder or hub id the weights come from (without loading anything)."""
    if model_cfg.get("path"):
        return str(Path(model_cfg.path).expanduser())
    if model_cfg.get("hub_id"):
        return str(model_cfg.hub_id)
    return str(tiny_model_path())


def hub_model_id(model_cfg: Any) -> str | None:
    """The hub id the weights or the tokenizer load from (None when both are local folders or the tiny model)."""
    if not model_cfg.get("path") and model_cfg.get("hub_id") and not model_cfg.get("random_init"):
        return str(model_cfg.hub_id)
    tok = model_cfg.get("tokenizer")
    if tok and not Path(str(tok)).expanduser().is_dir():
        return str(tok)
    return None


def hub_model_hint(hub_id: str) -> str:
    """What to do when a hub model cannot be loaded: a local copy, named with ``model.path``."""
    return (
        f"download {hub_id} where the hub is reachable (hf download {hub_id} --local-dir <folder>) and pass "
        "model.path=<local folder>"
    )


def tokenizer_source(model_cfg: Any) -> str:
    """Where the tokenizer comes from: ``tokenizer``, else the weights' source (tiny for random init)."""
    if model_cfg.get("tokenizer"):
        return str(model_cfg.tokenizer)
    if model_cfg.get("random_init") and not model_cfg.get("path"):
        return str(tiny_model_path())
    return model_source(model_cfg)


# Parameter dtypes that keep AdamW's small updates: at the paper's learning rates (5e-7 to 1e-6) most
# updates are below half a bf16 ulp and round away (measured on CPU: 20 AdamW steps at lr 1e-6 change
# about 2% of bf16 weights, 100% of fp32 ones), so training keeps fp32 master weights and gets bf16
# speed from autocast (TRL's ``bf16=True``), as the authors did (transformers 4.55 loaded fp32 by default).
FULL_PRECISION = ("float32", "float64")
LOW_PRECISION = ("bfloat16", "float16")


def resolve_dtype(name: str | None, use_cuda: bool, training: bool = False):
    """The torch dtype parameters load in. ``auto``: float32 for training (fp32 master weights; bf16 comes
    from autocast), bfloat16 for evaluation on CUDA, float32 on CPU; otherwise the named torch dtype."""
    import torch

    if name in (None, "auto"):
        return torch.bfloat16 if use_cuda and not training else torch.float32
    return getattr(torch, name)


def train_dtype_name(model_cfg: Any) -> str:
    """The parameter dtype training loads, by name, checked without torch.

    ``model.train_dtype`` (an explicit opt-in, any dtype) wins; else ``model.dtype``, where ``auto`` means
    float32. A dtype below float32 without the opt-in raises ValueError (one line naming ``model.dtype``).
    """
    allowed = ("auto", *FULL_PRECISION, *LOW_PRECISION)
    name = model_cfg.get("dtype") or "auto"
    if name not in allowed:  # checked with the opt-in too: a dtype no loader takes is a typo either way
        raise ValueError(
            f"model.dtype must be one of {', '.join(allowed)}, got {name!r}{did_you_mean_after(name, allowed)}"
        )
    opt_in = model_cfg.get("train_dtype")
    if opt_in is not None:
        if opt_in not in allowed[1:]:
            raise ValueError(
                f"model.train_dtype must be null or one of {', '.join(allowed[1:])}, got {opt_in!r}"
            )
        return str(opt_in)
    if name in LOW_PRECISION:
        raise ValueError(
            f"model.dtype={name} would train {name} parameters, whose AdamW updates at lr ~1e-6 mostly round "
            f"away; use model.dtype=auto (fp32 weights, bf16 autocast via trainer.bf16) or opt in with "
            f"model.train_dtype={name}"
        )
    return "float32" if name == "auto" else str(name)


def load_tokenizer(model_cfg: Any):
    """The model's tokenizer; the EOS token doubles as padding when it has none."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(
        tokenizer_source(model_cfg), trust_remote_code=bool(model_cfg.get("trust_remote_code", False))
    )
    if tok.pad_token is None:  # GRPOTrainer pads prompts and completions
        tok.pad_token = tok.eos_token
    return tok


def load_model(model_cfg: Any, tokenizer, use_cuda: bool, training: bool = False):
    """The causal LM: pretrained from its source, or randomly initialised from ``arch``.

    ``training``: parameters in ``train_dtype_name(model_cfg)`` (fp32 unless opted out), else
    ``resolve_dtype(model.dtype)`` (bf16 on CUDA for ``auto``).
    """
    from transformers import AutoConfig, AutoModelForCausalLM

    if training:
        dtype = resolve_dtype(train_dtype_name(model_cfg), use_cuda, training=True)
    else:
        dtype = resolve_dtype(model_cfg.get("dtype"), use_cuda)
    kwargs: dict[str, Any] = {"trust_remote_code": bool(model_cfg.get("trust_remote_code", False))}
    if model_cfg.get("attn_implementation"):
        kwargs["attn_implementation"] = model_cfg.attn_implementation
    if not model_cfg.get("random_init"):
        # safetensors only: a pickled checkpoint (pytorch_model.bin) can run code when loaded
        return AutoModelForCausalLM.from_pretrained(
            model_source(model_cfg), dtype=dtype, use_safetensors=True, **kwargs
        )
    arch = dict(model_cfg.arch)
    model_type = arch.pop("model_type")
    if arch.get("vocab_size", 0) < len(tokenizer):
        raise ValueError(f"model.arch.vocab_size={arch.get('vocab_size')} < tokenizer size {len(tokenizer)}")
    config = AutoConfig.for_model(
        model_type,
        **arch,
        bos_token_id=None,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    model = AutoModelForCausalLM.from_config(config, dtype=dtype, **kwargs)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    return model


RANDOM_INIT_DIR = "random_init_model"


def save_random_init(model, tokenizer, run_folder: Path) -> Path:
    """Save a randomly initialised ``model`` + ``tokenizer`` to ``<run_folder>/random_init_model/``
    (safetensors) and set ``model.name_or_path`` to it, so TRL's colocated vLLM can load the architecture.

    The folder appears whole or not at all (written beside it, then renamed): an existing one is reused,
    and when several processes of one launch race, the first rename wins and the others drop theirs.
    Its weights matter little: TRL copies the policy's weights into vLLM before the first generation.
    """
    target = Path(run_folder) / RANDOM_INIT_DIR
    if not (target / "config.json").is_file():
        tmp = target.with_name(f".{RANDOM_INIT_DIR}.{os.getpid()}")
        shutil.rmtree(tmp, ignore_errors=True)
        model.save_pretrained(tmp, safe_serialization=True)
        tokenizer.save_pretrained(tmp)
        try:
            os.rename(tmp, target)
        except OSError:  # another process renamed its copy first
            if not (target / "config.json").is_file():
                raise
            shutil.rmtree(tmp, ignore_errors=True)
    model.config.name_or_path = str(target)
    model.name_or_path = str(target)  # a plain attribute in transformers 5 (copied from the config at init)
    return target


EMULATED_BF16 = (
    "bf16 autocast on a CPU without AVX512-BF16 or AMX: its bf16 matmuls are emulated, and the RL step ran "
    "1.6x slower than fp32 (docs/benchmarks.md, 'The RL step across model sizes'); trainer.bf16=false "
    "trains in fp32, with other numerics"
)


def native_bf16_cpu() -> bool:
    """Whether this CPU multiplies bf16 in hardware (x86 AVX512-BF16 or AMX; other architectures are not
    judged: True). Without it oneDNN emulates bf16 GEMMs and autocast costs time instead of saving it."""
    import platform

    import torch

    if platform.machine().lower() not in ("x86_64", "amd64"):
        return True
    return bool(torch.cpu._is_avx512_bf16_supported() or torch.cpu._is_amx_tile_supported())
