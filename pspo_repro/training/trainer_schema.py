"""The ``trainer`` config node's schema: every key of conf/trainer/default.yaml declared once, with its type, its
range and where it goes.

The values (the paper's, quoted beside each one) live in conf/trainer/default.yaml and the presets over it, as
lightning-hydra-template keeps them; this dataclass says what each key is. ``training.settings`` checks every
number and flag against it (one ``cli.check_number`` per key, the range from here), and ``training.grpo``
passes the keys marked ``trl`` to TRL's ``GRPOConfig`` under their own names, adding only the few it derives
(the precision, the validation and checkpoint strategy, the logger). A key added to the yaml without a field
here, or the other way round, fails ``tests/training/test_trainer_schema.py``; a ``trl`` key that TRL's
config does not have fails there too.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any


def _key(kind: type, *, low: float | None = None, high: float | None = None, low_open: bool = False,
         null: bool = False, trl: bool = False, when_set: bool = False, checked: bool = True) -> Any:  # fmt: skip
    """A schema field's metadata: ``kind`` (int, float, bool or str), the range of a number (``low``, ``high``,
    ``low_open``; ``null``: None allowed), ``trl``: passed to ``GRPOConfig`` under the same name
    (``when_set``: only when it is set, else TRL's default), ``checked``: a number or flag this module's
    check covers (a choice among names is checked where its options are read)."""
    meta = {"kind": kind, "low": low, "high": high, "low_open": low_open, "null": null, "trl": trl,
            "when_set": when_set, "checked": checked}  # fmt: skip
    return field(metadata=meta)


@dataclass(frozen=True)
class TrainerNode:
    """The keys of the ``trainer`` node (conf/trainer/default.yaml), in its order."""

    learning_rate: float = _key(float, low=0, low_open=True, trl=True)
    per_device_train_batch_size: int = _key(int, low=1, trl=True)
    gradient_accumulation_steps: int = _key(int, low=1, trl=True)
    steps_per_generation: int | None = _key(int, low=1, null=True, trl=True, when_set=True)
    num_generations: int = _key(int, low=2, trl=True)  # group advantages need G >= 2
    max_prompt_length: int | None = _key(int, low=1, null=True)  # the dataset's filter (TRL 1.16 has none)
    max_completion_length: int = _key(int, low=1, trl=True)
    temperature: float = _key(float, low=0, low_open=True, trl=True)
    top_p: float = _key(float, low=0, high=1, low_open=True, trl=True)
    beta: float = _key(float, low=0, trl=True)
    scale_rewards: str = _key(str, trl=True, checked=False)  # SCALE_REWARDS, checked in settings
    mask_truncated_completions: bool = _key(bool, trl=True)
    warmup_steps: int = _key(int, low=0, trl=True)
    lr_scheduler_type: str = _key(str, trl=True, checked=False)  # TRL's / HF's names, checked by them
    optim: str = _key(str, trl=True, checked=False)
    weight_decay: float = _key(float, low=0, trl=True)
    # 0 turns norm clipping off (HF); null is refused: HF compares it with 0 at the first optimizer step.
    max_grad_norm: float = _key(float, low=0, trl=True)
    bf16: Any = _key(str, checked=False)  # auto, true or false (settings); TRL's bf16 is derived from it
    gradient_checkpointing: bool = _key(bool, trl=True)
    length: str = _key(str, checked=False)  # token_budget | as_run (config_transforms.apply_run_length)
    token_budget: int | None = _key(int, low=1, null=True)
    max_steps: int | None = _key(int, low=-1, null=True)  # <= 0: num_train_epochs decides; TRL's is derived
    num_train_epochs: float | None = _key(float, low=0, null=True, trl=True)
    lr_horizon: str = _key(str, checked=False)  # run | epochs (config_transforms.apply_run_length)
    eval_steps: int | None = _key(int, low=1, null=True)  # null: no validation; TRL's strategy is derived
    eval_limit: int | None = _key(int, low=1, null=True)
    num_generations_eval: int | None = _key(int, low=1, null=True, trl=True, when_set=True)
    eval_on_start: bool = _key(bool)  # TRL's is derived (and needs validation)
    per_device_eval_batch_size: int | None = _key(int, low=1, null=True)  # null: the train batch size
    save_steps: int = _key(int, low=1, trl=True)
    save_total_limit: int | None = _key(int, low=1, null=True, trl=True)
    logging_steps: int = _key(int, low=1, trl=True)
    log_completions: bool = _key(bool, trl=True)
    disable_tqdm: bool = _key(bool, trl=True)
    use_vllm: bool = _key(bool, trl=True)
    vllm_mode: str = _key(str, trl=True, checked=False)  # colocate | server (settings)
    vllm_server_host: str = _key(str, trl=True, checked=False)
    vllm_server_port: int = _key(int, trl=True, checked=False)
    vllm_server_base_url: str | None = _key(str, trl=True, checked=False)
    vllm_gpu_memory_utilization: float = _key(float, low=0, high=1, low_open=True, trl=True)
    # TRL's own correction stays off: the trainer's rollout correction computes it (effective_rollout_correction)
    vllm_importance_sampling_correction: bool = _key(bool)
    skip_nonfinite: bool = _key(bool)
    log_update_norm: bool = _key(bool, checked=False)  # read as a switch (callbacks.UpdateNormCallback)
    log_param_sum: bool = _key(bool, checked=False)  # the per-step parameter checksum (the same callback)
    logprob_head: str = _key(str, checked=False)  # auto | fused | plain (settings)
    old_logps: str = _key(str, checked=False)  # auto | recompute | first_pass (settings, the trainer)
    token_draw: str = _key(str, checked=False)  # multinomial | inverse_cdf (settings, training/sampling.py)
    validation_loss: bool = _key(bool)  # the trainer's prediction_step; TRL has no such key
    stop_after_step: int | None = _key(int, low=1, null=True)


KEYS = {f.name: f.metadata for f in fields(TrainerNode)}


def numbers() -> list[tuple[str, dict[str, Any]]]:
    """(key, metadata) of every number the schema checks, in the node's order."""
    return [(k, m) for k, m in KEYS.items() if m["checked"] and m["kind"] in (int, float)]


def flags() -> list[str]:
    """The trainer's boolean keys the schema checks (true or false only)."""
    return [k for k, m in KEYS.items() if m["checked"] and m["kind"] is bool]


def trl_kwargs(trainer: Any) -> dict[str, Any]:
    """The keys marked ``trl`` of a composed ``trainer`` node, under their own names (``when_set`` ones only
    when set), for TRL's ``GRPOConfig``."""
    out = {}
    for k, m in KEYS.items():
        if m["trl"] and (not m["when_set"] or trainer.get(k)):
            out[k] = trainer.get(k)
    return out
