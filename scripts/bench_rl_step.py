"""The RL step's tokens/s per model size, before and after issue 34's speed-up, and where its time goes
(generation, the old-log-prob pass, forward, backward, optimizer; docs/benchmarks.md "The RL step across
model sizes").

Builds ``MethodGRPOTrainer`` exactly as ``python -m pspo_repro.train`` does, on a randomly initialised
Qwen2 model of each size (the tiny tokenizer; random weights run every completion to the length limit, the
worst case), with the mini's batch (16 prompts x 8, 48 new tokens, two passes per rollout), and times each
phase with the wall clock over ``--steps`` optimizer steps after ``--warmup``. The variants of one size run
in one process on the same initial weights, their steps interleaved, and tokens/s counts the prompt and
completion tokens each step trains on. "before": TRL's fused LM head (every run until issue 34); "after":
``trainer.logprob_head=plain`` (the CPU default since); "after+bf16": also bf16 autocast (the paper's
numerics; not the CPU default, but every RL run of the model-size ladder's: conf/experiment/scale.yaml).

    PSPO_DATA_DIR=../shared/data .venv/bin/python scripts/bench_rl_step.py [--rungs 128x2,256x4] [--steps 4]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import tempfile
import time
from collections import defaultdict
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("WANDB_MODE", "disabled")

MINI_TRAINER = [  # conf/experiment/mini.yaml's rollout shape
    "trainer.per_device_train_batch_size=128",
    "trainer.num_generations=8",
    "trainer.max_completion_length=48",
    "trainer.temperature=0.8",
    "trainer.top_p=0.9",
    "trainer.learning_rate=3e-4",
    "trainer.eval_steps=null",
    "trainer.eval_on_start=false",
    "trainer.max_steps=1000",
    "trainer.token_budget=null",
    "data.prompt_template=none",
]


def arch_overrides(hidden: int, layers: int) -> list[str]:
    """A Qwen2 size with head_dim 64 (vLLM's CPU attention needs it) and the MLP at 2x hidden."""
    heads = hidden // 64
    return [
        "model.random_init=true",
        f"model.arch.hidden_size={hidden}",
        f"model.arch.num_hidden_layers={layers}",
        f"model.arch.num_attention_heads={heads}",
        f"model.arch.num_key_value_heads={heads}",
        f"model.arch.intermediate_size={2 * hidden}",
    ]


def ladder_rungs() -> list[tuple[str, list[str]]]:
    """The rungs of conf/scale.yaml (``--rungs scale``): each size rung's full arch as model overrides."""
    from omegaconf import OmegaConf

    from pspo_repro.analysis.scale import full_arch
    from pspo_repro.common.paths import CONF_DIR

    out = []
    for r in OmegaConf.load(CONF_DIR / "scale.yaml").rungs:
        arch = full_arch(OmegaConf.to_container(r.arch))
        out.append(
            (str(r.name), ["model.random_init=true", *(f"++model.arch.{k}={v}" for k, v in arch.items())])
        )
    return out


def build(overrides: list[str], out: Path):
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    from pspo_repro.common.paths import CONF_DIR
    from pspo_repro.scoring.rewards import get_reward
    from pspo_repro.training import grpo as train
    from pspo_repro.training.models import load_model, load_tokenizer
    from pspo_repro.training.trainer import MethodGRPOTrainer

    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        cfg = compose("train", overrides=["model=tiny", "logger=none", "method=clip", *overrides])
    method = train.validate(cfg)
    rows, _ = train.load_data(cfg)
    tok = load_tokenizer(cfg.model)
    args = train._grpo_config(cfg, out, method, use_cuda=False)
    args.save_strategy, args.disable_tqdm = "no", True
    model = load_model(cfg.model, tok, False, training=True)
    tr = MethodGRPOTrainer(
        model=model,
        reward_funcs=[get_reward("smoke_length")],
        train_dataset=train.to_dataset(rows[:512], tok, "none", None),
        processing_class=tok,
        args=args,
        method_name=method.name,
        method_params=method.params,
        loss_agg=method.loss_agg,
        logprob_head=train.resolve_logprob_head(cfg.trainer.logprob_head, use_cuda=False),
    )
    n_params = sum(p.numel() for p in model.parameters())
    return tr, n_params


def instrument(tr, clock: dict[str, float]):
    """Wrap the trainer's phases so each adds its wall time to ``clock``."""
    import torch

    def timed(name_of, fn):
        def wrapper(*a, **k):
            t0 = time.perf_counter()
            try:
                return fn(*a, **k)
            finally:
                clock[name_of()] += time.perf_counter() - t0

        return wrapper

    tr._generate_single_turn = timed(lambda: "generate", tr._generate_single_turn)
    tr._get_per_token_logps_and_entropies = timed(
        lambda: "forward" if torch.is_grad_enabled() else "old_logps", tr._get_per_token_logps_and_entropies
    )
    tr.accelerator.backward = timed(lambda: "backward", tr.accelerator.backward)


def step_runner(tr, warmup: int):
    """Closure running one optimizer step of ``tr``; its phase clock and token count after ``warmup`` steps."""
    clock: dict[str, float] = defaultdict(float)
    instrument(tr, clock)
    tokens = [0]
    compute_loss = tr._compute_loss

    def counted(model, inputs):
        tokens[0] += int(inputs["prompt_mask"].sum() + inputs["completion_mask"].sum())
        return compute_loss(model, inputs)

    tr._compute_loss = counted
    tr.model.train()
    tr.current_gradient_accumulation_steps = tr.args.gradient_accumulation_steps  # set by train()
    tr.create_optimizer_and_scheduler(num_training_steps=10_000)
    batches = iter(tr.get_train_dataloader())
    done = [0]

    def step() -> None:
        if done[0] == warmup:
            clock.clear()
            tokens[0] = 0
        t0 = time.perf_counter()
        tr.training_step(tr.model, next(batches), None)
        t1 = time.perf_counter()
        tr.optimizer.step()
        tr.optimizer.zero_grad()
        clock["optimizer"] += time.perf_counter() - t1
        clock["total"] += time.perf_counter() - t0
        done[0] += 1

    return step, clock, tokens


VARIANTS = {  # name -> train overrides; "before" is TRL's fused head, as every run computed until issue 34
    "before": ["trainer.logprob_head=fused"],
    "after": ["trainer.logprob_head=plain"],
    "after+bf16": ["trainer.logprob_head=plain", "trainer.bf16=true"],
}


def main() -> None:
    import torch

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument(
        "--rungs",
        default="128x2,256x4,320x6",
        help="hidden x layers, comma separated; or `scale`: the model-size ladder's rungs (conf/scale.yaml)",
    )
    p.add_argument("--steps", type=int, default=4, help="timed optimizer steps per variant (even: 2 passes)")
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--variants", default="before,after,after+bf16")
    a = p.parse_args()
    torch.set_num_threads(1)  # the pipeline's setting: one thread per process, two processes
    names = a.variants.split(",")
    print(
        f"cpu: {cpu_model()}; torch {torch.__version__}; 1 thread; steps {a.steps} after {a.warmup} warm-up"
    )
    if a.rungs == "scale":
        rungs = ladder_rungs()
    else:
        rungs = [(r, arch_overrides(*map(int, r.split("x")))) for r in a.rungs.split(",")]
    for rung, arch in rungs:
        with tempfile.TemporaryDirectory() as tmp:
            runners = {}
            for name in names:
                torch.manual_seed(0)  # the same initial weights for every variant
                tr, n_params = build([*MINI_TRAINER, *arch, *VARIANTS[name]], Path(tmp) / name / "x" / "run")
                runners[name] = step_runner(tr, a.warmup)
            for i in range(a.steps + a.warmup):  # interleaved, so load drift on the machine hits all alike
                for name in names[i % len(names) :] + names[: i % len(names)]:
                    runners[name][0]()
            base = None
            for name in names:
                _, clock, tokens = runners[name]
                tps = tokens[0] / clock["total"]
                base = base or tps
                parts = ", ".join(f"{k} {v / a.steps:.2f}" for k, v in sorted(clock.items()) if k != "total")
                print(
                    f"{rung} ({n_params / 1e6:.2f}M params) {name:>10}: {clock['total'] / a.steps:6.2f} s/step,"
                    f" {tps:7.0f} tokens/s, x{tps / base:.2f} ({parts})",
                    flush=True,
                )


def cpu_model() -> str:
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return "unknown"


if __name__ == "__main__":
    main()
