"""The claims' key tests and verdicts: each claim's rule over its measurements, one Holm family.

Key tests and verdicts (``verdict.rule``; docs/statistics.md "Claims and verdicts"). Each claim has one key
test; the raw p-values of all claims are Holm-adjusted together, and "supported" / "contradicted" need an
adjusted p below ``ALPHA`` in the direction the rule names ("not resolved" otherwise):

- ``greater`` / ``interaction``: a two-sided test over seeds of a seed-paired difference (``test``: t,
  wilcoxon, sign, or bootstrap for a frontier); supported if positive, contradicted if negative.
- ``non_inferior``: one-sided t test that the difference is above -margin (supported), or below it
  (contradicted); the margin is absolute, fixed in the spec.
- ``equivalent``: TOST within +-margin (supported) or a significant difference (contradicted).
- ``greater_all``: ahead of every listed arm (two-sided t per difference, the largest p decides:
  intersection-union); behind every one contradicts; signs that differ are not resolved.
- ``equivalent_all``: TOST on every listed comparison (the largest p), or a significant difference on any
  (two-sided t, Bonferroni over the list).
- ``stable``: a majority of collapsed runs contradicts (no test); otherwise the gain over the base (t test)
  with no collapse supports.
- ``exceeds``: every listed per-seed statistic above ``threshold`` (one-sided t, the largest p).
- ``peak``: the named value above every other, seed-paired (one-sided t, the largest p).
- deterministic, outside the Holm family: ``zero_vs_positive`` (the first statistic at most ``tolerance``
  on every run, the second above it on every run) and ``identical_unless_clipped`` (per-prompt identity of
  the listed comparisons, and difference of the others).
- ``not_testable``: no experiment at this scale (the claim says why).
The measurements themselves are ``analysis.measures``'; the claims table that shows both is
``analysis.claims_report``'s.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pspo_repro.analysis.claims_spec import RULES, ClaimsError
from pspo_repro.analysis.measures import MEASURES, Measured, Records, pp, seeds_text, tuned_ref
from pspo_repro.analysis.stats import holm

SELECTION_SENSITIVE = "not resolved (selection-sensitive)"
VERDICTS = ("supported", "contradicted", "not resolved", "not testable", SELECTION_SENSITIVE)

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
    # the per-seed values the test is over and its margin (TOST), for the power beside the verdict (``power_text``)
    values: list[float] = field(default_factory=list)
    margin: float | None = None


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


def _tost(x: list[float], m: float) -> float:
    """The TOST p that the per-seed mean lies within (-m, m): the larger of the two one-sided p."""
    return max(one_sided_t(x, -m, True), one_sided_t(x, m, False))


def _margin(rule: dict[str, Any], got: dict[str, Measured]) -> tuple[float, str]:
    """The rule's absolute margin in accuracy units, fixed in the spec before the runs (issue 55)."""
    m = float(rule["margin"])
    return m, f"{pp(m)[1:]} points (pre-registered, absolute)"


def _diff_seeds(d: Measured) -> list[float]:
    return [d.seeds[s] for s in sorted(d.seeds)]


def _need(rule: dict[str, Any], got: dict[str, Measured], key: str) -> Measured:
    """The measurement the rule's ``key`` names (ClaimsError when the claim does not measure it)."""
    mid = rule[key]
    if mid not in got:
        raise ClaimsError(f"verdict rule {rule['rule']}: no measurement {mid!r}")
    return got[mid]


def _not_testable(rule: dict[str, Any], got: dict[str, Measured]) -> KeyTest:
    return KeyTest(None, "not testable", "not testable", rule.get("why", ""))


