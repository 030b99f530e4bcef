"""The claims table: each claim of the paper, the toy experiment that tests it, its numbers and a verdict.

``python -m pspo_repro.claims results_dir=<root> out_dir=<root> [spec=conf/claims.yaml]``

The claims, their quotes and the measurements that test them are data (``conf/claims.yaml``); this module
computes every number from the records under ``results_dir`` (per-prompt rows of the evaluation cells,
``metrics.jsonl`` of the runs) and derives each verdict by the rule the claim names, so a rerun of the
experiments rewrites the table and its verdicts together. Writes ``claims.md`` and ``claims.csv``.

Measurements (``kind``); a run group may be ``tuned: <id>`` (the spec's ``tuning`` section: the runs at the
value ``analysis.tuning.select`` chooses on validation, recomputed here from the tuning runs):

- ``accuracy``: a run group's per-seed accuracy (one value per seed, from its cells' per-prompt rows), mean
  with its Student t interval over seeds.
- ``compare``: A minus B, seed-paired: the difference of the two groups' values for each seed both have,
  with its t interval over seeds (the seeds are the independent replicates); beside it the paired
  per-prompt comparison, conditional on these seeds (each prompt averaged over each group's seeds;
  percentile bootstrap over prompts). B may be the base model (``method: baseline``, one seed: every seed
  of A is compared with it). ``identical`` says whether both groups gave the same per-prompt values on
  every shared seed.
- ``interaction``: (A - B at the higher temperature) - (A - B at the lower), per seed.
- ``collapse``: per seed 1 if the run collapsed (greedy true accuracy not above the base's, or its training
  reward fell below half its start), else 0.
- ``frontier``: retention (held-out accuracy minus the base's) against gain (rewarded-task accuracy minus the
  base's) over a sweep's runs, A's least-squares line minus B's at their mean gain, bootstrap over runs.
- ``run_stat``: a training statistic of ``metrics.jsonl`` (e.g. ``method/zero_grad_frac``; ``grad_clipped``:
  the share of steps whose gradient norm exceeded ``max_grad_norm``), each run's mean over its optimizer
  steps (``steps: reuse``: only the steps that reuse a rollout; ``agg: min``: the run's minimum), then the
  mean over seeds.
- ``val_reward``: validation reward at the last validation step every run of the group reached (the
  paper's alpha ablation reads validation reward), per seed.

Key tests and verdicts (``verdict.rule``; docs/statistics.md "Claims and verdicts"). Each claim has one key
test; the raw p-values of all claims are Holm-adjusted together, and "supported" / "contradicted" need an
adjusted p below ``ALPHA`` in the direction the rule names ("not resolved" otherwise):

- ``greater`` / ``interaction``: a two-sided test over seeds of a seed-paired difference (``test``: t,
  wilcoxon, sign, or bootstrap for a frontier); supported if positive, contradicted if negative.
- ``non_inferior``: one-sided t test that the difference is above -margin (supported), or below it
  (contradicted); ``margin_from``: the mean 95% half-width of the named accuracy measurements.
- ``equivalent``: TOST within +-margin (supported) or a significant difference (contradicted).
- ``stable``: a majority of collapsed runs contradicts (no test); otherwise the gain over the base (t test)
  with no collapse supports.
- ``exceeds``: every listed per-seed statistic above ``threshold`` (one-sided t, the largest p).
- ``peak``: the named value above every other, seed-paired (one-sided t, the largest p).
- deterministic, outside the Holm family: ``zero_vs_positive`` (the first statistic at most ``tolerance``
  on every run, the second above it on every run) and ``identical_unless_clipped`` (per-prompt identity of
  the listed comparisons, and difference of the others).
- ``not_testable``: no experiment at this scale (the claim says why).
"""

from __future__ import annotations

import csv
import io
import json
import math
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from pspo_repro.analysis.claims_spec import (  # noqa: F401 (KINDS, load_spec, load_tuning: claims' own names)
    KINDS,
    RULES,
    ClaimsError,
    load_spec,
    load_tuning,
    read_spec,
)
from pspo_repro.analysis.regime import rows_stats
from pspo_repro.analysis.results_io import eval_long, load_eval_cells, prompt_values, runs_frames
from pspo_repro.analysis.run_records import RunRecord, read_runs
from pspo_repro.analysis.stats import Interval, clip_interval, holm, paired_comparison, t_interval
from pspo_repro.analysis.tables import CLIPPED
from pspo_repro.analysis.tuning import Selection, TuningError, point_tag, select
from pspo_repro.common.atomic import write_set
from pspo_repro.common.cli import parse_key_values, run_writer
from pspo_repro.common.output_dirs import out_dir_error
from pspo_repro.common.paths import CONF_DIR
from pspo_repro.common.redact import redact_files

VERDICTS = ("supported", "contradicted", "not resolved", "not testable")
GRAD_CLIPPED = "grad_clipped"  # run_stat: share of optimizer steps whose gradient norm was clipped


@dataclass
class Measured:
    """One measurement's numbers: ``value`` (mean) with its interval, per-seed values and a text line."""

    id: str
    label: str
    value: float
    low: float = math.nan
    high: float = math.nan
    seeds: dict[int, float] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)
    text: str = ""
    short: str = ""  # the summary table's form


# ---------------------------------------------------------------- reading the records


