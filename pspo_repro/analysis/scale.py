"""The model-size ladder's tables, figure and claim-13 verdict (``make scale``; docs/scale.md).

Every number is computed from the records under each rung's folder (evaluation cells' per-prompt rows, the
runs' metrics), through the claims machinery (``analysis.measures`` and ``analysis.claims``: the same measurements, key
tests and rules as the claims study, with conf/claims/scale.yaml). On top of it:

- **One Holm family for the ladder**: every rung's headline key tests and claim 13's two key tests are
  corrected together, so no verdict of this table leans on the number of rungs or claims it shows.
- **Each headline claim across rungs**: "holds at every rung" (supported at each size rung), "contradicted at
  every rung", "changes with scale" (supported at one rung and contradicted at another), else "not resolved".
  Beside it, the slope of the claim's key difference against log10 parameters (descriptive, uncorrected).
- **Claim 13** ("PSPO's advantage grows with model size and domain specialisation"), by its rule:
  (a) size: the least-squares slope of the per-seed GR-PSPO - GRPO-clip true-accuracy differences (tuned lrs)
  against log10 parameters over the size rungs, with its t interval (n - 2 degrees of freedom);
  (b) specialisation: at the pair's rung, the same difference on the specialised base minus on the general
  base (Welch t over the two bases' seeds). Each is a two-sided key test in the ladder's Holm family. Claim 13
  is supported if both parts are significantly positive, contradicted if either is significantly negative,
  else not resolved. The preservation difference (held-out skill) gets the same slope and pair rows, beside.
"""

from __future__ import annotations

import csv
import io
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pspo_repro.analysis.claims import ALPHA, decide, evaluate, p_text
from pspo_repro.analysis.claims_spec import read_spec
from pspo_repro.analysis.measures import Measured, Records, interval_text, m_accuracy, pct, pp
from pspo_repro.analysis.stats import Interval, holm
from pspo_repro.common.atomic import write_set
from pspo_repro.common.paths import CONF_DIR
from pspo_repro.common.redact import redact_files
from pspo_repro.common.safe_paths import no_symlink_escape

SPEC = CONF_DIR / "claims" / "scale.yaml"
OUTPUTS = ("scale.md", "scale.csv", "scale.png")
# The rows of the per-method table: a label and the claims run group (tuned: each method at its chosen lr).
METHOD_ROWS = (
    ("GR-PSPO", {"method": "pspo", "tuned": "lr"}),
    ("GRPO-clip", {"method": "clip", "tuned": "lr"}),
    ("GRPO-noclip (1 pass)", {"method": "noclip", "tuned": "lr"}),
    ("GRPO-noclip (2 passes)", {"method": "noclip", "tuned": "lr", "point": {"method.num_iterations": 2}}),
    ("GR-PSPO, stale", {"method": "pspo", "tag": "offpolicy"}),
    ("GRPO-clip, stale", {"method": "clip", "tag": "offpolicy"}),
)
KEY_DIFF = "d_true"  # claim 13's quantity: GR-PSPO - GRPO-clip, tuned, greedy true accuracy
PRESERVE_DIFF = "h_d"  # beside it: the same on the held-out skill


@dataclass
class Rung:
    """One base of the ladder with its records and its headline claims measured."""

    name: str
    params: int
    general_of: str | None
    sft: dict[str, Any]
    rec: Records
    results: list[dict[str, Any]]
    base: dict[str, float] = field(default_factory=dict)

    @property
    def label(self) -> str:
        """The base's name as the tables show it (``(general)`` marks the pair's general base)."""
        return f"{self.name} (general)" if self.general_of else self.name


def sft_mix(sft: dict[str, Any]) -> tuple[int, int]:
    """(rewarded-family rows, held-out-skill rows) a base was SFT'ed on: its ``sft`` overrides over the counts the
    rung pipeline passes (conf/pipeline/mini.yaml's data sizes, ``pipelines.grid.sft_cmd``)."""
    from omegaconf import OmegaConf

    data = OmegaConf.load(CONF_DIR / "pipeline" / "mini.yaml").data
    return (int(sft.get("data.n_train", data.sizes.train)),
            int(sft.get("data.heldout_n_train", (data.get("heldout_sizes") or {}).get("train", 0))))  # fmt: skip


