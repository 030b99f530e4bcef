"""A command's start-up: import the ML stack it is about to use with Python's cyclic garbage collector paused,
then freeze what the imports made (``gc.freeze``).

Why: importing torch, transformers and TRL makes ~770,000 objects that the collector tracks, and its full
passes walk all of them, over and over while they load (a sizeable share of a command's start), and again at every
``gc.collect()`` afterwards (transformers' Trainer calls one through accelerate's ``free_memory`` when it
starts training, TRL more). Frozen objects are skipped by every later pass, and never freed: the modules
live as long as the process anyway, and the imports' own cyclic garbage (~10,700 objects, ~8 MB for the
training stack) stays too, rather than paying a full collection to free it. scripts/bench_startup.py
measures it side by side (its figures: docs/benchmarks.md): less CPU for a training and an evaluation command,
the same numbers.

Each command calls this only once its input has passed validation and work is pending, so a refused
override, a dry run or a finished run still exits before TRL and the model code load, as before.
"""

from __future__ import annotations

import contextlib
import gc
import importlib
from collections.abc import Iterator

# The modules each kind of command imports to do its work (loading them is most of its start).
TRAINING_STACK = (
    "torch",
    "transformers.models.auto.modeling_auto",
    "transformers.models.auto.tokenization_auto",
    "trl.trainer.grpo_trainer",
    "datasets",
    "pandas",
)
SFT_STACK = (
    "torch",
    "transformers.models.auto.modeling_auto",
    "transformers.models.auto.tokenization_auto",
    "trl.trainer.sft_trainer",
    "datasets",
)
EVALUATION_STACK = (
    "torch",
    "transformers.models.auto.modeling_auto",
    "transformers.models.auto.tokenization_auto",
)


@contextlib.contextmanager
def frozen_after() -> Iterator[None]:
    """Run the block with the cyclic garbage collector paused (restored as it was, also when the block raises),
    then ``gc.freeze()`` every object alive, unless the block raised: later collections skip them."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()
    gc.freeze()


def import_frozen(modules: tuple[str, ...]) -> None:
    """Import ``modules`` with the collector paused, then freeze what is alive (``frozen_after``)."""
    with frozen_after():
        for name in modules:
            importlib.import_module(name)
