"""The claims' measurements: what each claim reads from the records of one results folder.

Every number comes from the records under a results folder (per-prompt rows of the evaluation cells,
``metrics.jsonl`` of the runs), read once into :class:`Records` through the one reader of each record
(``results_io`` for cells, ``run_records`` for runs). A measurement is a :class:`Measured`: a value with its
interval, its per-seed values and its text. The claims table (``analysis.claims_report``), the leaderboard
(``Records``) and the model-size ladder (``analysis.scale``) read records here; the verdicts over the
measurements are ``analysis.claims``'.

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
- ``collapse``: per seed 1 if the run collapsed (its validation reward below the base model's, its step-0
  validation, at each of its last two validations: ``val_collapsed``), else 0.
- ``frontier``: retention (held-out accuracy minus the base's) against gain (rewarded-task accuracy minus the
  base's) over a sweep's runs, A's fitted frontier (least-squares line or non-increasing isotonic fit) minus
  B's at their mean gain, bootstrap over runs or over seeds.
- ``run_stat``: a training statistic of ``metrics.jsonl`` (e.g. ``method/zero_grad_frac``; ``grad_clipped``:
  the share of steps whose gradient norm exceeded ``max_grad_norm``), each run's mean over its optimizer
  steps (``steps: reuse``: only the steps that reuse a rollout; ``agg: min``: the run's minimum), then the
  mean over seeds.
- ``val_reward``: validation reward at the last validation step every run of the group reached (the
  paper's alpha ablation reads validation reward), per seed.
- ``part_step``: the first optimizer step where two groups' parameter checksums (``train/param_sum``) differ,
  per shared seed.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from pspo_repro.analysis.claims_spec import ClaimsError
from pspo_repro.analysis.results_io import eval_long, load_eval_cells, prompt_values, runs_frames
from pspo_repro.analysis.run_records import RunRecord, read_runs
from pspo_repro.analysis.stats import CLIPPED, Interval, clip_interval, paired_comparison, t_interval
from pspo_repro.analysis.tuning import Selection, TuningError, point_tag, select

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
    # (method, tuned, point) -> the value a tuned group is read at instead of its selected one: the selection
    # set's other members (claims.evaluate's selection sensitivity)
    forced: dict[tuple[str, str, str], str] = field(default_factory=dict)
    records: dict[str, RunRecord] = field(default_factory=dict)  # run_dir -> the run as the reader read it
    # (method, tag, dataset, metric) -> its rows of ``evals``, in their order: built on the first ``cells``
    # call. A claims table or leaderboard asks about a thousand times, and a mask over the whole long table
    # each time was most of its cost.
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
        key = tuned_ref({"method": method, "tuned": tuned, "point": point})
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
        value = self.forced.get(tuned_ref(g), sel.chosen)
        tag = point_tag(str(t["to_tag"]), {**point, str(t["key"]): value})
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


def tuned_ref(g: dict[str, Any]) -> tuple[str, str, str]:
    """A tuned run group's key in ``Records.selected`` / ``Records.forced``: (method, tuned id, point)."""
    return (g["method"], g["tuned"], json.dumps(dict(g.get("point") or {}), sort_keys=True))


def describe(g: dict[str, Any]) -> str:
    """``clip [as_run] synthetic T=0``: a run group in words (``[tuned lr]`` for a tuned group)."""
    if g.get("tuned"):
        extra = "".join(f" {k.split('.', 1)[-1]}={v}" for k, v in (g.get("point") or {}).items())
        tag = f" [tuned {g['tuned']}{extra}]"
    else:
        tag = f" [{g['tag']}]" if g.get("tag") else ""
    return f"{g['method']}{tag} {g.get('dataset', 'synthetic')} T={float(g.get('temperature', 0.0)):g}"


def pct(x: float) -> str:
    """A share as a percentage with one decimal (``-`` for none)."""
    return "-" if x is None or math.isnan(x) else f"{100 * x:.1f}"


def pp(x: float) -> str:
    """A difference of shares in signed percentage points with one decimal (``-`` for none)."""
    return "-" if x is None or math.isnan(x) else f"{100 * x:+.1f}"


def seeds_text(n: int) -> str:
    """``1 seed`` / ``n seeds``."""
    return f"{n} seed" if n == 1 else f"{n} seeds"


