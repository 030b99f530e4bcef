"""Trust-region regime table: how far each method's updates left the behaviour policy, and what it cost.

``python -m pspo_repro.regime results_dir=<root> out_dir=<root> [tag=<run tag>] [name=regime]``

Reads the training runs under ``<results_dir>/runs/`` (``metrics.jsonl``, ``run.json``) and the T = 0
evaluation cells under ``<results_dir>/eval/``, keeps the runs whose tag equals ``tag`` (the untagged
main runs by default), and writes ``<name>.md`` / ``<name>.csv`` (one row per method) and
``<name>_fractions.png`` (the fraction of tokens without gradient per optimizer step, mean over seeds).

Columns, each a mean over seeds (test accuracy with its 95% Student t interval over seeds):

- ``test_acc``: reward-style greedy accuracy of the selected checkpoint on the test split;
- ``val_first`` / ``val_last``: validation reward at the first and last validation step;
- ``zero_grad``: share of completion tokens whose gradient the method zeroes (clipped, masked or
  saturated; ``method/zero_grad_frac``), mean over all optimizer steps; ``zero_grad_reuse``: the same
  over the steps that reuse a rollout (ratio != 1), where a trust region can act at all;
- ``ratio_std``: spread of r = pi_theta / pi_old over tokens, mean over reuse steps;
- ``behaviour_kl``: KL(pi_old || pi_theta) per token (k3 estimator), mean over reuse steps;
- ``grad_clipped``: share of optimizer steps whose gradient norm exceeded ``max_grad_norm`` (where
  gradient-norm clipping engaged: the only place a constant loss scale such as PSPO's 1 - alpha acts
  under Adam, besides Adam's eps);
- ``collapsed``: runs whose selected checkpoint's greedy test accuracy is below half of the base
  model's (the ``baseline`` cell of the same model): a run that lost most of what the base model could
  do. ``reward_fell`` counts runs whose mean training reward over the last quarter of steps fell below
  half of that over the first three logged steps (on the sampling policy, T = 0.8).
"""

from __future__ import annotations

import logging
import math
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hydra.core.config_store import ConfigStore

from pspo_repro.analysis.results_io import checked_metrics
from pspo_repro.analysis.run_records import RunRecord, read_runs
from pspo_repro.analysis.run_stats import COLLAPSE_RATIO, mean_finite, rows_stats
from pspo_repro.analysis.stats import CLIPPED, Interval, clip_interval, t_interval
from pspo_repro.common.atomic import write_set
from pspo_repro.common.cli import required_error, run_command, run_writer
from pspo_repro.common.output_dirs import out_dir_error
from pspo_repro.common.redact import redact_files
from pspo_repro.common.safe_paths import check_name
from pspo_repro.evaluation.cells import cell_paths

log = logging.getLogger(__name__)


def _test_acc(results_dir: Path, model: str, method: str, folder: str) -> float | None:
    cell = cell_paths(results_dir / "eval" / model / method / folder / "synthetic", 0.0)["json"]
    if not cell.is_file():
        return None
    metrics, why = checked_metrics(cell, results_dir)  # recomputed from its records, never the stored cache
    if metrics is None:
        print(f"warning: {cell}: {why}; left out of every table", file=sys.stderr, flush=True)
        return None
    return metrics.get("reward_acc")


def _runs(results_dir: Path, tag: str) -> list[RunRecord]:
    """The finished runs tagged ``tag``, read and checked by ``run_records.read_runs`` (the one reader). A run
    of the tag left out because it is not finished, and one whose norm-clipped share is a guess
    (``RunRecord.norm_note``), is named in a ``warning:`` line: no seed count or share moves without a word."""
    out = []
    for r in read_runs(results_dir):
        if r.tag != tag:
            continue
        if r.status != "finished":
            print(f"warning: {r.folder}: status {r.status}; left out of the regime table (it reads finished "
                  "runs only)", file=sys.stderr, flush=True)  # fmt: skip
            continue
        if note := r.norm_note():
            print(f"warning: {note}", file=sys.stderr, flush=True)
        out.append(r)
    return out


