"""Figures: per-method ratio curves, an overview grid, DPPO's masks and the testbed traces (Agg backend)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # headless: figures are files, never windows
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from pspo_repro.common.atomic import atomic_open  # noqa: E402
from pspo_repro.explore.probe import PROBE_Q, SEQ_LEN, MaskGrid, RatioCurves, ratio_curves  # noqa: E402
from pspo_repro.explore.testbed import History  # noqa: E402

SIGN_STYLE = {1: ("C0", "A = +1"), -1: ("C3", "A = -1")}


def save(fig, out_dir: Path, stem: str, formats: Sequence[str], dpi: int) -> list[Path]:
    """Write ``stem.<fmt>`` for each format; PDFs without a creation date so reruns are byte-stable."""
    paths = []
    for fmt in formats:
        path = out_dir / f"{stem}.{fmt}"
        # atomically: a killed run never leaves a cut figure in place of a good one
        with atomic_open(path, "wb") as fh:
            fig.savefig(fh, format=fmt, dpi=dpi, metadata={"CreationDate": None} if fmt == "pdf" else None)
        paths.append(path)
    plt.close(fig)
    return paths


def _spans(r: np.ndarray, flag: np.ndarray):
    """Contiguous runs of ``flag`` over the grid ``r`` as (start, end) pairs."""
    edges = np.flatnonzero(np.diff(np.r_[0, flag.astype(int), 0]))
    return [(r[a], r[b - 1]) for a, b in zip(edges[::2], edges[1::2], strict=True)]


def _markers(
    ax, name: str, params: Mapping[str, Any], curves: RatioCurves, ref: RatioCurves | None, panel: str
):
    """Trust-region boundaries. Lines drawn from a method's parameters are reference marks; gates are read
    off the registry's own curves (where the gradient falls below half of noclip's)."""
    r = curves.ratio
    if name in ("clip", "gspo", "luspo", "clip_cov", "geo_mean"):
        lo, hi = 1 - params["eps_low"], 1 + params["eps_high"]
        if name == "geo_mean":  # GMPO's bounds are on log r: the band is (e^-eps_low, e^eps_high)
            lo, hi = math.exp(-params["eps_low"]), math.exp(params["eps_high"])
        for x in (lo, hi):
            ax.axvline(x, color="k", ls=":", lw=0.8)
        if name in ("gspo", "luspo"):
            lo_l, hi_l = lo**SEQ_LEN, hi**SEQ_LEN  # one token's r where s = r^(1/L) meets the band
            for x in (lo_l, hi_l):
                ax.axvline(x, color="C2", ls="--", lw=0.8)
            ax.text(
                0.02,
                0.03,
                f"band on s: [{lo:.4f}, {hi:.4f}]; one token of {SEQ_LEN}: r in [{lo_l:.3f}, {hi_l:.3f}]",
                transform=ax.transAxes,
                fontsize=7,
            )
        if params.get("delta") is not None:
            ax.axvline(params["delta"], color="C3", ls="--", lw=0.8)
    elif name == "pspo" and panel == "surrogate":
        a = params["alpha"]
        ax.plot(r, (1 - a) * r + a, color="k", ls=":", lw=1.0, label=f"slope 1-alpha = {1 - a:g}")
    elif name in ("sapo", "p3o") and ref is not None and panel == "grad":
        for sign, (color, _) in SIGN_STYLE.items():
            rel = np.divide(curves.grad[sign], ref.grad[sign], out=np.ones_like(r), where=ref.grad[sign] != 0)
            for a, b in _spans(r, rel < 0.5):
                ax.axvspan(a, b, color=color, alpha=0.07)
                for x in (a, b):
                    if r[0] < x < r[-1]:
                        ax.axvline(x, color=color, ls=":", lw=0.8)
        ax.text(0.02, 0.03, "shaded: gate < 1/2 of noclip", transform=ax.transAxes, fontsize=7)
    elif name == "kl_cov" and panel == "surrogate":
        ax.text(0.02, 0.03, "a penalised token; others: noclip", transform=ax.transAxes, fontsize=7)
    elif name == "vespo" and panel == "grad":
        ax.text(
            0.02, 0.03, "weight phi(w), w = prod r (one token: w = r)", transform=ax.transAxes, fontsize=7
        )
    elif name == "topr":
        ax.axvline(1.0, color="C3", ls=":", lw=0.8)
        ax.text(0.02, 0.03, "A<0: weight min(r, 1)", transform=ax.transAxes, fontsize=7)
    elif name == "cispo":
        cap = params["eps_high"]
        if cap <= r[-1]:
            ax.axvline(cap, color="k", ls=":", lw=0.8)
        elif panel == "grad":
            # the default cap lies past the axis: an inset out to beyond it shows the flat weight
            cispo_inset = ratio_curves(name, params, points=301, r_max=1.6 * cap, seq_len=1)
            ins = ax.inset_axes([0.58, 0.1, 0.38, 0.38])
            ri = cispo_inset.ratio
            for sign, (color, _) in SIGN_STYLE.items():
                ins.plot(ri, cispo_inset.grad[sign], color=color, lw=1.0)
            ins.axvline(cap, color="k", ls=":", lw=0.8)
            ins.set_xlim(0, ri[-1])
            ins.tick_params(labelsize=6)
            ins.set_title(f"r to {ri[-1]:g}: weight capped at r = {cap:g}", fontsize=6)


def _curve_panel(ax, name, params, curves: RatioCurves, ref: RatioCurves | None, panel: str):
    r = curves.ratio
    for sign, (color, label) in SIGN_STYLE.items():
        y = curves.grad[sign] if panel == "grad" else curves.surrogate[sign]
        ax.plot(r, y, color=color, lw=1.6, label=label)
        seq = curves.seq_grad[sign] if panel == "grad" else curves.seq_surrogate[sign]
        if not np.allclose(seq, y, rtol=1e-9, atol=1e-12):
            ax.plot(r, seq, color=color, lw=1.0, ls="--", label=f"{label}, 1 of {SEQ_LEN} tokens moves")
        if panel == "grad":
            for a, b in _spans(r, y == 0):
                ax.axvspan(a, b, color=color, alpha=0.12, lw=0)
            if ref is not None and name != "noclip":
                ax.plot(
                    r, ref.grad[sign], color="0.6", lw=0.8, ls="--", label="noclip" if sign == 1 else None
                )
    ax.axvline(1.0, color="0.8", lw=0.6, zorder=0)
    ax.axhline(0.0, color="0.8", lw=0.6, zorder=0)
    _markers(ax, name, params, curves, ref, panel)
    ax.set_xlim(0, r[-1])
    ax.set_xlabel("ratio r = pi / pi_old")


def method_figure(name, params, curves: RatioCurves, ref: RatioCurves | None):
    """Surrogate -loss/A (left) and gradient weight d(-loss)/d logp (right); shading = exactly zero gradient."""
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(8, 3.1))
    _curve_panel(ax1, name, params, curves, ref, "surrogate")
    _curve_panel(ax2, name, params, curves, ref, "grad")
    ax1.set_ylabel("surrogate  -loss / A")
    ax2.set_ylabel("gradient weight  d(-loss)/d logp")
    shown = ", ".join(f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}" for k, v in params.items())
    fig.suptitle(
        f"{name}" + (f"  ({shown})" if shown else "") + f"; probe token q = pi_old = {PROBE_Q}", fontsize=9
    )
    ax1.legend(fontsize=7, loc="upper left")
    ax2.legend(fontsize=7, loc="upper left")
    fig.tight_layout()
    return fig


def overview_figure(curves: Mapping[str, RatioCurves], params, ref: RatioCurves | None):
    """Gradient weight of every method in one grid (shading = exactly zero gradient)."""
    n = len(curves)
    cols = min(4, n)
    rows = math.ceil(n / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(3.2 * cols, 2.5 * rows), squeeze=False, sharex=True)
    for ax, (name, c) in zip(axes.flat, curves.items(), strict=False):
        _curve_panel(ax, name, params[name], c, ref, "grad")
        ax.set_title(name, fontsize=9)
        ax.set_ylim(-3.3, 3.3)
    for ax in list(axes.flat)[n:]:
        ax.axis("off")
    axes.flat[0].legend(fontsize=6, loc="upper left")
    fig.suptitle(
        "gradient weight d(-loss)/d logp against r (A = +1 blue, -1 red; shaded: zero gradient)", fontsize=9
    )
    fig.tight_layout()
    return fig


def dppo_mask_figure(grids: Mapping[str, MaskGrid], params):
    """Kept (white) vs masked (dark) tokens over (q = behaviour prob, p = current prob), per divergence/sign."""
    names = list(grids)
    fig, axes = plt.subplots(len(names), 2, figsize=(7, 3.2 * len(names)), squeeze=False)
    for row, name in enumerate(names):
        g = grids[name]
        for col, sign in enumerate((1, -1)):
            ax = axes[row, col]
            ax.imshow(
                ~g.kept[sign],
                origin="lower",
                extent=(g.q[0], g.q[-1], g.p[0], g.p[-1]),
                cmap="Greys",
                vmin=0,
                vmax=1.6,
                aspect="equal",
                interpolation="nearest",
            )
            ax.plot([0, 1], [0, 1], color="C0", lw=0.8, ls="--")
            pr = params[name]
            if name.endswith("_tv"):  # reference lines from the parameters: |p - q| = delta
                d = pr["delta_high"] if sign > 0 else pr["delta_low"]
                off = d if sign > 0 else -d
                ax.plot([0, 1], [off, 1 + off], color="C3", lw=0.8, ls=":")
            deltas = ", ".join(f"{k}={v:g}" for k, v in pr.items() if k.startswith("delta"))
            ax.set_xlim(0, 1)
            ax.set_ylim(0, 1)
            ax.set_title(f"{name}, A {'> 0' if sign > 0 else '< 0'} ({deltas})", fontsize=8)
            ax.set_xlabel("q = mu(a) (behaviour)")
            ax.set_ylabel("p = pi(a) (current)")
    fig.suptitle("DPPO mask: dark = gradient masked (autograd of the registry loss)", fontsize=9)
    fig.tight_layout()
    return fig


def testbed_figure(runs: Mapping[str, History], title: str):
    """Per epoch: expected reward, TV and KL from the behaviour policy, fraction of zero-gradient tokens."""
    fig, axes = plt.subplots(2, 2, figsize=(9, 6), sharex=True)
    panels = [
        ("expected reward", "reward"),
        ("TV(pi, pi_old) (sequences)", "tv"),
        ("KL(pi || pi_old) (sequences)", "kl"),
        ("zero-gradient fraction (A != 0 tokens)", "zero_grad_frac"),
    ]
    styles = ["-", "--", "-.", ":"]
    for ax, (label, key) in zip(axes.flat, panels, strict=True):
        for i, (name, hist) in enumerate(runs.items()):
            y = getattr(hist, key)
            x = np.arange(1, len(y) + 1) if key == "zero_grad_frac" else np.arange(len(y))
            ax.plot(x, y, color=f"C{i % 10}", ls=styles[(i // 10) % 4], lw=1.4, label=name, marker=".", ms=3)
        ax.set_title(label, fontsize=9)
        ax.grid(alpha=0.3)
    axes[1, 0].set_xlabel("epoch (updates on the same batch)")
    axes[1, 1].set_xlabel("update")
    axes[0, 0].legend(fontsize=7, ncol=2)
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    return fig
