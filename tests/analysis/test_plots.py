"""Figure rendering (``pspo_repro.analysis.plots.render``): one layout and one tight box for every format, the
PNG byte for byte what matplotlib's ``savefig(bbox_inches="tight")`` gives, the PDF's page that same box."""

from __future__ import annotations

import io
import re
import struct

import matplotlib.pyplot as plt
import pytest

from pspo_repro.analysis import plots


def _figure(layout: str):
    """Two panels with titles, labels, a band and a figure legend, as the aggregate's figures have."""
    fig, axes = plt.subplots(1, 2, figsize=(6.8, 3.6), squeeze=False,
                             layout="constrained" if layout == "constrained" else None)  # fmt: skip
    for j, ax in enumerate(axes.flat):
        ax.plot([0.0, 0.4, 0.8], [12.5, 31.0 + j, 20.25], marker="o", label="GR-PSPO")
        ax.fill_between([0.0, 0.4, 0.8], [10, 28, 18], [15, 34, 23], alpha=0.2, linewidth=0)
        ax.plot([0.0, 0.4, 0.8], [11.0, 25.0, 17.0], marker="o", label="GRPO-clip")
        ax.set_title(f"Tiny SFT (mini) / Synthetic task {j}", fontsize=9)
        ax.set_xlabel("temperature")
        ax.set_ylabel("True accuracy (%)")
    if layout == "constrained":
        plots._figure_legend(fig, axes)
    else:
        axes[0][0].legend(fontsize=8)
        fig.tight_layout()
    return fig


@pytest.mark.parametrize("layout", ["constrained", "tight_layout"])
def test_png_is_savefigs_own_with_a_tight_box(layout):
    expected = io.BytesIO()
    fig = _figure(layout)
    fig.savefig(expected, format="png", dpi=150, bbox_inches="tight")
    plt.close(fig)
    got = plots.render(_figure(layout))
    assert got["png"] == expected.getvalue()
    assert set(got) == {"png", "pdf"} and got["pdf"].startswith(b"%PDF")


def test_pdf_page_is_the_pngs_box():
    """The PDF is cut to the box the PNG was cut to (the layout is not run again for it): the page in points is
    the PNG's size in pixels at 150 dpi, to within a pixel."""
    got = plots.render(_figure("constrained"))
    width_px, height_px = struct.unpack(">II", got["png"][16:24])  # the PNG's IHDR chunk
    box = re.search(rb"/MediaBox \[ *0 0 ([0-9.]+) ([0-9.]+) *\]", got["pdf"])
    assert box, got["pdf"][:400]
    width_pt, height_pt = float(box[1]), float(box[2])
    assert width_pt == pytest.approx(width_px * 72 / 150, abs=72 / 150)
    assert height_pt == pytest.approx(height_px * 72 / 150, abs=72 / 150)


def test_formats_asked_for_only():
    assert set(plots.render(_figure("constrained"), ("png",))) == {"png"}


def test_the_layout_runs_once_for_both_formats(monkeypatch):
    """``savefig`` runs a figure's layout engine again for each format it writes; render runs it once."""
    from matplotlib.layout_engine import ConstrainedLayoutEngine

    calls = []
    real = ConstrainedLayoutEngine.execute
    monkeypatch.setattr(
        ConstrainedLayoutEngine, "execute", lambda self, fig: calls.append(1) or real(self, fig)
    )
    plots.render(_figure("constrained"))
    assert len(calls) == 1
