"""The method registry: ``@register_method(name)`` fills it; lookups fail loudly with the valid names.

A method is a plain function ``fn(logp, old_logp, advantages, mask, *, <extra tensors>, <hyperparams>)``.
Its signature is the schema: keyword-only parameters *without* defaults are extra input tensors the trainer
must supply (e.g. DPPO's top-K log-probs); keyword-only parameters *with* defaults are hyperparameters, the
keys of ``conf/method/<name>.yaml`` besides ``RESERVED_KEYS``, except the names in ``OPTIONAL_INPUTS``:
tensors the trainer passes when it has them (default ``None``).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple

from pspo_repro.common.names import did_you_mean, did_you_mean_each
from pspo_repro.methods.aggregation import AGGREGATION_MODES
from pspo_repro.methods.base import MethodOutput
from pspo_repro.methods.params import PARAM_RULES, check_param, check_param_order
from pspo_repro.methods.rollout_correction import NONE, RolloutCorrection, parse_rollout_correction

MethodFn = Callable[..., MethodOutput]

_POSITIONAL = ("logp", "old_logp", "advantages", "mask")
# Keys of conf/method/*.yaml that are read by the trainer, not passed to the method function.
RESERVED_KEYS = ("name", "loss_agg", "num_iterations")
# The rollout-correction axis (``methods.rollout_correction``): optional keys of a method config, read by the
# trainer like ``loss_agg``; conf/train.yaml sets them to these defaults for every method.
ROLLOUT_KEYS: dict[str, Any] = {
    "rollout_correction": "none",
    "rollout_correction_threshold": None,
    "rollout_correction_batch_normalize": False,
}
# Optional tensor inputs (keyword default None). ``importance_sampling_ratio``: the rollout correction's token IS
# weight [B, T] (``methods.rollout_correction``); a method that takes it applies it itself (VESPO, as TRL with
# vLLM's ratio), and the trainer then does not multiply the per-token loss by it. ``entropies``: the current
# policy's per-token entropy [B, T] at the sampling temperature, detached (ASPO, Archer, ERC).
# ``old_entropies``: the same for the policy that sampled, stored at rollout beside the old log-probs (ERC).
OPTIONAL_INPUTS = ("importance_sampling_ratio", "entropies", "old_entropies")


@dataclass(frozen=True)
class MethodSpec:
    """A registered method and what its signature says about it."""

    name: str
    fn: MethodFn
    defaults: dict[str, Any]  # hyperparameter -> default
    extra_inputs: tuple[str, ...]  # required extra tensor keywords
    optional_inputs: tuple[str, ...] = ()  # OPTIONAL_INPUTS the method accepts


_REGISTRY: dict[str, MethodSpec] = {}

# Other names of registered methods, for the command line: ``conf/method/<alias>.yaml`` composes the target's
# config (a defaults list naming it), so ``method=kimi15`` runs ``dro`` with dro's parameters and run folder. An
# alias is no registry entry: ``list_methods()`` (and so the leaderboard's sweep) never holds it.
METHOD_ALIASES: dict[str, str] = {
    "kimi15": "dro",  # Kimi k1.5 (arXiv 2501.12599; ROLL pg_variant="kimi15"): dro with dro_beta = kimi15_tau
    "kimi_k25": "dppo_k25",  # Kimi K2.5's squared log-ratio term (arXiv 2602.02276) as prime-rl's default loss
}


def register_method(name: str) -> Callable[[MethodFn], MethodFn]:
    """Decorator registering ``fn`` under ``name``; a duplicate name or a malformed signature raises."""

    def decorator(fn: MethodFn) -> MethodFn:
        if name in _REGISTRY:
            raise ValueError(f"method {name!r} is already registered (by {_REGISTRY[name].fn.__module__})")
        if name in METHOD_ALIASES:
            raise ValueError(f"method {name!r} is an alias of {METHOD_ALIASES[name]!r}; choose another name")
        params = list(inspect.signature(fn).parameters.values())
        head = tuple(p.name for p in params[: len(_POSITIONAL)])
        if head != _POSITIONAL:
            raise TypeError(f"method {name!r} must start with parameters {_POSITIONAL}, got {head}")
        defaults: dict[str, Any] = {}
        extra: list[str] = []
        optional: list[str] = []
        for p in params[len(_POSITIONAL) :]:
            if p.kind is not inspect.Parameter.KEYWORD_ONLY:
                raise TypeError(f"method {name!r}: parameter {p.name!r} must be keyword-only")
            if p.name in OPTIONAL_INPUTS:
                if p.default is not None:
                    raise TypeError(f"method {name!r}: optional input {p.name!r} must default to None")
                optional.append(p.name)
            elif p.default is inspect.Parameter.empty:
                extra.append(p.name)
            elif p.name not in PARAM_RULES:
                raise TypeError(
                    f"method {name!r}: hyperparameter {p.name!r} has no rule in params.PARAM_RULES"
                )
            elif p.name in RESERVED_KEYS or p.name in ROLLOUT_KEYS:
                raise TypeError(f"method {name!r}: {p.name!r} is a reserved config key")
            else:
                defaults[p.name] = p.default
        _REGISTRY[name] = MethodSpec(name, fn, defaults, tuple(extra), tuple(optional))
        return fn

    return decorator


def list_methods() -> list[str]:
    """Sorted names of all registered methods."""
    return sorted(_REGISTRY)


def method_aliases() -> dict[str, str]:
    """Alias -> registered name (``METHOD_ALIASES``), sorted by alias."""
    return dict(sorted(METHOD_ALIASES.items()))


def get_spec(name: str) -> MethodSpec:
    """The registered spec of ``name`` (or of the method an alias names); an unknown name raises ValueError
    listing the valid ones."""
    try:
        return _REGISTRY[METHOD_ALIASES.get(name, name)]
    except KeyError:
        aliases = ", ".join(f"{a} ({t})" for a, t in method_aliases().items())
        raise ValueError(
            f"unknown method {name!r}; {did_you_mean(name, [*list_methods(), *METHOD_ALIASES])}"
            f"valid methods: {', '.join(list_methods())}; aliases: {aliases}"
        ) from None


def get_method(name: str) -> MethodFn:
    """The callable ``(logp, old_logp, advantages, mask, **params) -> MethodOutput`` registered as ``name``."""
    return get_spec(name).fn


def method_extra_inputs(name: str) -> tuple[str, ...]:
    """Extra tensor keywords ``name`` requires (empty for all but the top-K DPPO variants)."""
    return get_spec(name).extra_inputs


def method_optional_inputs(name: str) -> tuple[str, ...]:
    """Optional tensor keywords (``OPTIONAL_INPUTS``) ``name`` accepts, e.g. VESPO's importance_sampling_ratio."""
    return get_spec(name).optional_inputs


