"""The policy-loss leaderboard: every method under one token budget, with intervals, and only the order
the intervals support.

``python -m pspo_repro.leaderboard results_dir=<root> out_dir=<root> [tag=] [offpolicy_tag=<tag>]
[reference=clip] [alpha=0.05]``

Reads the evaluation cells and training runs under ``results_dir`` (``make leaderboard`` writes them:
conf/pipeline/leaderboard.yaml) and writes ``leaderboard.md``, ``leaderboard.csv`` and ``leaderboard.png`` into
``out_dir``. One table per regime: the runs tagged ``tag`` (the learning regime, untagged by default) and,
when given, those tagged ``offpolicy_tag`` (rollout reuse). Per method, every number from the records:

- rank interval: the 2.5th-97.5th percentile of the method's rank (by mean greedy true accuracy) over
  10,000 bootstrap resamples of each method's seeds, fixed RNG seed (``ranking.rank_intervals``); there is
  no single rank number, and rows are listed by mean, which is not a ranking;
- equivalence class: methods whose per-prompt values are identical on every seed they share, in every
  evaluation cell of the regime (both datasets, both temperatures, true and reward-style), computed the
  same update there and form one class (``ranking.equivalence_classes``); a class resamples as one;
- true and reward-style accuracy on the rewarded task's test split at T = 0 and T = 0.8: mean over seeds
  with a Student t interval over seeds; a proportion's interval is clipped to [0, 100] and marked;
- the gain over the base model (the ``baseline`` cell), greedy true accuracy, per seed, t interval;
- preservation: the held-out skill's greedy true accuracy minus the base model's (when its cells exist);
- against the regime's reference: the per-prompt paired difference in greedy true accuracy (each prompt
  averaged over seeds), its bootstrap interval and paired t-test, the p-values Holm-adjusted over the
  methods of the regime; ``=`` marks a method that cannot be told apart from the reference at level
  ``alpha``, ``>``/``<`` one that is better/worse, ``≡`` one of the reference's own class (not tested).
  The reference is ``reference=`` where it has cells and none of its seeds collapsed; otherwise the method
  with the best mean greedy true accuracy there, and the caption says why (``choose_reference``). A
  ``reference=`` that is no method of the records is refused (exit 2);
- tokens without gradient (``method/zero_grad_frac``, mean over optimizer steps) and the KL from the
  behaviour policy (``train/behaviour_kl``, mean over the steps that reuse a rollout), from metrics.jsonl;
- norm-clipped steps: the share of optimizer steps, pooled over seeds, whose pre-clip gradient norm
  exceeded the run's ``max_grad_norm``, and the mean update norm (``train/update_norm``; "not logged" for
  runs written before it existed) (``run_stats.step_norms``);
- at foreign defaults: whether none of the method's own knobs is swept in the records (``knobs``);
- collapses: seeds whose final greedy true accuracy is not above the base model's, or whose training
  reward in the last quarter of steps fell below half of the first steps' (``run_stats.rows_stats``).

A method added to the registry appears with no edit here. The records must be of one model (rows are keyed
by method): a second model's cells or runs are refused, naming a file of each (``Records.check_one_model``).
"""

from __future__ import annotations

import csv
import io
import math
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hydra.core.config_store import ConfigStore

from pspo_repro.analysis import run_records
from pspo_repro.analysis.knobs import Knobs
from pspo_repro.analysis.leaderboard_rows import (
    DATASET,
    SAME,
    Regime,
    UnknownReference,
    base_accuracy,
    class_label,
    regime_rows,
)
from pspo_repro.analysis.measures import Records
from pspo_repro.analysis.run_stats import StepNorms
from pspo_repro.analysis.stats import CLIPPED, Interval, clip_interval
from pspo_repro.common.atomic import write_set
from pspo_repro.common.cli import USAGE_EXIT, required_error, run_command
from pspo_repro.common.output_dirs import out_dir_error
from pspo_repro.common.redact import redact, redact_files

GROUP_TEXT = {"=": "cannot be told apart from", ">": "better than", "<": "worse than", SAME: "same update as",
              "ref": "reference"}  # fmt: skip


# ---------------------------------------------------------------- formatting


def _pct(iv: Interval | None, signed: bool = False) -> str:
    """``31.2 [24.0, 38.4]`` in percent; a proportion's interval is cut at [0, 100] and marked ``§``."""
    if iv is None:
        return "-"
    f = (lambda x: f"{100 * x:+.1f}") if signed else (lambda x: f"{100 * x:.1f}")
    if not iv.has_interval:
        return f"{f(iv.mean)} (1 seed)"
    if not signed:
        iv = clip_interval(iv, 0.0, 1.0)
    return f"{f(iv.mean)} [{f(iv.low)}, {f(iv.high)}]" + (CLIPPED if iv.clipped else "")