@dataclass
class Records:
    """The long evaluation table and the runs' metrics of one results folder, read once."""

    root: Path
    evals: pd.DataFrame
    runs: pd.DataFrame
    metrics: pd.DataFrame
    tuning: dict[str, dict[str, Any]] = field(default_factory=dict)  # the spec's ``tuning`` section
    selected: dict[tuple[str, str, str], Selection] = field(default_factory=dict)
    records: dict[str, RunRecord] = field(default_factory=dict)  # run_dir -> the run as the reader read it
    # (method, tag, dataset, metric) -> its rows of ``evals``, in their order: built on the first ``cells``
    # call. A claims table or leaderboard asks ~1,000 times; a mask over the whole long table each time
    # was ~2.9 ms a call.
    _groups: dict[tuple, pd.DataFrame] | None = field(default=None, repr=False, compare=False)

    @classmethod
    def read(cls, root: Path) -> Records:
        """Read the evaluation cells (long table) and the runs under ``root``, each run once, through the one
        reader of run records (``run_records.read_runs``)."""
        cells = load_eval_cells(root)
        evals = eval_long(cells) if not cells.empty else pd.DataFrame()
        records = read_runs(root)
        runs, metrics = runs_frames(records)
        return cls(root, evals, runs, metrics, records={str(r.folder): r for r in records})

    def run(self, run_dir: str | Path) -> RunRecord:
        """The run in ``run_dir`` (a ``run_dir`` of ``runs``/``metrics``), read and checked once by the reader."""
        return self.records[str(run_dir)]

    def check_one_model(self, command: str) -> None:
        """ClaimsError when the records hold cells or runs of more than one model folder: ``command`` (the
        claims, the leaderboard) compares methods of one model, and would merge another model's seeds into
        its rows. The line names a file of each model."""
        where: dict[str, str] = {}
        for frame, column in ((self.evals, "file"), (self.runs, "run_dir")):
            if not frame.empty:
                for model, path in zip(frame["model"].astype(str), frame[column].astype(str), strict=True):
                    where.setdefault(model, path)
        if len(where) > 1:
            raise ClaimsError(
                f"{command} compares the methods of one model, but {self.root} holds {len(where)}: "
                + "; ".join(f"{m} (e.g. {where[m]})" for m in sorted(where))
                + "; give a results_dir of one model"
            )

    def selection(self, method: str, tuned: str, point: dict[str, Any]) -> Selection:
        """The value ``tuning[tuned]`` selects for ``method`` (and the point's other keys), recomputed from the
        tuning runs' validation rewards (analysis.tuning.select: the pipeline's own choice)."""
        if tuned not in self.tuning:
            raise ClaimsError(
                f"tuned: {tuned!r} is not in the spec's tuning section ({', '.join(self.tuning)})"
            )
        t = self.tuning[tuned]
        key = (method, tuned, json.dumps(point, sort_keys=True))
        if key not in self.selected:
            try:
                self.selected[key] = select(self.root / "runs" / str(t.get("model", "mini_sft")), method,
                                            str(t["from_tag"]), str(t["key"]), list(t["values"]),
                                            [int(x) for x in t["seeds"]], point)  # fmt: skip
            except TuningError as exc:
                raise ClaimsError(str(exc)) from None
        return self.selected[key]

    def resolve(self, g: dict[str, Any]) -> dict[str, Any]:
        """A run group with ``tuned: <id>`` as the plain group it names: ``tag`` = the tuned runs' folder tag
        at the selected value (``{to_tag}-...{key}{value}...``, with the group's ``point`` keys)."""
        if "tuned" not in g:
            return g
        point = dict(g.get("point") or {})
        t = self.tuning.get(g["tuned"], {})
        sel = self.selection(g["method"], g["tuned"], point)
        tag = point_tag(str(t["to_tag"]), {**point, str(t["key"]): sel.chosen})
        return {**{k: v for k, v in g.items() if k not in ("tuned", "point")}, "tag": tag}

    def cells(self, g: dict[str, Any], metric: str) -> pd.DataFrame:
        """The cells of a run group (method, tag, dataset, temperature) for one metric, one per seed."""
        g = self.resolve(g)
        e = self.evals
        if e.empty:
            raise ClaimsError(f"no evaluation cells under {self.root / 'eval'}")
        if self._groups is None:
            keys = ["method", "tag", "dataset", "metric"]
            self._groups = {k: rows for k, rows in e.groupby(keys, sort=False, dropna=False)}
        rows = self._groups.get((g["method"], str(g.get("tag") or ""), g.get("dataset", "synthetic"), metric))
        if rows is None:
            rows = e.iloc[:0]
        sel = rows[(rows["temperature"] - float(g.get("temperature", 0.0))).abs() < 1e-9]
        if "model" in g:
            sel = sel[sel["model"] == g["model"]]
        if sel.empty:
            raise ClaimsError(f"no {metric} cells for {describe(g)} under {self.root / 'eval'}")
        return sel.sort_values("seed")


def describe(g: dict[str, Any]) -> str:
    """``clip [as_run] synthetic T=0``: a run group in words (``[tuned lr]`` for a tuned group)."""
    if g.get("tuned"):
        extra = "".join(f" {k.split('.', 1)[-1]}={v}" for k, v in (g.get("point") or {}).items())
        tag = f" [tuned {g['tuned']}{extra}]"
    else:
        tag = f" [{g['tag']}]" if g.get("tag") else ""
    return f"{g['method']}{tag} {g.get('dataset', 'synthetic')} T={float(g.get('temperature', 0.0)):g}"


def _pct(x: float) -> str:
    return "-" if x is None or math.isnan(x) else f"{100 * x:.1f}"


def _pp(x: float) -> str:
    return "-" if x is None or math.isnan(x) else f"{100 * x:+.1f}"


def _seeds(n: int) -> str:
    return f"{n} seed" if n == 1 else f"{n} seeds"


def _interval_text(iv: Interval, signed: bool) -> str:
    """``mean [low, high]``; an accuracy's (unsigned) interval is cut at [0, 100] % and marked ``§``."""
    f = _pp if signed else _pct
    if not iv.has_interval:
        return f"{f(iv.mean)} (one seed)"
    if not signed:
        iv = clip_interval(iv, 0.0, 1.0)
    return f"{f(iv.mean)} [{f(iv.low)}, {f(iv.high)}]" + (CLIPPED if iv.clipped else "")


# ---------------------------------------------------------------- measurements


def m_accuracy(rec: Records, spec: dict[str, Any]) -> Measured:
    """``accuracy``: a run group's per-seed accuracy, mean and t interval over seeds."""
    metric = spec.get("metric", "true_acc")
    seeds = _seed_values(rec, spec["a"], metric)
    iv = t_interval(list(seeds.values()))
    text = f"{describe(spec['a'])}, {metric}: {_interval_text(iv, False)} over {_seeds(len(seeds))}"
    label = spec.get("label", describe(spec["a"]))
    return Measured(spec["id"], label, iv.mean, iv.low, iv.high, seeds, text=text, short=f"{label}: {text}")


