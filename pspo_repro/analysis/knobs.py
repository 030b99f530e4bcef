"""A method's own knobs as its runs record them, whether the records sweep them, and where each value
comes from.

A knob is a key of a run's ``config.method`` (run.json) other than the settings every method shares
(``SHARED_KEYS``: the registry's ``RESERVED_KEYS``, read by the trainer, not by the method). A knob is
swept in the records when the method's finished runs hold two or more values of it. A method none of whose
knobs is swept ran at foreign defaults: values set for another model or scale, never retuned here. Where a
value comes from is the comment beside it in ``conf/method/<name>.yaml`` when the run used that file's
value; a run that used another value got it from its experiment config, and says so.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from pspo_repro.common.paths import CONF_DIR

# pspo_repro.methods.registry.RESERVED_KEYS (not imported: analysis stays free of torch); a test keeps
# the two equal.
SHARED_KEYS = ("name", "loss_agg", "num_iterations")
_LINE = re.compile(r"^(?P<key>[A-Za-z_]\w*):[^#]*#\s*(?P<comment>.*?)\s*$")


@dataclass
class Knobs:
    """One method's knobs over its runs: ``values`` (knob -> sorted distinct values, as text) and the
    ``source`` of each value the runs used (text)."""

    method: str
    values: dict[str, list[str]] = field(default_factory=dict)
    source: dict[str, str] = field(default_factory=dict)

    @property
    def swept(self) -> list[str]:
        """The knobs with two or more values in the records."""
        return [k for k, v in self.values.items() if len(v) > 1]

    @property
    def at_foreign_defaults(self) -> bool | None:
        """True when no knob is swept; None when the method has no knob of its own."""
        return None if not self.values else not self.swept


def _text(v: Any) -> str:
    return f"{v:g}" if isinstance(v, float) else str(v)


def conf_defaults(method: str, conf_dir: Path = CONF_DIR) -> tuple[dict[str, Any], dict[str, str]]:
    """``conf/method/<method>.yaml``'s values and the comment beside each (empty when there is no file)."""
    path = conf_dir / "method" / f"{method}.yaml"
    if not path.is_file():
        return {}, {}
    text = path.read_text(encoding="utf-8")
    values = yaml.safe_load(text) or {}
    comments = {m["key"]: m["comment"] for line in text.splitlines() if (m := _LINE.match(line))}
    return values, comments


def method_knobs(method: str, configs: list[dict[str, Any]], conf_dir: Path = CONF_DIR) -> Knobs:
    """The knobs of ``method`` over the ``config.method`` dicts of its runs, with their sources."""
    out = Knobs(method)
    seen: dict[str, set[str]] = {}
    for cfg in configs:
        for k, v in cfg.items():
            if k not in SHARED_KEYS:
                seen.setdefault(k, set()).add(_text(v))
    out.values = {k: sorted(v) for k, v in sorted(seen.items())}
    defaults, comments = conf_defaults(method, conf_dir)
    where = f"conf/method/{method}.yaml"
    for k, vals in out.values.items():
        if k not in defaults:
            out.source[k] = f"not in {where}"
            continue
        default = _text(defaults[k])
        parts = []
        if default in vals:
            parts.append(f"{where}: {comments[k]}" if k in comments else f"{where} (no comment)")
        if other := [v for v in vals if v != default]:
            parts.append(f"{'/'.join(other)} set by the experiment (not {where}'s {default})")
        out.source[k] = " + ".join(parts)
    return out


def run_method_configs(infos: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The ``config.method`` of each run.json in ``infos``, as the one reader of run records read them
    (``run_records.RunRecord.info``: ``config.method`` checked to be a mapping)."""
    return [dict((info.get("config") or {}).get("method") or {}) for info in infos]