def interval_text(iv: Interval, signed: bool) -> str:
    """``mean [low, high]``; an accuracy's (unsigned) interval is cut at [0, 100] % and marked ``§``."""
    f = pp if signed else pct
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
    text = f"{describe(spec['a'])}, {metric}: {interval_text(iv, False)} over {seeds_text(len(seeds))}"
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
        f"{describe(spec['a'])} {pct(ma.mean)} ({seeds_text(len(va))}) vs {describe(spec['b'])} {pct(mb.mean)} "
        f"({seeds_text(len(vb))}), {metric}: difference {interval_text(iv, True)} seed-paired over "
        f"{seeds_text(len(diffs))}; per prompt, conditional on these seeds: {pp(paired.diff)} [{pp(paired.low)}, "
        f"{pp(paired.high)}], p = {paired.p_value:.3g} "
        f"({paired.n_prompts} prompts, {paired.wins} better / {paired.losses} worse)"
        + ("; identical per-prompt values on every shared seed" if identical else "")
    )
    extra = {
        "mean_a": ma.mean, "mean_b": mb.mean, "n_seeds": len(diffs), "prompt_diff": paired.diff,
        "prompt_low": paired.low, "prompt_high": paired.high, "prompt_p": paired.p_value, "identical": identical,
    }  # fmt: skip
    label = spec.get("label", f"{describe(spec['a'])} - {describe(spec['b'])}")
    short = (f"{label}: {interval_text(iv, True)} ({seeds_text(len(diffs))}; {pct(ma.mean)} vs {pct(mb.mean)})"
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
        if steps == "reuse":  # the steps whose ratio can differ from 1 (run_stats.rows_stats' definition)
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
    factor = 100.0 if spec.get("percent", True) else 1.0
    unit = "%" if spec.get("percent", True) else ""
    g = ".3g" if spec.get("percent", True) else ".4g"  # raw statistics (update norms) need a digit more
    text = (
        f"{spec['a']['method']} [{spec['a'].get('tag') or ''}] {key} ({agg} over {steps} steps): "
        f"{mean * factor:{g}}{unit} mean over {seeds_text(len(seeds))} (range {min(seeds.values()) * factor:{g}}-"
        f"{max(seeds.values()) * factor:{g}}{unit})"
    )
    label = spec.get("label", key)
    return Measured(spec["id"], label, mean, min(seeds.values()), max(seeds.values()), seeds, text=text,
                    short=f"{label}: {mean * factor:{g}}{unit} ({seeds_text(len(seeds))})")  # fmt: skip


def m_val_reward(rec: Records, spec: dict[str, Any]) -> Measured:
    """``val_reward``: validation reward per seed at the alpha table's step."""
    sel = _run_groups(rec, spec["a"])
    val = sel[sel["metric"] == "eval/reward"]
    last = {int(s): int(r["step"].max()) for s, r in val.groupby("seed")}
    # The alpha table's step (pipelines.grid.ablation_step): the last multiple of the validation interval
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
            f"{iv.mean:.3f} [{iv.low:.3f}, {iv.high:.3f}] over {seeds_text(len(seeds))}")  # fmt: skip
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
    text = (f"({describe(spec['a'])} - {describe(spec['b'])}) at T = {hi:g} ({pp(at[hi])}) minus at T = {lo:g} "
            f"({pp(at[lo])}), {metric}: {interval_text(iv, True)} seed-paired over {seeds_text(len(seeds))}")  # fmt: skip
    return Measured(spec["id"], label, iv.mean, iv.low, iv.high, diffs, {"n_seeds": len(seeds)}, text,
                    f"{label}: {interval_text(iv, True)} ({seeds_text(len(seeds))})")  # fmt: skip


def val_collapsed(rows: list[dict[str, Any]], where: str) -> bool:
    """The claims' collapse rule (issue 55, stated in the spec's rules): a run collapsed when its validation reward
    is below the base model's (its own step-0 validation, ``trainer.eval_on_start``) at each of its last two
    validations, i.e. it fell below where it started and stayed there. Read on validation, never on the test
    problems; a run without a step-0 validation and two later ones is a ClaimsError naming ``where``."""
    vals = [(int(r["step"]), float(r["eval/reward"])) for r in rows if r.get("eval/reward") is not None]
    if len(vals) < 3 or vals[0][0] != 0:
        raise ClaimsError(f"{where}: the collapse rule needs a step-0 validation and two later ones "
                          f"(trainer.eval_on_start), got steps {[s for s, _ in vals]}")  # fmt: skip
    base = vals[0][1]
    return all(v < base for _, v in vals[-2:])


