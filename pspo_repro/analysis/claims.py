"""The claims table: each claim of the paper, the toy experiment that tests it, its numbers and a verdict.

``python -m pspo_repro.claims results_dir=<root> out_dir=<root> [spec=conf/claims.yaml]``

The claims, their quotes and the measurements that test them are data (``conf/claims.yaml``); this module
computes every number from the records under ``results_dir`` (per-prompt rows of the evaluation cells,
``metrics.jsonl`` of the runs) and derives each verdict by the rule the claim names, so a rerun of the
experiments rewrites the table and its verdicts together. Writes ``claims.md`` and ``claims.csv``.

Measurements (``kind``):

- ``accuracy``: a run group's per-seed accuracy (one value per seed, from its cells' per-prompt rows), mean
  with its Student t interval over seeds.
- ``compare``: A minus B. Seed-paired: the difference of the two groups' values for each seed both have,
  with its t interval over seeds (the seeds are the independent replicates); beside it the paired
  per-prompt comparison (each prompt averaged over each group's seeds; percentile bootstrap over prompts,
  ``stats.paired_comparison``). B may be the base model (``method: baseline``, one seed: every seed of A
  is compared with it). ``identical`` says whether both groups gave the same per-prompt values on every
  shared seed.
- ``run_stat``: a training statistic of ``metrics.jsonl`` (e.g. ``method/zero_grad_frac``), each run's mean
  over its optimizer steps (``steps: reuse``: only the steps that reuse a rollout, where a trust region can
  act; ``agg: min``: the run's minimum), then the mean over seeds.
- ``val_reward``: validation reward at the last validation step every run of the group reached (the
  paper's alpha ablation reads validation reward), per seed.

Verdict rules (``verdict.rule``; each names the measurement(s) it reads, by ``id``):

- ``greater``: supported if A - B's seed-paired interval lies above 0, contradicted if below, else
  not resolved.
- ``similar_or_better``: contradicted if the interval lies below 0; supported if its lower end is above
  ``-margin`` points; else not resolved.
- ``stable``: the claim that a run group keeps learning under reuse: contradicted if its drop against the
  one-pass group is significant (interval below 0) or its gain over the base does not exclude 0;
  supported if the gain excludes 0 and the drop's lower end is above ``-margin``; else not resolved.
  ``unstable`` is the claim that it does not (supported / contradicted swap).
- ``exceeds``: supported if every listed statistic exceeds the reference statistic by more than
  ``threshold``, contradicted if none does, else not resolved.
- ``zero_vs_positive``: supported if the first statistic is at most ``tolerance`` (default 0) on every run
  and the second above it on every run; contradicted otherwise.
- ``peak``: supported if the named value has the highest mean and its seed-paired difference to each
  other value lies above 0; contradicted if another value's difference to it lies above 0; else not
  resolved.
- ``not_testable``: no experiment at this scale (the claim says why).
"""

from __future__ import annotations

import csv
import json
import math
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd
from omegaconf import OmegaConf

from pspo_repro.analysis.results_io import eval_long, load_eval_cells, load_runs, prompt_values
from pspo_repro.analysis.stats import Interval, clip_interval, paired_comparison, t_interval
from pspo_repro.analysis.tables import CLIPPED
from pspo_repro.common.atomic import atomic_open
from pspo_repro.common.cli import parse_key_values, run_writer

VERDICTS = ("supported", "contradicted", "not resolved", "not testable")
KINDS = ("accuracy", "compare", "run_stat", "val_reward")
RULES = ("greater", "similar_or_better", "stable", "unstable", "exceeds", "zero_vs_positive", "peak",
         "not_testable")  # fmt: skip


class ClaimsError(ValueError):
    """A spec that names an unknown measurement, rule or run group, or a group with no records."""


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

    @classmethod
    def read(cls, root: Path) -> Records:
        """Read the evaluation cells (long table) and the runs' metrics under ``root``."""
        cells = load_eval_cells(root)
        evals = eval_long(cells) if not cells.empty else pd.DataFrame()
        runs, metrics = load_runs(root)
        return cls(root, evals, runs, metrics)

    def cells(self, g: dict[str, Any], metric: str) -> pd.DataFrame:
        """The cells of a run group (method, tag, dataset, temperature) for one metric, one per seed."""
        e = self.evals
        if e.empty:
            raise ClaimsError(f"no evaluation cells under {self.root / 'eval'}")
        sel = e[
            (e["method"] == g["method"])
            & (e["tag"] == str(g.get("tag") or ""))
            & (e["dataset"] == g.get("dataset", "synthetic"))
            & ((e["temperature"] - float(g.get("temperature", 0.0))).abs() < 1e-9)
            & (e["metric"] == metric)
        ]
        if "model" in g:
            sel = sel[sel["model"] == g["model"]]
        if sel.empty:
            raise ClaimsError(f"no {metric} cells for {describe(g)} under {self.root / 'eval'}")
        return sel.sort_values("seed")