def _greater(rule: dict[str, Any], got: dict[str, Measured]) -> KeyTest:
    """``greater`` / ``interaction``: a two-sided test over seeds of a seed-paired difference."""
    d = _need(rule, got, "diff")
    test = rule.get("test", "t")
    if test == "bootstrap":  # a measurement that carries its own p (the frontier's bootstrap over runs)
        p = float(d.extra["p"])
    else:
        p = seed_tests(_diff_seeds(d))[test]
    up = d.value > 0
    t = KeyTest(p, "supported" if up else "contradicted", "not resolved",
                f"{d.label}: {pp(d.value)} points, "
                + (f"bootstrap over {d.extra.get('resample', 'runs')}" if test == "bootstrap"
                   else f"{test} test over {seeds_text(len(d.seeds))}"),
                test)  # fmt: skip
    if test != "bootstrap":
        t.values = _diff_seeds(d)
    if test != "bootstrap" and len(d.seeds) > 1:
        other = seed_tests(_diff_seeds(d))
        t.extra.append("beside it: " + ", ".join(f"{k} p = {v:.3g}" for k, v in other.items() if k != test))
    return t


def _non_inferior(rule: dict[str, Any], got: dict[str, Measured]) -> KeyTest:
    """ "as well as or better": the difference is above -margin (one-sided t), with the margin's sensitivity."""
    d = _need(rule, got, "diff")
    m, why_m = _margin(rule, got)
    x = _diff_seeds(d)
    ni, inf = one_sided_t(x, -m, True), one_sided_t(x, -m, False)
    path_ni = d.value > -m
    t = KeyTest(ni if path_ni else inf, "supported" if path_ni else "contradicted", "not resolved",
                f"{d.label}: {pp(d.value)} points; margin {why_m}; one-sided t test that the difference "
                f"is {'above' if path_ni else 'below'} -margin", "non-inferiority t", values=x, margin=m)  # fmt: skip
    for f in (0.5, 2.0):
        pa = one_sided_t(x, -f * m, True) if d.value > -f * m else one_sided_t(x, -f * m, False)
        t.alternatives[f"margin x {f:g} ({pp(f * m)[1:]} points)"] = pa
    return t


def _equivalent(rule: dict[str, Any], got: dict[str, Measured]) -> KeyTest:
    """ "the same in distribution": two one-sided tests (TOST) within +-margin, or a significant difference."""
    d = _need(rule, got, "diff")
    m, why_m = _margin(rule, got)
    x = _diff_seeds(d)
    tost = _tost(x, m)
    two = seed_tests(x)["t"]
    # equivalence shown -> supported; otherwise a significant difference -> contradicted (Bonferroni x 2
    # inside the claim, since either path may decide)
    p, sig = (tost, "supported") if tost <= two else (two, "contradicted")
    t = KeyTest(min(1.0, 2 * p), sig, "not resolved",
                f"{d.label}: {pp(d.value)} points; margin {why_m}; TOST p = {tost:.3g}, difference t "
                f"p = {two:.3g} (the smaller decides, doubled)", "TOST / t", values=x, margin=m)  # fmt: skip
    for f in (0.5, 2.0):
        tf = _tost(x, f * m)
        t.alternatives[f"margin x {f:g} ({pp(f * m)[1:]} points)"] = min(1.0, 2 * min(tf, two))
    return t


def _greater_all(rule: dict[str, Any], got: dict[str, Measured]) -> KeyTest:
    """Ahead of every arm (intersection-union): supported if every difference is above 0 and the largest of
    their two-sided t p is below the level after Holm; contradicted if every one is below 0 by the same test;
    not resolved when the signs differ (no single direction to test)."""
    ds = [got[i] for i in rule["diffs"]]
    ps = {d.label: seed_tests(_diff_seeds(d))["t"] for d in ds}
    worst = max(ds, key=lambda d: ps[d.label])
    signs = {d.value > 0 for d in ds}
    listed = "; ".join(f"{d.label} {pp(d.value)} (t p = {ps[d.label]:.2g})" for d in ds)
    if len(signs) > 1:
        return KeyTest(max(ps.values()), "not resolved", "not resolved",
                       f"the differences disagree in sign: {listed}", "t, every arm",
                       values=_diff_seeds(worst))  # fmt: skip
    up = signs == {True}
    return KeyTest(max(ps.values()), "supported" if up else "contradicted", "not resolved",
                   f"{'ahead of' if up else 'behind'} every arm, the largest p decides: {listed}",
                   "t, every arm (the largest p)", values=_diff_seeds(worst))  # fmt: skip


