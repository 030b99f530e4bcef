"""The paper's statements (paper-notes section 1) as PASS/FAIL checks on the testbed and the probes."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from pspo_repro.explore.probe import call, mask_grid
from pspo_repro.explore.testbed import Batch, History, Tabular, evaluate, train

TOL = 1e-9  # float64 everywhere: equalities that hold algebraically hold to ~1e-15


@dataclass
class Check:
    """One named check of the explorer: whether it passed and what was measured."""

    name: str
    passed: bool
    detail: str

    def line(self) -> str:
        """``PASS|FAIL <name>: <detail>``, as printed and written to the summary."""
        return f"{'PASS' if self.passed else 'FAIL'} {self.name}: {self.detail}"


def _position_dists(logits: torch.Tensor) -> torch.Tensor:
    return torch.softmax(logits, -1)  # [T, V]: PSPO smooths each token's distribution


def library_smoothed_policy(
    p: torch.Tensor, q: torch.Tensor, params: Mapping[str, Any], method: str = "pspo"
) -> torch.Tensor:
    """The smoothed policy pi~(a) = r~(a) q(a) at every position and id, with r~ read off the registered
    ``method``: with A = -1 and a mask of ones its per-token loss -r~ A is r~ itself."""
    logp, old = p.log().reshape(1, -1), q.log().reshape(1, -1)
    out = call(method, params, logp, old, torch.tensor([-1.0], dtype=p.dtype), torch.ones_like(logp))
    return (out.per_token_loss.reshape(p.shape) * q).detach()


def check_smoothing_contraction(
    tb: Tabular,
    hist: History,
    params: Mapping[str, Mapping[str, Any]],
    label: str,
    method: str = "pspo",
) -> list[Check]:
    """TV(pi~, pi_old) = (1-alpha) TV(pi, pi_old) and KL(pi~||pi_old) <= (1-alpha) KL(pi||pi_old), at every
    epoch's parameters of a run and at every position, with pi~ taken from the registered ``method`` (not
    from the formula), so a wrong ``pspo`` fails here; ``method`` is an argument so a test can point the
    check at a method for which it must fail."""
    alpha = params["pspo"]["alpha"]
    q = _position_dists(tb.behaviour_logits)
    tv_err, kl_slack, tv_max, mass_err = 0.0, np.inf, 0.0, 0.0
    for logits in hist.logits:
        p = _position_dists(logits)
        smooth = library_smoothed_policy(p, q, params[method], method)
        tv = 0.5 * (p - q).abs().sum(-1)
        tv_s = 0.5 * (smooth - q).abs().sum(-1)
        kl = (p * (p.log() - q.log())).sum(-1)
        kl_s = (smooth * (smooth.log() - q.log())).sum(-1)
        tv_err = max(tv_err, float((tv_s - (1 - alpha) * tv).abs().max()))
        kl_slack = min(kl_slack, float(((1 - alpha) * kl - kl_s).min()))
        tv_max = max(tv_max, float(tv.max()))
        mass_err = max(mass_err, float((smooth.sum(-1) - 1).abs().max()))
    return [
        Check(
            f"[{label}] TV(pi~, pi_old) == (1-alpha) TV(pi, pi_old), pi~ from {method}",
            tv_err <= TOL and tv_max > 0 and mass_err <= TOL,
            f"max |error| {tv_err:.1e} over {len(hist.logits)} epochs (max TV reached {tv_max:.3f};"
            f" pi~ sums to 1 within {mass_err:.0e})",
        ),
        Check(
            f"[{label}] KL(pi~||pi_old) <= (1-alpha) KL(pi||pi_old), pi~ from {method}",
            kl_slack >= -TOL and mass_err <= TOL,
            f"min slack (1-alpha) KL - KL~ = {kl_slack:.2e}",
        ),
    ]


def check_zero_grads(runs: Mapping[str, History], label: str) -> list[Check]:
    """PSPO never zeroes a token's gradient; clip does once ratios leave [1-eps, 1+eps]."""
    out = []
    if "pspo" in runs:
        z = runs["pspo"].zero_grad_frac
        out.append(
            Check(f"[{label}] pspo zero-grad fraction == 0 at every epoch", max(z) == 0, f"max {max(z):.3f}")
        )
    if "clip" in runs:
        z = runs["clip"].zero_grad_frac
        first = next((i + 1 for i, v in enumerate(z) if v > 0), None)
        out.append(
            Check(
                f"[{label}] clip zero-grad fraction becomes > 0",
                first is not None,
                f"max {max(z):.3f}, first > 0 at update {first}"
                if first
                else f"stays 0 over {len(z)} updates",
            )
        )
    return out


