"""Test-wide settings: offline hubs, a temp results folder, one torch thread, and the tiny model."""

from __future__ import annotations

import gc
import importlib
import os
import re
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("WANDB_MODE", "disabled")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# One torch thread in every command a test starts, too: two xdist workers already fill the two cores, and a
# two-thread child beside them spends its cycles in OpenMP's spin-waits (measured: 18% less CPU on the
# fault, gpu_check and rehearse files). Tests of the thread setting pass their own value.
os.environ.setdefault("OMP_NUM_THREADS", "1")

SHARED_DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
if "PSPO_DATA_DIR" not in os.environ and SHARED_DATA.is_dir():
    os.environ["PSPO_DATA_DIR"] = str(SHARED_DATA)

# A relative PSPO_DATA_DIR (PSPO_DATA_DIR=../shared/data make test) means the folder seen from where pytest
# started; tests run commands from other folders, so make it absolute now (as importing pspo_repro does).
from pspo_repro.common.paths import absolutize_env  # noqa: E402

absolutize_env()

# Hydra's config files parsed once per test process, each load a deep copy (tests/hydra_memo.py).
import hydra_memo  # noqa: E402

hydra_memo.install()


@pytest.fixture(scope="session", autouse=True)
def _one_thread():
    import torch

    torch.set_num_threads(1)


@pytest.fixture
def results_root(tmp_path, monkeypatch):
    """A fresh results folder for the test; ``PSPO_RESULTS_DIR`` points at it."""
    root = tmp_path / "results"
    monkeypatch.setenv("PSPO_RESULTS_DIR", str(root))
    return root


@pytest.fixture(scope="session")
def tiny_model_dir():
    """Path of the locally built tiny Qwen2 model (built once per cache)."""
    from pspo_repro.training.tiny_model import tiny_model_path

    return tiny_model_path()


@pytest.fixture(scope="session")
def data_dir():
    """The offline benchmark folder (``PSPO_DATA_DIR``); tests that need it fail loudly without it."""
    value = os.environ.get("PSPO_DATA_DIR")
    if not value or not Path(value).is_dir():
        pytest.fail("PSPO_DATA_DIR is not set to the offline data folder (../shared/data)")
    return Path(value)


@pytest.fixture(scope="session")
def entry_main():
    """``entry_main("train")``: the ``main`` that ``python -m pspo_repro.train`` runs, read from the thin
    entry module (which only imports and calls it under its main guard)."""
    package = Path(__file__).resolve().parents[1] / "pspo_repro"

    def resolve(name: str):
        source = (package / f"{name}.py").read_text()
        found = re.search(r"^\s+from (pspo_repro\.[\w.]+) import main$", source, re.M)
        assert found, f"pspo_repro/{name}.py does not run a main"
        return importlib.import_module(found.group(1)).main

    return resolve


@pytest.hookimpl(hookwrapper=True)
def pytest_collection(session):
    """Collect with the cyclic garbage collector paused, then freeze what collection made (gc.freeze).

    Collecting imports torch, transformers, TRL, pandas and every test module and builds ~2,500 items; the
    collector's full passes over that growing heap were half of the collection's CPU (13.2 -> 7.0 CPU s in one
    process; each xdist worker collects)."""
    from pspo_repro.common.startup import frozen_after

    with frozen_after():  # a hookwrapper's yield does not raise: collection's end is always frozen
        yield


def pytest_runtest_setup(item):
    """Before each test: collect the earlier tests' cyclic garbage, then freeze what is still alive (gc.freeze).

    A full collection walks every object the collector tracks, and a worker holds torch, transformers, TRL and
    every earlier test's survivors: ~0.3 s a collection. Each training run starts with one (transformers'
    Trainer calls accelerate's ``free_memory``, which calls ``gc.collect()``), and Python's own
    generation-2 collections walk the same heap. Frozen, they walk only what the running test made:
    tests/training/test_train_slow.py 66.4 -> 57.1 s in one process, back to back. A frozen object that a later test
    drops is freed as usual unless it sits in a reference cycle (then it stays: a few MB per worker).
    """
    gc.collect()
    gc.freeze()


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    """Under pytest-xdist (``make test`` runs 3 workers with ``--dist loadgroup``), the tests that submit to
    the one local Slurm cluster run in one worker, one after another, as they did before.

    First among the hooks: pytest-xdist's worker reads the ``xdist_group`` marks in its own hook, which runs
    before this file's otherwise (this conftest is registered before the worker's plugin, and pluggy calls
    the last registered first), so the Slurm tests were split over the workers by file."""
    for item in items:
        if item.get_closest_marker("slurm"):
            item.add_marker(pytest.mark.xdist_group("slurm"))
    # The Slurm tests first: their chain (~6 minutes, mostly waiting on jobs) then runs beside the rest on
    # its own worker from the start, instead of starting a third of the way in and ending last.
    items.sort(key=lambda item: item.get_closest_marker("slurm") is None)


def pytest_configure(config):
    """Refuse ``--dist loadgroup`` where pytest-xdist cannot name a test's group: xdist 3.8 appends the group to
    ``item._nodeid``, which pytest 9.2 no longer reads. The groups would be split over the workers silently: the
    Slurm tests sharing the one node at once, a grouped fixture built once per worker."""
    if config.getoption("dist", "no") != "loadgroup":
        return
    from _pytest.nodes import Node

    probe = object.__new__(Node)
    probe._nodeid = "probe@group"
    try:
        seen = probe.nodeid
    except AttributeError:
        seen = None
    if seen != "probe@group":
        raise pytest.UsageError(
            f"pytest-xdist's --dist loadgroup does not work with pytest {pytest.__version__} (the groups would be "
            "split over the workers): install pyproject.toml's dev pins (make env)"
        )
