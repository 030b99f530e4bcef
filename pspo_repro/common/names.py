"""The closest allowed name to a typo, for every error about a name looked up from a closed set.

``did_you_mean("pspp", methods)`` is ``"did you mean pspo? "`` (or ``""`` when nothing is close): the
messages put it before the list of what is allowed, so ``method=pspp`` reads its fix first and still sees
all 33 options. Closeness is ``difflib.get_close_matches``' ratio, at 0.7 rather than its default 0.6: at
0.6 a word that is no name at all (``method=nope``) got ``did you mean noclip?``, while the typos of a
letter or two that the hint is for score 0.75 or more. Imports nothing of the package.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from typing import Any

CUTOFF = 0.7  # difflib's similarity ratio a suggestion needs (module doc)


def closest(value: Any, allowed: Iterable[Any]) -> str | None:
    """The allowed name closest to ``value`` (None when ``value`` is not text or nothing is close)."""
    if not isinstance(value, str):
        return None
    options = [str(a) for a in allowed]
    matches = difflib.get_close_matches(value, options, n=1, cutoff=CUTOFF)
    return matches[0] if matches else None


def did_you_mean(value: Any, allowed: Iterable[Any]) -> str:
    """``"did you mean X? "`` for the name closest to ``value``, ``""`` when none is close."""
    match = closest(value, allowed)
    return f"did you mean {match}? " if match else ""


def did_you_mean_each(values: Iterable[Any], allowed: Iterable[Any]) -> str:
    """``did_you_mean`` for several unknown names at once: ``"did you mean pspo for pspp, clip for clp? "``
    (one name: as ``did_you_mean``; only the names with a close match are named)."""
    values, options = list(values), [str(a) for a in allowed]
    if len(values) == 1:
        return did_you_mean(values[0], options)
    pairs = [(closest(v, options), v) for v in values]
    named = [f"{match} for {v}" for match, v in pairs if match]
    return f"did you mean {', '.join(named)}? " if named else ""


def did_you_mean_after(value: Any, allowed: Iterable[Any]) -> str:
    """``did_you_mean`` for a message that ends with the bad value (``"... got 'grup'"``): ``"; did you
    mean group?"``, ``""`` when nothing is close."""
    hint = did_you_mean(value, allowed).rstrip()
    return f"; {hint}" if hint else ""
