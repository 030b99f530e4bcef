"""A small results tree every analysis command can read: evaluation cells and training runs of three
registered methods (clip, pspo, noclip) on the tiny model, three seeds each, with a base model's cells.

Used by the tests of the one writer, the one reader and the run-record edits (issue 36): aggregate, regime,
claims and the leaderboard all read it in well under a second.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

METHODS = ("clip", "pspo", "noclip")
SEEDS = (0, 1, 2)
DATASETS = ("synthetic", "synthetic_heldout")
PROMPTS = 6


def flags(method: str, seed: int, dataset: str) -> list[int]:
    """Greedy per-prompt correctness, fixed pseudo-random per method, seed and dataset (every table has
    spread, and the methods differ)."""
    rng = random.Random(f"{method}/{seed}/{dataset}")
    return [int(rng.random() < 0.3 + 0.15 * METHODS.index(method)) for _ in range(PROMPTS)]


def cell(
    root: Path, method: str, seed: int, dataset: str, values: list[int], model: str = "tiny", tag: str = ""
) -> Path:
    """One T = 0 evaluation cell (n = 1 per prompt) whose stored metrics agree with its rows."""
    rows = [{"id": f"{dataset}/test/{i}", "n": 1, "true_correct": f, "reward_correct": f, "mean_length": 9.0}
            for i, f in enumerate(values)]  # fmt: skip
    acc = sum(values) / len(values)
    record = {"schema_version": 1, "model": model, "method": method, "seed": seed, "tag": tag, "run_dir": None,
              "checkpoint": "ckpt", "dataset": dataset, "num_prompts": len(values), "limit": None,
              "rows_sha256": f"sha-{dataset}", "temperature": 0.0, "top_p": 1.0, "max_new_tokens": 48,
              "n_samples": 1, "sampling_seed": 1, "prompt_template": "none", "backend": "hf", "config": {},
              "versions": {}, "git_sha": "x", "per_prompt": rows,
              "metrics": {"true_acc": acc, "reward_acc": acc, "mean_length": 9.0}}  # fmt: skip
    path = (
        root
        / "eval"
        / model
        / method
        / (f"seed{seed}-{tag}" if tag else f"seed{seed}")
        / dataset
        / "T0.0.json"
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record))
    return path


def metrics_lines(method: str, seed: int, steps: int = 4) -> list[dict]:
    """metrics.jsonl rows: optimizer steps with loss, reward, gradient norm and method statistics, and a
    validation reward at the start (``trainer.eval_on_start``: the collapse rule reads it) and every other step."""
    k = METHODS.index(method) if method in METHODS else 0
    out = [{"step": 0, "num_tokens": 0, "eval/reward": 0.25 + 0.01 * seed}]
    for i in range(steps):
        row = {"step": i + 1, "num_tokens": 100 * (i + 1), "train/loss": 0.1, "train/reward": 0.4 + 0.05 * i,
               "train/grad_norm": 0.5 + 0.4 * ((i + seed + k) % 3), "method/zero_grad_frac": 0.1 * (i % 2) * k,
               "method/ratio_max": 1.0 + 0.1 * (i % 2), "train/ratio_std": 0.01 * i,
               "train/behaviour_kl": 0.001 * i}  # fmt: skip
        if i % 2 == 1:
            row["eval/reward"] = 0.3 + 0.01 * seed + 0.02 * i * (k + 1)
        out.append(row)
    return out


def run(
    root: Path, method: str, seed: int, model: str = "tiny", model_path: str = "/models/tiny", tag: str = "",
    lines: list[dict] | None = None,
) -> Path:  # fmt: skip
    """One finished run folder: run.json (identity, config with the model, method and trainer settings) and
    its metrics.jsonl (``lines``, else ``metrics_lines``)."""
    folder = root / "runs" / model / method / (f"seed{seed}-{tag}" if tag else f"seed{seed}")
    folder.mkdir(parents=True)
    config = {"model": {"name": model, "path": model_path, "hub_id": None},
              "method": {"name": method, "loss_agg": "dapo", "num_iterations": 2},
              "trainer": {"max_grad_norm": 1.0, "learning_rate": 3e-4, "eval_steps": 2}}  # fmt: skip
    info = {"model": model, "method": method, "seed": seed, "tag": tag, "status": "finished", "config": config,
            "run_dir": str(folder)}  # fmt: skip
    (folder / "run.json").write_text(json.dumps(info))
    lines = metrics_lines(method, seed) if lines is None else lines
    (folder / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
    return folder


def build(root: Path, methods=METHODS, seeds=SEEDS) -> Path:
    """The whole tree under ``root``: the base model's cells, and per method and seed two cells and a run."""
    for dataset in DATASETS:
        cell(root, "baseline", 0, dataset, [int(i % 3 == 0) for i in range(PROMPTS)])
    for method in methods:
        for seed in seeds:
            for dataset in DATASETS:
                cell(root, method, seed, dataset, flags(method, seed, dataset))
            run(root, method, seed)
    return root