def describe(g: dict[str, Any]) -> str:
    """``clip [as_run] synthetic T=0``: a run group in words."""
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
    sel = rec.cells(spec["a"], metric)
    seeds = dict(zip(sel["seed"].astype(int), sel["value"].astype(float), strict=True))
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
        f"{_seeds(len(diffs))}; per prompt {_pp(paired.diff)} [{_pp(paired.low)}, {_pp(paired.high)}], p = {paired.p_value:.3g} "
        f"({paired.n_prompts} prompts, {paired.wins} better / {paired.losses} worse)"
        + ("; identical per-prompt values on every shared seed" if identical else "")
    )
    extra = {
        "mean_a": ma.mean, "mean_b": mb.mean, "n_seeds": len(diffs), "prompt_diff": paired.diff,
        "prompt_low": paired.low, "prompt_high": paired.high, "prompt_p": paired.p_value, "identical": identical,
    }  # fmt: skip
    label = spec.get("label", f"{describe(spec['a'])} - {describe(spec['b'])}")
    short = (f"{label}: {_interval_text(iv, True)} ({_seeds(len(diffs))}; {_pct(ma.mean)} vs {_pct(mb.mean)}); "
             f"per prompt {_pp(paired.diff)} [{_pp(paired.low)}, {_pp(paired.high)}]"
             + (" (identical)" if identical else ""))  # fmt: skip
    return Measured(spec["id"], label, iv.mean, iv.low, iv.high, diffs, extra, text, short)


def _run_groups(rec: Records, g: dict[str, Any]) -> pd.DataFrame:
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
        if key not in wide or wide[key].dropna().empty:
            continue
        seeds[int(seed)] = float(wide[key].min() if agg == "min" else wide[key].mean())
    if not seeds:
        raise ClaimsError(f"{spec['id']}: no run of {describe(spec['a'])} logged {key} ({steps} steps)")
    mean = sum(seeds.values()) / len(seeds)
    scale = 100.0 if spec.get("percent", True) else 1.0
    unit = "%" if spec.get("percent", True) else ""
    text = (
        f"{spec['a']['method']} [{spec['a'].get('tag') or ''}] {key} ({agg} over {steps} steps): "
        f"{mean * scale:.3g}{unit} mean over {_seeds(len(seeds))} (range {min(seeds.values()) * scale:.3g}-"
        f"{max(seeds.values()) * scale:.3g}{unit})"
    )
    label = spec.get("label", key)
    return Measured(spec["id"], label, mean, min(seeds.values()), max(seeds.values()), seeds, text=text,
                    short=f"{label}: {mean * scale:.3g}{unit} ({_seeds(len(seeds))})")  # fmt: skip


def m_val_reward(rec: Records, spec: dict[str, Any]) -> Measured:
    """``val_reward``: validation reward per seed at the alpha table's step."""
    sel = _run_groups(rec, spec["a"])
    val = sel[sel["metric"] == "eval/reward"]
    last = {int(s): int(r["step"].max()) for s, r in val.groupby("seed")}
    # The alpha table's step (pipelines.mini.ablation_step): the last multiple of the validation interval
    # that every run reached (token budgets end runs a few steps apart; the paper reads step 250).
    every = {int(json.loads((Path(d) / "run.json").read_text())["config"]["trainer"]["eval_steps"])
             for d in sel["run_dir"].unique()}  # fmt: skip
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


MEASURES = {"accuracy": m_accuracy, "compare": m_compare, "run_stat": m_run_stat, "val_reward": m_val_reward}


# ---------------------------------------------------------------- verdicts


