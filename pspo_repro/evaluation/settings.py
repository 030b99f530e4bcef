"""The ``evaluate`` command's settings checks, read in one place: every setting that can be checked before
a model loads or a cell is started (``evaluation.evaluator`` runs them first).

``validate`` checks the data sets, temperatures, sample and token counts (with upper bounds that catch a
typo such as ``n_samples=1e9``), backend and device choices, ``top_p``/``eval.top_k``, the prompt template
and ``eval.limit``; ``_precheck_argv`` catches an unknown ``eval=<name>`` before Hydra. Each problem is an
:class:`EvalError`: one line naming the setting, the value and what is allowed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from pspo_repro.common.cli import check_number
from pspo_repro.common.names import did_you_mean, did_you_mean_after
from pspo_repro.common.paths import CONF_DIR
from pspo_repro.data.datasets import DATASETS, get_spec
from pspo_repro.data.problems import DataError
from pspo_repro.data.user_sets import UserSet, looks_like_source
from pspo_repro.evaluation.cells import cell_name


class EvalError(ValueError):
    """Bad evaluation input; the message is one line."""


def _number(key: str, value: Any, kind: type = float) -> Any:
    """``value`` as a finite number of ``kind`` (int: no fractional part; a string that spells one is read as
    it), else a one-line EvalError (``cli.check_number``)."""
    return check_number(key, value, kind, text=True, error=EvalError)


# Upper bounds checked before anything loads: a typo such as n_samples=1e9 would otherwise pass as an
# integer, load the model and generate for ever. 1024 samples per prompt is 64 times the paper's 16 and
# already ~1.3M completions for GSM8K's 1319 prompts (every one is kept in the cell's completions file);
# 32768 tokens is the longest context of the models this project trains (Qwen2.5's max_position_embeddings).
# A loadable checkpoint is held to its own context later (``check_context``), still before it loads.
MAX_SAMPLES = 1024
MAX_NEW_TOKENS = 32768
LIMIT_WHY = {
    "n_samples": " (samples per prompt at T > 0; the paper uses 16)",
    "max_new_tokens": " (the longest context of this project's models)",
}
# Parameter dtypes both backends take (hf's table, and names vLLM reads the same way).
EVAL_DTYPES = ("auto", "float32", "bfloat16", "float16")
DEVICES = ("auto", "cpu", "cuda")
ATTN_IMPLEMENTATIONS = ("eager", "sdpa")  # or null: transformers' default


def _check_choice(key: str, value: Any, allowed: tuple[str, ...]) -> None:
    """``value`` must be one of ``allowed`` (a one-line EvalError naming the key, the value and the list)."""
    if not isinstance(value, str) or value not in allowed:
        raise EvalError(
            f"{key} must be one of {', '.join(allowed)}, got {value!r}{did_you_mean_after(value, allowed)}"
        )


def user_set_of(cfg: Any) -> UserSet | None:
    """The user's own set of ``eval=<source>`` (conf/eval/user.yaml: ``eval.source``), None without one."""
    if "source" not in cfg.eval.keys():
        return None
    try:
        return UserSet.from_config(cfg.eval, "eval", str(cfg.eval.split))
    except DataError as exc:
        raise EvalError(str(exc)) from None