def _equivalent_all(rule: dict[str, Any], got: dict[str, Measured]) -> KeyTest:
    """ "the same" on every listed comparison: TOST within +-margin on each, the largest p decides
    (intersection-union); otherwise a significant difference on any (two-sided t, Bonferroni over the list)
    contradicts. Either path may decide, so the deciding p is doubled (as ``equivalent``)."""
    ds = [got[i] for i in rule["diffs"]]
    m, why_m = _margin(rule, got)
    tost = {d.label: _tost(_diff_seeds(d), m) for d in ds}
    two = {d.label: min(1.0, len(ds) * seed_tests(_diff_seeds(d))["t"]) for d in ds}
    worst = max(ds, key=lambda d: tost[d.label])
    p_eq, p_diff = max(tost.values()), min(two.values())
    p, sig = (p_eq, "supported") if p_eq <= p_diff else (p_diff, "contradicted")
    listed = "; ".join(f"{d.label} {pp(d.value)} (TOST p = {tost[d.label]:.2g})" for d in ds)
    t = KeyTest(min(1.0, 2 * p), sig, "not resolved",
                f"margin {why_m}; largest TOST p = {p_eq:.3g}, smallest Bonferroni t p = {p_diff:.3g} (the "
                f"smaller decides, doubled): {listed}", "TOST, every comparison (the largest p)",
                values=_diff_seeds(worst), margin=m)  # fmt: skip
    for f in (0.5, 2.0):
        tf = max(_tost(_diff_seeds(d), f * m) for d in ds)
        t.alternatives[f"margin x {f:g} ({pp(f * m)[1:]} points)"] = min(1.0, 2 * min(tf, p_diff))
    return t


def _stable(rule: dict[str, Any], got: dict[str, Measured]) -> KeyTest:
    """Keeps learning under reuse: gains over the base, and no run collapses (a majority contradicts)."""
    gain, col = _need(rule, got, "gain"), _need(rule, got, "collapse")
    n, k = len(col.seeds), int(sum(col.seeds.values()))
    p = seed_tests(_diff_seeds(gain))["t"]
    if k * 2 > n:
        return KeyTest(
            None, "contradicted", "contradicted", f"{k} of {n} runs collapsed ({col.label}): a majority"
        )
    return KeyTest(p, "supported" if gain.value > 0 and k == 0 else "contradicted" if gain.value < 0
                   else "not resolved", "not resolved",
                   f"{gain.label}: {pp(gain.value)} points (t test); {k} of {n} runs collapsed",
                   "t", values=_diff_seeds(gain))  # fmt: skip


def _exceeds(rule: dict[str, Any], got: dict[str, Measured]) -> KeyTest:
    """Every listed per-seed statistic above a threshold (one-sided t per statistic, the largest p)."""
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


def _zero_vs_positive(rule: dict[str, Any], got: dict[str, Measured]) -> KeyTest:
    """A property of the update rule, checked on every run (no sampling test)."""
    z, pos, tol = _need(rule, got, "zero"), _need(rule, got, "positive"), float(rule.get("tolerance", 0.0))
    bound = f"at most {100 * tol:g}%" if tol else "0"
    if all(v <= tol for v in z.seeds.values()) and all(v > tol for v in pos.seeds.values()):
        return KeyTest(None, "supported", "supported",
                       f"{z.label} is {bound} on every run, {pos.label} above it on every run")  # fmt: skip
    return KeyTest(None, "contradicted", "contradicted",
                   f"{z.label} is not {bound} on every run, or {pos.label} is on some run")  # fmt: skip


