"""Hydra entry point: ``python -m pspo_repro.train [model=..] [method=..] [experiment=..] [key=value ..]``.

Order of work, so that bad input costs nothing: check group names on the command line (one-line error,
exit 2), compose, validate the method's hyperparameters, rewards, dataset and trainer settings, load the
data, and only then create the run folder and load the model. Torch/TRL are imported after validation.
A finished run folder is reported and skipped; an unfinished one resumes from its last checkpoint.
One process at a time trains a run folder (an exclusive lock on ``<run>/.lock``; a second one fails at
once). With several processes (``accelerate launch``) only the main one writes run.json and prints.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import logging
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from pspo_repro.common.cli import UsageError, fail, first_line, run_command
from pspo_repro.common.provenance import git_sha, package_versions
from pspo_repro.common.run_dir import (
    identity_config,
    run_folder,
    tag_from_overrides,
)
from pspo_repro.common.run_folder import RunFolder
from pspo_repro.common.startup import TRAINING_STACK, import_frozen
from pspo_repro.training import trainer_schema
from pspo_repro.training.config_transforms import apply_per_method, apply_run_length
from pspo_repro.training.settings import (  # the settings checks: their own module, read in one place
    check_group_choices,
    lr_token_budget,
    user_data_args,
    validate,
)
from pspo_repro.training.tracking import tracker_run

log = logging.getLogger("pspo_repro.train")
# A results folder that cannot be written (read-only, no permission, full): one line, not a traceback.
WRITE_ERRNOS = frozenset({errno.EACCES, errno.EPERM, errno.EROFS, errno.ENOSPC, errno.EDQUOT})


def load_data(cfg: DictConfig):
    """Training and validation problems (validation cut to ``trainer.eval_limit``): a registry set, or a
    user's (``data.source``: ``data.user_sets``)."""
    from pspo_repro.data import datasets as data
    from pspo_repro.data import user_sets

    try:
        if "source" in cfg.data.keys():
            user = user_sets.UserSet.from_config(cfg.data, "data", cfg.data.get("split") or "train")
            problems = user_sets.load_user_problems(user, "data")
            train, val = user_sets.train_val(
                problems, cfg.seed, cfg.data.get("n_train"), cfg.data.get("n_val"), user.source
            )
        else:
            train, val = data.load_train_val(
                cfg.data.name, cfg.seed, n_train=cfg.data.n_train, n_val=cfg.data.get("n_val")
            )
    except ValueError as exc:  # DataError: names the file tried (and PSPO_DATA_DIR), the row, the column
        raise UsageError(str(exc)) from None
    limit = cfg.trainer.get("eval_limit")
    return train, (val[:limit] if limit else val)


def to_dataset(problems, tokenizer, template: str, max_prompt_length: int | None):
    """TRL's conversational format: ``prompt`` = chat messages; gold columns go to the reward functions."""
    from datasets import Dataset

    from pspo_repro.data.prompts import build_messages
    from pspo_repro.training.prompt_lengths import prompt_lengths

    rows, dropped = [], 0
    chats = [build_messages(p.question, template) for p in problems]
    # Counted once per tokenizer and prompt set, then read back by later runs (training.prompt_lengths).
    lengths = prompt_lengths(tokenizer, chats) if max_prompt_length else [0] * len(chats)
    for p, messages, n in zip(problems, chats, lengths, strict=True):
        if max_prompt_length and n > max_prompt_length:
            dropped += 1
            continue
        rows.append({"prompt": messages, "answer": p.answer, "answer_kind": p.answer_kind, "id": p.id})
    if dropped:
        log.warning("dropped %d prompts longer than %d tokens", dropped, max_prompt_length)
    return Dataset.from_list(rows)


# ---------------------------------------------------------------- training


