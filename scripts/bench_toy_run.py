"""One toy run end to end, profiled: CPU seconds per part of a learning-regime RL run and its evaluation cells,
before and after issue 53's changes, measured side by side (docs/benchmarks.md, "One toy run").

Each measurement is a fresh interpreter (``--child``) that does what a pipeline job does: ``pspo_repro.train``'s
``run`` on the SFT base (GRPO-clip, seed 0, the pipeline's experiment), then ``pspo_repro.evaluate``'s sweep of the
run's best checkpoint with the mini's evaluation settings (the rewarded task at T = 0 and T = 0.8 x 4, the held-out
skill at T = 0). Every part's CPU time (``time.process_time``, one torch thread) is its own, its inner parts
excluded: process start and imports, data and prompt filtering, model load, per RL step the generation, reward
scoring, old log-probs, the loss's forward, the method and its metrics, backward and the optimizer, validation
(its generation and passes), checkpoint writes, and per evaluation cell its generation, grading and writes.

The variants of a rung alternate (before, after, after, before, ...), so a drift in the machine's load falls on
all. Variants (``VARIANTS``): ``before``, the runs before issue 53 (fp32 for the mini, bf16 for the ladder's
h256_l3, both with scaled-dot-product attention, TRL's old-log-prob pass, transformers' top-p sort and
``torch.multinomial``); ``exact``, the changes that leave every number as it was (the old-log-prob pass skipped
where the first pass supplies it, the top-p shortcut); ``after``, today's experiment configs (also bf16 autocast
with eager attention, the inverse-CDF token draw, validation without its loss pass, and evaluation with bf16 weights and eager attention).

The SFT bases are built once into ``.cache/bench_toy_run/<rung>/`` (the mini's data and SFT recipe; the 2.2M base
takes ~10 CPU min). ``PSPO_DATA_DIR`` is not read: the synthetic task is written with the base.

    .venv/bin/python scripts/bench_toy_run.py [--rungs mini,h256_l3] [--repeats 2] [--variants before,after]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

T_START = time.process_time()  # the interpreter's own start, before this module's imports

ROOT = Path(__file__).resolve().parents[1]
CACHE = ROOT / ".cache" / "bench_toy_run"
RUNGS = {  # name -> (SFT arch overrides, RL experiment, bf16 before issue 53): conf/sft.yaml's mini model, h256_l3
    "mini": ([], "mini", "false"),
    "h256_l3": (
        [
            "++model.arch.hidden_size=256",
            "++model.arch.num_attention_heads=4",
            "++model.arch.num_key_value_heads=4",
            "++model.arch.intermediate_size=512",
            "++model.arch.num_hidden_layers=3",
        ],
        "scale",
        "true",
    ),
}
# name -> (train overrides, top-p shortcut on, evaluate overrides); {bf16}: the rung's RL numerics before issue 53
OLD_RL = [
    "trainer.bf16={bf16}",
    "model.attn_implementation=null",
    "trainer.token_draw=multinomial",
    "trainer.validation_loss=true",
]
VARIANTS = {
    "before": ([*OLD_RL, "trainer.old_logps=recompute"], False, []),
    "exact": (OLD_RL, True, []),
    "after": ([], True, ["dtype=bfloat16", "attn_implementation=eager"]),
}
EVAL = [  # conf/mini.yaml's eval.overrides (the rewarded task), then its held-out skill
    "eval=synthetic",
    "temperatures=[0.0,0.8]",
    "n_samples=4",
    "max_new_tokens=48",
    "backend=hf",
    "device=cpu",
    "batch_size=200",
    "chunk_size=100",
    "prompt_template=none",
]
HELDOUT = ["eval=synthetic_heldout", "temperatures=[0.0]"]


class Clock:
    """CPU seconds per part, each part's own (its inner parts' time goes to them)."""

    def __init__(self) -> None:
        self.parts: dict[str, float] = defaultdict(float)
        self.stack: list[list] = []  # [name, start, inner]

    @contextlib.contextmanager
    def part(self, name: str):
        self.stack.append([name, time.process_time(), 0.0])
        try:
            yield
        finally:
            name, start, inner = self.stack.pop()
            spent = time.process_time() - start
            self.parts[name] += spent - inner
            if self.stack:
                self.stack[-1][2] += spent

    def wrap(self, owner, attr: str, name):
        """Time every call of ``owner.attr`` as part ``name`` (a string or a function of the call's args)."""
        fn = getattr(owner, attr)

        def timed(*args, **kwargs):
            with self.part(name(*args, **kwargs) if callable(name) else name):
                return fn(*args, **kwargs)

        setattr(owner, attr, timed)

    def inside(self, prefix: str) -> bool:
        return any(n.startswith(prefix) for n, _, _ in self.stack)


def child(a: argparse.Namespace) -> None:
    """One run and its evaluation in this interpreter; writes the parts as JSON to ``a.out``."""
    clock = Clock()
    clock.parts["start: interpreter"] = T_START
    os.environ.update(
        PSPO_RESULTS_DIR=str(a.results), PSPO_DATA_DIR=str(a.data), PSPO_MINI_SFT_DIR=str(a.sft)
    )
    with clock.part("start: imports"):
        import torch  # noqa: F401
        import transformers  # noqa: F401
        import trl  # noqa: F401
        from hydra import compose, initialize_config_dir
        from trl import GRPOTrainer

        from pspo_repro.common.paths import CONF_DIR
        from pspo_repro.evaluation import evaluator
        from pspo_repro.evaluation.backends.hf import HFBackend
        from pspo_repro.training import grpo, models, sampling
        from pspo_repro.training.trainer import MethodGRPOTrainer
    overrides, sampling.TOP_P_SHORTCUT, eval_numerics = VARIANTS[a.variant]
    overrides = [o.format(bf16=a.bf16) for o in overrides]
    rl = lambda part: lambda *_, **__: ("validation: " if clock.inside("validation") else "rl: ") + part  # noqa: E731
    clock.wrap(grpo, "load_data", "data and prompt filtering")
    clock.wrap(grpo, "to_dataset", "data and prompt filtering")
    clock.wrap(models, "load_model", "model load")
    clock.wrap(GRPOTrainer, "_generate", rl("generation"))
    clock.wrap(GRPOTrainer, "_calculate_rewards", rl("reward scoring"))
    clock.wrap(MethodGRPOTrainer, "_compute_loss", rl("loss: method, aggregation, metrics"))

    def logps_part(self, *args, **kwargs):
        if torch.is_grad_enabled():
            return rl("loss: forward (new log-probs)")()
        return rl(
            "loss: forward (new log-probs)"
            if clock.inside("rl: loss") or clock.inside("validation: loss")
            else "old log-probs"
        )()

    clock.wrap(MethodGRPOTrainer, "_get_per_token_logps_and_entropies", logps_part)
    clock.wrap(GRPOTrainer, "evaluate", "validation: other")
    clock.wrap(GRPOTrainer, "_save_checkpoint", "checkpoint writes")
    clock.wrap(torch.optim.AdamW, "step", "rl: optimizer")
    from accelerate import Accelerator

    clock.wrap(Accelerator, "backward", "rl: backward")
    clock.wrap(GRPOTrainer, "train", "rl: other (TRL's loop, logging, callbacks)")

    ov = [f"experiment={a.experiment}", "method=clip", "seed=0", "data.prompt_template=none", *overrides]
    with clock.part("setup (config, checks, run folder, trainer)"):
        with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
            cfg = compose("train", overrides=ov)
        folder = grpo.run(cfg, ov)

    temp_of = {}

    def gen_part(self, requests, temperature, *args, **kwargs):
        return f"eval {temp_of['ds']} T={temperature:.1f}: generation"

    clock.wrap(HFBackend, "_generate_batch", gen_part)
    clock.wrap(evaluator, "grade_samples", lambda *_: f"eval {temp_of['ds']}: grading")
    clock.wrap(evaluator, "_finish_cell", lambda c, *_: f"eval {c.dataset} T={c.temperature:.1f}: write")
    import pspo_repro.evaluation.backends as backends

    clock.wrap(backends, "make_backend", "eval: model load")
    for ds, extra in (("synthetic", []), ("synthetic_heldout", HELDOUT)):
        temp_of["ds"] = ds
        with clock.part("eval: setup (config, target, prompts)"):
            evaluator.evaluate(evaluator.compose_config([f"run={folder}", *EVAL, *eval_numerics, *extra]))
    parts = dict(clock.parts)
    parts["total"] = time.process_time()
    parts["unattributed"] = parts["total"] - sum(v for k, v in clock.parts.items())
    Path(a.out).write_text(json.dumps(parts))


def build_base(rung: str) -> Path:
    """The rung's SFT base (and the mini's data) under CACHE, built once."""
    root = CACHE / rung
    if not (root / "work" / "sft" / "model" / "config.json").is_file():
        arch = RUNGS[rung][0]
        print(f"[bench] building the {rung} SFT base into {root} (once)", flush=True)
        quoted = ",".join(f"'{o}'" for o in arch)
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pspo_repro.mini",
                f"root={root}",
                "stages=[data,sft]",
                f"sft.overrides=[{quoted}]",
            ],
            check=True,
            cwd=ROOT,
        )
    return root / "work"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rungs", default="mini,h256_l3", help=f"comma separated, of {', '.join(RUNGS)}")
    p.add_argument("--variants", default="before,after")
    p.add_argument("--repeats", type=int, default=2, help="measurements per variant (interleaved)")
    p.add_argument("--json", type=Path, default=None, help="also write every measurement here")
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    for k in ("variant", "experiment", "bf16", "results", "data", "sft", "out"):
        p.add_argument(f"--{k}", help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.child:
        return child(a)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
    env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", HF_DATASETS_OFFLINE="1", WANDB_MODE="disabled")
    variants = a.variants.split(",")
    print(
        f"cpu: {cpu_model()}; one torch thread; {a.repeats} measurements per variant, interleaved", flush=True
    )
    everything = {}
    for rung in a.rungs.split(","):
        work = build_base(rung)
        got: dict[str, list[dict[str, float]]] = defaultdict(list)
        for r in range(a.repeats):
            for v in variants if r % 2 == 0 else variants[::-1]:
                with tempfile.TemporaryDirectory() as tmp:
                    out = Path(tmp) / "parts.json"
                    cmd = [sys.executable, __file__, "--child", "--variant", v, "--experiment", RUNGS[rung][1], "--bf16", RUNGS[rung][2],
                           "--results", str(Path(tmp) / "results"), "--data", str(work / "data"),
                           "--sft", str(work / "sft"), "--out", str(out)]  # fmt: skip
                    subprocess.run(cmd, check=True, cwd=ROOT, env=env, stdout=subprocess.DEVNULL)
                    got[v].append(json.loads(out.read_text()))
                print(f"[bench] {rung} {v} #{r + 1}: {got[v][-1]['total']:.1f} CPU s", flush=True)
        everything[rung] = got
        print(table(rung, got, variants), flush=True)
    if a.json:
        a.json.write_text(json.dumps(everything, indent=1))


def table(rung: str, got: dict[str, list[dict[str, float]]], variants: list[str]) -> str:
    """Markdown: the median CPU seconds of every part per variant, and each variant's total against the first."""
    import statistics

    names = sorted({k for runs in got.values() for r in runs for k in r} - {"total"})
    med = {
        v: {k: statistics.median(r.get(k, 0.0) for r in got[v]) for k in [*names, "total"]} for v in variants
    }
    head = f"| {rung}: part (CPU s, median of {len(got[variants[0]])}) | " + " | ".join(variants) + " |"
    lines = [head, "|---|" + "---:|" * len(variants)]
    for k in names:
        lines.append(f"| {k} | " + " | ".join(f"{med[v][k]:.2f}" for v in variants) + " |")
    lines.append("| **total** | " + " | ".join(f"**{med[v]['total']:.2f}**" for v in variants) + " |")
    base = med[variants[0]]["total"]
    lines.append(
        "| ratio to "
        + variants[0]
        + " | "
        + " | ".join(f"{med[v]['total'] / base:.2f}x" for v in variants)
        + " |"
    )
    return "\n".join(lines)


def cpu_model() -> str:
    """The CPU's model name with its family and model numbers (VMs often report a bare "AMD EPYC", and two
    generations of it run at different speeds)."""
    fields: dict[str, str] = {}
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            fields.setdefault(key.strip(), value.strip())
    name = fields.get("model name", "unknown")
    if "cpu family" in fields:
        name += f" (family {fields['cpu family']}, model {fields.get('model', '?')})"
    return name


if __name__ == "__main__":
    main()
