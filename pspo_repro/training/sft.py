"""Supervised fine-tuning of the tiny model on synthetic worked solutions: ``python -m pspo_repro.sft``.

The mini-reproduction starts RL from a model that already knows the task's format and some of its
arithmetic (the paper starts from pretrained Qwen models; a randomly initialised tiny model gets zero
reward, so GRPO would have nothing to work with). Training uses TRL's ``SFTTrainer`` on a
prompt-completion conversational dataset: the prompt is exactly the RL prompt (``prompts.build_messages``
with the paper's system prompt, rendered by the chat template with the generation prompt), the
completion is the worked solution, rendered as the assistant turn so it ends with ``<|im_end|>``; the
loss covers the completion tokens only (TRL's ``completion_only_loss``, on by default for this format).

Output (deterministic, under ``PSPO_RESULTS_DIR``): ``mini/work/sft/model/`` holds the safetensors
checkpoint and tokenizer; ``sft.json`` (written last, atomically) marks the stage finished and records
the resolved config, versions, time and greedy validation accuracy. A rerun with the same config is
skipped; a rerun with a different config into the same folder is refused, not silently mixed.
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import time
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from pspo_repro.common.atomic import write_json
from pspo_repro.common.paths import results_dir
from pspo_repro.common.provenance import git_sha, package_versions
from pspo_repro.common.startup import SFT_STACK, import_frozen

log = logging.getLogger(__name__)
MARKER = "sft.json"
MODEL_SUBDIR = "model"


def default_out_dir() -> Path:
    """Where the SFT stage writes when ``out_dir`` is null: ``<results>/mini/work/sft``."""
    return results_dir() / "mini" / "work" / "sft"


# ---------------------------------------------------------------- model and data


def init_model(arch: dict[str, Any] | None, seed: int):
    """The tiny model and its tokenizer; ``arch`` overrides ``tiny_model.TINY_ARCH`` (fresh random init).

    With no overrides this is the cached tiny model itself. Overrides build a Qwen2 model of another
    size with the same tokenizer, special tokens and generation config (head_dim stays 64, which
    vLLM's CPU attention needs), so checkpoints stay interchangeable for training and evaluation.
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig, Qwen2ForCausalLM

    from pspo_repro.training.tiny_model import tiny_model_path

    base = tiny_model_path()
    tokenizer = AutoTokenizer.from_pretrained(base)
    if not arch:
        return AutoModelForCausalLM.from_pretrained(
            base, dtype=torch.float32, use_safetensors=True
        ), tokenizer
    model_cfg = arch_config(arch)
    torch.manual_seed(seed)
    model = Qwen2ForCausalLM(model_cfg)
    model.generation_config = GenerationConfig.from_pretrained(base)
    return model, tokenizer


def arch_config(arch: dict[str, Any]):
    """The tiny model's Qwen2 config with ``arch``'s fields replaced (ValueError naming a field it lacks)."""
    from transformers import AutoConfig

    from pspo_repro.training.tiny_model import tiny_model_path

    base_cfg = AutoConfig.from_pretrained(tiny_model_path())
    for key in arch:
        if not hasattr(base_cfg, key):
            raise ValueError(f"model.arch: {key!r} is not a Qwen2Config field")
    # Rebuilt from a dict, not set attribute by attribute: fields derived at construction (layer_types, one
    # per layer) must follow num_hidden_layers.
    fields = {k: v for k, v in base_cfg.to_dict().items() if k not in ("layer_types", "max_window_layers")}
    model_cfg = type(base_cfg)(**{**fields, **arch})
    if model_cfg.head_dim * model_cfg.num_attention_heads != model_cfg.hidden_size:
        raise ValueError(
            f"model.arch: hidden_size {model_cfg.hidden_size} must equal num_attention_heads "
            f"{model_cfg.num_attention_heads} x head_dim {model_cfg.head_dim}"
        )
    return model_cfg


def num_parameters(arch: dict[str, Any]) -> int:
    """Parameters of the SFT model ``arch`` builds (tied embedding counted once), without allocating it."""
    import torch
    from transformers import Qwen2ForCausalLM

    # The config first, outside the meta device: on a fresh clone it builds and saves the tiny model (real
    # tensors), which under the meta device fails ("Cannot copy out of meta tensor").
    config = arch_config(arch)
    with torch.device("meta"):
        model = Qwen2ForCausalLM(config)
    return sum(p.numel() for p in model.parameters())


def premature_answer(solution: str) -> str:
    """A two-step solution cut after its first worked line, answering that line's result.

    ``a + b = d x.\\nThen d - c = e x are left.\\n#### e`` becomes ``a + b = d x.\\n#### d``: the response
    stops one computation early and answers the intermediate value, so the gold number appears nowhere in
    it (the generator keeps the gold distinct from every number of the question and from ``d``). A
    solution with fewer than two worked lines (the held-out comparisons) is returned unchanged.
    """
    head, sep, _ = solution.rpartition("####")
    lines = head.rstrip("\n").split("\n")
    result = re.search(r"=\s*(\d+)", lines[0])
    if not sep or len(lines) < 2 or result is None:
        return solution
    return f"{lines[0]}\n#### {result.group(1)}"


def with_habit(problems: list, frac: float, seed: int) -> list:
    """A seeded ``frac`` of ``problems`` with a premature final answer (``premature_answer``), the rest kept.

    The habit gives the SFT model a systematic, prompt-independent mistake that its own samples often
    avoid: it stops after the first worked line and answers the intermediate result. RL can unlearn it
    from the reward alone by adding the missing second computation, which raises true accuracy (the
    gold appears anywhere) as well as reward-style accuracy; what RL on a pretrained LLM mostly does is
    the same kind of selection (turn pass@k into pass@1).
    """
    import dataclasses
    import random

    if not 0.0 <= frac <= 1.0:
        raise ValueError(f"data.habit_frac={frac}: must be in [0, 1]")
    if frac == 0.0:
        return list(problems)
    rng = random.Random(f"pspo-sft-habit/{seed}")
    return [
        dataclasses.replace(p, solution=premature_answer(p.solution)) if rng.random() < frac else p
        for p in problems
    ]


def sft_dataset(problems: list, template: str):
    """Prompt-completion conversational rows: the RL prompt messages and the solution as assistant turn."""
    from datasets import Dataset

    from pspo_repro.data.prompts import build_messages

    return Dataset.from_list(
        [
            {
                "prompt": build_messages(p.question, template),
                "completion": [{"role": "assistant", "content": p.solution}],
            }
            for p in problems
        ]
    )


# ---------------------------------------------------------------- greedy validation accuracy


def _correct(response: str, gold: str) -> bool:
    """The project's reward-style check (grading.reward_correct); a ``#### N`` match if it is missing."""
    try:
        from pspo_repro.scoring.grading import reward_correct
    except ImportError:  # pragma: no cover - grading.py is part of the package
        m = re.search(r"####\s*([-+]?\d+)", response)
        return bool(m) and m.group(1) == gold
    return reward_correct(response, gold, "numeric")


def greedy_accuracy(
    model, tokenizer, problems: list, template: str, max_new_tokens: int, batch_size: int
) -> dict[str, Any]:
    """Top-1 accuracy at T=0 (greedy, one sample) with the RL prompt; also the mean completion length."""
    import torch

    from pspo_repro.data.prompts import render_prompt

    model.eval()
    tokenizer.padding_side = "left"  # generation continues from the right end of every row
    correct, lengths, samples = 0, [], []
    eos = tokenizer.convert_tokens_to_ids("<|im_end|>")
    for start in range(0, len(problems), batch_size):
        batch = problems[start : start + batch_size]
        prompts = [render_prompt(tokenizer, p.question, template) for p in batch]
        enc = tokenizer(prompts, return_tensors="pt", padding=True, add_special_tokens=False)
        with torch.no_grad():
            out = model.generate(
                **enc, do_sample=False, max_new_tokens=max_new_tokens, pad_token_id=tokenizer.pad_token_id
            )
        for p, ids in zip(batch, out[:, enc["input_ids"].shape[1] :].tolist(), strict=True):
            n = next((i + 1 for i, t in enumerate(ids) if t == eos), len(ids))
            text = tokenizer.decode(ids[:n], skip_special_tokens=True)
            ok = _correct(text, p.answer)
            correct += ok
            lengths.append(n)
            if len(samples) < 5:
                samples.append({"id": p.id, "gold": p.answer, "response": text, "correct": ok})
    return {
        "accuracy": correct / len(problems),
        "num_prompts": len(problems),
        "mean_length": sum(lengths) / len(lengths),
        "max_length": max(lengths),
        "samples": samples,
    }


# ---------------------------------------------------------------- the stage


def _identity(cfg: DictConfig) -> dict[str, Any]:
    """The settings that determine the checkpoint (not where it goes or how fast it runs)."""
    resolved = OmegaConf.to_container(cfg, resolve=True)
    return {k: resolved[k] for k in ("seed", "data", "model", "prompt_template", "train")}


PROGRESS = "progress.json"  # {"step", "max_steps"} while training: the mini orchestrator's bar reads it


def progress_callback(path: Path, every: int = 10):
    """A TrainerCallback that writes ``{"step", "max_steps"}`` to ``path`` every ``every`` steps and at
    the end, so a parent process can show a step bar for this subprocess (atomic writes)."""
    from transformers import TrainerCallback

    class _Progress(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            if state.global_step % every == 0 or state.global_step == state.max_steps:
                write_json(path, {"step": state.global_step, "max_steps": state.max_steps})

    return _Progress()


def run_sft(cfg: DictConfig) -> dict[str, Any]:
    """Train (unless already finished), save the checkpoint, measure greedy validation accuracy."""
    out_dir = Path(cfg.out_dir) if cfg.get("out_dir") else default_out_dir()
    marker = out_dir / MARKER
    identity = _identity(cfg)
    if marker.exists():
        done = _finished_record(marker, out_dir, identity)
        if done is not None:
            return done

    import_frozen(SFT_STACK)  # what the lines below load, with the collector paused
    import torch
    from trl import SFTConfig, SFTTrainer

    if cfg.threads:
        torch.set_num_threads(int(cfg.threads))
    t0, cpu0 = time.time(), time.process_time()
    splits, held = _sft_splits(cfg)
    arch = OmegaConf.to_container(cfg.model.arch, resolve=True) if cfg.model.arch else None
    model, tokenizer = init_model(arch, cfg.seed)
    n_params = sum(p.numel() for p in model.parameters())
    log.info(
        "model: %d parameters; %d + %d held-out train rows",
        n_params,
        len(splits["train"]),
        len(held["train"]),
    )

    work = out_dir / "trainer"  # TRL's output_dir; nothing is saved there (save_strategy=no)
    trainer = SFTTrainer(
        model=model,
        args=SFTConfig(**_sft_args(cfg, work)),
        train_dataset=sft_dataset(
            with_habit(splits["train"], float(cfg.data.get("habit_frac", 0.0)), cfg.seed) + held["train"],
            cfg.prompt_template,
        ),
        processing_class=tokenizer,
        callbacks=[progress_callback(out_dir / PROGRESS)],
    )
    train_out = trainer.train()
    train_s = time.time() - t0
    model_dir = _save_checkpoint(trainer, tokenizer, out_dir, work)

    def validate(problems: list) -> dict[str, Any]:
        return greedy_accuracy(trainer.model, tokenizer, problems, cfg.prompt_template, cfg.eval.max_new_tokens,
                               cfg.eval.batch_size)  # fmt: skip

    val = validate(splits["validation"])
    val_heldout = validate(held["validation"]) if held["train"] else None
    record = {
        "status": "finished",
        "identity": identity,
        "config": OmegaConf.to_container(cfg, resolve=True),
        "checkpoint": str(model_dir),
        "num_parameters": n_params,
        "train_loss": train_out.training_loss,
        "train_steps": train_out.global_step,
        "train_seconds": round(train_s, 1),
        "total_seconds": round(time.time() - t0, 1),
        # CPU seconds of this process: about the wall time on an idle machine with threads=1 (the wall
        # time on a shared machine says more about the neighbours than about the stage).
        "cpu_seconds": round(time.process_time() - cpu0, 1),
        "val": val,
        "val_heldout": val_heldout,
        "versions": package_versions(),
        "git_sha": git_sha(),
        "torch_threads": torch.get_num_threads(),
    }
    write_json(marker, record)  # last: its presence means the checkpoint is complete
    log.info(
        "SFT finished: val greedy accuracy %.3f (%d prompts; held-out %s), %.0f s; checkpoint %s",
        val["accuracy"], val["num_prompts"], val_heldout and round(val_heldout["accuracy"], 3),
        record["total_seconds"], model_dir,
    )  # fmt: skip
    return record


def _sft_splits(cfg: DictConfig) -> tuple[dict[str, list], dict[str, list]]:
    """Data step: the rewarded task's train and validation rows, and the held-out skill's (synthetic_heldout:
    SFT rows without the habit, none when ``data.heldout_n_train`` is 0; RL never sees these prompts)."""
    from pspo_repro.data.synthetic import SyntheticConfig, generate

    data_cfg = SyntheticConfig(
        seed=cfg.data.seed, max_number=cfg.data.max_number, max_factor=cfg.data.max_factor
    )
    splits = generate({"train": cfg.data.n_train, "validation": cfg.data.n_val, "test": 0}, data_cfg)
    n_held = int(cfg.data.get("heldout_n_train", 0) or 0)
    held = generate(
        {"train": n_held, "validation": cfg.data.n_val if n_held else 0, "test": 0},
        data_cfg,
        task="synthetic_heldout",
    )
    return splits, held


def _finished_record(marker: Path, out_dir: Path, identity: dict[str, Any]) -> dict[str, Any] | None:
    """Skip step: the finished stage's ``sft.json``, refused when another config wrote it; None (train again,
    with one warning naming the file) when it is cut, edited or not UTF-8 and so says nothing."""
    try:
        done = json.loads(marker.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:  # UnicodeDecodeError and JSONDecodeError are ValueErrors
        done, why = None, str(exc).splitlines()[0]
    else:
        why = "not an SFT record with its validation accuracy"
    if not isinstance(done, dict) or not isinstance(done.get("val"), dict) or "accuracy" not in done["val"]:
        log.warning("%s: %s; training again", marker, why)
        return None
    if done.get("identity") != identity:
        raise RuntimeError(
            f"{marker} was written by a different SFT config; delete {out_dir} or set out_dir=... "
            f"(finished: {done.get('identity')}, asked: {identity})"
        )
    log.info("SFT already finished in %s (val accuracy %.3f); skipping", out_dir, done["val"]["accuracy"])
    return done


def _sft_args(cfg: DictConfig, work: Path) -> dict[str, Any]:
    """Trainer settings step: the keyword arguments of TRL's ``SFTConfig`` (CPU, seeded, no saves)."""
    t = cfg.train
    return dict(
        output_dir=str(work),
        num_train_epochs=t.epochs,
        max_steps=t.max_steps if t.max_steps else -1,
        learning_rate=t.lr,
        lr_scheduler_type=t.scheduler,
        warmup_steps=t.warmup_ratio,  # a float < 1 is a ratio in transformers 5
        weight_decay=t.weight_decay,
        per_device_train_batch_size=t.batch_size,
        max_grad_norm=t.max_grad_norm,
        max_length=t.max_length,
        seed=cfg.seed,
        data_seed=cfg.seed,
        # Seeded via set_seed; full_determinism (deterministic kernels) doubles CPU time per step and is
        # not needed on CPU, where one-thread kernels are already deterministic (tests check it).
        full_determinism=False,
        use_cpu=True,
        bf16=False,
        logging_steps=t.logging_steps,
        save_strategy="no",
        report_to="none",
        disable_tqdm=True,
        dataloader_num_workers=0,
    )


def _save_checkpoint(trainer, tokenizer, out_dir: Path, work: Path) -> Path:
    """Save step: the trained model and tokenizer as safetensors in ``<out_dir>/model``; TRL's folder goes."""
    model_dir = out_dir / MODEL_SUBDIR
    if model_dir.exists():  # a half-written checkpoint from an interrupted run
        shutil.rmtree(model_dir)
    trainer.model.save_pretrained(model_dir, safe_serialization=True)
    tokenizer.save_pretrained(model_dir)
    shutil.rmtree(work, ignore_errors=True)
    return model_dir


def _task(cfg: DictConfig) -> None:
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    run_sft(cfg)


def main() -> int:
    """Entry point of ``python -m pspo_repro.sft [key=value ...]``: ``cli.run_command`` with Hydra's own folder
    checked first (no name may steer it; the pipeline's overrides are composed by Hydra once, not twice), then
    Hydra runs ``run_sft``."""
    from pspo_repro.common.cli import run_command

    return run_command("sft", _task, compose_check=False)
