"""One rule for every name that becomes part of a results path, and the proof that a path stays under its root.

Model, method, tag and dataset names reach folder names from the command line, from config files and from
files on disk (a run.json's ``model``); all of them are untrusted. ``check_name`` accepts a name only when it
is one plain folder name (no separator, no ``.``/``..``, no control or non-ASCII character, not too long) and
does not hold a credential's value; ``results_path`` joins checked names under a root and proves the result
lies under it, both as written (after ``.``/``..`` normalisation) and after following symlinks: a link inside
results/ (``results/eval -> /elsewhere``) is written through only when it points back into the results folder
or into the folder ``PSPO_RESULTS_DIR`` names (``no_symlink_escape``); readers walk a results tree only
through ``tree_files``, which holds every link it meets to the same rule (docs/reliability.md, "One rule for
links"). File names a command derives from its options (``paired_<a>_vs_<b>_<metric>.md``) pass
``check_file_name``. No torch imports.
"""

from __future__ import annotations

import fnmatch
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
    ``check_name``, the result proven to lie under ``root`` (``<results>/runs``, ``<results>/eval``), and
    after following symlinks under the results folder ``root``'s parent (``no_symlink_escape``)."""
    names = [check_name(what, value) for what, value in parts]
    path = ensure_under(root, Path(root).joinpath(*names), "results path")
    return no_symlink_escape(Path(root).parent, path)


def _allowed_roots(top: str | os.PathLike) -> list[Path]:
    """Where a path under ``top`` may lead after symlinks: ``top`` itself (resolved: the results folder may
    be a link) and the folder ``PSPO_RESULTS_DIR`` names, the user's explicit choice."""
    roots = [Path(top).resolve()]
    if os.environ.get("PSPO_RESULTS_DIR"):
        roots.append(Path(os.environ["PSPO_RESULTS_DIR"]).expanduser().resolve())
    return roots


def no_symlink_escape(
    top: str | os.PathLike, path: str | os.PathLike, what: str = "", action: str = "write"
) -> Path:
    """``path`` unchanged when, after following every symlink on it (``Path.resolve``; parts that do not
    exist yet are taken as written), it still lies in ``top`` or in ``PSPO_RESULTS_DIR``; else
    UnsafePathError naming the link that leads out. Only paths that lie under ``top`` as written are
    checked: a folder the user names elsewhere (``out_dir=/tmp/x``) is theirs. The one link rule of a
    results tree, for writers (``action="write"``) and readers (``"read"``, through ``tree_files``) alike."""
    if action not in ("write", "read"):
        raise ValueError(f"action={action!r}: allowed write, read")
    top_abs = Path(os.path.normpath(os.path.abspath(top)))
    p = Path(os.path.normpath(os.path.abspath(path)))
    if not p.is_relative_to(top_abs):
        return Path(path)
    roots = _allowed_roots(top_abs)

    def inside(q: Path) -> bool:
        return any(q == r or q.is_relative_to(r) for r in roots)

    if inside(p.resolve()):
        return Path(path)
    link, cur = p, top_abs
    for part in p.relative_to(top_abs).parts:
        cur = cur / part
        if cur.is_symlink() and not inside(cur.resolve()):
            link = cur
            break
    prefix = f"{what} " if what else ""
    hint = (
        "remove the link, or set PSPO_RESULTS_DIR to the folder to write into"
        if action == "write"
        else "a results tree is read only inside itself: move the target in, or remove the link"
    )
    where = f"{prefix}{path}: " if link != p else prefix  # the link itself: named once
    raise UnsafePathError(
        f"{where}{link} is a symlink to {link.resolve()}, outside the results folder {roots[0]}: "
        f"refusing to {action} through it ({hint})"
    )


def tree_files(top: str | os.PathLike, folder: str | os.PathLike, pattern: str) -> list[Path]:
    """The files named like ``pattern`` (``fnmatch``: ``*.json``) anywhere under ``folder``, a folder of the
    results tree ``top``, sorted, as paths written through the tree: the one walk of every results reader.

    Every symlink met (``folder`` itself or a link above it inside ``top``, a folder or a file below) is
    held to ``no_symlink_escape(top, link, action="read")``: one that stays in the tree is followed, one
    whose target lies outside is refused (UnsafePathError naming the link), never passed over, so a linked
    method or seed folder cannot drop out of a table unseen. A link back to a folder that holds it (a loop)
    is refused too. A ``folder`` that does not exist holds no files."""
    folder = Path(folder)
    no_symlink_escape(top, folder, action="read")
    if not folder.is_dir():
        return []
    found: list[Path] = []

    def walk(here: Path, above: frozenset[Path]) -> None:
        try:
            with os.scandir(here) as entries:
                listed = sorted(entries, key=lambda e: e.name)
        except OSError as exc:  # an unreadable folder would drop its records from a table unseen
            raise UnsafePathError(f"{here}: cannot be read ({exc.strerror or exc})") from None
        for entry in listed:
            path = Path(entry.path)
            if entry.is_symlink():
                no_symlink_escape(top, path, action="read")
            if entry.is_dir():  # through a link that stays inside
                real = path.resolve()
                if real in above:
                    raise UnsafePathError(
                        f"{path} is a symlink to {real}, a folder that holds it: a loop in the results tree"
                    )
                walk(path, above | {real})
            elif entry.is_file() and fnmatch.fnmatchcase(entry.name, pattern):
                found.append(path)

    walk(folder, frozenset({folder.resolve()}))
    return sorted(found)


FILE_NAME_RULE = "1-200 characters from A-Z a-z 0-9 _ . + - @ starting with a letter or digit"
_FILE_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.+@-]{0,199}")


def check_file_name(what: str, name: object) -> str:
    """``name`` as one output file name (``FILE_NAME_RULE``: no separator, no ``.``/``..``, ``@`` allowed
    for metric names such as ``maj@16``), else UnsafePathError naming ``what``."""
    if not isinstance(name, str) or not _FILE_RE.fullmatch(name):
        raise UnsafePathError(
            f"{what}={_shown(str(name))} cannot name an output file: allowed {FILE_NAME_RULE}"
        )
    return name


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
