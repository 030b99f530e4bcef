"""Does training update its weights? The precision check shared by the CPU test and the GPU check.

At the paper's learning rates (5e-7 to 1e-6) AdamW's first steps move each weight by about the learning
rate, which is below half a bf16 ulp for most weights: bf16 parameters barely change, fp32 ones all do.
``measure`` runs a few real GRPO steps through the training entry point's own pieces (config, model
loading, ``MethodGRPOTrainer``) and reports the parameter dtype, the autocast dtype, and the share of the
weights with a non-zero gradient that changed after the first optimizer step and after the last one, and
the largest |r - 1| on the first pass over a freshly generated batch (``MethodGRPOTrainer``'s
``first_pass_max_abs_ratio_dev``).
"""

from __future__ import annotations

from typing import Any

# Overrides that make a short, self-contained run: no validation, no checkpoints, no budget, and a reward
# that varies within a group on any model (random weights never solve a problem, and their completions all
# run to the length limit).
RUN_OVERRIDES = (
    "trainer.learning_rate=1e-6",
    "trainer.warmup_steps=0",
    "trainer.eval_steps=null",
    "trainer.eval_on_start=false",  # no validation to start with (experiment=mini turns it on)
    "trainer.save_steps=100000",
    "trainer.token_budget=null",
    "trainer.num_generations=4",
    "trainer.per_device_train_batch_size=4",
    "trainer.gradient_accumulation_steps=1",
    "trainer.max_completion_length=16",
    "trainer.disable_tqdm=true",
    "reward.funcs=[smoke_hash]",
    "logger=none",
    "data.n_train=64",
)


def changed_fraction(before: dict, after: dict, grads: dict) -> float:
    """Share of the weights with a non-zero gradient whose value differs between ``before`` and ``after``."""
    moved = total = 0
    for name, g in grads.items():
        mask = g != 0
        total += int(mask.sum())
        moved += int(((after[name] != before[name]) & mask).sum())
    return moved / total if total else float("nan")


class Probe:
    """Trainer callback: weights at the start, the first step's gradients, weights after the first and
    the last optimizer step, and the output dtypes of one MLP projection (bf16 under autocast)."""

    def __init__(self, model):
        self.model = model
        self.before: dict | None = None
        self.grads: dict | None = None
        self.after_first: dict | None = None
        self.after_last: dict | None = None
        self.matmul_dtypes: set = set()
        proj = next(m for n, m in model.named_modules() if n.endswith("mlp.up_proj"))
        proj.register_forward_hook(lambda m, i, o: self.matmul_dtypes.add(o.dtype))

    def _params(self) -> dict:
        return {n: p.detach().clone() for n, p in self.model.named_parameters()}

    def on_train_begin(self, args, state, control, **kw):
        """Snapshot of the weights before any update."""
        self.before = self._params()

    def on_pre_optimizer_step(self, args, state, control, **kw):
        """The first step's gradients (fp32 copies)."""
        if self.grads is None:
            self.grads = {
                n: p.grad.detach().float().clone()
                for n, p in self.model.named_parameters()
                if p.grad is not None
            }

    def on_optimizer_step(self, args, state, control, **kw):
        """Weights after the first and after every later optimizer step."""
        params = self._params()
        if self.after_first is None:
            self.after_first = params
        self.after_last = params

    def __getattr__(self, name):  # the other TrainerCallback events: no-ops
        if name.startswith("on_"):
            return lambda *a, **k: None
        raise AttributeError(name)


def build_trainer(overrides: list[str], root) -> tuple[Any, Any]:
    """A ``MethodGRPOTrainer`` built as ``python -m pspo_repro.train`` builds it, writing under the folder
    ``root``; returns (trainer, probe)."""
    from pathlib import Path

    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    from pspo_repro.common.paths import CONF_DIR
    from pspo_repro.scoring.rewards import get_reward
    from pspo_repro.training import grpo as train
    from pspo_repro.training.models import load_model
    from pspo_repro.training.trainer import MethodGRPOTrainer

    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        cfg = compose("train", overrides=[*RUN_OVERRIDES, *overrides])
    method = train.validate(cfg)
    rows, _ = train.load_data(cfg)
    folder = Path(root) / "runs" / str(cfg.model.name) / "precision"
    tokenizer, args, use_cuda = train._prepare(cfg, folder, method)
    model = load_model(cfg.model, tokenizer, use_cuda, training=True)
    probe = Probe(model)
    trainer = MethodGRPOTrainer(
        model=model,
        reward_funcs=[get_reward(n) for n in cfg.reward.funcs],
        args=args,
        train_dataset=train.to_dataset(rows, tokenizer, cfg.data.prompt_template, None),
        processing_class=tokenizer,
        callbacks=[probe],
        method_name=method.name,
        method_params=method.params,
        loss_agg=method.loss_agg,
    )
    return trainer, probe


def measure(overrides: list[str]) -> dict[str, Any]:
    """Train ``trainer.max_steps`` steps (from ``overrides``) and report the precision figures."""
    import tempfile

    from pspo_repro.common.startup import TRAINING_STACK, import_frozen
    from pspo_repro.training.grpo import precision_record

    import_frozen(TRAINING_STACK)  # as the train command loads its stack

    with tempfile.TemporaryDirectory(prefix="precision-") as root:  # the trainer's output, dropped after
        trainer, probe = build_trainer(overrides, root)
        record = precision_record(trainer)
        trainer.train()
        after = precision_record(trainer)
    return {
        **record,
        "param_dtype_after": after["param_dtype"],
        "matmul_dtypes": sorted(str(d).removeprefix("torch.") for d in probe.matmul_dtypes),
        "learning_rate": trainer.args.learning_rate,
        "steps": int(trainer.state.global_step),
        "weights_with_grad": int(sum(int((g != 0).sum()) for g in (probe.grads or {}).values())),
        "changed_after_first_step": changed_fraction(probe.before, probe.after_first, probe.grads),
        "changed_after_last_step": changed_fraction(probe.before, probe.after_last, probe.grads),
        # max |r - 1| on first passes over fresh rollouts: 0 unless recomputed log-probs differ from stored ones
        "first_pass_max_abs_ratio_dev": trainer.ratio_dev_for_json(trainer.first_pass_max_abs_ratio_dev),
    }


def main(argv: list[str] | None = None) -> int:
    """``python -m pspo_repro.precision OUT.json [override ...]``: run ``measure`` and write its figures."""
    import json
    import sys

    from pspo_repro.common.atomic import write_json

    argv = sys.argv[1:] if argv is None else argv
    if not argv or not argv[0].endswith(".json"):
        print("usage: python -m pspo_repro.precision OUT.json [hydra override ...]", file=sys.stderr)
        return 2
    figures = measure([a for a in argv[1:] if a != "--"])
    write_json(argv[0], figures)
    print(json.dumps(figures))
    if not figures["weights_with_grad"]:
        print(
            "error: no weight received a gradient (equal rewards in every group): nothing measured",
            file=sys.stderr,
        )
        return 1
    return 0
