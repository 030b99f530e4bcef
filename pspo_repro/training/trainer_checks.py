"""The trainer's settings checks that need no model: which rollout corrections a method can fold, the log-prob
heads, and whether the first training pass over a batch can supply its old log-probs (``trainer.old_logps``).

``training.settings`` runs them before anything is built; ``MethodGRPOTrainer`` runs them again on its own
arguments.
"""

from __future__ import annotations

from pspo_repro.methods import method_extra_inputs, method_optional_inputs
from pspo_repro.methods import rollout_correction as rc


def check_rollout_correction(method_name: str, correction: rc.RolloutCorrection) -> None:
    """A method that takes ``importance_sampling_ratio`` (VESPO) folds a per-token weight into its own; a
    sequence-level IS mode cannot be folded so (as TRL's own check for vespo): ValueError."""
    step = correction.is_step
    if step is not None and step.mode in rc.SEQUENCE_IS_MODES:
        if "importance_sampling_ratio" in method_optional_inputs(method_name):
            raise ValueError(
                f"method {method_name!r} folds a token-level IS weight into its own: rollout_correction"
                f" {step.mode} is sequence-level; use token_tis or token_icepop"
            )


# How per-token log-probs are computed (``trainer.logprob_head``; ``auto`` resolves in training.grpo):
# TRL's fused LM head, or the model's logits on the completion positions (the same numbers, faster on CPU).
LOGPROB_HEADS = ("fused", "plain")
# Where the old log-probs come from when TRL stores them (``trainer.old_logps``): TRL's no-grad pass over the
# batch at rollout, or the first training pass's own log-probs, detached, kept with the batch for its later
# passes (``MethodGRPOTrainer.first_pass_old_logps_problem``); ``auto``: first_pass on CPU where it can, else
# recompute.
OLD_LOGPS = ("auto", "recompute", "first_pass")


def first_pass_problem(
    *,
    use_vllm: bool,
    rollout_correction_active: bool,
    method_name: str,
    beta: float,
    gradient_accumulation_steps: int,
    steps_per_generation: int | None,
) -> str | None:
    """Why the first training pass over a batch cannot supply its old log-probs (None: it can).

    It can when that pass runs the policy that sampled the batch, before any optimizer step on it, and nothing
    else reads the old log-probs at rollout: then the first pass's log-probs, detached, are what TRL's no-grad
    pass would compute from the same weights. On CPU they are equal bit for bit (every committed CPU run logged
    ``first_pass_max_abs_ratio_dev`` 0.0); on a GPU another batch layout can move them, which is what the
    authors' clip with eps 0 reacts to, so ``auto`` keeps TRL's pass there."""
    spg = steps_per_generation or gradient_accumulation_steps  # TRL's default
    if use_vllm:
        return "the rollouts come from vLLM, whose log-probs TRL compares with a recomputed pass"
    if rollout_correction_active:
        return "a rollout correction compares the sampler's log-probs with the trainer's at rollout"
    if "topk_logps" in method_extra_inputs(method_name):
        return "top-K DPPO stores its own old log-probs at rollout"
    if "old_entropies" in method_optional_inputs(method_name):
        return "ERC stores the sampling policy's entropies beside the old log-probs at rollout"
    if beta != 0.0:
        return "a KL penalty's reference pass runs beside the old log-probs' at rollout"
    if gradient_accumulation_steps % spg != 0:
        return (
            f"a micro-batch's first pass can come after an optimizer step (steps_per_generation {spg} does "
            f"not divide gradient_accumulation_steps {gradient_accumulation_steps})"
        )
    return None
