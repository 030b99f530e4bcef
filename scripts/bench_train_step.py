"""Step time of MethodGRPOTrainer (method=clip, dapo) against TRL's GRPOTrainer (loss_type="dapo").

Both trainers are built from the same composed config (tiny model, CPU) and the same seed; the timed
unit is one full ``training_step`` (generation on generation steps, forward, loss, backward) on each
trainer's own batches, interleaved A/B/A/B so machine-load drift hits both equally; the clock is this thread's CPU time
(one torch thread), because wall time on the shared machine is noisy. Optimizer steps are
not timed (identical code). Prints the ratio of medians (ours / TRL).

    PSPO_DATA_DIR=../shared/data .venv/bin/python scripts/bench_train_step.py [--steps 40] [--method clip]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("WANDB_MODE", "disabled")


def build(method_name: str, which: str, out: Path):
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from trl import GRPOTrainer

    from pspo_repro.common.paths import CONF_DIR
    from pspo_repro.scoring.rewards import get_reward
    from pspo_repro.training import grpo as train
    from pspo_repro.training.models import load_model, load_tokenizer
    from pspo_repro.training.trainer import MethodGRPOTrainer

    ov = [
        "model=tiny",
        "logger=none",
        f"method={method_name}",
        "trainer.eval_steps=null",
        "trainer.max_steps=1000",
    ]
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        cfg = compose("train", overrides=ov)
    method = train.validate(cfg)
    rows, _ = train.load_data(cfg)
    tok = load_tokenizer(cfg.model)
    args = train._grpo_config(cfg, out / which, method, use_cuda=False)
    args.save_strategy, args.disable_tqdm = "no", True
    common = dict(
        model=load_model(cfg.model, tok, False, training=True),
        reward_funcs=[get_reward("smoke_length")],
        train_dataset=train.to_dataset(rows[:256], tok, "paper", None),
        processing_class=tok,
    )
    if which == "trl":
        return GRPOTrainer(args=args, **common)
    return MethodGRPOTrainer(
        args=args, method_name=method.name, method_params=method.params, loss_agg=method.loss_agg, **common
    )


def main() -> None:
    import torch

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--warmup", type=int, default=4)
    p.add_argument("--method", default="clip")
    a = p.parse_args()
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        trainers = {w: build(a.method, w, Path(tmp)) for w in ("trl", "ours")}
        state = {}
        for w, tr in trainers.items():
            tr.model.train()
            tr.current_gradient_accumulation_steps = tr.args.gradient_accumulation_steps  # set by train()
            tr.create_optimizer_and_scheduler(num_training_steps=a.steps + a.warmup)
            state[w] = iter(tr.get_train_dataloader())
        times: dict[str, list[float]] = {w: [] for w in trainers}
        for i in range(a.steps + a.warmup):
            for w in ("trl", "ours") if i % 2 == 0 else ("ours", "trl"):  # alternate who goes first
                tr = trainers[w]
                batch = next(state[w])
                t0 = time.thread_time()
                tr.training_step(tr.model, batch, None)
                dt = time.thread_time() - t0
                tr.optimizer.step()
                tr.optimizer.zero_grad()
                if i >= a.warmup:
                    times[w].append(dt)
    # Steps alternate between generating and reusing a rollout (num_iterations=2): the distribution is
    # bimodal, so compare totals, and medians of each kind separately.
    tot = {w: sum(v) for w, v in times.items()}
    gen = {w: statistics.median(v[0::2]) for w, v in times.items()}
    reuse = {w: statistics.median(v[1::2]) for w, v in times.items()}
    print(f"method={a.method} steps={a.steps} total: trl {tot['trl']:.2f} s, ours {tot['ours']:.2f} s")
    print(f"median generation step: trl {gen['trl'] * 1e3:.1f} ms, ours {gen['ours'] * 1e3:.1f} ms")
    print(f"median reuse step: trl {reuse['trl'] * 1e3:.1f} ms, ours {reuse['ours'] * 1e3:.1f} ms")
    print(f"ratio ours/trl (total) = {tot['ours'] / tot['trl']:.3f}")


if __name__ == "__main__":
    main()