def m_collapse(rec: Records, spec: dict[str, Any]) -> Measured:
    """``collapse``: per seed 1 if the run collapsed (``val_collapsed``), else 0, over the runs with test cells."""
    g = rec.resolve(spec["a"])
    acc = _seed_values(rec, g, "true_acc")
    runs = rec.runs[(rec.runs["method"] == g["method"]) & (rec.runs["tag"] == str(g.get("tag") or ""))]
    seeds: dict[int, float] = {}
    for r in runs.to_dict("records"):
        if int(r["seed"]) not in acc:
            continue
        seeds[int(r["seed"])] = float(val_collapsed(rec.run(r["run_dir"]).rows, str(r["run_dir"])))
    if not seeds:
        raise ClaimsError(f"{spec['id']}: no run of {describe(spec['a'])}")
    k = int(sum(seeds.values()))
    label = spec.get("label", f"{describe(spec['a'])} collapses")
    text = (f"{describe(spec['a'])}: {k} of {len(seeds)} runs collapsed (validation reward below the base "
            "model's, the run's step-0 validation, at each of its last two validations)")  # fmt: skip
    return Measured(spec["id"], label, k / len(seeds), seeds=seeds, text=text,
                    short=f"{label}: {k} of {len(seeds)}")  # fmt: skip


def frontier_fit(x: Any, y: Any, fit: str) -> Any:
    """A frontier's fitted retention as a function of gain: ``linear`` (least squares) or ``isotonic`` (the
    non-increasing least-squares fit, scipy's pool-adjacent-violators: retention can only fall as the gain
    rises; linear interpolation between the fitted points, constant beyond them). Returns a callable of gain."""
    import numpy as np
    import scipy.optimize

    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    if fit == "linear":
        if np.ptp(x) == 0:
            return lambda g: float(y.mean())
        slope, icpt = np.polyfit(x, y, 1)
        return lambda g: float(icpt + slope * g)
    order = np.argsort(x, kind="stable")
    xs, ys = x[order], y[order]
    ux, inv = np.unique(xs, return_inverse=True)  # ties in gain: one point at their mean retention
    uy = np.bincount(inv, weights=ys) / np.bincount(inv)
    fitted = scipy.optimize.isotonic_regression(
        uy, weights=np.bincount(inv).astype(float), increasing=False
    ).x
    return lambda g: float(np.interp(g, ux, fitted))


def m_frontier(rec: Records, spec: dict[str, Any]) -> Measured:
    """``frontier``: preservation against gain across a sweep, A against B at matched gain.

    Every run of each method's ``groups`` (e.g. the lr sweep's runs) is a point (gain = greedy true accuracy on
    the rewarded task minus the base's; retention = held-out accuracy minus the base's). Each method's frontier
    (``fit``: ``linear`` least squares, or ``isotonic``, non-increasing: ``frontier_fit``) gives its retention at
    the gain both methods' runs average; the value is A's minus B's there, with a percentile bootstrap (2000
    draws, seed 0) and its two-sided bootstrap p. ``resample: runs`` draws runs within each method;
    ``resample: seeds`` draws seeds, each with all its runs of both methods (the seed is what was randomised:
    a seed's runs at different lrs share its data order and its base's initial rollouts). Returns the points
    in ``extra`` for the figure."""
    import numpy as np

    held = spec.get("heldout", "synthetic_heldout")
    fit, resample = str(spec.get("fit", "linear")), str(spec.get("resample", "runs"))
    base_g = next(iter(_seed_values(rec, {"method": "baseline"}, "true_acc").values()))
    base_h = next(iter(_seed_values(rec, {"method": "baseline", "dataset": held}, "true_acc").values()))
    pts: dict[str, list[tuple[float, float, str, int]]] = {}
    for side in ("a", "b"):
        rows = []
        for g in spec[side]["groups"]:
            g = {"method": spec[side]["method"], **g}
            gain = _seed_values(rec, g, "true_acc")
            ret = _seed_values(rec, {**g, "dataset": held}, "true_acc")
            tag = rec.resolve(g).get("tag", "")
            rows += [(gain[s] - base_g, ret[s] - base_h, tag, s) for s in sorted(set(gain) & set(ret))]
        if len(rows) < 3:
            raise ClaimsError(
                f"{spec['id']}: {spec[side]['method']} has {len(rows)} runs; a frontier needs >= 3"
            )
        pts[side] = rows
    arr = {k: np.array([(r[0], r[1], r[3]) for r in v]) for k, v in pts.items()}  # gain, retention, seed

    # the gain both methods' runs average: the matched point, held fixed across the bootstrap's draws
    g_star = float(np.concatenate([arr["a"][:, 0], arr["b"][:, 0]]).mean())

    def at(runs: np.ndarray) -> float:  # a method's fitted retention at the matched gain
        return frontier_fit(runs[:, 0], runs[:, 1], fit)(g_star)

    ret_a, ret_b = at(arr["a"]), at(arr["b"])
    value = ret_a - ret_b
    rng = np.random.default_rng(0)
    seeds = np.array(sorted(set(arr["a"][:, 2]) | set(arr["b"][:, 2])))
    if resample == "seeds" and seeds.size < 3:
        raise ClaimsError(f"{spec['id']}: a bootstrap over seeds needs >= 3 seeds, got {seeds.size}")
    draws = []
    for _ in range(2000):
        if resample == "seeds":
            pick = rng.choice(seeds, seeds.size)
            a = np.concatenate([arr["a"][arr["a"][:, 2] == s] for s in pick])
            b = np.concatenate([arr["b"][arr["b"][:, 2] == s] for s in pick])
        else:
            a = arr["a"][rng.integers(0, len(arr["a"]), len(arr["a"]))]
            b = arr["b"][rng.integers(0, len(arr["b"]), len(arr["b"]))]
        draws.append(at(a) - at(b))
    d = np.array(draws)
    low, high = (float(q) for q in np.quantile(d, [0.025, 0.975]))
    p = float(min(1.0, 2 * min((d <= 0).mean(), (d >= 0).mean())))
    over = f"bootstrap over {seeds.size} seeds" if resample == "seeds" else "bootstrap over runs"
    label = spec.get("label", "retention at matched gain")
    text = (f"{label}: at the mean gain {pp(g_star)} points over the base, {spec['a']['method']} retains "
            f"{pp(ret_a)} and {spec['b']['method']} {pp(ret_b)} points of held-out accuracy"
            + (f" ({fit} frontiers)" if fit != "linear" else "") + ": "
            f"difference {pp(value)} [{pp(low)}, {pp(high)}] ({over}, p = {p:.3g}; {len(arr['a'])} and "
            f"{len(arr['b'])} runs)")  # fmt: skip
    extra = {"p": p, "gain": g_star, "points": pts, "methods": (spec["a"]["method"], spec["b"]["method"])}
    if (fit, resample) != ("linear", "runs"):  # the earlier specs' tables keep their columns
        extra |= {"fit": fit, "resample": resample}
    return Measured(spec["id"], label, value, low, high, {}, extra, text,
                    f"{label}: {pp(value)} [{pp(low)}, {pp(high)}] at gain {pp(g_star)}")  # fmt: skip