def _grpo_config(cfg: DictConfig, folder: Path, method, use_cuda: bool):
    """TRL's ``GRPOConfig``: the trainer node's ``trl`` keys passed through under their own names
    (``training.trainer_schema``), and what this run derives (its folder and seed, the precision, the
    validation and checkpoint strategy, the logger, the method's passes and the reward weights)."""
    from trl import GRPOConfig

    from pspo_repro.training.models import EMULATED_BF16, native_bf16_cpu

    t = cfg.trainer
    bf16 = use_cuda if t.bf16 == "auto" else bool(t.bf16)
    if bf16 and not use_cuda and not native_bf16_cpu():
        log.warning(EMULATED_BF16)
    do_eval = bool(t.eval_steps)
    return GRPOConfig(
        **trainer_schema.trl_kwargs(t),
        output_dir=str(folder),
        run_name=str(folder.relative_to(folder.parents[2])),
        seed=cfg.seed,
        num_iterations=method.num_iterations,
        loss_type="dapo",  # unused by MethodGRPOTrainer's loss; TRL only reads it for init checks
        reward_weights=list(cfg.reward.weights) if cfg.reward.get("weights") is not None else None,
        bf16=bf16,
        use_cpu=not use_cuda,
        max_steps=t.max_steps if t.max_steps and t.max_steps > 0 else -1,
        eval_strategy="steps" if do_eval else "no",
        eval_steps=t.eval_steps if do_eval else None,
        # A step-0 validation is logged only: HF's eval_on_start does not enter best-checkpoint selection.
        eval_on_start=do_eval and bool(t.get("eval_on_start")),
        per_device_eval_batch_size=t.per_device_eval_batch_size or t.per_device_train_batch_size,
        save_strategy="steps",
        load_best_model_at_end=do_eval,
        metric_for_best_model="eval_reward" if do_eval else None,
        greater_is_better=True if do_eval else None,
        report_to=["wandb"] if cfg.logger.name == "wandb" else [],
        # the project the logged config names (TrainingArguments' own default is "huggingface")
        **({"project": str(cfg.logger.project)} if cfg.logger.get("project") else {}),
        # TRL's own correction stays off: the trainer's rollout correction computes it (effective_rollout_correction)
        vllm_importance_sampling_correction=False,
    )


def precision_record(trainer) -> dict[str, Any]:
    """What the optimizer updates and what the forward pass computes in: the parameter dtype(s) of the
    trainer's model and the autocast dtype of its mixed precision (None: no autocast)."""
    dtypes = sorted({str(p.dtype).removeprefix("torch.") for p in trainer.model.parameters()})
    mixed = str(getattr(trainer.accelerator, "mixed_precision", "no") or "no")
    autocast = {"bf16": "bfloat16", "fp16": "float16"}.get(mixed)
    return {"param_dtype": dtypes[0] if len(dtypes) == 1 else dtypes, "autocast_dtype": autocast,
            "mixed_precision": mixed}  # fmt: skip


def _spent_budget_state(checkpoint: Path, budget: int | None) -> dict | None:
    """``checkpoint``'s trainer state when it has already consumed the token budget, else None."""
    import json

    if not budget:
        return None
    state = json.loads((checkpoint / "trainer_state.json").read_text())
    return state if int(state.get("num_input_tokens_seen") or 0) >= int(budget) else None


def _finish_from_checkpoint(folder: Path, state: dict, record: dict, main_process: bool) -> Path:
    """Mark the run finished from the final checkpoint's trainer ``state`` (no training step taken)."""
    best = state.get("best_model_checkpoint")
    record.update(
        status="finished",
        final_step=int(state["global_step"]),
        num_tokens=int(state.get("num_input_tokens_seen") or 0),
        best_checkpoint=Path(best).name if best else None,
        best_metric=state.get("best_metric"),
        stop_reason="token_budget",
    )
    if main_process:
        RunFolder(folder).write(record)
        print(
            f"finished: {folder} (the token budget was reached at step {record['final_step']} before a kill)"
        )
    return folder


def _prepare(cfg: DictConfig, folder: Path, method) -> tuple[Any, Any, bool]:
    """The tokenizer, TRL's GRPOConfig and whether CUDA is used; errors become one-line UsageErrors."""
    import torch

    from pspo_repro.common.hub import offline_unless_reachable
    from pspo_repro.training.models import hub_model_hint, hub_model_id, load_tokenizer, tokenizer_source

    use_cuda = torch.cuda.is_available()
    hub_id = hub_model_id(cfg.model)
    if hub_id:
        offline_unless_reachable()  # no network: the local cache or a one-line error, not 50 s of retries
    try:
        tokenizer = load_tokenizer(cfg.model)
    except (OSError, ValueError) as exc:
        hint = f"; {hub_model_hint(hub_id)}" if hub_id else ""
        raise UsageError(
            f"cannot load the tokenizer of {tokenizer_source(cfg.model)}: "
            f"{first_line(exc).rstrip('.') or type(exc).__name__}{hint}"
        ) from None
    try:
        args = _grpo_config(cfg, folder, method, use_cuda)
    except ValueError as exc:
        raise UsageError(
            f"TRL's GRPOConfig refused the trainer settings: {first_line(exc) or type(exc).__name__}"
        ) from None
    return tokenizer, args, use_cuda


