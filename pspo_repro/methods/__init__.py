"""Trust-region methods for GRPO, one module each, behind a registry; aggregation is a separate axis.

Usage (the trainer)::

    cfg = parse_method_config(method_yaml)                 # name, validated params, loss_agg, num_iterations
    out = get_method(cfg.name)(logp, old_logp, adv, mask, **extra_tensors, **cfg.params)
    loss = aggregate(out.per_token_loss, mask, cfg.loss_agg, num_items=..., max_completion_length=...,
                     accumulation_steps=...)

``method_extra_inputs(name)`` names the extra tensors a method needs (top-K DPPO only);
``method_optional_inputs(name)`` those it takes when the trainer has them (VESPO's importance_sampling_ratio,
ASPO's, Archer's and ERC's entropies, ERC's old_entropies).
"""

import importlib
import pkgutil

from pspo_repro.methods.aggregation import AGGREGATION_MODES, aggregate
from pspo_repro.methods.base import LOG_RATIO_CLAMP, MethodOutput
from pspo_repro.methods.registry import (
    METHOD_ALIASES,
    OPTIONAL_INPUTS,
    RESERVED_KEYS,
    ROLLOUT_KEYS,
    MethodConfig,
    get_method,
    get_spec,
    list_methods,
    method_aliases,
    method_extra_inputs,
    method_optional_inputs,
    parse_method_config,
    register_method,
    validate_params,
)

# Importing every module of the package registers the methods it defines (``@register_method``), so a new
# method file joins the registry with no edit here (docs/adding_a_method.md); order is irrelevant: names are
# unique and listed sorted.
for _module in pkgutil.iter_modules(__path__):
    importlib.import_module(f"{__name__}.{_module.name}")

__all__ = [
    "AGGREGATION_MODES",
    "LOG_RATIO_CLAMP",
    "METHOD_ALIASES",
    "OPTIONAL_INPUTS",
    "RESERVED_KEYS",
    "ROLLOUT_KEYS",
    "MethodConfig",
    "MethodOutput",
    "aggregate",
    "get_method",
    "get_spec",
    "list_methods",
    "method_aliases",
    "method_extra_inputs",
    "method_optional_inputs",
    "parse_method_config",
    "register_method",
    "validate_params",
]
