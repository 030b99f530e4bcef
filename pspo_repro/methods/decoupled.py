"""AReaL's decoupled PPO (arXiv 2505.24298): the clip on pi_theta / pi_prox, weighted by pi_prox / pi_behav.

Three policies: pi_behav sampled the tokens (``old_logp``: the log-probs stored at rollout), pi_prox is the
trust region's anchor, pi_theta is trained. Read from inclusionAI/AReaL (commit 4aef98d):
``areal/utils/functional/functional.py`` ``ppo_actor_loss_fn`` and ``apply_rejection_sampling``, and
``areal/trainer/ppo/actor.py`` / ``areal/trainer/rl_trainer.py`` for where pi_prox comes from. Per token,

    loss = w * max(-A u, -A clip(u, 1 - eps_clip, 1 + eps_clip_higher)),
    u = pi_theta / pi_prox,   w = pi_prox / pi_behav,

and with AReaL's rejection sampling (token level, ratio metric, action "mask", the setting of its
``examples/math/gsm8k_grpo.yaml`` and of its former default ``behave_imp_weight_cap=5``) a token with
``w > behav_imp_weight_cap`` leaves the loss; the normaliser still counts it (AReaL divides by the mask
before rejection), so here its per-token loss is zero and the aggregation's mask is unchanged.

Where pi_prox comes from. AReaL recomputes it by a forward pass of the current weights right before an
update (``compute_logp`` before ``ppo_update``): it is "the policy before this optimizer step". In TRL's
GRPOTrainer the weights do not change between the micro-batches of one optimizer step, so that recompute
is the training forward's own log-probs, detached: ``pi_prox = sg(pi_theta)``, exactly and at no extra cost
(AReaL's "loglinear" interpolation exists to skip that forward pass; here there is none to skip). It is
distinct from pi_behav whenever a batch serves more than one optimizer step (``steps_per_generation`` >
``gradient_accumulation_steps``, or ``num_iterations`` > 1): slice k of a rollout is trained k optimizer
steps after it was sampled, as AReaL trains on data up to ``max_head_offpolicyness`` versions old.

Consequence: ``u == 1`` at every evaluation, so the clip never binds (as in AReaL's own example, which uses
``ppo_n_minibatches: 1``), and the loss is ``-A w u`` with gradient ``-A w grad(logp)`` on kept tokens: a
policy gradient importance-weighted from the behaviour policy, whose trust region is the rejection of
tokens with ``w > behav_imp_weight_cap``. AReaL's ``ppo_n_minibatches > 1`` (pi_prox held for several
optimizer steps, where the clip binds) would need pi_prox recomputed for TRL's buffered slices every few
optimizer steps; it is not offered.
"""

from __future__ import annotations

import torch

from pspo_repro.methods.base import LOG_RATIO_CLAMP, Masked, MethodOutput, token_advantages, zero_grad_frac
from pspo_repro.methods.registry import register_method


def behaviour_weight(
    prox: torch.Tensor, old_logp: torch.Tensor, cap: float | None
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(w, weight)``: AReaL's ``w = pi_prox / pi_behav`` (detached, in at least float32) and the weight its loss
    applies: ``w`` where ``w <= cap`` and 0 where the token is rejected (token-level rejection sampling, action
    "mask", ratio metric); ``cap=None`` is AReaL's ``rejection_sampling: null``, which applies no weight at all
    (``ppo_actor_loss_fn`` multiplies by ``behave_imp_weight`` only when rejection sampling is configured): 1."""
    # computed in at least fp32 as AReaL upcasts before subtracting (bf16 log-probs); clamping its log before exp
    # bounds the value only (past +20 the token is rejected by any cap)
    wide = torch.promote_types(prox.dtype, torch.float32)
    log_w = (prox.detach().to(wide) - old_logp.detach().to(wide)).clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
    w = torch.exp(log_w)
    weight = torch.ones_like(w) if cap is None else torch.where(w <= cap, w, 0.0)
    return w, weight


@register_method("decoupled_ppo")
def decoupled_ppo(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    behav_imp_weight_cap: float | None = 5.0,
) -> MethodOutput:
    """``-A w u`` with ``u = pi_theta / sg(pi_theta)`` (pi_prox = the policy before this optimizer step) and
    ``w = pi_prox / pi_behav``; tokens with ``w > behav_imp_weight_cap`` are rejected (zero loss, zero
    gradient). Gradient ``-A w grad(logp)`` on kept tokens; with ``None`` (AReaL's ``rejection_sampling: null``) no
    weight is applied: ``-A grad(logp)``."""
    adv = token_advantages(advantages)
    prox = logp.detach()
    u = torch.exp(logp - prox)  # 1 in value; carries grad(logp)
    w, weight = behaviour_weight(prox, old_logp, behav_imp_weight_cap)
    loss = -adv * weight.to(logp.dtype) * u

    m = Masked(mask)
    with torch.no_grad():
        rejected = weight == 0
        metrics = {
            **m.stats("behav_weight", w.float()),
            "mask_frac": m.frac(rejected),
            "zero_grad_frac": zero_grad_frac(m, rejected, adv),
        }
    return MethodOutput(m.select(loss), metrics)