def is_main_process() -> bool:
    """Global rank 0, or a plain single process. ``RANK`` is set for every process by torchrun,
    ``accelerate launch`` and the DeepSpeed launcher; read before the Trainer sets up torch.distributed."""
    return int(os.environ.get("RANK", "0") or 0) == 0


@contextlib.contextmanager
def run_folder_lock(folder: Path):
    """Hold an exclusive ``flock`` on ``<folder>/.lock`` (created with the folder) for the ``with`` block.

    Taken without waiting: a second process training the same folder gets a UsageError at once instead
    of two jobs writing one run. The kernel drops the lock when the holder exits, however it ends.
    """
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / ".lock", "a+b") as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise UsageError(
                f"{folder} is being trained by another process (it holds {folder / '.lock'}); "
                "wait for that job to end before rerunning"
            ) from None
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def run(cfg: DictConfig, overrides: list[str] | None = None) -> Path | None:
    """Train one run described by a composed config; returns its folder (None for a dry run).

    Everything after validation runs under ``run_folder_lock`` (taken by the main process only).
    """
    with contextlib.ExitStack() as locks:
        return _run(cfg, overrides, locks)


@dataclass(frozen=True)
class _Plan:
    """A run as validation settles it, before anything is loaded or written."""

    overrides: list[str]
    method: Any  # the parsed method config (methods.parse_method_config)
    train_rows: list
    val_rows: list
    tag: str
    folder: Path
    resolved: dict[str, Any]  # the composed config, as run.json records it
    identity: dict[str, Any]

    @property
    def run(self) -> RunFolder:
        """The run's folder, whose run.json it reads and writes."""
        return RunFolder(self.folder)


def _run(cfg: DictConfig, overrides: list[str] | None, locks: contextlib.ExitStack) -> Path | None:
    """``run``'s steps in order: plan, prepare and lock, check the folder, then train and record."""
    if overrides is None:
        overrides = _hydra_overrides()
    plan = _plan_run(cfg, overrides)
    # A finished run is reported before the tokenizer and TRL load, so rerunning a finished grid costs each
    # job only the interpreter and the settings checks. A finished run.json is final, so it is safe to read
    # without the lock; a run in any other state is read again under the lock below.
    if _finished_already(plan, plan.run.read()):
        return plan.folder
    prepared = None
    if not cfg.get("dry_run"):
        import_frozen(TRAINING_STACK)  # the stack the steps below load, with the collector paused
        prepared = _prepare_and_lock(cfg, plan, locks)

    previous = plan.run.read()
    if _finished_already(plan, previous):
        return plan.folder
    if cfg.get("dry_run"):
        print(OmegaConf.to_yaml(cfg, resolve=True))
        print(f"run folder: {plan.folder}")
        return None
    tokenizer, args, use_cuda = prepared

    # TRL's trainer and the callbacks load here, past the dry-run return but before anything is written:
    # a broken install fails with the folder untouched. The steps below import their names from them.
    import pspo_repro.training.callbacks  # noqa: F401
    import pspo_repro.training.trainer  # noqa: F401

    train_ds, eval_ds = _datasets(cfg, plan, tokenizer)
    record, resume, main_process = _start_record(cfg, plan, previous, args, locks)
    if resume and (spent := _spent_budget_state(resume, cfg.trainer.token_budget)):
        # Killed after the budget's final checkpoint but before run.json said finished: training again
        # would add a step past the budget. The checkpoint's trainer state is the run's end.
        return _finish_from_checkpoint(plan.folder, spent, record, main_process)
    # one wandb run per job, finished when the job ends (the ExitStack closes it before the lock)
    locks.enter_context(tracker_run(cfg, plan.folder, args.run_name, main_process))

    trainer, nonfinite, budget, stopper = _build_trainer(
        cfg, plan, tokenizer, args, use_cuda, train_ds, eval_ds
    )
    _check_precision(cfg, trainer, record)
    if main_process:
        plan.run.write(record)
    return _train_and_record(trainer, plan.folder, record, resume, nonfinite, budget, stopper)