def spec(path: Path, quote: str = "q", frontier: bool = False, tuning: bool = False, **text) -> Path:
    """A claims spec reading the tree: pspo's accuracy, pspo minus clip, a run statistic, a collapse count
    (and a frontier, and the tuned pspo's accuracy (``tuned``'s records), when asked); ``quote`` is the
    claim's quote, ``text`` other fields of it (``claim``, ``section``, ``test``, ``reading``...)."""
    measures = [
        {"id": "acc", "kind": "accuracy", "a": {"method": "pspo"}},
        {"id": "diff", "kind": "compare", "a": {"method": "pspo"}, "b": {"method": "clip"}},
        {"id": "zg", "kind": "run_stat", "a": {"method": "pspo"}, "stat": "method/zero_grad_frac"},
        {"id": "gc", "kind": "run_stat", "a": {"method": "clip"}, "stat": "grad_clipped"},
        {"id": "val", "kind": "val_reward", "a": {"method": "noclip"}},
        {"id": "col", "kind": "collapse", "a": {"method": "clip"}},
    ]
    if frontier:
        measures.append({"id": "fr", "kind": "frontier", "a": {"method": "pspo", "groups": [{}]},
                         "b": {"method": "clip", "groups": [{}]}})  # fmt: skip
    if tuning:
        measures.append({"id": "tuned", "kind": "accuracy", "a": {"method": "pspo", "tuned": "lr"}})
    claims = [{"id": "c1", "claim": "PSPO beats clip", "quote": quote, "section": "s 1", "test": "t",
               "test_short": "toy", "key": "diff", "measure": measures,
               "verdict": {"rule": "greater", "diff": "diff"}, **text}]  # fmt: skip
    import yaml

    path.write_text(yaml.safe_dump({"claims": claims, **({"tuning": TUNING} if tuning else {})}))
    return path


TUNING = {"lr": {"from_tag": "tune", "to_tag": "tuned", "key": "trainer.learning_rate", "values": ["1e-4", "1e-3"],
                 "seeds": [100], "model": "tiny"}}  # fmt: skip


def tuned(root: Path) -> Path:
    """A learning-rate selection for pspo (two tuning runs on seed 100; 1e-3 validates better) and the cells
    of the runs at the chosen value (tag ``tuned-learning_rate0.001``), for a spec's ``tuned: lr`` group."""
    for value, reward in (("0.0001", 0.2), ("0.001", 0.4)):
        rows = [{"step": 0, "eval/reward": 0.1}, {"step": 2, "train/loss": 0.1, "eval/reward": reward}]
        run(root, "pspo", 100, tag=f"tune-learning_rate{value}", lines=rows)
    for seed in SEEDS:
        for dataset in DATASETS:
            cell(root, "pspo", seed, dataset, flags("noclip", seed, dataset), tag="tuned-learning_rate0.001")
    return root