def m_compare(rec: Records, spec: dict[str, Any]) -> Measured:
    """``compare``: A minus B, seed-paired (t interval) and per prompt (paired bootstrap)."""
    metric = spec.get("metric", "true_acc")
    a, b = rec.cells(spec["a"], metric), rec.cells(spec["b"], metric)
    va = dict(zip(a["seed"].astype(int), a["value"].astype(float), strict=True))
    vb = dict(zip(b["seed"].astype(int), b["value"].astype(float), strict=True))
    if spec["b"]["method"] == "baseline":  # one base model: every seed of A against it
        base = next(iter(vb.values()))
        diffs = {s: v - base for s, v in va.items()}
    else:
        diffs = {s: va[s] - vb[s] for s in sorted(set(va) & set(vb))}
    if not diffs:
        raise ClaimsError(f"{spec['id']}: {describe(spec['a'])} and {describe(spec['b'])} share no seed")
    iv = t_interval(list(diffs.values()))
    pa, pb = prompt_values(a), prompt_values(b)
    paired = paired_comparison(pa, pb)
    by_seed_a = dict(zip(a["seed"].astype(int), pa, strict=True))
    by_seed_b = dict(zip(b["seed"].astype(int), pb, strict=True))
    shared = sorted(set(by_seed_a) & set(by_seed_b))
    identical = (
        bool(shared)
        and spec["b"]["method"] != "baseline"
        and all(by_seed_a[s] == by_seed_b[s] for s in shared)
    )
    ma, mb = t_interval(list(va.values())), t_interval(list(vb.values()))
    text = (
        f"{describe(spec['a'])} {_pct(ma.mean)} ({_seeds(len(va))}) vs {describe(spec['b'])} {_pct(mb.mean)} "
        f"({_seeds(len(vb))}), {metric}: difference {_interval_text(iv, True)} seed-paired over "
        f"{_seeds(len(diffs))}; per prompt, conditional on these seeds: {_pp(paired.diff)} [{_pp(paired.low)}, "
        f"{_pp(paired.high)}], p = {paired.p_value:.3g} "
        f"({paired.n_prompts} prompts, {paired.wins} better / {paired.losses} worse)"
        + ("; identical per-prompt values on every shared seed" if identical else "")
    )
    extra = {
        "mean_a": ma.mean, "mean_b": mb.mean, "n_seeds": len(diffs), "prompt_diff": paired.diff,
        "prompt_low": paired.low, "prompt_high": paired.high, "prompt_p": paired.p_value, "identical": identical,
    }  # fmt: skip
    label = spec.get("label", f"{describe(spec['a'])} - {describe(spec['b'])}")
    short = (f"{label}: {_interval_text(iv, True)} ({_seeds(len(diffs))}; {_pct(ma.mean)} vs {_pct(mb.mean)})"
             + (" (identical per prompt)" if identical else ""))  # fmt: skip
    return Measured(spec["id"], label, iv.mean, iv.low, iv.high, diffs, extra, text, short)


def _run_groups(rec: Records, g: dict[str, Any]) -> pd.DataFrame:
    g = rec.resolve(g)
    m = rec.metrics
    sel = m[(m["method"] == g["method"]) & (m["tag"] == str(g.get("tag") or ""))] if not m.empty else m
    if sel.empty:
        raise ClaimsError(
            f"no training metrics for {g['method']} [{g.get('tag') or ''}] under {rec.root / 'runs'}"
        )
    return sel


def m_run_stat(rec: Records, spec: dict[str, Any]) -> Measured:
    """``run_stat``: a metrics.jsonl statistic per run (mean or min over its steps), mean over seeds."""
    key, steps, agg = spec["stat"], spec.get("steps", "all"), spec.get("agg", "mean")
    sel = _run_groups(rec, spec["a"])
    seeds: dict[int, float] = {}
    for seed, run in sel.groupby("seed"):
        wide = run.pivot_table(index="step", columns="metric", values="value", aggfunc="first")
        if "train/loss" in wide:
            wide = wide[wide["train/loss"].notna()]
        if steps == "reuse":  # the steps whose ratio can differ from 1 (regime.run_stats' definition)
            ratio_max = wide.get("method/ratio_max", pd.Series(1.0, index=wide.index))
            kl = wide.get("train/behaviour_kl", pd.Series(0.0, index=wide.index)).fillna(0.0)
            wide = wide[(ratio_max.notna() & (ratio_max != 1.0)) | (kl != 0.0)]
        if key == GRAD_CLIPPED:  # steps whose pre-clip gradient norm exceeded the run's max_grad_norm
            limit = rec.run(run["run_dir"].iloc[0]).max_grad_norm  # inf: clipping off (0 or null)
            norms = wide.get("train/grad_norm", pd.Series(dtype=float))
            if norms.isna().any():  # a NaN norm is not "not clipped"
                raise ClaimsError(
                    f"{spec['id']}: {run['run_dir'].iloc[0]} logged a non-finite train/grad_norm"
                )
            if norms.empty:
                continue
            seeds[int(seed)] = 0.0 if math.isinf(limit) else float((norms > limit).mean())
            continue
        if key not in wide or wide[key].dropna().empty:
            continue
        seeds[int(seed)] = float(wide[key].min() if agg == "min" else wide[key].mean())
    if not seeds:
        raise ClaimsError(f"{spec['id']}: no run of {describe(spec['a'])} logged {key} ({steps} steps)")
    mean = sum(seeds.values()) / len(seeds)
    scale = 100.0 if spec.get("percent", True) else 1.0
    unit = "%" if spec.get("percent", True) else ""
    g = ".3g" if spec.get("percent", True) else ".4g"  # raw statistics (update norms) need a digit more
    text = (
        f"{spec['a']['method']} [{spec['a'].get('tag') or ''}] {key} ({agg} over {steps} steps): "
        f"{mean * scale:{g}}{unit} mean over {_seeds(len(seeds))} (range {min(seeds.values()) * scale:{g}}-"
        f"{max(seeds.values()) * scale:{g}}{unit})"
    )
    label = spec.get("label", key)
    return Measured(spec["id"], label, mean, min(seeds.values()), max(seeds.values()), seeds, text=text,
                    short=f"{label}: {mean * scale:{g}}{unit} ({_seeds(len(seeds))})")  # fmt: skip