def _identical_unless_clipped(rule: dict[str, Any], got: dict[str, Measured]) -> KeyTest:
    """Deterministic arithmetic on one machine: per-prompt identity of the listed comparisons."""
    same = [got[i] for i in rule["identical"]]
    differ = [got[i] for i in rule.get("differ", [])]
    ok = all(m.extra.get("identical") for m in same) and not any(m.extra.get("identical") for m in differ)
    why = (f"identical per prompt on every shared seed: {', '.join(m.label for m in same if m.extra.get('identical')) or 'none'}; "
           f"differing: {', '.join(m.label for m in differ if not m.extra.get('identical')) or 'none'}")  # fmt: skip
    v = "supported" if ok else "contradicted"
    return KeyTest(None, v, v, why)


def _peak(rule: dict[str, Any], got: dict[str, Measured]) -> KeyTest:
    """The named value above every other, seed-paired (one-sided t, the largest p)."""
    values = [got[i] for i in rule["values"]]
    best = _need(rule, got, "best")
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


# Each verdict rule's key test (docs/statistics.md "Claims and verdicts"); claims_spec.RULES names the same.
KEY_TESTS: dict[str, Callable[[dict[str, Any], dict[str, Measured]], KeyTest]] = {
    "not_testable": _not_testable, "greater": _greater, "interaction": _greater, "non_inferior": _non_inferior,
    "equivalent": _equivalent, "greater_all": _greater_all, "equivalent_all": _equivalent_all, "stable": _stable, "exceeds": _exceeds, "zero_vs_positive": _zero_vs_positive,
    "identical_unless_clipped": _identical_unless_clipped, "peak": _peak,
}  # fmt: skip


def key_test(rule: dict[str, Any], got: dict[str, Measured]) -> KeyTest:
    """The key test of a claim by its rule (the verdict follows once p is Holm-adjusted: ``decide``)."""
    if rule["rule"] not in KEY_TESTS:
        raise ClaimsError(f"unknown verdict rule {rule['rule']!r}; allowed: {', '.join(RULES)}")
    return KEY_TESTS[rule["rule"]](rule, got)


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
    a claim's margin sensitivity reruns the correction with the alternative p in its place, and so does its
    selection sensitivity (``selection_sensitivity``): a verdict that differs at another member of a tuned
    arm's selection set is ``SELECTION_SENSITIVE``."""
    rec.tuning = dict(tuning or {})
    out = []
    for c in claims:
        got = _measure(rec, c)
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
            alt = holm_in_place(ps, i, p_alt)
            r["sensitivity"][label] = (p_alt, alt, decide(t, alt))
        r["power"] = power_text(t, family)
        r["selection"] = selection_sensitivity(rec, r, ps, i)
        if any(v != r["verdict_text"] for *_, v in r["selection"]):
            r["verdict_text"] = SELECTION_SENSITIVE
            r["verdict_why"] += "; the verdict differs at another member of a selection set"
    return out


def holm_in_place(ps: list[float | None], i: int, p: float | None) -> float | None:
    """Claim ``i``'s Holm-adjusted p with ``p`` in place of its own, the family's other p as they are (None
    for a deterministic check)."""
    return None if p is None else holm([p if j == i else q for j, q in enumerate(ps)])[i]


def _measure(rec: Records, claim: dict[str, Any]) -> dict[str, Measured]:
    return {m["id"]: MEASURES[m["kind"]](rec, m) for m in claim.get("measure") or []}


def _rule_ids(rule: dict[str, Any]) -> set[str]:
    """The measurement ids a verdict rule reads (its ``diff``, ``diffs``, ``gain``, ... values)."""
    ids: set[str] = set()
    for k, v in rule.items():
        if k == "rule":
            continue
        if isinstance(v, str):
            ids.add(v)
        elif isinstance(v, list):
            ids |= {x for x in v if isinstance(x, str)}
    return ids