def habit_rate(rec: Records) -> float:
    """Share of the base's greedy test answers that are the first worked line's result (the stop-early habit:
    ``sft.premature_answer``), from the base cell's per-prompt answers and the regenerated test problems."""
    import re

    from pspo_repro.data.synthetic import load_split

    cells = rec.cells({"method": "baseline"}, "true_acc")
    rows = [(str(r.get("id")), r.get("answers") or []) for r in cells.iloc[0]["per_prompt"]]
    problems = {p.id: p for p in load_split("test", n=max(len(rows), 1))}
    hits = n = 0
    for pid, answers in rows:
        p = problems.get(pid)
        first = re.search(r"=\s*(\d+)", p.solution.split("\n", 1)[0]) if p else None
        if first is None or not answers:
            continue
        n += 1
        hits += answers[0] == first.group(1)
    return hits / n if n else math.nan


# What claim 13 reads from each rung, by measurement id: the claim of conf/claims/scale.yaml that measures it.
CLAIM13_MEASURES = {KEY_DIFF: "pspo_beats_clip", PRESERVE_DIFF: "knowledge_preservation"}


def check_claim13_measures(spec: Path, checked: dict[str, Any]) -> None:
    """ValueError in one line when no claim of ``spec`` measures one of ``CLAIM13_MEASURES`` (claim 13's
    slope and pair are built from them: without, the table failed with a traceback after every rung's
    records were read)."""
    have = {m["id"] for claim in checked["claims"] for m in claim.get("measure") or []}
    missing = [f"{mid} (claim {claim})" for mid, claim in CLAIM13_MEASURES.items() if mid not in have]
    if missing:
        raise ValueError(
            f"{spec}: claim 13 needs the measurement(s) {', '.join(missing)}, which no claim there measures; "
            f"allowed: a spec whose claims measure {' and '.join(CLAIM13_MEASURES)} (conf/claims/scale.yaml's)"
        )


def read_ladder(root: Path, ladder: list[dict[str, Any]], spec: Path = SPEC) -> list[Rung]:
    """Each base's records (``<root>/<name>``) with conf/claims/scale.yaml's claims measured on them; ``ladder``
    gives each base's ``name``, ``params`` (its SFT model's parameter count, from the ladder's pipeline:
    ``pipelines.ladder.ladder_spec``), ``general_of`` and ``sft`` mix."""
    checked = read_spec(spec)
    check_claim13_measures(spec, checked)
    # The ladder's shape first (folders, distinct sizes): a bad one is refused before any record is read.
    names = [str(b["name"]) for b in ladder]
    for name in names:
        no_symlink_escape(root, root / name, f"rung {name}", action="read")  # the tree's one link rule
        if not (root / name).is_dir():
            raise ValueError(f"rung {name}: no results folder {root / name} (run its pipeline: make scale)")
    params = [int(b["params"]) for b in ladder]
    sizes = [(n, p) for n, p, b in zip(names, params, ladder, strict=True) if not b.get("general_of")]
    if len({p for _, p in sizes}) != len(sizes):
        raise ValueError(f"rungs of equal size: {', '.join(f'{n} {p}' for n, p in sizes)}")
    out = []
    for name, size, b in zip(names, params, ladder, strict=True):
        rec = Records.read(root / name)
        rec.check_one_model(f"the ladder's rung {name}")
        results = evaluate(rec, checked["claims"], checked.get("tuning") or {})
        rung = Rung(name, size, b.get("general_of"), dict(b.get("sft") or {}), rec, results)
        for key, g in (
            ("true", {"method": "baseline"}),
            ("held", {"method": "baseline", "dataset": "synthetic_heldout"}),
        ):
            rung.base[key] = float(rec.cells(g, "true_acc")["value"].iloc[0])
        rung.base["reward"] = float(rec.cells({"method": "baseline"}, "reward_acc")["value"].iloc[0])
        rung.base["habit"] = habit_rate(rec)
        out.append(rung)
    return out


