"""Benchmark: the prompt-length filter's token counts, counted afresh (every training run before) against read
back from the cache (``pspo_repro.training.prompt_lengths``), side by side.

    PSPO_DATA_DIR=../shared/data .venv/bin/python scripts/bench_prompt_lengths.py [--rounds 5] [-- overrides]

The prompts are those a training run of ``conf/train.yaml`` counts (default ``model=tiny``: GSM8K's training
split with the paper's template, the tiny model's tokenizer). Each round, in alternating order, counts them
afresh (``apply_chat_template(..., tokenize=True)``, the call every run made before), and asks the cache: a miss (an empty cache
folder: count, then keep) and a hit (read back). One tokenizer thread (``TOKENIZERS_PARALLELISM=false``, as
in the tests). Prints the median CPU seconds of each and the ratios, and checks the three give the same counts.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from pathlib import Path

os.environ["TOKENIZERS_PARALLELISM"] = "false"  # before the tokenizer loads: one thread, CPU = the work


def cpu() -> float:
    t = os.times()
    return t.user + t.system


def _afresh(tokenizer, chats) -> list[int]:
    """What every training run counted before the cache: the library renders and tokenizes in one call."""
    ids = tokenizer.apply_chat_template(chats, add_generation_prompt=True, tokenize=True, return_dict=False)
    return [len(x) for x in ids]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("overrides", nargs="*", default=["model=tiny"], help="conf/train.yaml overrides")
    args = ap.parse_args(argv)

    from hydra import compose, initialize_config_dir

    from pspo_repro.common.paths import CONF_DIR
    from pspo_repro.data.prompts import build_messages
    from pspo_repro.training import grpo
    from pspo_repro.training import prompt_lengths as pl
    from pspo_repro.training.models import load_tokenizer

    with initialize_config_dir(str(CONF_DIR), version_base=None):
        cfg = compose("train", args.overrides)
    tokenizer = load_tokenizer(cfg.model)
    train, _ = grpo.load_data(cfg)
    chats = [build_messages(p.question, cfg.data.prompt_template) for p in train]
    print(f"{len(chats)} prompts ({cfg.data.name}, template {cfg.data.prompt_template}), {type(tokenizer).__name__}"
          f" of {len(tokenizer)} tokens; {args.rounds} rounds")  # fmt: skip

    seconds: dict[str, list[float]] = {"afresh": [], "cache miss": [], "cache hit": []}
    reference = None
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):
            folder = Path(tmp) / f"round{r}"
            order = (
                ["afresh", "cache miss", "cache hit"] if r % 2 == 0 else ["cache miss", "cache hit", "afresh"]
            )
            for kind in order:
                start = cpu()
                got = (
                    _afresh(tokenizer, chats)
                    if kind == "afresh"
                    else pl.prompt_lengths(tokenizer, chats, folder)
                )
                seconds[kind].append(cpu() - start)
                reference = got if reference is None else reference
                if got != reference:
                    print(f"MISMATCH: {kind} in round {r} gave other counts", file=sys.stderr)
                    return 1
    base = statistics.median(seconds["afresh"])
    for kind, values in seconds.items():
        med = statistics.median(values)
        print(f"{kind:>10}: median {med:.3f} CPU s = {med / base:.2f} x afresh")
    print("same counts: yes (every round, all three)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