def _plan_run(cfg: DictConfig, overrides: list[str]) -> _Plan:
    """Step 1: merge the per-method values, validate, load the data and name the run folder (no writes)."""
    apply_per_method(cfg, overrides)
    apply_run_length(cfg, overrides)
    method = validate(cfg)
    train_rows, val_rows = load_data(cfg)
    try:
        tag = tag_from_overrides(cfg, overrides)
        folder = run_folder(cfg, tag)
    except OmegaConfBaseException:  # an unset ${oc.env:...} in run_tag: _task reports it as a bad value
        raise
    except ValueError as exc:  # UnsafePathError, or a data.default_reward that names no reward config
        raise UsageError(str(exc)) from None
    resolved = OmegaConf.to_container(cfg, resolve=True)
    resolved.pop("per_method", None)
    resolved.pop("per_method_as_run", None)
    resolved["method"] = {**resolved["method"], **method.params}  # defaults made explicit
    identity = identity_config(resolved)
    return _Plan(overrides, method, train_rows, val_rows, tag, folder, resolved, identity)


def _prepare_and_lock(cfg: DictConfig, plan: _Plan, locks: contextlib.ExitStack) -> tuple[Any, Any, bool]:
    """Step 2: the tokenizer, TRL's config and CUDA (``_prepare``), then the folder's lock (main process)."""
    # Tokenizer and TRL's config before the lock (which creates the folder): a tokenizer that cannot
    # load or a setting TRL refuses is a one-line error with nothing written.
    prepared = _prepare(cfg, plan.folder, plan.method)
    if is_main_process():
        locks.enter_context(run_folder_lock(plan.folder))
    return prepared


def _finished_already(plan: _Plan, previous: dict | None) -> bool:
    """Step 3: refuse a folder of another configuration; True (reported) when this run has finished."""
    return plan.run.finished_already(plan.identity, previous, announce=is_main_process())


def _datasets(cfg: DictConfig, plan: _Plan, tokenizer) -> tuple[Any, Any]:
    """Step 4: the training prompts and (when validating) the validation prompts as TRL datasets."""
    t = cfg.trainer
    train_ds = to_dataset(plan.train_rows, tokenizer, cfg.data.prompt_template, t.max_prompt_length)
    eval_ds = (
        to_dataset(plan.val_rows, tokenizer, cfg.data.prompt_template, t.max_prompt_length)
        if t.eval_steps
        else None
    )
    return train_ds, eval_ds


def _start_record(
    cfg: DictConfig, plan: _Plan, previous: dict | None, args, locks: contextlib.ExitStack
) -> tuple[dict[str, Any], Path | None, bool]:
    """Step 5: create the folder, find the checkpoint to resume from and write run.json as running."""
    # Returns the record (later steps update it; the failure hook writes its latest state), the
    # checkpoint to resume from (None: start afresh) and whether this is the main process.
    folder = plan.folder
    main_process = is_main_process()  # only it writes run.json and metrics.jsonl
    resume = plan.run.resume_point(main_process)
    step0 = int(resume.name.split("-")[1]) if resume else 0
    if resume:
        args.eval_on_start = False  # the curve's step-0 point is logged already; no duplicate at step0
    record = {
        "schema_version": 1,
        "model": cfg.model.name,
        "method": cfg.method.name,
        "seed": cfg.seed,
        "tag": plan.tag,
        "run_dir": str(folder),
        "status": "running",
        "overrides": list(plan.overrides),
        "identity": plan.identity,
        "config": plan.resolved,
        "git_sha": git_sha(),
        "versions": package_versions(),
        "resumed_from": str(resume) if resume else None,
        "started_at": (previous or {}).get("started_at") or time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "best_checkpoint": None,
        "final_step": step0,
        "num_tokens": None,
    }
    if main_process:
        plan.run.write(record)
        locks.push(plan.run.failure_hook(record))
    return record, resume, main_process


