"""A tabular testbed: softmax policies trained for several epochs on one fixed batch (data reuse).

The policy is a logits table ``[seq_len, vocab]``: position t draws its token from ``softmax(logits[t])``
independently of the others (``seq_len = 1`` is a K-armed bandit). The whole sequence space
(``vocab ** seq_len`` sequences) is enumerated, so expected reward, TV and KL are exact, not estimated.

One "rollout" is drawn from a peaked behaviour ("pretrained") policy, advantages are group-normalised as in
GRPO, and then every method takes ``epochs`` optimiser steps on that same batch with ``old_logp`` fixed at the
behaviour policy, which is exactly what ``num_iterations > 1`` does.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import torch

from pspo_repro.explore.probe import DTYPE, call
from pspo_repro.methods import aggregate, method_extra_inputs


@dataclass(frozen=True)
class TestbedSpec:
    """One testbed's shape; ``reward`` is ``random`` (a fixed U(0,1) reward per sequence) or ``correct``."""

    name: str
    seq_len: int
    vocab: int
    peak: float = 2.0  # std of the behaviour logits: larger = more peaked "pretrained" policy
    num_groups: int = 4
    group_size: int = 8
    reward: str = "random"
    num_correct: int = 3
    seed: int = 0


class Tabular:
    """Behaviour policy, reward table and the exact metrics of a tabular testbed."""

    def __init__(self, spec: TestbedSpec):
        if spec.reward not in ("random", "correct"):
            raise ValueError(f"testbed reward={spec.reward!r} is invalid; allowed: random, correct")
        self.spec = spec
        gen = torch.Generator().manual_seed(spec.seed)
        self.behaviour_logits = torch.randn(spec.seq_len, spec.vocab, generator=gen, dtype=DTYPE) * spec.peak
        # all sequences, one row each: [vocab ** seq_len, seq_len]
        self.sequences = torch.tensor(list(itertools.product(range(spec.vocab), repeat=spec.seq_len)))
        n = self.sequences.shape[0]
        if spec.reward == "random":
            self.rewards = torch.rand(n, generator=gen, dtype=DTYPE)
        else:
            # The correct set is the behaviour policy's 2nd..(1+num_correct)-th most likely sequences, so the
            # batch sees some of them but the pretrained mode is wrong: learning has to move probability mass.
            order = self.joint(self.behaviour_logits).argsort(descending=True)
            self.rewards = torch.zeros(n, dtype=DTYPE)
            self.rewards[order[1 : 1 + spec.num_correct]] = 1.0
        self.gen = gen

    # --- exact quantities over the enumerated sequence space -------------------------------------------
    def joint(self, logits: torch.Tensor) -> torch.Tensor:
        """Probability of every sequence, [vocab ** seq_len]."""
        logp = torch.log_softmax(logits, -1)
        return logp.gather(1, self.sequences.T).sum(0).exp()

    def expected_reward(self, logits: torch.Tensor) -> float:
        """Exact expected reward of the policy ``logits`` over all sequences."""
        return float(self.joint(logits) @ self.rewards)

    def divergences(self, logits: torch.Tensor) -> tuple[float, float]:
        """(TV, KL(pi_theta || pi_old)) between the sequence distributions."""
        p, q = self.joint(logits), self.joint(self.behaviour_logits)
        return float(0.5 * (p - q).abs().sum()), float((p * (p.log() - q.log())).sum())

    # --- the fixed batch ---------------------------------------------------------------------------------
    def sample_batch(self) -> Batch:
        """Draw ``num_groups * group_size`` sequences from the behaviour policy; GRPO advantages per group."""
        s = self.spec
        probs = torch.softmax(self.behaviour_logits, -1)
        b = s.num_groups * s.group_size
        tokens = torch.stack(
            [torch.multinomial(probs[t], b, True, generator=self.gen) for t in range(s.seq_len)], 1
        )
        index = (tokens * (s.vocab ** torch.arange(s.seq_len - 1, -1, -1))).sum(1)  # row in self.sequences
        r = self.rewards[index].view(s.num_groups, s.group_size)
        # TRL's normalisation: (R - group mean) / (group std + 1e-4), unbiased std
        adv = ((r - r.mean(1, keepdim=True)) / (r.std(1, keepdim=True) + 1e-4)).reshape(-1)
        old = torch.log_softmax(self.behaviour_logits, -1).gather(1, tokens.T).T  # [B, T]
        return Batch(tokens, adv, old, torch.ones_like(old))

    def logp(self, logits: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
        """Per-token log-probs [B, T] of ``tokens`` under the policy ``logits``."""
        return torch.log_softmax(logits, -1).gather(1, tokens.T).T

    def topk_inputs(self, logits: torch.Tensor, tokens: torch.Tensor, k: int) -> dict[str, torch.Tensor]:
        """DPPO's top-K inputs: the behaviour policy's top-k token ids per position, the sampled token forced
        in (it replaces the k-th entry when absent), log-probs of both policies on those ids."""
        old_all = torch.log_softmax(self.behaviour_logits, -1)
        k = min(k, self.spec.vocab)
        ids = old_all.topk(k, -1).indices[None].expand(tokens.shape[0], -1, -1).clone()  # [B, T, k]
        present = (ids == tokens[..., None]).any(-1)
        ids[..., -1] = torch.where(present, ids[..., -1], tokens)
        pos = torch.arange(self.spec.seq_len)[None, :, None]
        cur_all = torch.log_softmax(logits, -1)
        return {"topk_old_logps": old_all[pos, ids], "topk_logps": cur_all[pos, ids].detach()}


@dataclass
class Batch:
    """A fixed batch from the behaviour policy: tokens, advantages, old log-probs and mask."""

    tokens: torch.Tensor  # [B, T]
    advantages: torch.Tensor  # [B]
    old_logp: torch.Tensor  # [B, T]
    mask: torch.Tensor  # [B, T]


@dataclass
class Step:
    """One method evaluated at one parameter value: the loss, its gradients and the method's metrics."""

    loss: float
    theta_grad: torch.Tensor
    zero_grad_frac: float  # autograd: tokens with A != 0 whose d loss / d logp is exactly 0
    metrics: dict[str, float]


def evaluate(tb: Tabular, batch: Batch, logits: torch.Tensor, name: str, params: Mapping[str, Any]) -> Step:
    """Loss (dapo aggregation) and gradients of ``name`` at ``logits`` on ``batch``.

    Top-K methods get K = min(params["topk"], vocab): the toy vocabulary may be smaller than the default K.
    """
    theta = logits.detach().clone().requires_grad_(True)
    logp = tb.logp(theta, batch.tokens)
    logp.retain_grad()
    extra = tb.topk_inputs(theta, batch.tokens, params.get("topk", 20)) if method_extra_inputs(name) else {}
    with torch.no_grad():  # the current and behaviour policies' entropy per position (ASPO, Archer, ERC)
        full = torch.log_softmax(theta, -1)
        extra["entropies"] = (-(full.exp() * full).sum(-1))[None].expand_as(logp)
        old = torch.log_softmax(tb.behaviour_logits, -1)
        extra["old_entropies"] = (-(old.exp() * old).sum(-1))[None].expand_as(logp)
    out = call(name, params, logp, batch.old_logp, batch.advantages, batch.mask, extra)
    loss = aggregate(out.per_token_loss, batch.mask, "dapo")
    loss.backward()
    live = (batch.advantages[:, None] != 0) & batch.mask.bool()
    zero = ((logp.grad == 0) & live).sum() / live.sum().clamp(min=1)
    return Step(
        float(loss.detach()), theta.grad.detach(), float(zero), {k: float(v) for k, v in out.metrics.items()}
    )


@dataclass
class History:
    """Per-epoch trace of one training run; state metrics have ``epochs + 1`` entries (0 = behaviour)."""

    reward: list[float] = field(default_factory=list)
    tv: list[float] = field(default_factory=list)
    kl: list[float] = field(default_factory=list)
    zero_grad_frac: list[float] = field(default_factory=list)  # one per update
    library_zero_grad_frac: list[float | None] = field(default_factory=list)
    logits: list[torch.Tensor] = field(default_factory=list)  # parameters before each update, then final


def train(
    tb: Tabular,
    batch: Batch,
    name: str,
    params: Mapping[str, Any],
    *,
    epochs: int,
    optimizer: str,
    lr: float,
) -> History:
    """``epochs`` full-batch optimiser steps of ``name`` on the fixed ``batch``."""
    theta = tb.behaviour_logits.clone().requires_grad_(True)
    opt = make_optimizer(optimizer, [theta], lr)
    hist = History()
    for epoch in range(epochs + 1):
        tv, kl = tb.divergences(theta.detach())
        hist.reward.append(tb.expected_reward(theta.detach()))
        hist.tv.append(tv)
        hist.kl.append(kl)
        hist.logits.append(theta.detach().clone())
        if epoch == epochs:
            break
        step = evaluate(tb, batch, theta, name, params)
        hist.zero_grad_frac.append(step.zero_grad_frac)
        hist.library_zero_grad_frac.append(step.metrics.get("zero_grad_frac"))
        opt.zero_grad()
        theta.grad = step.theta_grad.clone()
        opt.step()
    return hist


def make_optimizer(kind: str, params, lr: float) -> torch.optim.Optimizer:
    """Plain SGD or Adam (default betas/eps, as AdamW in the paper's runs, without weight decay)."""
    if kind == "sgd":
        return torch.optim.SGD(params, lr=lr)
    if kind == "adam":
        return torch.optim.Adam(params, lr=lr)
    raise ValueError(f"optimizer={kind!r} is invalid; allowed: adam, sgd")
