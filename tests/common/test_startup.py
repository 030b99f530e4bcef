"""``common.startup.import_frozen``: a command's heavy imports with the garbage collector paused, then frozen."""

from __future__ import annotations

import gc
import sys

import pytest

from pspo_repro.common.startup import EVALUATION_STACK, SFT_STACK, TRAINING_STACK, import_frozen


@pytest.fixture
def collector_state():
    """Put the collector back as the test found it (enabled, its frozen set as conftest left it)."""
    enabled = gc.isenabled()
    yield
    gc.enable() if enabled else gc.disable()


@pytest.mark.parametrize("enabled", [True, False])
def test_the_collector_is_left_as_it_was(collector_state, enabled):
    gc.enable() if enabled else gc.disable()
    import_frozen(("colorsys",))
    assert "colorsys" in sys.modules and gc.isenabled() is enabled


def test_an_import_error_leaves_the_collector_running(collector_state):
    gc.enable()
    with pytest.raises(ModuleNotFoundError, match="no_such_module_here"):
        import_frozen(("json", "no_such_module_here"))
    assert gc.isenabled()


def test_what_is_alive_is_frozen(collector_state):
    made = [[i] for i in range(1000)]  # tracked objects made after conftest's freeze
    before = gc.get_freeze_count()
    import_frozen(())
    assert gc.get_freeze_count() >= before + len(made)


def test_the_stacks_name_importable_modules():
    """Every name is a real module (a typo would fail every command at start-up, not silently)."""
    import importlib.util

    for name in {*TRAINING_STACK, *SFT_STACK, *EVALUATION_STACK}:
        assert importlib.util.find_spec(name) is not None, name