def _build_trainer(
    cfg: DictConfig, plan: _Plan, tokenizer, args, use_cuda: bool, train_ds, eval_ds
) -> tuple[Any, Any, Any, Any]:
    """Step 6: load the model and assemble the trainer with its callbacks."""
    # Also returns the non-finite, token-budget and stop-after-step callbacks (the last two None when
    # unset): the final record reads their state.
    from pspo_repro.scoring.rewards import get_reward
    from pspo_repro.training.callbacks import (
        CheckpointMarkerCallback,
        MetricsJsonlCallback,
        NonFiniteCallback,
        StopAfterStepCallback,
        TokenBudgetCallback,
        UpdateNormCallback,
    )
    from pspo_repro.training.models import load_model, save_random_init
    from pspo_repro.training.trainer import MethodGRPOTrainer

    t = cfg.trainer
    folder = plan.folder
    model = load_model(cfg.model, tokenizer, use_cuda, training=True)
    if cfg.model.get("random_init") and t.use_vllm and t.vllm_mode == "colocate":
        save_random_init(model, tokenizer, folder)  # vLLM loads the model from its name_or_path
    # NonFinite first (it adds its count to the logs Metrics writes); the marker last (after the flush).
    nonfinite = NonFiniteCallback(folder, skip=bool(t.get("skip_nonfinite", False)))
    callbacks: list[Any] = [nonfinite]
    if t.get("log_update_norm") or t.get("log_param_sum"):  # before Metrics, which writes the logs it adds to
        callbacks.append(UpdateNormCallback(bool(t.get("log_update_norm")), bool(t.get("log_param_sum"))))
    callbacks.append(MetricsJsonlCallback(folder / "metrics.jsonl"))
    budget = TokenBudgetCallback(t.token_budget, evaluate=bool(t.eval_steps)) if t.token_budget else None
    stopper = StopAfterStepCallback(t.stop_after_step) if t.get("stop_after_step") else None
    callbacks += [c for c in (budget, stopper) if c is not None]
    callbacks.append(CheckpointMarkerCallback())
    trainer = MethodGRPOTrainer(
        model=model,
        reward_funcs=[get_reward(n) for n in cfg.reward.funcs],
        args=args,
        train_dataset=train_ds,
        eval_dataset=eval_ds,
        processing_class=tokenizer,
        callbacks=callbacks,
        method_name=plan.method.name,
        method_params=plan.method.params,
        loss_agg=plan.method.loss_agg,
        lr_token_budget=lr_token_budget(t),
        rollout_correction=plan.method.rollout_correction,
        logprob_head=resolve_logprob_head(
            t.get("logprob_head", "auto"), use_cuda, plain_head_bytes(model, t)
        ),
        old_logps=t.get("old_logps", "auto"),
        token_draw=t.get("token_draw", "multinomial"),
        validation_loss=bool(t.get("validation_loss", True)),
    )
    return trainer, nonfinite, budget, stopper


# The plain head keeps a micro-batch's completion logits (and their softmax) for the backward pass, which TRL's
# fused head recomputes instead: above this estimate ``auto`` takes the fused head (e.g. Qwen's 151,936-way
# vocabulary at the paper's batch), below it the plain head (the CPU mini: ~0.15 GB).
PLAIN_HEAD_MAX_BYTES = 2 * 1024**3


def plain_head_bytes(model, t) -> int:
    """The plain head's estimated peak for one micro-batch: rows x completion tokens x vocabulary x fp32, three
    copies (logits, log-softmax, its gradient)."""
    vocab = int(model.config.get_text_config().vocab_size)
    rows = max(int(t.per_device_train_batch_size), int(t.get("per_device_eval_batch_size") or 0))
    return rows * int(t.max_completion_length) * vocab * 4 * 3


def resolve_logprob_head(name: str, use_cuda: bool, plain_bytes: int = 0) -> str:
    """``trainer.logprob_head``: ``auto`` is TRL's fused head on CUDA (its Triton kernel scores the completion
    tokens only) or where the plain head's logits would exceed ``PLAIN_HEAD_MAX_BYTES``, and the plain head
    elsewhere (trainer.MethodGRPOTrainer._get_per_token_logps_and_entropies)."""
    if name == "auto":
        return "fused" if use_cuda or plain_bytes > PLAIN_HEAD_MAX_BYTES else "plain"
    return name