# ---------------------------------------------------------------- statistics


def slope(points: list[tuple[float, float]]) -> dict[str, float]:
    """Least-squares slope of y on x with its 95% t interval and two-sided p (n - 2 degrees of freedom)."""
    from scipy import stats

    if len(points) < 3 or len({x for x, _ in points}) < 2:
        raise ValueError(f"a slope needs >= 3 points at >= 2 sizes, got {len(points)}")
    xs, ys = [p[0] for p in points], [p[1] for p in points]
    fit = stats.linregress(xs, ys)
    # a perfect fit (e.g. every difference 0) has no residual: scipy gives a NaN error, the interval is the point
    half = stats.t.ppf(0.975, len(points) - 2) * fit.stderr if math.isfinite(fit.stderr) else 0.0
    p = float(fit.pvalue) if not math.isnan(fit.pvalue) else (0.0 if fit.slope else 1.0)
    return {"value": float(fit.slope), "low": float(fit.slope - half), "high": float(fit.slope + half), "p": p,
            "n": len(points)}  # fmt: skip


def welch(a: list[float], b: list[float]) -> dict[str, float]:
    """Mean of ``a`` minus mean of ``b`` with Welch's 95% interval and two-sided p."""
    import numpy as np
    from scipy import stats

    if len(a) < 2 or len(b) < 2:
        raise ValueError(f"Welch's test needs >= 2 seeds a side, got {len(a)} and {len(b)}")
    va, vb = np.var(a, ddof=1) / len(a), np.var(b, ddof=1) / len(b)
    diff = float(np.mean(a) - np.mean(b))
    se = math.sqrt(va + vb)
    if se == 0:
        return {"value": diff, "low": diff, "high": diff, "p": 0.0 if diff else 1.0, "n": len(a) + len(b)}
    df = (va + vb) ** 2 / (va**2 / (len(a) - 1) + vb**2 / (len(b) - 1))
    half = stats.t.ppf(0.975, df) * se
    p = float(2 * stats.t.sf(abs(diff) / se, df))
    return {"value": diff, "low": diff - half, "high": diff + half, "p": p, "n": len(a) + len(b)}


def measured(rung: Rung, mid: str) -> Measured | None:
    """A rung's measurement ``mid`` (None when its claim does not measure it)."""
    for r in rung.results:
        if mid in r["measured"]:
            return r["measured"][mid]
    return None


def size_points(rungs: list[Rung], mid: str) -> list[tuple[float, float]]:
    """(log10 parameters, per-seed value of ``mid``) over the size rungs."""
    return [
        (math.log10(r.params), v) for r in rungs if not r.general_of for v in measured(r, mid).seeds.values()
    ]


def claim13(rungs: list[Rung]) -> dict[str, Any]:
    """Claim 13's rows: size slopes and the specialisation pair, for the key difference and preservation."""
    rows: dict[str, dict[str, Any]] = {}
    for mid, what in (
        (KEY_DIFF, "GR-PSPO - GRPO-clip, true accuracy"),
        (PRESERVE_DIFF, "GR-PSPO - GRPO-clip, held-out skill"),
    ):
        s = slope(size_points(rungs, mid))
        rows[f"size_{mid}"] = {
            **s,
            "label": f"{what}: slope per decade of parameters",
            "key": mid == KEY_DIFF,
        }
        for g in (r for r in rungs if r.general_of):
            spec_rung = next(r for r in rungs if r.name == g.general_of)
            a, b = measured(spec_rung, mid).seeds, measured(g, mid).seeds
            w = welch(list(a.values()), list(b.values()))
            rows[f"special_{mid}"] = {**w, "label": f"{what}: specialised ({spec_rung.name}) - general ({g.name})",
                                      "key": mid == KEY_DIFF}  # fmt: skip
    return rows


