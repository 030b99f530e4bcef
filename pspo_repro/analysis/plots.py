"""Figures: accuracy against temperature and validation-reward training curves (PNG and PDF).

Matplotlib runs on the Agg backend (no display on cluster nodes); figures are rendered to bytes
here and written by the caller through :mod:`pspo_repro.common.atomic`, so a crash never leaves a
truncated figure.
"""

from __future__ import annotations

import io
import math
from collections.abc import Mapping

import matplotlib

matplotlib.use("Agg")  # must precede pyplot: headless nodes have no display
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402

from pspo_repro.analysis.stats import Interval, t_interval  # noqa: E402
from pspo_repro.analysis.tables import Names, ordered, row_order  # noqa: E402
from pspo_repro.analysis.units import PERCENT, Unit, with_unit  # noqa: E402

FORMATS = ("png", "pdf")


def render(fig, formats: tuple[str, ...] = FORMATS) -> dict[str, bytes]:
    """The figure's bytes in each of ``formats`` (PNG and PDF; written later, atomically, with the other
    outputs), cut to its tight bounding box.

    The layout and the box are computed once, at the PNG's resolution, for every format: ``savefig`` with
    ``bbox_inches="tight"`` runs both again for each format (aggregating results/mini took 1.8x the CPU).
    The PNG is byte for byte what that gave; the PDF's layout and box come from the raster text measures
    (its page ~1% wider than with its own, the drawing the same)."""
    dpi = 150
    fig.set_dpi(dpi)
    fig.draw_without_rendering()  # the layout engine (constrained layout) runs here, once
    bbox = fig.get_tightbbox().padded(matplotlib.rcParams["savefig.pad_inches"])
    fig.set_layout_engine("none")  # keep the positions it computed
    out = {}
    for fmt in formats:
        buf = io.BytesIO()
        fig.savefig(buf, format=fmt, dpi=dpi, bbox_inches=bbox)
        out[fmt] = buf.getvalue()
    plt.close(fig)
    return out


def _band(ax, x, intervals: list[Interval], label: str, color, scale: float = 1.0) -> None:
    mean = [iv.mean * scale for iv in intervals]
    ax.plot(x, mean, marker="o", ms=3, label=label, color=color)
    low = [iv.low * scale for iv in intervals]
    high = [iv.high * scale for iv in intervals]
    if not all(math.isnan(v) for v in low):
        # NaN bounds (single seed) leave gaps rather than a fake zero-width band.
        ax.fill_between(x, low, high, color=color, alpha=0.2, linewidth=0)


def _colours(rows: list[tuple[str, str, str]], names: Names) -> dict[tuple[str, str], str]:
    """One colour per (method, tag) across all panels, so a method is recognisable everywhere."""
    keys = list(dict.fromkeys((k[1], k[2]) for k in row_order([("", k[1], k[2]) for k in rows], names)))
    cycle = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    return {k: cycle[i % len(cycle)] for i, k in enumerate(keys)}


def _figure_legend(fig, axes) -> None:
    handles: dict[str, object] = {}
    for ax in axes.flat:
        for h, lab in zip(*ax.get_legend_handles_labels(), strict=True):
            handles.setdefault(lab, h)
    fig.legend(
        list(handles.values()),
        list(handles),
        loc="outside lower center",
        ncol=min(6, len(handles)),
        fontsize=8,
    )


def temperature_figure(
    stats: Mapping[tuple, tuple[Interval, tuple[int, ...]]],
    names: Names,
    label: str,
    ci_text: str,
    unit: Unit = PERCENT,
) -> dict[str, bytes]:
    """Grid model x dataset of a metric against temperature, one line + CI band per method, in ``unit``
    (``units.unit_of``: accuracies in %, lengths in tokens, ...)."""
    keys = list(stats)
    models = ordered((k[0] for k in keys), names.model_order)
    datasets = ordered((k[3] for k in keys), names.dataset_order)
    colours = _colours([k[:3] for k in keys], names)
    fig, axes = plt.subplots(
        len(models), len(datasets), figsize=(3.4 * len(datasets), 2.8 * len(models) + 0.8),
        squeeze=False, layout="constrained",
    )  # fmt: skip
    for i, model in enumerate(models):
        rows = row_order({k[:3] for k in keys if k[0] == model}, names)
        for j, ds in enumerate(datasets):
            ax = axes[i][j]
            for rk in rows:
                pts = sorted((k[4], v[0]) for k, v in stats.items() if k[:3] == rk and k[3] == ds)
                if pts:
                    _band(ax, [p[0] for p in pts], [p[1] for p in pts], names.method(rk[1], rk[2]),
                          colours[rk[1:]], scale=unit.scale)  # fmt: skip
            ax.set_title(f"{names.model(model)} / {names.dataset(ds)}", fontsize=9)
            ax.set_xlabel("temperature")
            ax.set_ylabel(with_unit(label, unit))
            ax.grid(alpha=0.3)
    _figure_legend(fig, axes)
    fig.suptitle(f"{label} against temperature\nbands: {ci_text}", fontsize=8)
    return render(fig)


def curve_stats(runs_long: pd.DataFrame, metric: str, confidence: float) -> pd.DataFrame:
    """Per (model, method, tag, step): mean tokens, and ``metric``'s t interval over seeds."""
    df = runs_long[runs_long["metric"] == metric]
    recs = []
    for (model, method, tag, step), grp in df.groupby(["model", "method", "tag", "step"], sort=True):
        iv = t_interval(grp["value"].to_numpy(), confidence)
        # Seeds log at the same steps but process slightly different token counts: use the mean.
        tokens = pd.to_numeric(grp["num_tokens"], errors="coerce").mean()
        recs.append(
            {
                "model": model,
                "method": method,
                "tag": tag,
                "step": step,
                "num_tokens": tokens,
                "interval": iv,
                "n": iv.n,
            }  # fmt: skip
        )
    return pd.DataFrame(recs)


CURVE_X = {"num_tokens": "tokens processed", "step": "optimizer step"}


def curves_figure(
    runs_long: pd.DataFrame, metric: str, confidence: float, names: Names, x: str = "num_tokens"
) -> dict[str, bytes]:
    """Validation reward against ``x`` (tokens processed, or step), one panel per model, mean and t band
    over seeds."""
    if x not in CURVE_X:
        raise ValueError(f"curves.x={x!r} is not allowed; allowed: {', '.join(CURVE_X)}")
    stats = curve_stats(runs_long, metric, confidence)
    models = ordered(stats["model"], names.model_order)
    colours = _colours(list(zip(stats["model"], stats["method"], stats["tag"], strict=True)), names)
    fig, axes = plt.subplots(
        1, len(models), figsize=(4.5 * len(models), 3.6), squeeze=False, layout="constrained"
    )
    for ax, model in zip(axes[0], models, strict=True):
        sub = stats[stats["model"] == model]
        for rk in row_order(zip(sub["model"], sub["method"], sub["tag"], strict=True), names):
            line = sub[(sub["method"] == rk[1]) & (sub["tag"] == rk[2])].sort_values("step")
            seeds = int(line["n"].max())
            _band(ax, line[x].to_numpy(dtype=float), list(line["interval"]),
                  f"{names.method(rk[1], rk[2])} (n={seeds})", colours[rk[1:]])  # fmt: skip
        ax.set_title(names.model(model), fontsize=9)
        ax.set_xlabel(CURVE_X[x])
        ax.set_ylabel(f"validation reward ({metric})")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.suptitle(
        f"Training curves: mean over seeds, {confidence * 100:g}% Student t band (t_seeds)", fontsize=9
    )
    return render(fig)