def check_library_zero_grad_metric(runs: Mapping[str, History], label: str) -> Check:
    """The methods' own ``zero_grad_frac`` metric agrees with autograd (methods that report it)."""
    worst, where = 0.0, ""
    for name, hist in runs.items():
        for i, (auto, lib) in enumerate(zip(hist.zero_grad_frac, hist.library_zero_grad_frac, strict=True)):
            if lib is not None and abs(auto - lib) > worst:
                worst, where = (
                    abs(auto - lib),
                    f" ({name}, update {i + 1}: autograd {auto:.3f}, metric {lib:.3f})",
                )
    return Check(
        f"[{label}] methods' zero_grad_frac metric == autograd's",
        worst <= 1e-6,
        f"max |diff| {worst:.1e}{where}",
    )


def check_gradient_scaling(
    tb: Tabular,
    batch: Batch,
    hist: History,
    params: Mapping[str, Mapping[str, Any]],
    label: str,
    method: str = "pspo",
    reference: str = "noclip",
) -> Check:
    """grad(method) == (1 - alpha) grad(reference) at every epoch's parameters of ``hist`` on the same batch.

    ``method``/``reference`` are arguments so a test can point the check at a pair for which it must fail.
    """
    alpha = params["pspo"]["alpha"]
    worst, scale = 0.0, 0.0
    for logits in hist.logits:
        g = evaluate(tb, batch, logits, method, params[method]).theta_grad
        g_ref = evaluate(tb, batch, logits, reference, params[reference]).theta_grad
        worst = max(worst, float((g - (1 - alpha) * g_ref).abs().max()))
        scale = max(scale, float(g_ref.abs().max()))
    return Check(
        f"[{label}] grad({method}) == (1-alpha) grad({reference}) on the same batch",
        worst <= TOL * max(scale, 1.0),
        f"max |error| {worst:.1e} (max |grad| {scale:.2e}) over {len(hist.logits)} parameter values",
    )


def check_optimizer_equivalence(
    tb: Tabular, batch: Batch, params: Mapping[str, Mapping[str, Any]], epochs: int, lr: float, label: str
) -> list[Check]:
    """Consequences of the (1 - alpha) scaling: under SGD, PSPO at lr follows noclip at (1 - alpha) lr exactly;
    under Adam (invariant to a constant gradient scale, up to its eps), PSPO at lr follows noclip at lr."""
    alpha = params["pspo"]["alpha"]
    out = []
    for opt, lr_ref, tol in (("sgd", (1 - alpha) * lr, 1e-9), ("adam", lr, 1e-5)):
        a = train(tb, batch, "pspo", params["pspo"], epochs=epochs, optimizer=opt, lr=lr)
        b = train(tb, batch, "noclip", params["noclip"], epochs=epochs, optimizer=opt, lr=lr_ref)
        diff = max(
            float((tb.joint(x) - tb.joint(y)).abs().max()) for x, y in zip(a.logits, b.logits, strict=True)
        )
        ref = "(1-alpha) lr" if opt == "sgd" else "lr"
        out.append(
            Check(
                f"[{label}] {opt}: pspo(lr) and noclip({ref}) give the same policies",
                diff <= tol,
                f"max |pi_pspo - pi_noclip| {diff:.1e} over {epochs} epochs (tol {tol:.0e})",
            )
        )
    return out


def check_dppo_topk_reduces_to_binary(
    params: Mapping[str, Mapping[str, Any]], points: int = 61
) -> list[Check]:
    """With one listed token plus the rest bucket, dppo_topk_{tv,kl} must keep the same tokens as the binary
    variants at equal deltas (their divergences coincide on two buckets)."""
    out = []
    for div in ("tv", "kl"):
        topk, binary = f"dppo_topk_{div}", f"dppo_binary_{div}"
        if topk not in params or binary not in params:
            continue
        deltas = {k: v for k, v in params[binary].items() if k.startswith("delta")}
        shared = {**params[topk], **{k: v for k, v in deltas.items() if k in params[topk]}}
        a, b = mask_grid(topk, shared, points), mask_grid(binary, params[binary], points)
        differ = sum(int((a.kept[s] != b.kept[s]).sum()) for s in (1, -1))
        out.append(
            Check(
                f"{topk} with K=1 + rest == {binary}",
                differ == 0,
                f"{differ} of {2 * points * points} (p, q, sign A) cells differ",
            )
        )
    return out