def ladder_holm(rungs: list[Rung], c13: dict[str, Any]) -> float:
    """Holm over every rung's sampling key tests and claim 13's key rows, in place: each rung result gets
    ``p_ladder`` and ``verdict_ladder``, each key row of ``c13`` gets ``p_holm``. Returns the family size."""
    family: list[tuple[Any, float]] = []
    for r in rungs:
        for res in r.results:
            p = res["key_test"].p
            if p is not None and not math.isnan(p):
                family.append((res, p))
            else:
                res["p_ladder"], res["verdict_ladder"] = None, decide(res["key_test"], None)
    for row in c13.values():
        if row["key"]:
            family.append((row, row["p"]))
    adj = holm([p for _, p in family])
    for (obj, _), pa in zip(family, adj, strict=True):
        if "key_test" in obj:
            obj["p_ladder"], obj["verdict_ladder"] = pa, decide(obj["key_test"], pa)
        else:
            obj["p_holm"] = pa
    return len(family)


def row_verdict(row: dict[str, Any]) -> str:
    """A claim-13 key row's verdict from its Holm-adjusted p and sign."""
    if row["p_holm"] >= ALPHA:
        return "not resolved"
    return "supported" if row["value"] > 0 else "contradicted"


def claim13_verdict(c13: dict[str, Any]) -> str:
    """Supported if both parts are, contradicted if either is, else not resolved."""
    parts = [row_verdict(r) for r in c13.values() if r["key"]]
    if "contradicted" in parts:
        return "contradicted"
    return "supported" if parts and all(v == "supported" for v in parts) else "not resolved"


def across(verdicts: list[str]) -> str:
    """A headline claim's verdicts at the size rungs, in one phrase (module docstring)."""
    if all(v == "supported" for v in verdicts):
        return "holds at every rung"
    if all(v == "contradicted" for v in verdicts):
        return "contradicted at every rung"
    if "supported" in verdicts and "contradicted" in verdicts:
        return "changes with scale"
    if all(v == verdicts[0] for v in verdicts):
        return f"{verdicts[0]} at every rung"
    return "not resolved"


# ---------------------------------------------------------------- output


def _iv(m: Measured | dict[str, float] | None, signed: bool = False) -> str:
    """``mean [low, high]``; an accuracy's interval is cut at [0, 100] % and marked as the claims table does."""
    if m is None:
        return "-"
    v, lo, hi = (m["value"], m["low"], m["high"]) if isinstance(m, dict) else (m.value, m.low, m.high)
    return interval_text(Interval(v, lo, hi, 0, "t"), signed)


def method_table(r: Rung) -> list[tuple[str, str, Any, Any, Any]]:
    """(label, lr, true, reward-style, held-out) per method row of one rung."""
    rows = []
    for label, g in METHOD_ROWS:
        lr = "2e-3 (regime)" if g.get("tag") == "offpolicy" else r.rec.selection(
            g["method"], "lr", dict(g.get("point") or {})).chosen  # fmt: skip
        got = [m_accuracy(r.rec, {"id": "x", "a": {**g, "dataset": ds}, "metric": metric})
               for ds, metric in (("synthetic", "true_acc"), ("synthetic", "reward_acc"), ("synthetic_heldout", "true_acc"))]  # fmt: skip
        rows.append((label, lr, *got))
    return rows