PARAM_SUM = "train/param_sum"  # trainer.log_param_sum: the float64 sum of every parameter after each step


def m_part_step(rec: Records, spec: dict[str, Any]) -> Measured:
    """``part_step``: per shared seed, the first optimizer step where A's and B's parameter checksums
    (``train/param_sum``) differ (0: they differ from the first logged step on; NaN: identical throughout),
    and the median over seeds. Locates where two arms predicted to take the same steps part."""
    sums = {}
    for side in ("a", "b"):
        sel = _run_groups(rec, spec[side])
        sel = sel[sel["metric"] == PARAM_SUM]
        if sel.empty:
            raise ClaimsError(f"{spec['id']}: no run of {describe(spec[side])} logged {PARAM_SUM} "
                              "(trainer.log_param_sum=true)")  # fmt: skip
        sums[side] = {int(s): dict(zip(r["step"].astype(int), r["value"].astype(float), strict=True))
                      for s, r in sel.groupby("seed")}  # fmt: skip
    seeds: dict[int, float] = {}
    for seed in sorted(set(sums["a"]) & set(sums["b"])):
        a, b = sums["a"][seed], sums["b"][seed]
        steps = sorted(set(a) & set(b))
        seeds[seed] = float(next((s for s in steps if a[s] != b[s]), math.nan))
    if not seeds:
        raise ClaimsError(f"{spec['id']}: {describe(spec['a'])} and {describe(spec['b'])} share no seed")
    parted = sorted(v for v in seeds.values() if not math.isnan(v))
    median = float(pd.Series(parted).median()) if parted else math.nan
    label = spec.get("label", f"{describe(spec['a'])} vs {describe(spec['b'])}: first step that parts")
    if not parted:
        span = "never"
    elif parted[0] == parted[-1]:
        span = f"step {parted[0]:g} on every seed that parts"
    else:
        span = f"steps {parted[0]:g}-{parted[-1]:g}, median {median:g}"
    text = (f"{label}: parameter checksums ({PARAM_SUM}) first differ at {span}; {len(parted)} of "
            f"{len(seeds)} seeds part")  # fmt: skip
    return Measured(spec["id"], label, median, seeds=seeds, text=text, short=f"{label}: {span}")


MEASURES = {"accuracy": m_accuracy, "compare": m_compare, "run_stat": m_run_stat, "val_reward": m_val_reward,
            "interaction": m_interaction, "collapse": m_collapse, "frontier": m_frontier,
            "part_step": m_part_step}  # fmt: skip
