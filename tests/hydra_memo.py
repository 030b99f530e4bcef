"""A memo of Hydra's config-file loads for the test processes (installed by tests/conftest.py).

Hydra parses every YAML file of a config again for each composition, and a command composes three times (our
override check, Hydra's ``get_mode``, its run). The tests compose ~1,300 times in their own processes (the
bad-input catalogue, every method x model, the grids' commented commands), and parsing was about a third of
each composition. The memo keeps a file's first load while its path, size, modification time and inode are
unchanged and hands each load a deep copy, as a fresh parse would be: Hydra takes the ``defaults`` out of
what it loads. ``tests/common/test_hydra_memo.py`` composes every entry point's config with the memo and
without and compares. The commands the tests start as processes load their files as shipped.
"""

from __future__ import annotations

import copy
import dataclasses
import os
from typing import Any

from hydra._internal.sources_registry import SourcesRegistry
from hydra.core.plugins import Plugins

# The classes Hydra uses: its plugin scan executes the core plugins' modules again, so the classes an import of
# them would give are not the ones it registered.
Plugins.instance()
_SOURCES = (SourcesRegistry.instance().resolve("file"), SourcesRegistry.instance().resolve("pkg"))
_ORIGINAL = {cls: cls.load_config for cls in _SOURCES}
_MEMO: dict[tuple, Any] = {}


def _key(source: Any, config_path: str) -> tuple | None:
    """What identifies one load: the file and its stat for a folder, the package and name for a package's
    files (installed, unchanging); None when the file is missing (Hydra raises its own error)."""
    name = source._normalize_file_name(config_path)
    if source.scheme() == "file":
        full = os.path.realpath(os.path.join(source.path, name))
        try:
            st = os.stat(full)
        except OSError:
            return None
        return ("file", full, st.st_size, st.st_mtime_ns, st.st_ino)
    return ("pkg", source.path, name)


def _load_config(self: Any, config_path: str) -> Any:
    key = _key(self, config_path)
    if key is None:
        return _ORIGINAL[type(self)](self, config_path)
    first = _MEMO.get(key)
    if first is None:
        first = _MEMO[key] = _ORIGINAL[type(self)](self, config_path)
    return dataclasses.replace(first, config=copy.deepcopy(first.config), header=dict(first.header))


def install() -> None:
    """Serve Hydra's file and package config loads from the memo."""
    for cls in _SOURCES:
        cls.load_config = _load_config


def uninstall() -> None:
    """Hydra's own loads again, and the memo emptied."""
    for cls, original in _ORIGINAL.items():
        cls.load_config = original
    _MEMO.clear()


def installed() -> bool:
    """Whether the memo serves the loads now."""
    return all(cls.load_config is _load_config for cls in _SOURCES)