def markdown(rungs: list[Rung], c13: dict[str, Any], family: int) -> str:
    """scale.md: bases, per-method accuracies per rung, headline claims per rung, claim 13."""
    sizes = [r for r in rungs if not r.general_of]
    out = ["# The claims across model scale (`make scale`)", "",
           "Every number is computed from the rungs' evaluation cells and run records (conf/scale.yaml, "
           "conf/pipeline/scale_rung.yaml, conf/claims/scale.yaml; docs/scale.md). Greedy (T = 0) accuracy in %, mean "
           "[95% t interval] over seeds 0-2; each method at the lr it chose on validation (seed 100).", "",
           "## The bases", "",
           "| base | parameters | SFT mix (rewarded / held-out rows) | true acc | reward-style acc | stop-early habit | held-out skill |",
           "|---|---:|---|---:|---:|---:|---:|"]  # fmt: skip
    for r in rungs:
        mix = " / ".join(map(str, sft_mix(r.sft)))
        out.append(f"| {r.label} | {r.params:,} | {mix} | {pct(r.base['true'])} | {pct(r.base['reward'])} | "
                   f"{pct(r.base['habit'])} | {pct(r.base['held'])} |")  # fmt: skip
    out += [
        "",
        "Stop-early habit: share of the base's greedy test answers that are the first worked line's result.",
        "",
    ]
    out += ["## Methods at each rung", ""]
    for r in rungs:
        out += [f"### {r.label}: {r.params:,} parameters", "", "| method | lr | true acc | reward-style acc | held-out skill |",
                "|---|---|---:|---:|---:|"]  # fmt: skip
        for label, lr, t, rw, h in method_table(r):
            out.append(f"| {label} | {lr} | {_iv(t)} | {_iv(rw)} | {_iv(h)} |")
        out.append("")
    out += ["## Headline claims at each rung", "",
            f"Verdicts after Holm over the whole ladder ({family} key tests: every rung's and claim 13's); "
            "each cell: verdict (key difference in points, ladder-adjusted p). Across rungs: the size rungs' "
            "verdicts in one phrase, and the slope of the key difference per decade of parameters (descriptive, "
            "uncorrected).", "",
            "| claim | " + " | ".join(r.label for r in rungs) + " | across sizes | slope per decade |",
            "|---|" + "---|" * len(rungs) + "---|---|"]  # fmt: skip
    for i, res in enumerate(rungs[0].results):
        cells, vs = [], []
        for r in rungs:
            x = r.results[i]
            key = x["measured"].get(x["verdict"].get("diff") or x["verdict"].get("positive") or "")
            val = f"{pp(key.value)}" if key is not None else "-"
            cells.append(f"{x['verdict_ladder']} ({val}, p {p_text(x['p_ladder'])})")
            if not r.general_of:
                vs.append(x["verdict_ladder"])
        diff = res["verdict"].get("diff")
        try:
            s = slope(size_points(rungs, diff)) if diff and measured(sizes[0], diff).seeds else None
        except ValueError:
            s = None
        out.append(
            f"| {res['claim']} | " + " | ".join(cells) + f" | {across(vs)} | {_iv(s, True) if s else '-'} |"
        )
    out += ["", "## Claim 13: PSPO's advantage grows with model size and domain specialisation", "",
            "Rule (pspo_repro/analysis/scale.py): (a) the least-squares slope of the per-seed GR-PSPO - GRPO-clip "
            "true-accuracy differences (tuned lrs) against log10 parameters over the size rungs, t interval; (b) at "
            "the pair's rung, that difference on the specialised base minus on the general base (Welch). Both are "
            "two-sided key tests in the ladder's Holm family; claim 13 is supported if both are significantly "
            "positive, contradicted if either is significantly negative, else not resolved. The held-out-skill rows "
            "are beside it, not part of the rule.", "",
            "| quantity | estimate (points) | 95% interval | p | Holm p | verdict |", "|---|---:|---|---:|---:|---|"]  # fmt: skip
    for row in c13.values():
        hp = p_text(row["p_holm"]) if row["key"] else "(beside)"
        v = row_verdict(row) if row["key"] else "-"
        out.append(f"| {row['label']} | {pp(row['value'])} | [{pp(row['low'])}, {pp(row['high'])}] | "
                   f"{p_text(row['p'])} | {hp} | {v} |")  # fmt: skip
    out += ["", f"**Claim 13: {claim13_verdict(c13)}.**", ""]
    return "\n".join(out)