def _num(x: float, pct: bool = False, digits: int = 4) -> str:
    if x is None or not math.isfinite(x):
        return "-"
    return f"{100 * x:.2f}" if pct else f"{x:.{digits}f}"


def _rank(r: dict[str, Any]) -> str:
    if r["rank"] is None:
        return "-"
    low, high = r["rank"]
    return f"{low}" if low == high else f"{low}-{high}"


def _versus(r: dict[str, Any]) -> str:
    if r["group"] == SAME:
        return "identical (same class)"
    p = r["paired"]
    if p is None:
        return "-"
    return f"{100 * p.diff:+.1f} [{100 * p.low:+.1f}, {100 * p.high:+.1f}], p = {r['p_holm']:.2g}"


def norm_clip_text(n: StepNorms) -> str:
    """The norm-clipped share in percent, naming the steps it could not judge."""
    if n.steps == 0:
        return "-"
    if n.clipping_off == n.steps:
        return "off"
    out = "-" if math.isnan(n.clipped_share) else f"{100 * n.clipped_share:.1f}"
    notes = [f"{n.no_norm} steps no norm"] * bool(n.no_norm) + [f"{n.clipping_off} steps off"] * bool(
        n.clipping_off
    )
    return out + (f" ({'; '.join(notes)})" if notes else "")


def update_norm_text(n: StepNorms) -> str:
    """The mean update norm, or "not logged" (never 0) when no step logged it."""
    if n.update_steps == 0:
        return "not logged"
    text = f"{n.update_norm:.4g}"
    return text if n.update_steps == n.steps else f"{text} ({n.update_steps}/{n.steps} steps)"


def foreign_text(k: Knobs) -> str:
    """``yes (eps_low, eps_high)``: at foreign defaults, and its knobs; ``no (swept: ...)``; ``no own knob``."""
    if k.at_foreign_defaults is None:
        return "no own knob"
    if k.at_foreign_defaults:
        return f"yes ({', '.join(k.values)})"
    return f"no (swept: {', '.join(k.swept)})"


def regime_markdown(reg: Regime, base: float | None, alpha: float) -> str:
    """One regime's table under its caption (percent; intervals over seeds)."""
    rows, ref = reg.rows, reg.reference
    n = {r["n_seeds"] for r in rows}
    seeds = "/".join(str(s) for s in sorted(n))
    counted = {g: [r["method"] for r in rows if r["group"] == g] for g in ("=", ">", "<", SAME)}
    base_text = "-" if base is None else f"{100 * base:.1f}"
    top = [r["method"] for r in rows if r["rank"] is not None and r["rank"][0] == 1]
    classes = "; ".join(f"{class_label(i)} = {{{', '.join(c)}}}" for i, c in enumerate(reg.classes)) or "none"
    lr = ", ".join(reg.learning_rates) or "-"
    lr_text = (
        f"learning rate {lr} for every method (one value in these records: not swept)"
        if len(reg.learning_rates) == 1
        else f"learning rates {lr}"
    )
    n_tests = sum(1 for r in rows if r["paired"] is not None)
    lines = [
        f"### {reg.title}",
        "",
        f"{len(rows)} methods, {seeds} seeds each; base model (SFT) greedy true accuracy {base_text}%; "
        f"{lr_text}.",
        "",
        f"- Reference: {reg.reference_note}.",
        f"- Against {ref} on the same prompts (greedy true accuracy, Holm-adjusted over {n_tests} comparison{'s' * (n_tests != 1)}, "
        f"level {alpha:g}): {len(counted['='])} cannot be told apart, {len(counted['>'])} better"
        + (f" ({', '.join(counted['>'])})" if counted[">"] else "")
        + f", {len(counted['<'])} worse"
        + (f" ({', '.join(counted['<'])})" if counted["<"] else "")
        + (f"; {len(counted[SAME])} of its own class ({', '.join(counted[SAME])})" if counted[SAME] else "")
        + ".",
        f"- Equivalence classes (identical per-prompt values on every shared seed, in every cell): {classes}.",
        f"- Rank interval reaching 1 (cannot be told from the top): {len(top)} of {len(rows)} methods"
        + (f" ({', '.join(top)})" if len(top) < len(rows) else "")
        + ".",
        "",
        "| Rank [95%] | Method | Class | vs "
        + ref
        + " | True acc. T=0 | True acc. T=0.8 | Reward-style T=0 | "
        "Reward-style T=0.8 | Gain over base (true, T=0) | Held-out minus base | Per prompt vs "
        + ref
        + " (pp), Holm p | Zero-grad tokens % | KL(old\\|\\|new) | Norm-clipped steps % | Update norm | "
        "At foreign defaults | Collapsed |",
        "|:---:|:---|:---:|:---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|:---|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {_rank(r)} | {r['method']} | {r['class'] or '-'} | {r['group'] or '-'} | {_pct(r['true_acc_T0'])} | "
            f"{_pct(r['true_acc_T0.8'])} | {_pct(r['reward_acc_T0'])} | {_pct(r['reward_acc_T0.8'])} | "
            f"{_pct(r['gain'], True)} | {_pct(r['preservation'], True)} | {_versus(r)} | "
            f"{_num(r['zero_grad'], pct=True)} | {_num(r['behaviour_kl'])} | {norm_clip_text(r['norms'])} | "
            f"{update_norm_text(r['norms'])} | {foreign_text(r['knobs'])} | {r['collapsed']}/{r['n_seeds']} |"
        )
    return "\n".join(lines) + "\n"


