"""Settings passed to a stage's command line as data: Hydra overrides rendered by Hydra's override grammar.

A pipeline (the mini's stages, the ladder's rungs, the leaderboard) hands each stage its settings as
``key=value`` arguments. A value pasted between quotes can close them (``64','out_dir=/x'`` is three
overrides), so every value goes through ``override``: text is bare where Hydra reads it as that text, else one quoted string (Hydra's own
``QuotedString.with_quotes`` escapes its quotes and backslashes; an ``${`` is escaped for OmegaConf, so it
stays text, not an interpolation), lists and dicts are rendered element by element, numbers, booleans and
null as themselves. ``sweep`` renders a multirun choice, ``primitive`` reads a config author's sweep text
(``"1e-4,3e-4"``) by the same grammar. No torch imports.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

# A key as the override grammar's key rule takes it (a dot path, optionally ``+``/``++``/``~`` and a group's
# ``/``), and a dict key inside a value (the grammar's dictKey takes no quotes: plain names only).
_KEY_RE = re.compile(r"^(?:\+\+|\+|~)?[A-Za-z_$][A-Za-z0-9_$\-]*(?:[./][A-Za-z0-9_$][A-Za-z0-9_$\-]*)*$")
_DICT_KEY_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_\-]*$")
# Backslashes right before ``${``: OmegaConf reads ``\${`` as a literal ``${`` and ``\\`` there as one ``\``.
_INTERP_RE = re.compile(r"(\\*)\$\{")
_BARE_RE = re.compile(r"[A-Za-z0-9_.+\-/@%*?|]+")


def _bare(value: str) -> bool:
    """Whether Hydra reads ``value`` written bare as this very text (``clip``, ``/a/b``): then it needs no
    quotes, and the stages' own checks of the raw arguments read it as before."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    # Only characters that mean the same inside a list or dict as at the top (no backslash, space, colon, $).
    if not _BARE_RE.fullmatch(value):
        return False
    try:
        parsed = OverridesParser.create().parse_override(f"k={value}")
    except Exception:  # Hydra's grammar errors come in several types: not bare text then
        return False
    return not parsed.is_sweep_override() and type(parsed.value()) is str and parsed.value() == value


def _text(value: str) -> str:
    """``value`` as Hydra text that OmegaConf keeps as this very text: bare where Hydra reads it so, else
    single-quoted (Hydra's ``QuotedString.with_quotes``) with any ``${`` escaped for OmegaConf."""
    from hydra.core.override_parser.types import Quote, QuotedString

    if _bare(value):
        return value
    literal = _INTERP_RE.sub(lambda m: m.group(1) * 2 + "\\${", value)
    return QuotedString(text=literal, quote=Quote.single).with_quotes()


def render(value: Any) -> str:
    """``value`` (None, bool, int, float, str, Path, or a list/tuple/dict of them) as a Hydra override value
    that parses back to exactly that value; ValueError for anything else (a dict key that is not a name)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return (
            repr(value)
            if math.isfinite(value)
            else ("nan" if math.isnan(value) else ("inf" if value > 0 else "-inf"))
        )
    if isinstance(value, str | Path):
        return _text(str(value))
    if isinstance(value, Mapping):
        bad = [k for k in value if not (isinstance(k, str) and _DICT_KEY_RE.match(k))]
        if bad:
            raise ValueError(f"dict key {bad[0]!r} is not allowed in an override value; allowed: plain names")
        return "{" + ",".join(f"{k}:{render(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list | tuple):
        return "[" + ",".join(render(v) for v in value) + "]"
    raise ValueError(f"{value!r} ({type(value).__name__}) cannot be an override value; allowed: "
                     "null, bool, int, float, text, or a list/dict of them")  # fmt: skip


def check_key(key: str) -> str:
    """``key`` if it is an override key (``a.b``, ``+a.b``, ``hydra/launcher``), else ValueError naming it."""
    if not isinstance(key, str) or not _KEY_RE.match(key):
        raise ValueError(f"override key {key!r} is not allowed; allowed: a dotted name like trainer.seed")
    return key


def override(key: str, value: Any) -> str:
    """One Hydra override ``key=value`` with ``value`` rendered by ``render`` (it arrives as that value)."""
    return f"{check_key(key)}={render(value)}"


def sweep(key: str, values: Iterable[Any]) -> str:
    """A multirun override ``key=v1,v2,...`` (Hydra's choice sweep), each value rendered by ``render``."""
    values = list(values)
    if not values:
        raise ValueError(f"sweep of {key!r} has no values; allowed: one or more")
    return f"{check_key(key)}={','.join(render(v) for v in values)}"


def primitive(what: str, text: Any) -> Any:
    """``text`` read as one Hydra primitive (``1e-4`` a float, ``clip`` a string, as Hydra reads a bare value)
    when it is a plain word or number; ValueError naming ``what`` otherwise (a quote, comma, bracket,
    ``=``, space or ``${`` would be override syntax, not one value)."""
    if not isinstance(text, str):
        return text
    if not re.fullmatch(r"[A-Za-z0-9_.+\-/]+", text):
        raise ValueError(f"{what}={text!r}: a sweep value must be a plain word or number "
                         "(letters, digits, _ . + - /); give other values as a list")  # fmt: skip
    from hydra.core.override_parser.overrides_parser import OverridesParser

    return OverridesParser.create().parse_rule(text, "primitive")


def quoted_text(value: str) -> str | None:
    """The text a quoted override value (``'a b'``, as ``render`` writes it) stands for, None when ``value``
    is not one quoted string (a sweep, a list, an interpolation, or not Hydra's grammar at all)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    try:
        parsed = OverridesParser.create().parse_override(f"k={value}")
    except Exception:  # Hydra's grammar errors come in several types: not one quoted string then
        return None
    text = parsed.value()
    if parsed.is_sweep_override() or type(text) is not str or not value.startswith(("'", '"')):
        return None
    runs = [len(m.group(1)) for m in _INTERP_RE.finditer(text)]
    if any(n % 2 == 0 for n in runs):  # an unescaped ``${``: a live interpolation, not one text
        return None
    # OmegaConf's reading of the escapes ``_text`` wrote: 2k+1 backslashes before ``${`` are k and a literal.
    return _INTERP_RE.sub(lambda m: m.group(1)[: len(m.group(1)) // 2] + "${", text)