def collect(results_dir: Path, tag: str = "", runs: list[RunRecord] | None = None) -> list[dict[str, Any]]:
    """One row per (model, method): regime statistics over the seeds of runs with this ``tag`` (``runs``:
    those of ``_runs``, when already read)."""
    by_method: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for run in _runs(results_dir, tag) if runs is None else runs:
        stats = rows_stats(run.rows, run.max_grad_norm)
        stats["test_acc"] = _test_acc(results_dir, run.model, run.method, run.folder.name)
        by_method.setdefault((run.model, run.method), []).append(stats)
    rows = []
    for (model, method), runs in sorted(by_method.items()):
        base = _test_acc(results_dir, model, "baseline", "seed0")
        accs = [r["test_acc"] for r in runs if r["test_acc"] is not None]
        ci = t_interval(accs) if accs else None
        row: dict[str, Any] = {"model": model, "method": method, "tag": tag, "n_seeds": len(runs)}
        row["test_acc"] = ci.mean if ci else math.nan
        row["test_acc_low"] = ci.low if ci else math.nan
        row["test_acc_high"] = ci.high if ci else math.nan
        for key in ("val_first", "val_last", "zero_grad", "zero_grad_reuse", "ratio_std", "behaviour_kl",
                    "grad_clipped"):  # fmt: skip
            row[key] = mean_finite([r[key] for r in runs])
        row["base_acc"] = math.nan if base is None else base
        row["collapsed"] = (
            sum(a < COLLAPSE_RATIO * base for a in accs) if base is not None and accs else math.nan
        )
        row["reward_fell"] = sum(bool(r["reward_fell"]) for r in runs)
        rows.append(row)
    return rows


def _fmt(x: float, pct: bool = False, digits: int = 3) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "-"
    return f"{100 * x:.1f}" if pct else f"{x:.{digits}f}"


def markdown(rows: list[dict[str, Any]]) -> str:
    """The regime table as Markdown (percentages for accuracies and fractions), under a one-line caption."""
    base = next((r["base_acc"] for r in rows if not math.isnan(r["base_acc"])), math.nan)
    caption = (
        f"Base model (SFT) greedy test accuracy: {_fmt(base, True)}%. Means over seeds; collapsed: the "
        "selected checkpoint below half of the base model's accuracy; reward fell: the last quarter's "
        "training reward below half of the first steps'. A test-accuracy interval that reached past [0, 100] is "
        f"cut there and marked {CLIPPED}. Definitions: pspo_repro/analysis/regime.py.\n\n"
    )
    head = caption + (
        "| Method | Seeds | Test acc. (T=0) [95% CI] | Val. reward first -> last | Zero-grad tokens % "
        "(all / reuse steps) | Ratio std | KL(old\\|\\|new) | Grad-norm clipped % | Collapsed | Reward fell |\n"
        "|:---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n"
    )
    lines = []
    for r in rows:
        ci = ""
        if not math.isnan(r["test_acc_low"]):  # an accuracy's t interval cut at [0, 100] %, marked
            iv = clip_interval(
                Interval(r["test_acc"], r["test_acc_low"], r["test_acc_high"], r["n_seeds"], "t_seeds"),
                0.0,
                1.0,
            )
            ci = f" [{_fmt(iv.low, True)}, {_fmt(iv.high, True)}]" + (CLIPPED if iv.clipped else "")
        lines.append(
            f"| {r['method']} | {r['n_seeds']} | {_fmt(r['test_acc'], True)}{ci} | "
            f"{_fmt(r['val_first'])} -> {_fmt(r['val_last'])} | "
            f"{_fmt(r['zero_grad'], True)} / {_fmt(r['zero_grad_reuse'], True)} | {_fmt(r['ratio_std'])} | "
            f"{_fmt(r['behaviour_kl'], digits=4)} | {_fmt(r['grad_clipped'], True)} | "
            f"{'-' if isinstance(r['collapsed'], float) else r['collapsed']}/{r['n_seeds']} | "
            f"{r['reward_fell']}/{r['n_seeds']} |"
        )
    return head + "\n".join(lines) + "\n"