def verdict(rule: dict[str, Any], got: dict[str, Measured]) -> tuple[str, str]:
    """(verdict, the rule's reading in words) for one claim."""
    name = rule["rule"]

    def need(key: str) -> Measured:
        mid = rule[key]
        if mid not in got:
            raise ClaimsError(f"verdict rule {name}: no measurement {mid!r}")
        return got[mid]

    if name == "not_testable":
        return "not testable", rule.get("why", "")
    if name == "greater":
        d = need("diff")
        if d.low > 0:
            return "supported", f"the interval of {d.label} lies above 0"
        if d.high < 0:
            return "contradicted", f"the interval of {d.label} lies below 0"
        return "not resolved", f"the interval of {d.label} contains 0"
    if name == "similar_or_better":
        d, margin = need("diff"), float(rule["margin"])
        if d.high < 0:
            return "contradicted", f"the interval of {d.label} lies below 0"
        if d.low > -margin:
            return "supported", f"the interval of {d.label} lies above -{100 * margin:g} points"
        return "not resolved", f"the interval of {d.label} reaches below -{100 * margin:g} points"
    if name in ("stable", "unstable"):
        gain, drop, margin = need("gain"), need("drop"), float(rule["margin"])
        if drop.high < 0 or gain.low <= 0:
            res, why = (
                "unstable",
                (
                    f"{drop.label} lies below 0"
                    if drop.high < 0
                    else f"{gain.label}'s interval does not exclude 0"
                ),
            )
        elif drop.low > -margin:
            res, why = (
                "stable",
                (f"{gain.label} excludes 0 and {drop.label} lies above -{100 * margin:g} points"),
            )
        else:
            return "not resolved", f"{drop.label} reaches below -{100 * margin:g} points without excluding 0"
        return ("supported" if res == name else "contradicted"), why
    if name == "exceeds":
        ref, thr = need("reference"), float(rule.get("threshold", 0.0))
        stats = [got[i] for i in rule["stats"]]
        over = [s for s in stats if s.value > ref.value + thr]
        if len(over) == len(stats):
            return "supported", f"every one exceeds {ref.label} by more than {100 * thr:g} points"
        if not over:
            return "contradicted", f"none exceeds {ref.label} by more than {100 * thr:g} points"
        return "not resolved", f"{', '.join(s.label for s in over)} exceed {ref.label}, the others do not"
    if name == "zero_vs_positive":
        z, p, tol = need("zero"), need("positive"), float(rule.get("tolerance", 0.0))
        bound = f"at most {100 * tol:g}%" if tol else "0"
        if all(v <= tol for v in z.seeds.values()) and all(v > tol for v in p.seeds.values()):
            return "supported", f"{z.label} is {bound} on every run, {p.label} above it on every run"
        return "contradicted", f"{z.label} is not {bound} on every run, or {p.label} is on some run"
    if name == "peak":
        values = [got[i] for i in rule["values"]]
        best = need("best")
        diffs = {}
        for v in values:
            if v.id == best.id:
                continue
            shared = sorted(set(best.seeds) & set(v.seeds))
            diffs[v.label] = t_interval([best.seeds[s] - v.seeds[s] for s in shared])
        if any(iv.high < 0 for iv in diffs.values()):
            beat = [k for k, iv in diffs.items() if iv.high < 0]
            return "contradicted", f"{', '.join(beat)} is above {best.label} with an interval excluding 0"
        top = max(values, key=lambda v: v.value)
        if top.id == best.id and all(iv.low > 0 for iv in diffs.values()):
            return (
                "supported",
                f"{best.label} is highest and above every other value with intervals excluding 0",
            )
        ranks = ", ".join(f"{v.label} {v.value:.3f}" for v in sorted(values, key=lambda v: -v.value))
        return "not resolved", f"order by mean: {ranks}; no seed-paired difference to {best.label} excludes 0"
    raise ClaimsError(f"unknown verdict rule {name!r}; allowed: {', '.join(RULES)}")


# ---------------------------------------------------------------- the table


def load_spec(path: Path) -> list[dict[str, Any]]:
    """The claims of ``path`` (YAML with a ``claims`` list), checked for unknown kinds and rules."""
    spec = OmegaConf.to_container(OmegaConf.load(path), resolve=True)
    claims = spec.get("claims") if isinstance(spec, dict) else None
    if not isinstance(claims, list) or not claims:
        raise ClaimsError(f"{path}: expected a non-empty `claims` list")
    for c in claims:
        for key in ("id", "claim", "quote", "section", "test", "verdict"):
            if key not in c:
                raise ClaimsError(f"{path}: claim {c.get('id', '?')!r} has no {key!r}")
        for m in c.get("measure") or []:
            if m.get("kind") not in KINDS:
                raise ClaimsError(
                    f"{path}: claim {c['id']}: measurement kind {m.get('kind')!r}; allowed: {KINDS}"
                )
        if c["verdict"].get("rule") not in RULES:
            raise ClaimsError(f"{path}: claim {c['id']}: rule {c['verdict'].get('rule')!r}; allowed: {RULES}")
    return claims