def rows_csv(rungs: list[Rung], c13: dict[str, Any]) -> list[dict[str, Any]]:
    """scale.csv: every measurement of every rung, then claim 13's rows."""
    rows = []
    for r in rungs:
        for res in r.results:
            for m in res["measured"].values():
                rows.append({"rung": r.name, "parameters": r.params, "claim": res["id"], "measure": m.id,
                             "value": m.value, "low": m.low, "high": m.high, "n": len(m.seeds),
                             "p_ladder": res.get("p_ladder") if m.id == res["key"] else "",
                             "verdict": res.get("verdict_ladder") if m.id == res["key"] else ""})  # fmt: skip
    for name, row in c13.items():
        rows.append({"rung": "ladder", "parameters": "", "claim": "scale_and_specialisation", "measure": name,
                     "value": row["value"], "low": row["low"], "high": row["high"], "n": row["n"],
                     "p_ladder": row.get("p_holm", ""), "verdict": row_verdict(row) if row["key"] else ""})  # fmt: skip
    return rows


def figure(rungs: list[Rung]) -> bytes:
    """scale.png: true accuracy and held-out retention against parameters, per method (tuned), with seed
    intervals; the general base as open markers at its size."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for label, g in METHOD_ROWS[:4]:
        for general in (False, True):
            pts = [r for r in rungs if bool(r.general_of) == general]
            if not pts:
                continue
            for ax, ds in zip(axes, ("synthetic", "synthetic_heldout"), strict=True):
                xs, ys, lo, hi = [], [], [], []
                for r in pts:
                    m = m_accuracy(r.rec, {"id": "x", "a": {**g, "dataset": ds}})
                    base = r.base["true"] if ds == "synthetic" else r.base["held"]
                    shift = 0.0 if ds == "synthetic" else base
                    k = [x for x, _ in METHOD_ROWS].index(label)
                    xs.append(r.params * 1.04 ** (k - 1.5))  # side by side: identical methods stay visible
                    ys.append(100 * (m.value - shift))
                    lo.append(100 * (m.value - m.low) if not math.isnan(m.low) else 0.0)
                    hi.append(100 * (m.high - m.value) if not math.isnan(m.high) else 0.0)
                ax.errorbar(xs, ys, yerr=[lo, hi], marker="o", capsize=3, mfc="none" if general else None,
                            linestyle="none" if general else "-", label=None if general else label,
                            color=f"C{[x for x, _ in METHOD_ROWS].index(label)}")  # fmt: skip
    sizes = [r for r in rungs if not r.general_of]
    axes[0].plot([r.params for r in sizes], [100 * r.base["true"] for r in sizes], "k--", label="SFT base")
    axes[1].axhline(0.0, color="k", linestyle="--", linewidth=1)
    axes[0].set_ylabel("greedy true accuracy, rewarded task (%)")
    axes[1].set_ylabel("held-out skill: RL model - its base (points)")
    for ax in axes:
        ax.set_xscale("log")
        ax.set_xticks([r.params for r in sizes], [f"{r.params / 1e6:.2g}M" for r in sizes])
        ax.minorticks_off()
        ax.set_xlabel("parameters (open markers: general base)")
    axes[0].legend(fontsize=8)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110, metadata={"Software": None})
    plt.close(fig)
    return buf.getvalue()


def write(results_dir: Path, out_dir: Path, ladder: list[dict[str, Any]], spec: Path = SPEC) -> list[Path]:
    """Compute everything from the rungs under ``results_dir``; write scale.md, scale.csv and scale.png into
    ``out_dir`` as one set (``atomic.write_set``)."""
    rungs = read_ladder(results_dir, ladder, spec)
    c13 = claim13(rungs)
    family = ladder_holm(rungs, c13)
    rows = rows_csv(rungs, c13)
    text = io.StringIO(newline="")
    w = csv.DictWriter(text, fieldnames=list(rows[0]))
    w.writeheader()
    w.writerows(rows)
    files: dict[Path, str | bytes] = {
        out_dir / "scale.md": markdown(rungs, c13, family),
        out_dir / "scale.csv": text.getvalue(),
        out_dir / "scale.png": figure(rungs),
    }
    write_set(redact_files(files), (".md", ".csv", ".png"))
    return list(files)
