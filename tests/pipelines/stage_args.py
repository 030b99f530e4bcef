"""A stage's command-line arguments read back as the stage's Hydra would: each override's key and the value
its config will hold (after OmegaConf's own reading of the text, so an escaped ``\\${`` is the text ``${``)."""

from __future__ import annotations

from typing import Any

from hydra.core.override_parser.overrides_parser import OverridesParser
from omegaconf import OmegaConf


def _as_config(value: Any) -> Any:
    """A parsed override value as the config will hold it."""
    return OmegaConf.to_container(OmegaConf.create({"v": value}), resolve=True)["v"]


def _value(parser: OverridesParser, override: Any) -> Any:
    """An override's value; a sweep's as the list of its jobs' values (each job's override re-parsed, as
    Hydra's basic sweeper does)."""
    if not override.is_sweep_override():
        return _as_config(override.value())
    return [_as_config(parser.parse_override(f"k={s}").value()) for s in override.sweep_string_iterator()]


def parsed(args: list[str], unique: bool = True) -> dict[str, Any]:
    """``{key: value}`` of ``args`` (one override each; with ``unique`` a key given twice fails the caller's
    test, else the last one counts, as in Hydra)."""
    parser = OverridesParser.create()
    overrides = parser.parse_overrides([a for a in args if not a.startswith("-")])
    keys = [o.key_or_group if not o.package else f"{o.key_or_group}@{o.package}" for o in overrides]
    keys = [
        ("++" if o.is_force_add() else "+" if o.is_add() else "") + k
        for o, k in zip(overrides, keys, strict=True)
    ]
    assert not unique or len(set(keys)) == len(keys), f"a key given twice: {keys}"
    return {k: _value(parser, o) for k, o in zip(keys, overrides, strict=True)}
