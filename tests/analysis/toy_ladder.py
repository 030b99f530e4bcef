"""A toy model-size ladder every part of ``analysis.scale`` can read in a second: per rung the records
conf/claims/scale.yaml measures (the lr sweep on seed 100 with its validation rewards, the tuned runs on seeds
0-2, the stale pair, the base's cells on both datasets), with a GR-PSPO - GRPO-clip gap set per rung."""

from __future__ import annotations

import random
from pathlib import Path

import toy_records as T

from pspo_repro.analysis.tuning import point_tag

MODEL = "mini_sft"
LRS = ("0.0001", "0.0003", "0.001")
PROMPTS = 40
ARMS = (("clip", {}), ("pspo", {}), ("noclip", {}), ("noclip", {"method.num_iterations": 2}))


def flags(key: str, p: float) -> list[int]:
    """Per-prompt greedy correctness with exactly ``round(p * PROMPTS)`` successes, shuffled per ``key``."""
    k = round(min(max(p, 0.0), 1.0) * PROMPTS)
    out = [1] * k + [0] * (PROMPTS - k)
    random.Random(key).shuffle(out)
    return out


def rung(root: Path, gap: float, held_gap: float = 0.0) -> Path:
    """One rung's records under ``root``: every method at base rate 0.3 (held-out 0.6), GR-PSPO ``gap`` above
    on the rewarded task (plus 2.5 points per seed above 1, so differences have a spread) and ``held_gap`` on
    the held-out skill; clip zeroes 5% of reuse-step gradients."""

    def rate(method: str, dataset: str, seed: int = 1) -> float:
        base = 0.3 if dataset == "synthetic" else 0.6
        lift = gap + 0.025 * (seed - 1) if dataset == "synthetic" else held_gap
        return base + lift * (method == "pspo")

    for dataset in T.DATASETS:
        T.cell(root, "baseline", 0, dataset, flags(f"base/{dataset}", 0.1 if dataset == "synthetic" else 0.6),
               model=MODEL)  # fmt: skip
    for method, point in ARMS:
        for i, lr in enumerate(LRS):
            tag = point_tag("tune", {**point, "trainer.learning_rate": lr})
            # validation reward peaks at 3e-4 for every arm: the tuned runs are at 3e-4
            rows = [
                {"step": 0, "eval/reward": 0.1},
                {"step": 2, "train/loss": 0.1, "eval/reward": 0.3 - 0.1 * abs(i - 1)},
            ]
            T.run(root, method, 100, model=MODEL, tag=tag, lines=rows)
            for dataset in T.DATASETS:
                T.cell(root, method, 100, dataset, flags(f"{root.name}/{tag}/{method}/{dataset}", rate(method, dataset) - 0.05 * abs(i - 1)),
                       model=MODEL, tag=tag)  # fmt: skip
        tuned = point_tag("tuned", {**point, "trainer.learning_rate": "0.0003"})
        for seed in T.SEEDS:
            for dataset in T.DATASETS:
                T.cell(root, method, seed, dataset, flags(f"{root.name}/{tuned}/{method}/{seed}/{dataset}", rate(method, dataset, seed)),
                       model=MODEL, tag=tuned)  # fmt: skip
    for method in ("clip", "pspo"):
        for seed in T.SEEDS:
            lines = T.metrics_lines(method, seed)
            for row in lines:
                row["method/zero_grad_frac"] = 0.05 if method == "clip" else 0.0
            T.run(root, method, seed, model=MODEL, tag="offpolicy", lines=lines)
            for dataset in T.DATASETS:
                T.cell(root, method, seed, dataset, flags(f"{root.name}/off/{method}/{seed}/{dataset}", rate(method, dataset, seed)),
                       model=MODEL, tag="offpolicy")  # fmt: skip
    return root


LADDER = [
    {
        "name": "small",
        "arch": {"hidden_size": 64, "num_attention_heads": 2, "num_key_value_heads": 2, "head_dim": 32},
        "params": 190_464,
    },
    {"name": "mid", "arch": {}, "params": 446_464},
    {
        "name": "big",
        "arch": {
            "hidden_size": 256,
            "num_attention_heads": 4,
            "num_key_value_heads": 4,
            "intermediate_size": 512,
            "num_hidden_layers": 3,
        },
        "params": 2_204_928,
    },  # fmt: skip
    {"name": "mid_general", "arch": {}, "params": 446_464, "general_of": "mid", "sft": {"data.n_train": 500}},
]


def build(root: Path, gaps: dict[str, float]) -> list[dict]:
    """The ladder under ``root`` with GR-PSPO's gap per base name; returns the ladder spec."""
    for b in LADDER:
        rung(root / b["name"], gaps[b["name"]])
    return LADDER