def validate(cfg: Any) -> tuple[list[str], list[float]]:
    """Dataset names (a user set's last) and temperatures after checking every setting (raises EvalError)."""
    datasets = list(cfg.eval.datasets) if isinstance(cfg.eval.datasets, Sequence) else [cfg.eval.datasets]
    for name in datasets:
        get_spec(name)  # unknown names list the allowed ones
    user = user_set_of(cfg)
    if user is not None:
        if user.name in DATASETS or user.name in datasets:
            raise EvalError(
                f"eval.name {user.name!r} is a built-in set's name; name your set otherwise (eval.name=<name>)"
            )
        datasets.append(user.name)
    if not datasets:
        raise EvalError("eval.datasets is empty")
    raw_temps = cfg.temperatures if isinstance(cfg.temperatures, Sequence) else [cfg.temperatures]
    temps = [_number("temperature", t) for t in raw_temps]
    if not temps:
        raise EvalError("temperatures is empty")
    for t in temps:
        if t < 0:
            raise EvalError(f"temperature must be >= 0, got {t}")
    for t in temps:
        # Cells are filed as T{t:.1f}.json and read back by that name: 0.25 would land in T0.2.json and
        # pass for a T = 0.2 cell, so a temperature the name cannot hold exactly is refused.
        if float(f"{t:.1f}") != t:
            raise EvalError(
                f"temperature {t:g} cannot be filed exactly (cells are named T{{t:.1f}}.json, it would be "
                f"{cell_name(t)}.json); allowed: multiples of 0.1 such as 0.0, 0.2, 0.8"
            )
    labels = [f"{t:.1f}" for t in temps]
    if len(set(labels)) != len(labels):
        raise EvalError(f"temperatures collide at one decimal (file names use T{{t:.1f}}): {temps}")
    for key, high in (("n_samples", MAX_SAMPLES), ("max_new_tokens", MAX_NEW_TOKENS)):
        v = _number(key, cfg[key], int)
        if not 1 <= v <= high:
            raise EvalError(f"{key} must be a positive integer <= {high}{LIMIT_WHY[key]}, got {cfg[key]!r}")
    for key in ("chunk_size", "batch_size", "sampling_seed"):
        if key == "chunk_size" and cfg[key] is None:
            continue  # the backend's default (CHUNK_SIZE)
        v = _number(key, cfg[key], int)
        if v < (0 if key == "sampling_seed" else 1):
            raise EvalError(
                f"{key} must be a {'non-negative' if key == 'sampling_seed' else 'positive'} integer, got {v}"
            )
    max_model_len = cfg.vllm.get("max_model_len")
    if max_model_len is not None and _number("vllm.max_model_len", max_model_len, int) < 1:
        raise EvalError(f"vllm.max_model_len must be a positive integer or null, got {max_model_len}")
    _check_choice("vllm.dtype", cfg.vllm.get("dtype", "auto"), EVAL_DTYPES)
    _check_choice("dtype", cfg.get("dtype", "auto"), EVAL_DTYPES)
    if cfg.get("attn_implementation") is not None:
        _check_choice("attn_implementation", cfg.attn_implementation, ATTN_IMPLEMENTATIONS)
    _check_choice("device", cfg.device, DEVICES)
    if not 0 < _number("top_p", cfg.top_p) <= 1:
        raise EvalError(f"top_p must be in (0, 1], got {cfg.top_p}")
    top_k = cfg.eval.get("top_k")
    if top_k is not None and _number("eval.top_k", top_k, int) < 1:
        raise EvalError(f"eval.top_k must be a positive integer or null (no top-k filter), got {top_k}")
    from pspo_repro.data.prompts import TEMPLATES

    if str(cfg.prompt_template) not in TEMPLATES:
        raise EvalError(
            f"unknown prompt_template {cfg.prompt_template!r}; {did_you_mean(str(cfg.prompt_template), TEMPLATES)}"
            f"allowed: {', '.join(sorted(TEMPLATES))}"
        )
    if cfg.eval.limit is not None and _number("eval.limit", cfg.eval.limit, int) < 1:
        raise EvalError(f"eval.limit must be a positive integer or null, got {cfg.eval.limit}")
    sources_of(cfg)
    if not isinstance(cfg.get("allow_foreign_checkpoint", False), bool):
        raise EvalError(
            f"allow_foreign_checkpoint must be true or false, got {cfg.allow_foreign_checkpoint!r}"
        )
    return datasets, temps


def _precheck_argv(argv: list[str]) -> None:
    """Catch a missing ``eval=<name>`` group file before Hydra (whose error spans several lines)."""
    for arg in argv:
        if arg.startswith("eval="):
            name = arg.split("=", 1)[1]
            if not (CONF_DIR / "eval" / f"{name}.yaml").is_file() and not looks_like_source(name):
                allowed = sorted(p.stem for p in (CONF_DIR / "eval").glob("*.yaml"))
                raise EvalError(
                    f"unknown eval config {name!r}; {did_you_mean(name, allowed)}allowed: {', '.join(allowed)}"
                )


def numerics_of(cfg: Any) -> dict[str, str]:
    """The hf backend's ``dtype`` and ``attn_implementation`` where they are not its defaults (``auto``: bf16 on
    CUDA, fp32 on CPU; null: transformers' attention); {} otherwise. vLLM takes its own ``vllm.dtype``."""
    out = {}
    if str(cfg.get("dtype", "auto")) != "auto":
        out["dtype"] = str(cfg.dtype)
    if cfg.get("attn_implementation"):
        out["attn_implementation"] = str(cfg.attn_implementation)
    return out


def sources_of(cfg: Any) -> dict[str, str]:
    """``eval.sources``: {dataset: a local .jsonl/.parquet file or a hub id ``owner/name[:config]``} for the
    datasets read from somewhere other than their default (PSPO_DATA_DIR, else the hub); null entries are
    the default. A key that is no dataset of the sweep, or a value that is not a string, is an EvalError."""
    raw = cfg.eval.get("sources") or {}
    if not isinstance(raw, Mapping):
        raise EvalError(f"eval.sources must be a mapping of dataset name to a file or hub id, got {raw!r}")
    datasets = list(cfg.eval.datasets) if isinstance(cfg.eval.datasets, Sequence) else [cfg.eval.datasets]
    out = {}
    for name, value in raw.items():
        if name not in datasets:
            raise EvalError(f"eval.sources.{name}: {name!r} is not in eval.datasets ({', '.join(datasets)})")
        if value is None:
            continue
        if not isinstance(value, str) or not value.strip():
            raise EvalError(f"eval.sources.{name} must be a local file or a hub id, got {value!r}")
        out[str(name)] = value.strip()
    return out