def fractions_figure(results_dir: Path, tag: str, runs: list[RunRecord] | None = None):
    """Zero-gradient token fraction per optimizer step (mean over seeds), one line per method (``runs``: those
    of ``_runs``, when already read)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 3.6))
    series: dict[str, dict[int, list[float]]] = {}
    kls: dict[str, dict[int, list[float]]] = {}
    for run in _runs(results_dir, tag) if runs is None else runs:
        for r in (r for r in run.rows if r.get("num_tokens") is not None):  # the figure's x axis
            if r.get("method/zero_grad_frac") is not None:
                series.setdefault(run.method, {}).setdefault(r["num_tokens"], []).append(
                    r["method/zero_grad_frac"]
                )
            if r.get("train/behaviour_kl") is not None:
                kls.setdefault(run.method, {}).setdefault(r["num_tokens"], []).append(r["train/behaviour_kl"])
    for ax, data, label in ((axes[0], series, "zero-gradient tokens"), (axes[1], kls, "KL(old || new)")):
        for method, pts in sorted(data.items()):
            xs = sorted(pts)
            ax.plot(xs, [mean_finite(pts[x]) for x in xs], label=method, lw=1.2)
        ax.set_xlabel("tokens (prompt + completion)")
        ax.set_ylabel(label)
    axes[0].legend(fontsize=7)
    fig.tight_layout()
    return fig


# Suffixes of regime's outputs: temporaries of these names left by a kill are removed on the next write.
OUTPUT_SUFFIXES = (".md", ".csv", ".png")


def write(results_dir: Path, out_dir: Path, tag: str = "", name: str = "regime") -> list[Path]:
    """Write ``<name>.md``, ``<name>.csv`` and ``<name>_fractions.png`` into ``out_dir`` as one set
    (``atomic.write_set``: after a kill the folder holds the previous three or the new three, never a
    mix); return the paths. Tables of another ``name`` in the folder are another set, left alone."""
    import csv
    import io

    check_name("name", name)  # it names the files: one plain name, never a path
    runs = _runs(results_dir, tag)  # read once: each warning printed once
    rows = collect(results_dir, tag, runs)
    if not rows:
        raise ValueError(f"no finished runs with tag {tag!r} under {results_dir / 'runs'}")
    paths = [out_dir / f"{name}.md", out_dir / f"{name}.csv", out_dir / f"{name}_fractions.png"]
    table = io.StringIO(newline="")
    writer = csv.DictWriter(table, fieldnames=list(rows[0]))
    writer.writeheader()
    writer.writerows(rows)
    from pspo_repro.analysis.plots import render

    png = render(fractions_figure(results_dir, tag, runs), ("png",))["png"]
    write_set(
        redact_files({paths[0]: markdown(rows), paths[1]: table.getvalue(), paths[2]: png}), OUTPUT_SUFFIXES
    )
    return paths


@dataclass
class RegimeCommand:
    """The ``regime`` command's settings (a schema in Hydra's ConfigStore; each value text, as typed)."""

    results_dir: str | None = None
    out_dir: str | None = None
    tag: str = ""
    name: str = "regime"


ConfigStore.instance().store(name="regime_command", node=RegimeCommand)


def _task(cfg: Any) -> int:
    """The Hydra task: the settings checked before anything is read or written, then ``write``."""
    if why := required_error(cfg, ("results_dir", "out_dir")):
        print(f"error: {why}", file=sys.stderr)
        return 2
    try:
        check_name("name", cfg.name or "regime")
    except ValueError as exc:  # before anything is read or written
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if why := out_dir_error(cfg.out_dir):  # a file, read-only, a name too long: before any work
        print(f"error: {why}", file=sys.stderr)
        return 2
    return run_writer(write, Path(cfg.results_dir), Path(cfg.out_dir), cfg.tag or "", cfg.name or "regime")


def main(argv: list[str] | None = None) -> int:
    """``python -m pspo_repro.regime results_dir=... out_dir=... [tag=...] [name=...]`` (a Hydra app:
    ``cli.run_command``); returns the exit code."""
    return run_command("regime_command", _task, argv, structured=True, exit_on_error=False)