def _check_precision(cfg: DictConfig, trainer, record: dict[str, Any]) -> None:
    """Step 7: add the trainer's precision to ``record``; non-fp32 parameters need model.train_dtype."""
    record["precision"] = precision_record(trainer)
    if record["precision"]["param_dtype"] != "float32" and not cfg.model.get("train_dtype"):
        # load_model asked for fp32; anything else (a plugin model class, a cast) is caught here, not later
        raise UsageError(
            f"training parameters are {record['precision']['param_dtype']}, not float32 (model.dtype="
            f"{cfg.model.get('dtype')}); set model.train_dtype to opt in"
        )


def _train_and_record(
    trainer, folder: Path, record: dict[str, Any], resume: Path | None, nonfinite, budget, stopper
) -> Path:
    """Step 8: train (from ``resume`` when set) and write the final run.json; returns the run folder."""
    import trl

    from pspo_repro.training.callbacks import NonFiniteError

    log.info("trl %s, run folder %s, resume from %s, precision %s", trl.__version__, folder, resume,
             record["precision"])  # fmt: skip
    try:
        trainer.train(resume_from_checkpoint=str(resume) if resume else None)
    except NonFiniteError as exc:
        if trainer.is_world_process_zero():
            RunFolder(folder).write({**record, "status": "failed", "error": str(exc)})
        raise UsageError(str(exc)) from None

    state = trainer.state
    stopped_early = stopper is not None and stopper.fired
    best = state.best_model_checkpoint
    record.update(
        status="running" if stopped_early else "finished",
        final_step=state.global_step,
        num_tokens=int(state.num_input_tokens_seen),
        best_checkpoint=str(Path(best).relative_to(folder)) if best else None,
        best_metric=state.best_metric,
        nonfinite_skipped=len(nonfinite.skipped_steps),
        nonfinite_skipped_steps=nonfinite.skipped_steps,
        # max |r - 1| on first passes over fresh rollouts since this process started (null: not measured)
        first_pass_max_abs_ratio_dev=trainer.ratio_dev_for_json(trainer.first_pass_max_abs_ratio_dev),
        stop_reason="stop_after_step"
        if stopped_early
        else ("token_budget" if budget and budget.reached else "max_steps"),
    )
    if trainer.is_world_process_zero():
        RunFolder(folder).write(record)
        print(
            f"{record['status']}: {folder} (step {state.global_step}, {record['num_tokens']} tokens, best {record['best_checkpoint']})"
        )
    return folder


def _hydra_overrides() -> list[str]:
    try:
        from hydra.core.hydra_config import HydraConfig

        return list(HydraConfig.get().overrides.task)
    except (ImportError, ValueError):
        return []


def _task(cfg: DictConfig) -> None:
    try:
        run(cfg)
    except UsageError as exc:  # one line and exit 2; a launcher job (Slurm) raises it
        fail(str(exc))
    except OmegaConfBaseException as exc:  # e.g. run_tag=${oc.env:UNSET}: resolved only when read
        fail(f"bad config value: {first_line(exc)}")
    except OSError as exc:
        if exc.errno not in WRITE_ERRNOS:
            raise
        # A read-only or full results folder: name the target, not Python's stack.
        fail(
            f"cannot write {exc.filename or 'the run folder'}: {exc.strerror or exc} (check PSPO_RESULTS_DIR)"
        )


def _checked_groups(argv: list[str]) -> list[str]:
    """``argv`` with ``data=<file|folder|hub id>`` read as a user set (``user_data_args``), once its
    ``group=choice`` names are known ones (UsageError listing the options otherwise)."""
    argv = user_data_args(argv)
    check_group_choices(argv)
    return argv


def main() -> int:
    """Entry point of ``python -m pspo_repro.train``: one-line errors for bad groups, keys and output folders
    (``cli.run_command``: before Hydra makes its log folder or a run folder is made), then Hydra."""
    return run_command("train", _task, prepare=_checked_groups, output_folders="runs")