def m_val_reward(rec: Records, spec: dict[str, Any]) -> Measured:
    """``val_reward``: validation reward per seed at the alpha table's step."""
    sel = _run_groups(rec, spec["a"])
    val = sel[sel["metric"] == "eval/reward"]
    last = {int(s): int(r["step"].max()) for s, r in val.groupby("seed")}
    # The alpha table's step (pipelines.mini.ablation_step): the last multiple of the validation interval
    # that every run reached (token budgets end runs a few steps apart; the paper reads step 250).
    every = {((rec.run(d).info.get("config") or {}).get("trainer") or {}).get("eval_steps")
             for d in sel["run_dir"].unique()}  # fmt: skip
    if not all(isinstance(e, int) and not isinstance(e, bool) and e > 0 for e in every):
        raise ClaimsError(f"{spec['id']}: the runs of {spec['a']} record config.trainer.eval_steps "
                          f"{sorted(map(repr, every))}, not a positive integer each")  # fmt: skip
    if len(every) != 1:
        raise ClaimsError(
            f"{spec['id']}: the runs of {spec['a']} validate at different intervals {sorted(every)}"
        )
    (interval,) = every
    step = int(spec.get("step") or min(last.values()) // interval * interval)
    at = val[val["step"] == step]
    seeds = {int(r["seed"]): float(r["value"]) for r in at.to_dict("records")}
    if len(seeds) != len(last):
        raise ClaimsError(f"{spec['id']}: not every seed of {spec['a']} validated at step {step}")
    iv = t_interval(list(seeds.values()))
    text = (f"{spec['a']['method']} [{spec['a'].get('tag')}] validation reward at step {step}: "
            f"{iv.mean:.3f} [{iv.low:.3f}, {iv.high:.3f}] over {_seeds(len(seeds))}")  # fmt: skip
    label = spec.get("label", spec["a"].get("tag", ""))
    return Measured(spec["id"], label, iv.mean, iv.low, iv.high, seeds, {"step": step}, text,
                    f"{label}: {iv.mean:.3f} [{iv.low:.3f}, {iv.high:.3f}] at step {step}")  # fmt: skip


def _seed_values(rec: Records, g: dict[str, Any], metric: str) -> dict[int, float]:
    sel = rec.cells(g, metric)
    return dict(zip(sel["seed"].astype(int), sel["value"].astype(float), strict=True))


def m_interaction(rec: Records, spec: dict[str, Any]) -> Measured:
    """``interaction``: (A - B at ``temperatures[1]``) - (A - B at ``temperatures[0]``) per seed, t interval:
    whether A's advantage over B grows as the sampling temperature rises (robustness, not level)."""
    metric = spec.get("metric", "true_acc")
    lo, hi = (float(t) for t in spec["temperatures"])
    v = {
        (w, t): _seed_values(rec, {**spec[w], "temperature": t}, metric) for w in ("a", "b") for t in (lo, hi)
    }
    seeds = sorted(set.intersection(*(set(x) for x in v.values())))
    if not seeds:
        raise ClaimsError(f"{spec['id']}: no seed has both groups at both temperatures")
    diffs = {s: (v["a", hi][s] - v["b", hi][s]) - (v["a", lo][s] - v["b", lo][s]) for s in seeds}
    iv = t_interval(list(diffs.values()))
    at = {t: sum(v["a", t][s] - v["b", t][s] for s in seeds) / len(seeds) for t in (lo, hi)}
    label = spec.get("label", f"interaction {describe(spec['a'])} - {describe(spec['b'])}")
    text = (f"({describe(spec['a'])} - {describe(spec['b'])}) at T = {hi:g} ({_pp(at[hi])}) minus at T = {lo:g} "
            f"({_pp(at[lo])}), {metric}: {_interval_text(iv, True)} seed-paired over {_seeds(len(seeds))}")  # fmt: skip
    return Measured(spec["id"], label, iv.mean, iv.low, iv.high, diffs, {"n_seeds": len(seeds)}, text,
                    f"{label}: {_interval_text(iv, True)} ({_seeds(len(seeds))})")  # fmt: skip


def m_collapse(rec: Records, spec: dict[str, Any]) -> Measured:
    """``collapse``: per seed 1 if the run collapsed, else 0. Collapsed: its greedy true accuracy is not
    above the base model's, or its training reward over the last quarter of steps fell below half of the first
    three steps' (``regime.run_stats``' ``reward_fell``; the leaderboard's definition)."""
    g = rec.resolve(spec["a"])
    acc = _seed_values(rec, g, "true_acc")
    base = next(iter(_seed_values(rec, {"method": "baseline", "dataset": g.get("dataset", "synthetic")},
                                  "true_acc").values()))  # fmt: skip
    runs = rec.runs[(rec.runs["method"] == g["method"]) & (rec.runs["tag"] == str(g.get("tag") or ""))]
    seeds: dict[int, float] = {}
    for r in runs.to_dict("records"):
        if int(r["seed"]) not in acc:
            continue
        run = rec.run(r["run_dir"])
        fell = bool(rows_stats(run.rows, run.max_grad_norm)["reward_fell"])
        seeds[int(r["seed"])] = float(fell or acc[int(r["seed"])] <= base)
    if not seeds:
        raise ClaimsError(f"{spec['id']}: no run of {describe(spec['a'])}")
    k = int(sum(seeds.values()))
    label = spec.get("label", f"{describe(spec['a'])} collapses")
    text = (f"{describe(spec['a'])}: {k} of {len(seeds)} runs collapsed (greedy true accuracy not above the "
            f"base's {_pct(base)}, or training reward fell below half its start)")  # fmt: skip
    return Measured(spec["id"], label, k / len(seeds), seeds=seeds, text=text,
                    short=f"{label}: {k} of {len(seeds)}")  # fmt: skip


def m_frontier(rec: Records, spec: dict[str, Any]) -> Measured:
    """``frontier``: preservation against gain across a sweep, A against B at matched gain.

    Every run of each method's ``groups`` (e.g. the lr sweep's and the tuned runs) is a point (gain = greedy
    true accuracy on the rewarded task minus the base's; retention = held-out accuracy minus the base's).
    A least-squares line per method gives its retention at the gain both methods' runs average; the value is
    A's minus B's there, with a percentile bootstrap over runs (resampled within method, 2000 draws, seed 0)
    and its two-sided bootstrap p. Returns the points in ``extra`` for the figure."""
    import numpy as np

    held = spec.get("heldout", "synthetic_heldout")
    base_g = next(iter(_seed_values(rec, {"method": "baseline"}, "true_acc").values()))
    base_h = next(iter(_seed_values(rec, {"method": "baseline", "dataset": held}, "true_acc").values()))
    pts: dict[str, list[tuple[float, float, str]]] = {}
    for side in ("a", "b"):
        rows = []
        for g in spec[side]["groups"]:
            g = {"method": spec[side]["method"], **g}
            gain = _seed_values(rec, g, "true_acc")
            ret = _seed_values(rec, {**g, "dataset": held}, "true_acc")
            tag = rec.resolve(g).get("tag", "")
            rows += [(gain[s] - base_g, ret[s] - base_h, tag) for s in sorted(set(gain) & set(ret))]
        if len(rows) < 3:
            raise ClaimsError(f"{spec['id']}: {spec[side]['method']} has {len(rows)} runs; a line needs >= 3")
        pts[side] = rows
    xa, ya = (np.array([r[i] for r in pts["a"]]) for i in (0, 1))
    xb, yb = (np.array([r[i] for r in pts["b"]]) for i in (0, 1))
    g_star = float(np.concatenate([xa, xb]).mean())

    def at(x: np.ndarray, y: np.ndarray) -> float:
        if np.ptp(x) == 0:
            return float(y.mean())
        slope, icpt = np.polyfit(x, y, 1)
        return float(icpt + slope * g_star)

    value = at(xa, ya) - at(xb, yb)
    rng = np.random.default_rng(0)
    draws = []
    for _ in range(2000):
        ia, ib = rng.integers(0, xa.size, xa.size), rng.integers(0, xb.size, xb.size)
        draws.append(at(xa[ia], ya[ia]) - at(xb[ib], yb[ib]))
    d = np.array(draws)
    low, high = (float(q) for q in np.quantile(d, [0.025, 0.975]))
    p = float(min(1.0, 2 * min((d <= 0).mean(), (d >= 0).mean())))
    label = spec.get("label", "retention at matched gain")
    text = (f"{label}: at the mean gain {_pp(g_star)} points over the base, {spec['a']['method']} retains "
            f"{_pp(at(xa, ya))} and {spec['b']['method']} {_pp(at(xb, yb))} points of held-out accuracy: difference "
            f"{_pp(value)} [{_pp(low)}, {_pp(high)}] (bootstrap over runs, p = {p:.3g}; {xa.size} and {xb.size} runs)")  # fmt: skip
    extra = {"p": p, "gain": g_star, "points": pts, "methods": (spec["a"]["method"], spec["b"]["method"])}
    return Measured(spec["id"], label, value, low, high, {}, extra, text,
                    f"{label}: {_pp(value)} [{_pp(low)}, {_pp(high)}] at gain {_pp(g_star)}")  # fmt: skip


MEASURES = {"accuracy": m_accuracy, "compare": m_compare, "run_stat": m_run_stat, "val_reward": m_val_reward,
            "interaction": m_interaction, "collapse": m_collapse, "frontier": m_frontier}  # fmt: skip


# ---------------------------------------------------------------- verdicts

ALPHA = 0.05  # the family-wise level of the claims' key tests (Holm)


@dataclass
class KeyTest:
    """A claim's key test before the family-wise correction.

    ``p``: the raw p-value of the test that decides (None: a deterministic check, outside the Holm family);
    ``if_significant`` / ``otherwise``: the verdict when the Holm-adjusted p is below ``ALPHA`` / is not
    (for a deterministic check ``otherwise`` is the verdict); ``why``: the reading in words;
    ``extra``: lines shown under the verdict (margins and their sensitivity, other tests beside).
    """

    p: float | None
    if_significant: str
    otherwise: str
    why: str
    test: str = ""
    extra: list[str] = field(default_factory=list)
    alternatives: dict[str, float] = field(default_factory=dict)  # label -> raw p (margin sensitivity)


def seed_tests(values: list[float], null: float = 0.0) -> dict[str, float]:
    """Two-sided p-values that the per-seed values' centre is ``null``: Student t (``t``), Wilcoxon signed
    rank (``wilcoxon``, exact for n <= 25) and the sign test (``sign``). Constant values: 0 when they differ
    from ``null``, 1 when they equal it (no spread to test against)."""
    import numpy as np
    import scipy.stats

    x = np.asarray(values, dtype=float) - null
    if x.size < 2:
        return {"t": math.nan, "wilcoxon": math.nan, "sign": math.nan}
    if np.allclose(x, x[0]):
        p = 1.0 if x[0] == 0 else 0.0
        return {"t": p, "wilcoxon": p, "sign": p}
    t = float(scipy.stats.ttest_1samp(x, 0.0).pvalue)
    nz = x[x != 0]
    w = float(scipy.stats.wilcoxon(nz).pvalue) if nz.size else 1.0
    sign = float(scipy.stats.binomtest(int((nz > 0).sum()), int(nz.size)).pvalue) if nz.size else 1.0
    return {"t": t, "wilcoxon": w, "sign": sign}


def one_sided_t(values: list[float], bound: float, greater: bool) -> float:
    """One-sided t-test p-value that the per-seed mean is above (``greater``) or below ``bound``."""
    import numpy as np
    import scipy.stats

    x = np.asarray(values, dtype=float)
    if x.size < 2:
        return math.nan
    if np.allclose(x, x[0]):
        holds = x[0] > bound if greater else x[0] < bound
        return 0.0 if holds else 1.0
    return float(scipy.stats.ttest_1samp(x, bound, alternative="greater" if greater else "less").pvalue)


def _margin(rule: dict[str, Any], got: dict[str, Measured]) -> tuple[float, str]:
    """An equivalence margin in accuracy units: ``margin`` fixed, or ``margin_from`` (accuracy measurements):
    the mean half-width of their 95% t intervals over seeds, the resolution of one method's mean at this
    many seeds (a difference inside it is what the study cannot tell from none)."""
    if "margin_from" in rule:
        src = [got[i] for i in rule["margin_from"]]
        widths = [(m.high - m.low) / 2 for m in src if not math.isnan(m.high - m.low)]
        if not widths:
            raise ClaimsError(f"margin_from {rule['margin_from']}: no measurement with an interval")
        scale = float(rule.get("margin_scale", 1.0))
        m = scale * sum(widths) / len(widths)
        return m, (f"{_pp(m)[1:]} points: {'' if scale == 1 else f'{scale:g} x '}the mean 95% half-width of "
                   f"{', '.join(x.label for x in src)} over their seeds")  # fmt: skip
    m = float(rule["margin"])
    return m, f"{_pp(m)[1:]} points (fixed)"


def _diff_seeds(d: Measured) -> list[float]:
    return [d.seeds[s] for s in sorted(d.seeds)]


def key_test(rule: dict[str, Any], got: dict[str, Measured]) -> KeyTest:
    """The key test of a claim by its rule (the verdict follows once p is Holm-adjusted: ``decide``)."""
    name = rule["rule"]

    def need(key: str) -> Measured:
        mid = rule[key]
        if mid not in got:
            raise ClaimsError(f"verdict rule {name}: no measurement {mid!r}")
        return got[mid]

    if name == "not_testable":
        return KeyTest(None, "not testable", "not testable", rule.get("why", ""))
    if name in ("greater", "interaction"):
        d = need("diff")
        test = rule.get("test", "t")
        if test == "bootstrap":  # a measurement that carries its own p (the frontier's bootstrap over runs)
            p = float(d.extra["p"])
        else:
            p = seed_tests(_diff_seeds(d))[test]
        up = d.value > 0
        t = KeyTest(p, "supported" if up else "contradicted", "not resolved",
                    f"{d.label}: {_pp(d.value)} points, "
                    + ("bootstrap over runs" if test == "bootstrap" else f"{test} test over {_seeds(len(d.seeds))}"),
                    test)  # fmt: skip
        if test != "bootstrap" and len(d.seeds) > 1:
            other = seed_tests(_diff_seeds(d))
            t.extra.append(
                "beside it: " + ", ".join(f"{k} p = {v:.3g}" for k, v in other.items() if k != test)
            )
        return t
    if name == "non_inferior":  # "as well as or better": the difference is above -margin
        d = need("diff")
        m, why_m = _margin(rule, got)
        x = _diff_seeds(d)
        ni, inf = one_sided_t(x, -m, True), one_sided_t(x, -m, False)
        path_ni = d.value > -m
        t = KeyTest(ni if path_ni else inf, "supported" if path_ni else "contradicted", "not resolved",
                    f"{d.label}: {_pp(d.value)} points; margin {why_m}; one-sided t test that the difference "
                    f"is {'above' if path_ni else 'below'} -margin", "non-inferiority t")  # fmt: skip
        for f in (0.5, 2.0):
            pa = one_sided_t(x, -f * m, True) if d.value > -f * m else one_sided_t(x, -f * m, False)
            t.alternatives[f"margin x {f:g} ({_pp(f * m)[1:]} points)"] = pa
        return t
    if name == "equivalent":  # "the same in distribution": two one-sided tests (TOST) within +-margin
        d = need("diff")
        m, why_m = _margin(rule, got)
        x = _diff_seeds(d)
        tost = max(one_sided_t(x, -m, True), one_sided_t(x, m, False))
        two = seed_tests(x)["t"]
        # equivalence shown -> supported; otherwise a significant difference -> contradicted (Bonferroni x 2
        # inside the claim, since either path may decide)
        p, sig = (tost, "supported") if tost <= two else (two, "contradicted")
        t = KeyTest(min(1.0, 2 * p), sig, "not resolved",
                    f"{d.label}: {_pp(d.value)} points; margin {why_m}; TOST p = {tost:.3g}, difference t "
                    f"p = {two:.3g} (the smaller decides, doubled)", "TOST / t")  # fmt: skip
        for f in (0.5, 2.0):
            tf = max(one_sided_t(x, -f * m, True), one_sided_t(x, f * m, False))
            t.alternatives[f"margin x {f:g} ({_pp(f * m)[1:]} points)"] = min(1.0, 2 * min(tf, two))
        return t
    if name == "stable":  # keeps learning under reuse: gains over the base, and no run collapses
        gain, col = need("gain"), need("collapse")
        n, k = len(col.seeds), int(sum(col.seeds.values()))
        p = seed_tests(_diff_seeds(gain))["t"]
        if k * 2 > n:
            return KeyTest(None, "contradicted", "contradicted",
                           f"{k} of {n} runs collapsed ({col.label}): a majority")  # fmt: skip
        return KeyTest(p, "supported" if gain.value > 0 and k == 0 else "contradicted" if gain.value < 0
                       else "not resolved", "not resolved",
                       f"{gain.label}: {_pp(gain.value)} points (t test); {k} of {n} runs collapsed",
                       "t")  # fmt: skip
    if name == "exceeds":  # every listed per-seed statistic above a threshold (one-sided t, the largest p)
        stats = [got[i] for i in rule["stats"]]
        thr = float(rule.get("threshold", 0.0))
        above = [one_sided_t(list(s.seeds.values()), thr, True) for s in stats]
        below = [one_sided_t(list(s.seeds.values()), thr, False) for s in stats]
        if all(s.value > thr for s in stats):
            return KeyTest(max(above), "supported", "not resolved",
                           f"every one of {', '.join(s.label for s in stats)} above {100 * thr:g}% "
                           "(one-sided t per statistic; the largest p decides)", "one-sided t")  # fmt: skip
        return KeyTest(max(below) if all(s.value < thr for s in stats) else min(above + below),
                       "contradicted" if all(s.value < thr for s in stats) else "not resolved", "not resolved",
                       f"{', '.join(f'{s.label} {100 * s.value:.3g}%' for s in stats)} against {100 * thr:g}%",
                       "one-sided t")  # fmt: skip
    if name == "zero_vs_positive":  # a property of the update rule, checked on every run (no sampling test)
        z, pos, tol = need("zero"), need("positive"), float(rule.get("tolerance", 0.0))
        bound = f"at most {100 * tol:g}%" if tol else "0"
        if all(v <= tol for v in z.seeds.values()) and all(v > tol for v in pos.seeds.values()):
            return KeyTest(None, "supported", "supported",
                           f"{z.label} is {bound} on every run, {pos.label} above it on every run")  # fmt: skip
        return KeyTest(None, "contradicted", "contradicted",
                       f"{z.label} is not {bound} on every run, or {pos.label} is on some run")  # fmt: skip
    if name == "identical_unless_clipped":  # deterministic arithmetic on one machine: per-prompt identity
        same = [got[i] for i in rule["identical"]]
        differ = [got[i] for i in rule.get("differ", [])]
        ok = all(m.extra.get("identical") for m in same) and not any(m.extra.get("identical") for m in differ)
        why = (f"identical per prompt on every shared seed: {', '.join(m.label for m in same if m.extra.get('identical')) or 'none'}; "
               f"differing: {', '.join(m.label for m in differ if not m.extra.get('identical')) or 'none'}")  # fmt: skip
        v = "supported" if ok else "contradicted"
        return KeyTest(None, v, v, why)
    if name == "peak":
        values = [got[i] for i in rule["values"]]
        best = need("best")
        diffs = {}
        for v in values:
            if v.id != best.id:
                shared = sorted(set(best.seeds) & set(v.seeds))
                diffs[v.label] = [best.seeds[s] - v.seeds[s] for s in shared]
        top = max(values, key=lambda v: v.value)
        if top.id == best.id:  # all pairwise differences above 0 (intersection-union: the largest p)
            p = max(one_sided_t(d, 0.0, True) for d in diffs.values())
            return KeyTest(p, "supported", "not resolved",
                           f"{best.label} has the highest mean; the largest one-sided p of its seed-paired "
                           "differences to the others decides", "one-sided t")  # fmt: skip
        above = {k: one_sided_t(d, 0.0, False) for k, d in diffs.items() if sum(d) < 0}
        if not above:  # a tie on the means: no direction to test
            return KeyTest(1.0, "not resolved", "not resolved",
                           f"{top.label} and {best.label} tie on the mean; no value is above the other")  # fmt: skip
        k = min(above, key=above.get)
        ranks = ", ".join(f"{v.label} {v.value:.3f}" for v in sorted(values, key=lambda v: -v.value))
        return KeyTest(above[k], "contradicted", "not resolved",
                       f"order by mean: {ranks}; {k} above {best.label} (one-sided t, seed-paired)",
                       "one-sided t")  # fmt: skip
    raise ClaimsError(f"unknown verdict rule {name!r}; allowed: {', '.join(RULES)}")


def decide(test: KeyTest, p_adj: float | None) -> str:
    """The verdict of a key test given its Holm-adjusted p (None: a deterministic check)."""
    if test.p is None or p_adj is None or math.isnan(p_adj):
        return test.otherwise
    return test.if_significant if p_adj < ALPHA else test.otherwise


def verdict(rule: dict[str, Any], got: dict[str, Measured]) -> tuple[str, str]:
    """(verdict, reading) of one claim tested alone (no family-wise correction): for tests and one-offs."""
    t = key_test(rule, got)
    return decide(t, t.p), t.why


# ---------------------------------------------------------------- the table


def evaluate(rec: Records, claims: list[dict[str, Any]], tuning: dict | None = None) -> list[dict[str, Any]]:
    """Each claim with its measurements, key test, raw and Holm-adjusted p and verdict.

    The Holm family is every claim's key test that is a sampling test (deterministic checks are outside it);
    a claim's margin sensitivity reruns the correction with the alternative p in its place."""
    rec.tuning = dict(tuning or {})
    out = []
    for c in claims:
        got = {m["id"]: MEASURES[m["kind"]](rec, m) for m in c.get("measure") or []}
        out.append({**c, "measured": got, "key_test": key_test(c["verdict"], got)})
    ps = [r["key_test"].p for r in out]
    adj = holm(ps)
    family = sum(1 for p in ps if p is not None and not math.isnan(p))
    for i, r in enumerate(out):
        t = r["key_test"]
        r["p_raw"], r["p_holm"], r["family"] = t.p, (adj[i] if t.p is not None else None), family
        r["verdict_text"], r["verdict_why"] = decide(t, r["p_holm"]), t.why
        r["sensitivity"] = {}
        for label, p_alt in t.alternatives.items():
            alt = holm([p_alt if j == i else p for j, p in enumerate(ps)])[i]
            r["sensitivity"][label] = (p_alt, alt, decide(t, alt))
    return out


def _p(x: float | None) -> str:
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.2g}"


