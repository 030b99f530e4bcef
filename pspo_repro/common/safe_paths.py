"""One rule for every name that becomes part of a results path, and the proof that a path stays under its root.

Model, method, tag and dataset names reach folder names from the command line, from config files and from
files on disk (a run.json's ``model``); all of them are untrusted. ``check_name`` accepts a name only when it
is one plain folder name (no separator, no ``.``/``..``, no control or non-ASCII character, not too long) and
does not hold a credential's value; ``results_path`` joins checked names under a root and proves the result
lies under it. Symlinks a user placed inside results/ are followed as usual: the proof is on the path as
written (after ``.``/``..`` normalisation), which a checked name cannot change. No torch imports.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

NAME_RULE = "1-128 characters from A-Z a-z 0-9 _ . + - starting with a letter or digit"
_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.+-]{0,127}")


class UnsafePathError(ValueError):
    """A name cannot be part of a results path, or a path would leave its root; the message is one line."""


def _shown(text: str) -> str:
    """A short, printable rendering of a rejected value (long values cut, control characters escaped)."""
    return repr(text if len(text) <= 60 else text[:60] + "...")


def check_name(what: str, value: object, max_len: int = 128) -> str:
    """``value`` as a folder name when it follows ``NAME_RULE`` and holds no credential, else UnsafePathError.

    ``what`` names where the value came from (``run_tag``, ``model in <file>``) for the message.
    """
    from pspo_repro.common.redact import secret_names_in

    if isinstance(value, bool) or not isinstance(value, str | int):
        raise UnsafePathError(f"{what} must be a name ({NAME_RULE}), got {type(value).__name__} {value!r}")
    text = str(value)
    secrets = secret_names_in([text])
    if secrets:  # never echo the value: it is a credential
        raise UnsafePathError(
            f"{what} holds the value of {', '.join(secrets)}: a credential cannot name a results folder"
        )
    if not _NAME_RE.fullmatch(text) or len(text) > max_len:
        rule = NAME_RULE.replace("1-128", f"1-{max_len}")
        raise UnsafePathError(f"{what}={_shown(text)} cannot name a results folder: allowed {rule}")
    return text


def ensure_under(root: str | os.PathLike, path: str | os.PathLike, what: str = "path") -> Path:
    """``path`` unchanged when, made absolute and normalised, it lies strictly under ``root``; else
    UnsafePathError naming both."""
    r = Path(os.path.normpath(os.path.abspath(root)))
    p = Path(os.path.normpath(os.path.abspath(path)))
    if p == r or not p.is_relative_to(r):
        raise UnsafePathError(f"{what} {path} lies outside {r}")
    return Path(path)


def results_path(root: str | os.PathLike, *parts: tuple[str, object]) -> Path:
    """``root/<name>/<name>/...`` for ``parts`` given as ``(what, name)`` pairs, each checked by
    ``check_name``, the result proven to lie under ``root``."""
    names = [check_name(what, value) for what, value in parts]
    return ensure_under(root, Path(root).joinpath(*names), "results path")


def check_seed(what: str, value: object) -> int:
    """A seed from a file or a config as a non-negative integer below 2**32, else UnsafePathError."""
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise UnsafePathError(f"{what} must be an integer in [0, 4294967295], got {value!r}")
    text = str(value)
    if not (text.isascii() and text.isdigit()) or int(text) > 2**32 - 1:
        raise UnsafePathError(f"{what} must be an integer in [0, 4294967295], got {_shown(text)}")
    return int(text)


def seed_folder(seed: object, tag: object, what: str = "") -> str:
    """``seed{seed}[-{tag}]``, the seed and tag checked (``what`` prefixes the names in messages)."""
    s = check_seed(f"{what}seed", seed)
    t = str(tag or "")
    return f"seed{s}" + (f"-{check_name(f'{what}tag', t, max_len=100)}" if t else "")