def markdown(regimes: list[Regime], base: float | None, alpha: float) -> str:
    """The whole leaderboard: a caption, one table per regime, the hyperparameters each method ran with."""
    head = (
        "## Policy-loss leaderboard\n\n"
        "Every registered method under the same token budget on the mini's task and SFT base "
        "(pspo_repro/analysis/leaderboard.py; docs/leaderboard.md). Rows are listed by mean greedy true "
        "accuracy, which is not a ranking. Rank [95%]: the 2.5th-97.5th percentile of the method's rank by mean "
        "greedy true accuracy over 10,000 bootstrap resamples of each method's seeds (fixed RNG seed; tied means "
        "share the better rank; an equivalence class resamples as one); methods whose intervals overlap are "
        "not ordered by this table. Class: methods with identical per-prompt values on every shared seed in "
        "every evaluation cell of the regime (both datasets, both temperatures, true and reward-style) "
        "computed the same update there and share a letter. Accuracies in percent: mean over seeds [95% "
        "Student t interval over seeds]; an interval cut at [0, 100] is marked `§`. Gain and held-out "
        "columns: per-seed differences from the base model, percentage points. Reference: the given "
        "`reference=` where it has cells and none of its seeds collapsed, otherwise the method with the best "
        "mean greedy true accuracy (each table says which and why). Per prompt vs reference: each prompt's "
        "greedy true accuracy averaged over seeds, mean difference [95% percentile bootstrap over prompts] "
        "and the paired t-test's p-value, Holm-adjusted within the table; vs column: `=` cannot be told apart "
        f"from the reference at level {alpha:g}, `>` better, `<` worse, `{SAME}` its own class (not tested). "
        "Zero-grad tokens: share of completion tokens whose gradient the method zeroes, mean over optimizer "
        "steps; KL: KL(pi_old || pi_theta) per token over the steps that reuse a rollout (`-`: none does). "
        "Norm-clipped steps: share of optimizer steps (pooled over seeds) whose pre-clip gradient norm "
        "(`train/grad_norm`) exceeded the run's `max_grad_norm` (steps without a finite norm are left out and "
        "counted). Update norm: mean `train/update_norm` per step (`not logged`: the runs predate it). At "
        "foreign defaults: `yes` when none of the method's own knobs (listed) shows a sweep in these records, "
        "so it ran at values set for other models and scales (sources in the last table). Collapsed: seeds "
        "whose final greedy true accuracy is not above the base's, or whose training reward fell below half "
        "of its start.\n"
    )
    parts = [head]
    for reg in regimes:
        parts.append(regime_markdown(reg, base, alpha))
    params: dict[str, str] = {}
    knobs: dict[str, Knobs] = {}
    for reg in regimes:
        for r in reg.rows:
            params.setdefault(r["method"], r["hyperparameters"])
            knobs.setdefault(r["method"], r["knobs"])

    def sources(k: Knobs) -> str:
        return "; ".join(f"{key}: {k.source[key]}" for key in k.values).replace("|", "\\|") or "-"

    def swept(k: Knobs) -> str:
        return ", ".join(f"{key} {'/'.join(k.values[key])}" for key in k.swept) or "none"

    parts.append(
        "### Hyperparameters (run.json's config.method; sources from conf/method/<name>.yaml's comments)\n\n"
        "| Method | Settings (learning regime) | Knobs swept in these records | Where each knob's value comes "
        "from |\n|:---|:---|:---|:---|\n"
        + "\n".join(
            f"| {m} | {params[m] or '-'} | {swept(knobs[m])} | {sources(knobs[m])} |" for m in sorted(params)
        )
        + "\n"
    )
    return "\n".join(parts)


