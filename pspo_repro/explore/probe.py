"""Evaluate registered methods on hand-built inputs, with autograd, for plots and checks.

Nothing here re-implements a formula: each quantity is the registry function's own output
(``per_token_loss``) or its autograd derivative with respect to ``logp``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from pspo_repro.methods import get_method, method_extra_inputs, method_optional_inputs

DTYPE = torch.float64  # the probes are tiny; float64 keeps the PASS/FAIL tolerances tight
# The ratio grid starts just above 0: r = 0 is logp = -inf, and REINFORCE-form methods (TOPR, CISPO, DPPO)
# multiply logp itself.
RATIO_MIN = 1e-3
# Behaviour probability q of the probed token on the ratio grid. Ratio-form methods do not depend on it;
# REINFORCE-form ones do (their surrogate is w * log(q r)) and DPPO's mask does (p = q r must stay <= 1:
# with q = 0.3 the grid r <= 3 keeps p <= 0.9).
PROBE_Q = 0.3


def two_bucket_topk(logp: torch.Tensor, old_logp: torch.Tensor) -> dict[str, torch.Tensor]:
    """Top-K inputs for a vocabulary of {the sampled token, everything else}: K = 1 bucket plus the rest.

    With one listed token the top-K divergences reduce to the binary ones (TV: |p - q|; KL: the Bernoulli KL),
    which ``checks.check_dppo_topk_reduces_to_binary`` verifies on the library.
    """
    return {"topk_old_logps": old_logp.detach().unsqueeze(-1), "topk_logps": logp.detach().unsqueeze(-1)}


def call(
    name: str,
    params: Mapping[str, Any],
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    extra: Mapping[str, torch.Tensor] | None = None,
):
    """Call the registered ``name``; extra tensors a method requires default to the two-bucket top-K ones.

    A method that takes ``entropies`` (ASPO, Archer, ERC) gets ``extra["entropies"]``, else one entropy for every
    token: each token is then at its response's entropy quantile, so the probes draw the low-entropy bounds.
    ``old_entropies`` (ERC) likewise, zero by default: the same entropy as the current one, so ERC's entropy
    ratio is 1 and the probes draw its clip.
    """
    needed = method_extra_inputs(name)
    if needed and extra is None:
        extra = two_bucket_topk(logp, old_logp)
    kwargs = {k: extra[k] for k in needed} if needed else {}
    for key in ("entropies", "old_entropies"):
        if key in method_optional_inputs(name):
            given = extra.get(key) if extra else None
            kwargs[key] = torch.zeros_like(logp.detach()) if given is None else given
    if kwargs and "topk" in params:
        # the method checks that its ``topk`` matches the tensors' K; the probes choose K themselves
        params = {**params, "topk": next(iter(kwargs.values())).shape[-1]}
    return get_method(name)(logp, old_logp, advantages, mask, **kwargs, **params)


SEQ_LEN = 128  # the paper's max completion length: the sequence the sequence-level curves are drawn for


@dataclass
class RatioCurves:
    """Surrogate ``-loss/A`` and gradient weight ``d(-loss)/d logp`` of one method over a ratio grid.

    Keys of the dicts are the advantage sign (+1, -1). ``seq_*`` hold the same for the first token of a
    ``seq_len``-token sequence whose other tokens sit at r = 1: token-level methods give the one-token curves
    again, while a sequence-level method (GSPO) sees s = exp(mean log r) = r^(1/seq_len), so its band in r
    widens to [(1 - eps_low)^L, (1 + eps_high)^L]. The gradient is taken of the token sum, as dapo sums tokens.
    """

    ratio: np.ndarray
    surrogate: dict[int, np.ndarray]
    grad: dict[int, np.ndarray]
    seq_surrogate: dict[int, np.ndarray]
    seq_grad: dict[int, np.ndarray]


def _probe(name, params, ratio: torch.Tensor, adv_sign: int, seq_len: int, q: float):
    n = ratio.numel()
    old = torch.full((n, seq_len), float(np.log(q)), dtype=DTYPE)
    shift = torch.zeros(n, seq_len, dtype=DTYPE)
    shift[:, 0] = ratio.log()  # only the first token moves; the others keep r = 1
    logp = (old + shift).requires_grad_(True)
    adv = torch.full((n,), float(adv_sign), dtype=DTYPE)
    mask = torch.ones(n, seq_len, dtype=DTYPE)
    out = call(name, params, logp, old, adv, mask)
    (grad,) = torch.autograd.grad(-out.per_token_loss.sum(), logp)
    surrogate = (-out.per_token_loss[:, 0] / adv_sign).detach().numpy()
    return surrogate, grad[:, 0].numpy()


def ratio_curves(
    name: str,
    params: Mapping[str, Any],
    points: int = 601,
    r_max: float = 3.0,
    seq_len: int = SEQ_LEN,
    q: float = PROBE_Q,
) -> RatioCurves:
    """Probe ``name`` on ``points`` ratios in [RATIO_MIN, r_max]: one-token sequences, and one moving token in a
    ``seq_len``-token sequence."""
    ratio = torch.linspace(RATIO_MIN, r_max, points, dtype=DTYPE)
    curves = RatioCurves(ratio.numpy(), {}, {}, {}, {})
    for sign in (1, -1):
        curves.surrogate[sign], curves.grad[sign] = _probe(name, params, ratio, sign, 1, q)
        curves.seq_surrogate[sign], curves.seq_grad[sign] = _probe(name, params, ratio, sign, seq_len, q)
    return curves


@dataclass
class MaskGrid:
    """Whether a token keeps a gradient, over current probability p (rows) and behaviour probability q (cols)."""

    p: np.ndarray
    q: np.ndarray
    kept: dict[int, np.ndarray]  # advantage sign -> bool [len(p), len(q)]


def mask_grid(name: str, params: Mapping[str, Any], points: int = 199, extra_fn=None) -> MaskGrid:
    """A token is "kept" where the autograd gradient of its loss w.r.t. logp is non-zero.

    ``extra_fn(logp, old_logp)`` builds the method's extra tensors (default: two-bucket top-K inputs).
    """
    axis = torch.linspace(0.005, 0.995, points, dtype=DTYPE)
    p, q = torch.meshgrid(axis, axis, indexing="ij")
    old = q.reshape(-1, 1).log()
    grid = MaskGrid(axis.numpy(), axis.numpy(), {})
    for sign in (1, -1):
        logp = p.reshape(-1, 1).log().requires_grad_(True)
        adv = torch.full((logp.shape[0],), float(sign), dtype=DTYPE)
        extra = (extra_fn or two_bucket_topk)(logp, old) if method_extra_inputs(name) else None
        out = call(name, params, logp, old, adv, torch.ones_like(old), extra)
        (grad,) = torch.autograd.grad(out.per_token_loss.sum(), logp)
        grid.kept[sign] = (grad != 0).reshape(points, points).numpy()
    return grid