def selection_sensitivity(
    rec: Records, result: dict[str, Any], ps: list[float | None], i: int
) -> list[tuple[str, str, float | None, float | None, str]]:
    """The claim's key test at every other combination of its tuned arms' selection sets (issue 55).

    For each tuned run group that the verdict rule reads (``tuned: <id>`` whose tuning section sets a
    ``tolerance``), the set is ``Selection.near(tolerance)``: the pick, each leave-one-seed-out pick and every
    value within the tolerance of the best. Every combination other than the picks is read as if chosen
    (``Records.forced``); its p is Holm-adjusted in place of the claim's own (``ps[i]``). Returns (where,
    key number, raw p, Holm-adjusted p, verdict) per combination; empty when nothing is tuned."""
    ids = _rule_ids(result["verdict"])
    refs: dict[tuple[str, str, str], dict[str, Any]] = {}
    for m in result.get("measure") or []:
        if m["id"] not in ids:
            continue
        for side in ("a", "b"):
            g = m.get(side)
            if (
                isinstance(g, dict)
                and g.get("tuned")
                and rec.tuning.get(g["tuned"], {}).get("tolerance") is not None
            ):
                refs.setdefault(tuned_ref(g), g)
    if not refs:
        return []
    sets = {}
    for ref, g in refs.items():
        sel = rec.selection(g["method"], g["tuned"], dict(g.get("point") or {}))
        sets[ref] = (sel, sel.near(float(rec.tuning[g["tuned"]]["tolerance"])))
    out = []
    keys = list(sets)
    for combo in itertools.product(*(sets[k][1] for k in keys)):
        if all(v == sets[k][0].chosen for k, v in zip(keys, combo, strict=True)):
            continue
        rec.forced = dict(zip(keys, combo, strict=True))
        try:
            got = _measure(rec, result)
            t = key_test(result["verdict"], got)
        finally:
            rec.forced = {}
        p_adj = holm_in_place(ps, i, t.p)
        where = ", ".join(f"{k[0]}{_point_words(refs[k])} {sets[k][0].key.split('.', 1)[-1]} {v}"
                          for k, v in zip(keys, combo, strict=True))  # fmt: skip
        key = got.get(result.get("key") or "")
        out.append((where, key.short if key else "-", t.p, p_adj, decide(t, p_adj)))
    return out


def _point_words(g: dict[str, Any]) -> str:
    return "".join(f" ({k.split('.', 1)[-1]}={v})" for k, v in sorted((g.get("point") or {}).items()))


def power_text(t: KeyTest, family: int) -> tuple[str, str] | None:
    """(short, sentence): what the design as run can detect, at 80% power and the family's strictest level
    (ALPHA / family, Holm's first step). For a seed-paired t test the minimum detectable effect from the per-seed
    spread; for TOST its power at a true difference of 0 and the seeds that would give 80%. None where the key
    test is no t test over seeds (a deterministic check, a bootstrap over runs, several statistics at once)."""
    import statistics

    from pspo_repro.analysis import power

    if t.p is None or not t.values:
        return None
    n = len(t.values)
    level = f"alpha {ALPHA:g} / {max(family, 1)}"
    if n < 2:
        return "-", f"minimum detectable effect: none with {seeds_text(n)} (a t test needs two)"
    alpha = ALPHA / max(family, 1)
    sd = statistics.stdev(t.values)
    if t.test.startswith("TOST"):
        got = power.tost_power(t.margin, sd, n, alpha=alpha)
        need = power.tost_seeds(t.margin, sd, alpha=alpha)
        return (f"TOST {got:.0%}", f"TOST power at a true difference of 0: {got:.0%} over {seeds_text(n)} at "
                f"{level} (per-seed sd {100 * sd:.1f} points); 80% needs {need} seeds")  # fmt: skip
    m = 100 * power.mde(sd, n, alpha=alpha)
    return (f"{m:.1f}", f"minimum detectable effect (80% power, two-sided paired t at {level}, {seeds_text(n)}, "
            f"per-seed sd {100 * sd:.1f} points): {m:.1f} points")  # fmt: skip


def p_text(x: float | None) -> str:
    """A p-value with two significant digits (``-`` for none: a deterministic check)."""
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.2g}"