def csv_rows(regimes: list[Regime]) -> list[dict[str, Any]]:
    """Flat rows (fractions, not percent) for leaderboard.csv."""
    out = []
    for reg in regimes:
        for r in reg.rows:
            low, high = r["rank"] if r["rank"] is not None else (math.nan, math.nan)
            rec: dict[str, Any] = {"regime": reg.title, "tag": r["tag"], "rank_low": low, "rank_high": high,
                                   "method": r["method"], "equivalence_class": r["class"],
                                   "n_seeds": r["n_seeds"], "reference": reg.reference,
                                   "group_vs_reference": r["group"]}  # fmt: skip
            for key in (
                "true_acc_T0",
                "true_acc_T0.8",
                "reward_acc_T0",
                "reward_acc_T0.8",
                "gain",
                "preservation",
            ):
                iv = r[key]
                rec[key] = iv.mean if iv else math.nan
                rec[f"{key}_low"] = iv.low if iv else math.nan
                rec[f"{key}_high"] = iv.high if iv else math.nan
            p = r["paired"]
            rec["prompt_diff"] = p.diff if p else math.nan
            rec["prompt_diff_low"] = p.low if p else math.nan
            rec["prompt_diff_high"] = p.high if p else math.nan
            rec["p_value"] = p.p_value if p else math.nan
            rec["p_holm"] = r["p_holm"]
            for key in ("zero_grad", "behaviour_kl"):
                rec[key] = r[key]
            n: StepNorms = r["norms"]
            rec["optimizer_steps"] = n.steps
            rec["grad_norm_clipped_share"] = n.clipped_share
            rec["grad_norm_missing_steps"] = n.no_norm
            rec["grad_clipping_off_steps"] = n.clipping_off
            rec["update_norm"] = n.update_norm
            rec["update_norm_steps"] = n.update_steps
            k: Knobs = r["knobs"]
            rec["at_foreign_defaults"] = {None: "no own knob", True: "yes", False: "no"}[
                k.at_foreign_defaults
            ]
            rec["knobs"] = " ".join(k.values)
            rec["collapsed"] = r["collapsed"]
            rec["hyperparameters"] = r["hyperparameters"]
            out.append(rec)
    return out


COLORS = {"ref": "tab:blue", SAME: "tab:cyan", "=": "tab:gray", ">": "tab:green", "<": "tab:red", "": "black"}