DEFAULT_MODEL = "One tiny model (0.45M parameters)"  # the study's; a spec's ``model`` line says another


def markdown(
    results: list[dict[str, Any]], root_name: str, selections: list[Selection] | None = None,
    spec_name: str = "conf/claims.yaml", model: str = DEFAULT_MODEL,
) -> str:  # fmt: skip
    """claims.md: the tuning, the summary table, then one section per claim (quote, test, rule, numbers,
    key test with its raw and Holm-adjusted p, verdict). ``spec_name`` and ``model`` name the spec and the
    model in the header."""
    family = results[0]["family"] if results else 0
    lines = [
        "# The paper's claims at toy scale",
        "",
        f"Generated by `python -m pspo_repro.claims` from the runs and evaluation cells under `{root_name}/` "
        f"(claims, measurements and rules: {spec_name}; statistics: pspo_repro/analysis/claims.py). "
        "Accuracies are greedy (T = 0) true accuracy in % on the 200 test problems unless a row says otherwise; "
        "differences in percentage points with 95% Student t intervals over seeds (seed-paired); the "
        "per-prompt comparisons beside them are conditional on these seeds (they ignore seed-to-seed "
        f"variation). {model} on a synthetic task: a verdict here says what this toy "
        "shows, not what holds for Qwen at 1.5B.",
        "",
        f"**Statistics.** Each claim has one key test; its raw p and its Holm-adjusted p over the {family} "
        f"claims whose key test is a sampling test (family-wise level {ALPHA:g}) stand beside the verdict. "
        '"Supported" or "contradicted" only when the adjusted p is below the level (and in the direction '
        'the rule names); otherwise "not resolved". Checks of a deterministic property (a gradient that is '
        "zero by construction, per-prompt identity of fp32 CPU runs) have no p and sit outside the family.",
    ]
    if selections:
        lines += [
            "",
            "**Tuning-matched comparisons.** The head-to-head claims compare each method at its own learning "
            "rate, chosen from the same sweep by its mean best validation reward (validation split, never the "
            "test problems) on selection seeds that the reported numbers do not use; bold: the value kept.",
            "",
        ] + [f"- {s.text()}" for s in selections]
    lines += [
        "",
        "| # | Claim (paper section) | Toy experiment | Key number | p (raw) | p (Holm) | Verdict |",
        "|---:|:---|:---|:---|---:|---:|:---|",
    ]
    for i, r in enumerate(results, 1):
        key = r["measured"].get(r.get("key") or "", None)
        key_text = key.short if key else "-"
        lines.append(
            f"| {i} | {r['claim']} ({r['section']}) | {r['test_short']} | {key_text} | {_p(r['p_raw'])} | "
            f"{_p(r['p_holm'])} | **{r['verdict_text']}** |"
        )
    for i, r in enumerate(results, 1):
        lines += ["", f"## {i}. {r['claim']}", "", f"> {r['quote'].strip()}", "", f"*{r['section']}*", ""]
        lines += [f"**Test.** {r['test'].strip()}", ""]
        if r.get("rule_text"):
            lines += [f"**Rule.** {r['rule_text'].strip()}", ""]
        if r["measured"]:
            lines += ["**Numbers.**", ""] + [f"- {m.text}" for m in r["measured"].values()] + [""]
        t = r["key_test"]
        if t.p is not None:
            lines += [f"**Key test.** {t.test}: p = {_p(t.p)}, Holm-adjusted p = {_p(r['p_holm'])} "
                      f"({r['family']} key tests).", ""]  # fmt: skip
        for e in t.extra:
            lines += [f"- {e}"]
        for label, (p_alt, p_adj, v) in r["sensitivity"].items():
            lines += [f"- sensitivity, {label}: p = {_p(p_alt)}, Holm-adjusted {_p(p_adj)}: {v}"]
        if t.extra or r["sensitivity"]:
            lines += [""]
        lines += [f"**Verdict: {r['verdict_text']}** ({r['verdict']['rule']}: {r['verdict_why']}).", ""]
        if r.get("reading"):
            lines += [r["reading"].strip(), ""]
    return "\n".join(lines).rstrip() + "\n"


