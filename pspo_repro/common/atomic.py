"""Atomic file writes: a reader (or a job killed mid-write) never sees a half-written result."""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import re
import secrets
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import IO, Any


@contextlib.contextmanager
def atomic_open(path: str | os.PathLike, mode: str = "w", **kwargs: Any) -> Iterator[IO]:
    """Open a temp file beside ``path``; on success fsync and ``os.replace`` it into place.

    On any exception the temp file is removed and the previous ``path`` (if any) is left intact;
    the exception is re-raised with the target path named.
    """
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    except OSError as exc:  # a read-only or missing folder: name the target, not the temp file
        raise OSError(exc.errno, f"writing {path} failed: {exc.strerror or exc}", str(path)) from exc
    try:
        with os.fdopen(fd, mode, **kwargs) as fh:
            yield fh
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException as exc:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        if isinstance(exc, OSError):  # also when os.replace fails: name the target, not the temp file
            raise OSError(exc.errno, f"writing {path} failed: {exc.strerror or exc}", str(path)) from exc
        if isinstance(exc, Exception):
            exc.add_note(f"while writing {path} (previous file left intact)")
        raise


def write_text(path: str | os.PathLike, text: str) -> None:
    """Atomically write ``text`` to ``path``."""
    with atomic_open(path, "w", encoding="utf-8") as fh:
        fh.write(text)


def write_json(path: str | os.PathLike, obj: Any) -> None:
    """Atomically write ``obj`` as indented, key-sorted JSON."""
    with atomic_open(path, "w", encoding="utf-8") as fh:
        json.dump(obj, fh, indent=2, sort_keys=True)
        fh.write("\n")


# ---------------------------------------------------------------- a set of files switched as one

SET_JOURNAL = ".write-set.json"
# A temp file of atomic_open (".<name>.<8 random>.tmp") and a staged file of write_set (".<name>.<id>.staged").
_TMP_RE = re.compile(r"^\.(?P<name>.+)\.[A-Za-z0-9_]{8}\.tmp$")
_STAGED_RE = re.compile(r"^\.(?P<name>.+)\.[0-9a-f]{12}\.staged$")