def evaluate(rec: Records, claims: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each claim with its measurements and verdict."""
    out = []
    for c in claims:
        got = {m["id"]: MEASURES[m["kind"]](rec, m) for m in c.get("measure") or []}
        v, why = verdict(c["verdict"], got)
        out.append({**c, "measured": got, "verdict_text": v, "verdict_why": why})
    return out


def markdown(results: list[dict[str, Any]], root_name: str) -> str:
    """claims.md: the summary table, then one section per claim (quote, test, numbers, verdict rule)."""
    lines = [
        "# The paper's claims at toy scale",
        "",
        f"Generated by `python -m pspo_repro.claims` from the runs and evaluation cells under `{root_name}/` "
        "(claims and measurements: conf/claims.yaml; rules: pspo_repro/analysis/claims.py). Accuracies are "
        "greedy (T = 0) true accuracy in % on the 200 test problems unless a row says otherwise; "
        "differences in percentage points with 95% Student t intervals over seeds (seed-paired), the "
        "per-prompt paired comparison beside them. One tiny model (0.45M parameters) on a synthetic task: "
        "a verdict here says what this toy shows, not what holds for Qwen at 1.5B.",
        "",
        "| # | Claim (paper section) | Toy experiment | Key number | Verdict |",
        "|---:|:---|:---|:---|:---|",
    ]
    for i, r in enumerate(results, 1):
        key = r["measured"].get(r.get("key") or "", None)
        key_text = key.short if key else "-"
        lines.append(
            f"| {i} | {r['claim']} ({r['section']}) | {r['test_short']} | {key_text} | **{r['verdict_text']}** |"
        )
    for i, r in enumerate(results, 1):
        lines += ["", f"## {i}. {r['claim']}", "", f"> {r['quote'].strip()}", "", f"*{r['section']}*", ""]
        lines += [f"**Test.** {r['test'].strip()}", ""]
        if r["measured"]:
            lines += ["**Numbers.**", ""] + [f"- {m.text}" for m in r["measured"].values()] + [""]
        lines += [f"**Verdict: {r['verdict_text']}** ({r['verdict']['rule']}: {r['verdict_why']}).", ""]
        if r.get("reading"):
            lines += [r["reading"].strip(), ""]
    return "\n".join(lines).rstrip() + "\n"


def rows_csv(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One CSV row per measurement, with its claim's verdict."""
    out = []
    for r in results:
        for m in r["measured"].values() or []:
            out.append({"claim": r["id"], "verdict": r["verdict_text"], "measurement": m.id, "label": m.label,
                        "value": m.value, "low": m.low, "high": m.high,
                        "seeds": " ".join(f"{s}:{v:.6g}" for s, v in sorted(m.seeds.items())),
                        **{k: v for k, v in m.extra.items()}})  # fmt: skip
        if not r["measured"]:
            out.append({"claim": r["id"], "verdict": r["verdict_text"]})
    return out


def write(results_dir: Path, out_dir: Path, spec: Path) -> list[Path]:
    """Compute every claim from ``results_dir``; write ``claims.md`` and ``claims.csv`` into ``out_dir``."""
    claims = load_spec(spec)
    results = evaluate(Records.read(results_dir), claims)  # everything computed before anything is written
    rows = rows_csv(results)
    cols = list(dict.fromkeys(k for row in rows for k in row))
    out_dir.mkdir(parents=True, exist_ok=True)
    md, table = out_dir / "claims.md", out_dir / "claims.csv"
    with atomic_open(md, "w", encoding="utf-8") as fh:
        fh.write(markdown(results, results_dir.name))
    with atomic_open(table, "w", encoding="utf-8", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=cols)
        w.writeheader()
        w.writerows(rows)
    return [md, table]


KEYS = ("results_dir", "out_dir", "spec")


def main(argv: list[str] | None = None) -> int:
    """``python -m pspo_repro.claims results_dir=... out_dir=... [spec=...]``; returns the exit code."""
    from pspo_repro.common.paths import CONF_DIR

    args = parse_key_values(sys.argv[1:] if argv is None else argv, KEYS, ("results_dir", "out_dir"))
    if isinstance(args, str):
        print(f"error: {args}", file=sys.stderr)
        return 2
    spec = Path(args.get("spec") or CONF_DIR / "claims.yaml")
    if not spec.is_file():
        print(f"error: spec={spec} is not a file", file=sys.stderr)
        return 2
    return run_writer(write, Path(args["results_dir"]), Path(args["out_dir"]), spec)