def rows_csv(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One CSV row per measurement, with its claim's verdict and key-test p-values."""
    out = []
    for r in results:
        head = {"claim": r["id"], "verdict": r["verdict_text"], "p_raw": r["p_raw"], "p_holm": r["p_holm"]}
        for m in r["measured"].values() or []:
            extra = {k: v for k, v in m.extra.items() if k not in ("points", "methods")}
            out.append({**head, "measurement": m.id, "label": m.label, "value": m.value, "low": m.low,
                        "high": m.high, "seeds": " ".join(f"{s}:{v:.6g}" for s, v in sorted(m.seeds.items())),
                        **extra})  # fmt: skip
        if not r["measured"]:
            out.append(head)
    return out


def frontier_figure(results: list[dict[str, Any]]) -> bytes | None:
    """claims_frontier.png as bytes (written with the other outputs as one set): each frontier measurement's
    runs (gain, retention) and fitted lines; None when no claim reads a frontier."""
    fronts = [m for r in results for m in r["measured"].values() if "points" in m.extra]
    if not fronts:
        return None
    import io

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    fig, axes = plt.subplots(1, len(fronts), figsize=(5.5 * len(fronts), 4.2), squeeze=False)
    for ax, m in zip(axes[0], fronts, strict=True):
        for side, colour, method in zip(("a", "b"), ("C0", "C1"), m.extra["methods"], strict=True):
            pts = m.extra["points"][side]
            x, y = np.array([p[0] for p in pts]) * 100, np.array([p[1] for p in pts]) * 100
            ax.scatter(x, y, s=14, color=colour, alpha=0.7, label=f"{method}: {len(pts)} runs")
            if np.ptp(x) > 0:
                k, c = np.polyfit(x, y, 1)
                xs = np.linspace(x.min(), x.max(), 10)
                ax.plot(xs, k * xs + c, color=colour)
        ax.axvline(100 * m.extra["gain"], color="grey", ls=":", lw=1)
        ax.set_xlabel("gain on the rewarded task over the base (points)")
        ax.set_ylabel("held-out skill minus the base (points)")
        ax.set_title(m.label, fontsize=9)
        ax.legend(fontsize=8)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110, metadata={"Software": None})
    plt.close(fig)
    return buf.getvalue()