def validate_params(name: str, params: Mapping[str, Any]) -> dict[str, Any]:
    """Return ``params`` completed with the method's defaults; raise a one-line ValueError on a bad entry.

    Call once at start-up (the method functions themselves do not validate: they are the hot path).
    """
    spec = get_spec(name)
    unknown = sorted(set(params) - set(spec.defaults))
    if unknown:
        allowed = ", ".join(sorted(spec.defaults)) or "none"
        hint = did_you_mean_each(unknown, spec.defaults)
        raise ValueError(
            f"method {name!r}: unknown parameter(s) {', '.join(unknown)}; {hint}allowed: {allowed}"
        )
    full = {**spec.defaults, **params}
    for key, value in full.items():
        check_param(name, key, value)
    check_param_order(name, full)
    return full


class MethodConfig(NamedTuple):
    """A ``conf/method/<name>.yaml`` split into what the method gets and what the trainer reads."""

    name: str
    params: dict[str, Any]  # validated, defaults applied: pass as **params
    loss_agg: str
    num_iterations: int
    rollout_correction: RolloutCorrection = NONE  # parsed ROLLOUT_KEYS


def parse_method_config(cfg: Mapping[str, Any]) -> MethodConfig:
    """Split and validate a method config (a plain mapping, e.g. ``OmegaConf.to_container(cfg.method)``)."""
    cfg = dict(cfg)
    missing = [k for k in RESERVED_KEYS if k not in cfg]
    if missing:
        raise ValueError(f"method config lacks required key(s) {', '.join(missing)}")
    name, loss_agg, num_iterations = (cfg.pop(k) for k in RESERVED_KEYS)
    rollout = parse_rollout_correction(*(cfg.pop(k, default) for k, default in ROLLOUT_KEYS.items()))
    if loss_agg not in AGGREGATION_MODES:
        raise ValueError(
            f"method config: loss_agg={loss_agg!r} is invalid; {did_you_mean(loss_agg, AGGREGATION_MODES)}"
            f"allowed: {', '.join(AGGREGATION_MODES)}"
        )
    if not isinstance(num_iterations, int) or isinstance(num_iterations, bool) or num_iterations < 1:
        raise ValueError(
            f"method config: num_iterations={num_iterations!r} is invalid; allowed: an integer >= 1"
        )
    return MethodConfig(name, validate_params(name, cfg), loss_agg, num_iterations, rollout)