@contextlib.contextmanager
def _folder_lock(folder: Path) -> Iterator[None]:
    """An exclusive ``flock`` on the folder itself (no lock file is left among the outputs)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError as exc:
        raise OSError(exc.errno, f"writing into {folder} failed: {exc.strerror or exc}", str(folder)) from exc
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock


STALE_DIR = "stale"  # where write_set moves the files of the previous set that the new one does not have
_PLAIN_RE = re.compile(r"[A-Za-z0-9][^/\\\x00-\x1f]{0,254}")


def _plain_name(name: object) -> bool:
    """A file name directly in the folder: no separator, not hidden, not ``.``/``..``, no control character."""
    return isinstance(name, str) and _PLAIN_RE.fullmatch(name) is not None


def set_aside(folder: Path, names: list[str]) -> list[str]:
    """Move each of ``names`` that is a regular file in ``folder`` (not a link, not a folder) into
    ``folder/stale/`` (replacing an older file of that name there); returns the names moved. Idempotent, so a
    recovery may repeat it."""
    moved = []
    for name in names:
        src = folder / name
        if not _plain_name(name) or src.is_symlink() or not src.is_file():
            continue
        (folder / STALE_DIR).mkdir(exist_ok=True)
        os.replace(src, folder / STALE_DIR / name)
        moved.append(name)
    return moved


def recover_set(folder: str | os.PathLike, stale_suffixes: tuple[str, ...] = ()) -> list[str]:
    """Finish a ``write_set`` that a kill interrupted while switching (its journal lists every staged file:
    each one still there is moved into place; and the previous set's files to set aside: each one still there
    is moved into ``stale/``), then delete stale temporaries left by kills: staged files and ``atomic_open``
    temp files of names ending in ``stale_suffixes``. Returns the names it changed. Call it with the folder
    locked (``write_set`` does)."""
    folder = Path(folder)
    done = []
    journal = folder / SET_JOURNAL
    if journal.is_file():
        try:
            record = json.loads(journal.read_text(encoding="utf-8"))
            names, aside = record["files"], record.get("aside", [])
        except (OSError, ValueError, KeyError, TypeError):
            names, aside = {}, []  # a torn journal: written atomically, so only a hand edit; nothing switched
        for name, staged in sorted(names.items()):
            if Path(name).name == name not in ("", ".", "..") and (folder / staged).is_file():
                os.replace(folder / staged, folder / name)
                done.append(name)
        done += set_aside(folder, [n for n in aside if n not in names])
        journal.unlink()
    for p in sorted(folder.iterdir()) if folder.is_dir() else []:
        m = _STAGED_RE.match(p.name) or _TMP_RE.match(p.name)
        ours = m and (m.re is _STAGED_RE or m["name"] == SET_JOURNAL)
        if m and p.is_file() and (ours or m["name"].endswith((*stale_suffixes, ".staged"))):
            p.unlink()
            done.append(p.name)
    return done


def recover_folder(folder: str | os.PathLike, stale_suffixes: tuple[str, ...] = ()) -> None:
    """``recover_set`` on ``folder`` with it locked (nothing to do when it does not exist): afterwards the
    folder holds one whole set, whose record (e.g. a summary listing it) can be read."""
    folder = Path(folder)
    if folder.is_dir():
        with _folder_lock(folder):
            recover_set(folder, stale_suffixes)


def write_set(
    files: dict[Path, str | bytes], stale_suffixes: tuple[str, ...] = (), aside: Iterable[str] = ()
) -> None:
    """Write ``files`` (path -> text or bytes, all in one folder) so the folder holds either the previous
    set or the new one as a whole, even under SIGKILL.

    Each file is first written beside its target as a hidden staged file (atomically); then a journal
    naming every staged file is written (atomically), the staged files are moved into place and the journal
    is removed. A kill before the journal leaves the previous set (the staged files are stale temporaries);
    a kill after it is finished by the next ``write_set`` or ``recover_set`` on the folder, which also
    deletes stale temporaries. The folder is locked meanwhile, so two writers do not interleave.

    ``aside``: names of the previous set's files (in the same folder) that the new set does not have; the
    switch moves them into ``stale/`` (``set_aside``), so the folder never shows two sets side by side.
    """
    if not files:
        return
    folders = {Path(p).parent for p in files}
    if len(folders) != 1:
        raise ValueError(f"write_set writes into one folder, got {sorted(map(str, folders))}")
    (folder,) = folders
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise OSError(exc.errno, f"writing into {folder} failed: {exc.strerror or exc}", str(folder)) from exc
    with _folder_lock(folder):
        recover_set(folder, stale_suffixes)
        run_id = secrets.token_hex(6)
        staged: dict[str, str] = {}
        try:
            for path, content in sorted(files.items()):
                path = Path(path)
                stage = folder / f".{path.name}.{run_id}.staged"
                try:
                    if isinstance(content, bytes):
                        with atomic_open(stage, "wb") as fh:
                            fh.write(content)
                    else:
                        write_text(stage, content)
                except OSError as exc:  # name the target, not the staged file
                    cause = exc.__cause__ if isinstance(exc.__cause__, OSError) else exc
                    raise OSError(
                        exc.errno, f"writing {path} failed: {cause.strerror or cause}", str(path)
                    ) from exc
                staged[path.name] = stage.name
        except BaseException:
            for name in staged.values():  # an error (not a kill): the previous set stays, no temporaries
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(folder / name)
            raise
        stale = sorted(n for n in set(aside) if n not in staged)
        aside_dir = folder / STALE_DIR
        if stale and (aside_dir.is_symlink() or (aside_dir.exists() and not aside_dir.is_dir())):
            for name in staged.values():  # refused before the journal: the previous set stays whole
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(folder / name)
            raise OSError(errno.ENOTDIR, f"{aside_dir} is not a folder, so the previous set's extra files "
                          "cannot be set aside there; move or rename it", str(aside_dir))  # fmt: skip
        write_json(folder / SET_JOURNAL, {"run_id": run_id, "files": staged, "aside": stale})
        try:
            recover_set(folder, stale_suffixes)  # the switch itself: journal -> every file in place
        except OSError as exc:
            raise OSError(exc.errno, f"switching the outputs in {folder} failed: {exc.strerror or exc}; "
                          "rerun to finish it", str(folder)) from exc  # fmt: skip
