#!/usr/bin/env python3
"""One optimizer step of the PSPO authors' patched TRL 0.25.1 on a prepared batch (run in .venv-authors).

    .venv-authors/bin/python scripts/authors_step.py CASES.pt OUT.pt

``CASES.pt`` (``torch.save``): ``{"model_dir": str, "micro_batches": [dict of tensors], "cases": {name:
GRPOConfig kwargs}}``. For each case a fresh ``trl.GRPOTrainer`` (the authors' patched class, configured by
the kwargs, as their ``maths_finetuning.py`` configures it) loads the model from ``model_dir`` and takes one
optimizer step on the micro-batches: HF's own ``training_step`` per micro-batch (TRL's ``compute_loss`` and
HF's division by the accumulation steps), the pre-clip gradient norm with ``max_grad_norm`` clipping, then
the trainer's own AdamW at the configured learning rate (the warmup scheduler is not stepped: the paper's
first step has lr 0). ``OUT.pt``: ``{name: {"loss", "grad_norm", "lr", "weights", "versions"}}``, ``loss``
being the sum of the micro-steps' returned losses (what HF adds to ``tr_loss`` for the step).

Imports nothing of pspo_repro: this environment holds the authors' stack only (scripts/setup_authors_env.sh).
Tests: tests/training/test_authors_stack_parity.py.
"""

from __future__ import annotations

import importlib.metadata as md
import sys
import tempfile

import torch


def one_step(trainer, micro_batches: list[dict]) -> dict:
    """Loss, pre-clip gradient norm and the learning rate of one optimizer step over ``micro_batches``."""
    model = trainer.model
    trainer.current_gradient_accumulation_steps = len(micro_batches)
    trainer._prepare_inputs = lambda batch: batch  # the batch is given: no generation
    optimizer = trainer.create_optimizer()
    optimizer.zero_grad()
    loss = torch.zeros(())
    for i, batch in enumerate(micro_batches):
        trainer._step = i  # TRL's micro-step counter, which _prepare_inputs would have advanced
        loss = loss + trainer.training_step(model, batch, None)
    grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), trainer.args.max_grad_norm)
    optimizer.step()
    return {"loss": float(loss), "grad_norm": float(grad_norm), "lr": optimizer.param_groups[0]["lr"]}


def main(argv: list[str]) -> int:
    """Run every case of ``argv[0]`` and write the results to ``argv[1]``."""
    if len(argv) != 2:
        print("usage: authors_step.py CASES.pt OUT.pt", file=sys.stderr)
        return 2
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, PreTrainedTokenizerFast
    from trl import GRPOConfig, GRPOTrainer

    spec = torch.load(argv[0], weights_only=False)
    model_dir = spec["model_dir"]
    # transformers 4.57 cannot read the tokenizer_config that transformers 5 writes; the tokenizer only
    # supplies pad/eos ids here (the batch is token ids already)
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_file=f"{model_dir}/tokenizer.json", eos_token="<|im_end|>", pad_token="<|endoftext|>"
    )
    versions = {k: md.version(k) for k in ("trl", "transformers", "accelerate", "torch")}
    out = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, kwargs in spec["cases"].items():
            torch.manual_seed(0)
            args = GRPOConfig(output_dir=f"{tmp}/{name}", report_to=[], use_cpu=True, **kwargs)
            trainer = GRPOTrainer(
                model=AutoModelForCausalLM.from_pretrained(
                    model_dir, dtype=torch.float32, use_safetensors=True
                ),
                reward_funcs=lambda completions, **_: [0.0] * len(completions),
                args=args,
                train_dataset=Dataset.from_list([{"prompt": "x"}] * 8),
                processing_class=tokenizer,
            )
            assert trainer.trust_region_method == kwargs["trust_region_method"]  # the patched trainer
            result = one_step(trainer, spec["micro_batches"])
            result["weights"] = {k: v.detach().clone() for k, v in trainer.model.state_dict().items()}
            result["versions"] = versions
            out[name] = result
    torch.save(out, argv[1])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