# Suffixes of claims' outputs: temporaries of these names left by a kill are removed on the next write.
OUTPUT_SUFFIXES = (".md", ".csv", ".png")
FRONTIER_PNG = "claims_frontier.png"


def write(results_dir: Path, out_dir: Path, spec: Path) -> list[Path]:
    """Compute every claim from ``results_dir``; write ``claims.md`` and ``claims.csv`` (and
    ``claims_frontier.png`` when a claim reads a frontier) into ``out_dir`` as one set (``atomic.write_set``:
    after a failure or a kill the folder holds the previous set or the new one, never a mix). A frontier
    figure of the previous set that this one does not draw is moved into ``stale/``, as aggregate's extras."""
    checked = read_spec(spec)  # the whole spec checked before any record is read
    claims, tuning = checked["claims"], checked.get("tuning") or {}
    rec = Records.read(results_dir)
    rec.check_one_model("the claims table")
    results = evaluate(rec, claims, tuning)  # everything computed before anything is written
    rows = rows_csv(results)
    cols = list(dict.fromkeys(k for row in rows for k in row))
    md, table = out_dir / "claims.md", out_dir / "claims.csv"
    selections = [rec.selected[k] for k in sorted(rec.selected)]
    text = io.StringIO(newline="")
    w = csv.DictWriter(text, fieldnames=cols)
    w.writeheader()
    w.writerows(rows)
    name = f"conf/{spec.name}" if spec.resolve().parent == CONF_DIR.resolve() else spec.name
    body = markdown(results, results_dir.name, selections, name, str(checked.get("model") or DEFAULT_MODEL))
    files: dict[Path, str | bytes] = {md: body, table: text.getvalue()}
    png = frontier_figure(results)
    if png is not None:
        files[out_dir / FRONTIER_PNG] = png
    old = out_dir / FRONTIER_PNG
    aside = [FRONTIER_PNG] if png is None and old.is_file() and not old.is_symlink() else []
    write_set(redact_files(files), OUTPUT_SUFFIXES, aside)
    return list(files)


KEYS = ("results_dir", "out_dir", "spec")


def main(argv: list[str] | None = None) -> int:
    """``python -m pspo_repro.claims results_dir=... out_dir=... [spec=...]``; returns the exit code."""
    args = parse_key_values(sys.argv[1:] if argv is None else argv, KEYS, ("results_dir", "out_dir"))
    if isinstance(args, str):
        print(f"error: {args}", file=sys.stderr)
        return 2
    spec = Path(args.get("spec") or CONF_DIR / "claims.yaml")
    if not spec.is_file():
        print(f"error: spec={spec} is not a file", file=sys.stderr)
        return 2
    try:  # a setting like any other: checked whole, one line, exit 2, before any work
        read_spec(spec)
    except ClaimsError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if why := out_dir_error(args["out_dir"]):  # a file, read-only, a name too long: before any work
        print(f"error: {why}", file=sys.stderr)
        return 2
    return run_writer(write, Path(args["results_dir"]), Path(args["out_dir"]), spec)