def figure(regimes: list[Regime], base: float | None):
    """Greedy true accuracy per method with its interval, one panel per regime, coloured by the test
    against the panel's reference; each label carries the rank interval and the class."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    n = max(len(reg.rows) for reg in regimes)
    fig, axes = plt.subplots(1, len(regimes), figsize=(5.6 * len(regimes), 0.28 * n + 2.1), squeeze=False)
    for ax, reg in zip(axes[0], regimes, strict=True):
        rows = list(reversed(reg.rows))
        for y, r in enumerate(rows):
            iv = r["true_acc_T0"]
            if iv is None:
                continue
            low = max(iv.low, 0.0) if iv.has_interval else iv.mean
            high = min(iv.high, 1.0) if iv.has_interval else iv.mean
            ax.errorbar(100 * iv.mean, y, xerr=[[100 * (iv.mean - low)], [100 * (high - iv.mean)]], fmt="o",
                        color=COLORS.get(r["group"], "black"), ms=4, capsize=2)  # fmt: skip
        labels = [f"{r['method']} [{_rank(r)}]" + (f" {r['class']}" if r["class"] else "") for r in rows]
        ax.set_yticks(range(len(rows)), labels, fontsize=7)
        if base is not None:
            ax.axvline(100 * base, color="k", ls=":", lw=1, label="base (SFT)")
        ax.set_xlabel("greedy true accuracy (%), 95% t interval over seeds")
        ax.set_title(f"{reg.title}\nreference: {reg.reference}; [rank interval], class letter", fontsize=8)
    handles = [plt.Line2D([], [], color=c, marker="o", ls="", label=f"{GROUP_TEXT[g]} the reference" if g != "ref" else "reference")
               for g, c in COLORS.items() if g]  # fmt: skip
    fig.legend(handles=handles, fontsize=7, loc="lower center", ncol=len(handles))  # below, clear of the rows
    fig.tight_layout(rect=(0, 0.04, 1, 1))
    return fig


# Suffixes of the leaderboard's outputs: temporaries of these names left by a kill are removed on the next write.
OUTPUT_SUFFIXES = (".md", ".csv", ".png")


def write(
    results_dir: Path, out_dir: Path, tag: str = "", offpolicy_tag: str | None = None,
    reference: str = "clip", alpha: float = 0.05,
) -> list[Path]:  # fmt: skip
    """Compute the leaderboard from ``results_dir``; write leaderboard.md/.csv/.png into ``out_dir`` as one
    set (``atomic.write_set``: after a failure or a kill the folder holds the previous three or the new
    three, never a mix).

    Raises UnknownReference when ``reference`` is no method of the records' evaluation cells."""
    if reference not in run_records.registered_methods():  # a misspelt name: before reading the records
        raise UnknownReference(f"reference={reference!r} is no method; the registered methods are: "
                               f"{', '.join(run_records.registered_methods())}")  # fmt: skip
    rec = Records.read(results_dir)
    rec.check_one_model("the leaderboard")
    if not rec.evals.empty:
        present = sorted(set(rec.evals["method"]) - {"baseline"})
        if reference not in present:
            raise UnknownReference(f"reference={reference!r} is no method of the records; the methods are: "
                                   f"{', '.join(present)}")  # fmt: skip
    regimes = [  # titles (drawn into the figure too) from redacted text: a tag is user text
        regime_rows(
            rec, tag, reference, 0.95, alpha, "Learning regime" + (f" (tag {redact(tag)})" if tag else "")
        )
    ]
    if offpolicy_tag:
        title = f"Stale mini-batches (tag {redact(offpolicy_tag)})"
        regimes.append(regime_rows(rec, offpolicy_tag, reference, 0.95, alpha, title))
    base = base_accuracy(rec, DATASET)
    md = markdown(regimes, base, alpha)  # everything computed before anything is written
    rows = csv_rows(regimes)
    table = io.StringIO(newline="")
    w = csv.DictWriter(table, fieldnames=list(rows[0]))
    w.writeheader()
    w.writerows(rows)
    from pspo_repro.analysis.plots import render

    png = render(figure(regimes, base), ("png",))["png"]
    paths = [out_dir / "leaderboard.md", out_dir / "leaderboard.csv", out_dir / "leaderboard.png"]
    write_set(redact_files({paths[0]: md, paths[1]: table.getvalue(), paths[2]: png}), OUTPUT_SUFFIXES)
    return paths


@dataclass
class LeaderboardCommand:
    """The ``leaderboard`` command's settings (a schema in Hydra's ConfigStore; each value text, as typed)."""

    results_dir: str | None = None
    out_dir: str | None = None
    tag: str = ""
    offpolicy_tag: str | None = None
    reference: str = "clip"
    alpha: str = "0.05"


ConfigStore.instance().store(name="leaderboard_command", node=LeaderboardCommand)


def _task(cfg: Any) -> int:
    """The Hydra task: 2 for a bad argument (a misspelt reference included), 1 for bad or missing records, each
    one ``error:`` line."""
    if why := required_error(cfg, ("results_dir", "out_dir")):
        print(f"error: {why}", file=sys.stderr)
        return 2
    try:
        alpha = float(cfg.alpha or 0.05)
    except ValueError:
        alpha = math.nan
    if not 0 < alpha < 1:
        print(f"error: alpha={cfg.alpha!r} must be a number in (0, 1)", file=sys.stderr)
        return 2
    if why := out_dir_error(cfg.out_dir):  # a file, read-only, a name too long: before any work
        print(f"error: {why}", file=sys.stderr)
        return 2
    try:
        paths = write(Path(cfg.results_dir), Path(cfg.out_dir), cfg.tag or "", cfg.offpolicy_tag or None,
                      cfg.reference or "clip", alpha)  # fmt: skip
    except UnknownReference as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except (ValueError, KeyError) as exc:  # bad or missing records, as common.cli.run_writer
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except OSError as exc:  # a full disk mid-write: write_set names the target and keeps the previous set
        print(f"error: cannot write the outputs: {exc.strerror or exc}", file=sys.stderr)
        return USAGE_EXIT
    for path in paths:
        print(f"wrote {path}")
    return 0


def main(argv: list[str] | None = None) -> int:
    """``python -m pspo_repro.leaderboard results_dir=... out_dir=... [tag=] [offpolicy_tag=] [reference=clip]
    [alpha=0.05]`` (a Hydra app: ``cli.run_command``); returns the exit code."""
    return run_command("leaderboard_command", _task, argv, structured=True, exit_on_error=False)
