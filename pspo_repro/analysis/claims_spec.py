"""The claims spec (``conf/claims/study.yaml``) read as data and checked whole before any record is read.

The spec is a settings file like any config: a broken YAML is named by file and line; a wrong type, a missing
or unknown key, a measurement id used twice, a rule naming a measurement its claim does not have, text where a
temperature or a threshold belongs, are each one line naming the file, the line, the claim and the field
(``conf/claims/study.yaml:42: claim 'x', measure 'd': a.temperature must be a number >= 0, got 'hot'``), raised
before the records are read, so a typo costs no minutes of work and never ends in a traceback after it.

Interpolations are not resolved (``${oc.env:HF_TOKEN}`` stays text) and every credential value pasted into
the spec is replaced (``redact``), so no quote, label or caption drawn from it can carry one.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import yaml
from omegaconf import OmegaConf

from pspo_repro.common.names import did_you_mean
from pspo_repro.common.redact import redact

KINDS = ("accuracy", "compare", "run_stat", "val_reward", "interaction", "collapse", "frontier", "part_step")
RULES = ("greater", "interaction", "non_inferior", "equivalent", "greater_all", "equivalent_all", "stable", "exceeds", "zero_vs_positive",
         "identical_unless_clipped", "peak", "not_testable")  # fmt: skip
TESTS = (
    "t",
    "wilcoxon",
    "sign",
    "bootstrap",
)  # greater / interaction: the test over seeds (bootstrap: frontier)

CLAIM_TEXT = ("id", "claim", "quote", "section", "test", "test_short")  # required, each a non-empty text
CLAIM_OPTIONAL = ("rule_text", "reading", "key", "measure")
GROUP_KEYS = ("method", "tag", "dataset", "temperature", "model", "tuned", "point")
TUNING_KEYS = ("from_tag", "to_tag", "key", "values", "seeds", "tolerance")
# Each kind's keys besides id and kind (run groups a / b are checked as groups).
KIND_KEYS = {
    "accuracy": ("a", "metric", "label"),
    "compare": ("a", "b", "metric", "label"),
    "interaction": ("a", "b", "temperatures", "metric", "label"),
    "collapse": ("a", "label"),
    "run_stat": ("a", "stat", "steps", "agg", "percent", "label"),
    "val_reward": ("a", "step", "label"),
    "frontier": ("a", "b", "heldout", "fit", "resample", "label"),
    "part_step": ("a", "b", "label"),
}
# Each rule's keys: (required measurement ids, required lists of ids, optional keys).
RULE_KEYS: dict[str, tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...]]] = {
    "greater": (("diff",), (), ("test",)),
    "interaction": (("diff",), (), ("test",)),
    "non_inferior": (("diff",), (), ("margin",)),
    "equivalent": (("diff",), (), ("margin",)),
    "greater_all": ((), ("diffs",), ()),  # every difference above 0: the largest p decides
    "equivalent_all": ((), ("diffs",), ("margin",)),  # TOST on every difference: the largest p decides
    "stable": (("gain", "collapse"), (), ()),
    "exceeds": ((), ("stats",), ("threshold",)),
    "zero_vs_positive": (("zero", "positive"), (), ("tolerance",)),
    "identical_unless_clipped": ((), ("identical",), ("differ",)),
    "peak": (("best",), ("values",), ()),
    "not_testable": ((), (), ("why",)),
}


class ClaimsError(ValueError):
    """A spec that names an unknown measurement, rule or run group, or a group with no records."""


def _yaml_error(path: Path, exc: Exception) -> ClaimsError:
    """One line naming the file and the line of a YAML error (PyYAML's own report spans four lines)."""
    if isinstance(exc, yaml.MarkedYAMLError):
        mark = exc.problem_mark or exc.context_mark
        line = f":{mark.line + 1}" if mark is not None else ""
        what = "; ".join(x for x in (exc.problem, exc.context) if x)
        return ClaimsError(f"{path}{line}: not a readable YAML spec ({what})")
    return ClaimsError(f"{path}: not a readable YAML spec ({' '.join(str(exc).split())})")


def _lines(text: str) -> dict[tuple[Any, ...], int]:
    """The line (1-based) of every key and item of the YAML ``text``, by its path of keys and indexes."""
    out: dict[tuple[Any, ...], int] = {}

    def walk(node: yaml.Node, at: tuple[Any, ...]) -> None:
        out.setdefault(at, node.start_mark.line + 1)
        if isinstance(node, yaml.MappingNode):
            for key, value in node.value:
                out[(*at, key.value)] = key.start_mark.line + 1
                walk(value, (*at, key.value))
        elif isinstance(node, yaml.SequenceNode):
            for i, value in enumerate(node.value):
                walk(value, (*at, i))

    root = yaml.compose(text, Loader=yaml.SafeLoader)
    if root is not None:
        walk(root, ())
    return out


def read_spec(path: Path) -> dict[str, Any]:
    """The spec of ``path`` as data (interpolations kept as text, credential values redacted), checked whole
    (``check``); ClaimsError in one line naming the file, the line, the claim and the field otherwise."""
    try:
        text = path.read_text(encoding="utf-8")
        spec = OmegaConf.to_container(OmegaConf.load(path), resolve=False)
        lines = _lines(text)
    except Exception as exc:  # YAML errors carry their line; a file that is not UTF-8 its position
        raise _yaml_error(path, exc) from None
    spec = redact(spec)
    _Checker(path, lines).spec(spec)
    return spec


def _is_number(x: Any) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x)


def _is_text(x: Any) -> bool:
    return isinstance(x, str) and x.strip() != ""


class _Checker:
    """Checks one spec, naming the file and line, the claim and the field of the first problem."""

    def __init__(self, path: Path, lines: dict[tuple[Any, ...], int]) -> None:
        self.path, self.lines = path, lines
        self.where: tuple[Any, ...] = ()  # the YAML path of the claim or measurement being checked
        self.who = ""  # "claim 'x', measure 'd': "
        self.tuning: set[str] = set()

    def fail(self, at: tuple[Any, ...], message: str) -> None:
        """Raise ClaimsError at the YAML path ``at`` (its line, or its nearest parent's)."""
        full = (*self.where, *at)
        while full and full not in self.lines:
            full = full[:-1]
        line = f":{self.lines[full]}" if full in self.lines else ""
        raise ClaimsError(f"{self.path}{line}: {self.who}{message}")

    def keys(self, obj: dict[str, Any], allowed: tuple[str, ...], at: tuple[Any, ...], what: str) -> None:
        for key in obj:
            if key not in allowed:
                self.fail(
                    (*at, key),
                    f"{_dot(at, key)}: not a key of {what}; {did_you_mean(key, allowed)}keys: {', '.join(allowed)}",
                )

    def text(self, obj: dict[str, Any], key: str, at: tuple[Any, ...] = (), required: bool = True) -> None:
        if key not in obj:
            if required:
                self.fail(at, f"{_dot(at, key)} is missing (a text)")
            return
        if not _is_text(obj[key]):
            self.fail((*at, key), f"{_dot(at, key)} must be a non-empty text, got {obj[key]!r}")

    def number(self, obj: dict[str, Any], key: str, at: tuple[Any, ...] = (), low: float | None = None,
               integer: bool = False) -> None:  # fmt: skip
        x = obj[key]
        ok = _is_number(x) and (not integer or float(x).is_integer()) and (low is None or x >= low)
        if not ok:
            what = "an integer" if integer else "a number"
            bound = f" >= {low:g}" if low is not None else ""
            self.fail((*at, key), f"{_dot(at, key)} must be {what}{bound}, got {x!r}")

    def mapping(self, obj: Any, at: tuple[Any, ...], what: str) -> dict[str, Any]:
        """``obj`` if it is a mapping, else fail: ``what`` (its name and contents) must be a mapping."""
        if not isinstance(obj, dict):
            self.fail(at, f"{what} must be a mapping, got {obj!r}")
        return obj

    # ------------------------------------------------------------ the parts

    def spec(self, spec: Any) -> None:
        self.mapping(spec, (), "the spec (a `claims` list, an optional `tuning` section and `model` line)")
        self.keys(spec, ("claims", "tuning", "model"), (), "the spec")
        self.text(spec, "model", (), required=False)
        self.tuning_section(spec.get("tuning"))
        claims = spec.get("claims")
        if not isinstance(claims, list) or not claims:
            self.fail(("claims",), f"expected a non-empty `claims` list, got {claims!r}")
        seen: set[str] = set()
        for i, claim in enumerate(claims):
            self.where, self.who = ("claims", i), ""
            self.mapping(
                claim, (), f"claim #{i + 1} (id, claim, quote, section, test, test_short, measure, verdict)"
            )
            self.text(claim, "id")
            if claim["id"] in seen:
                self.fail(("id",), f"claim id {claim['id']!r} used twice (the table and the CSV key by it)")
            seen.add(claim["id"])
            self.who = f"claim {claim['id']!r}: "
            self.claim(claim)
        self.where, self.who = (), ""

    def tuning_section(self, tuning: Any) -> None:
        if tuning is None:
            return
        self.mapping(tuning, ("tuning",), "tuning (selections {id: {from_tag, to_tag, key, values, seeds}})")
        for tid, t in tuning.items():
            at = ("tuning", tid)
            self.mapping(t, at, f"tuning {tid!r} (from_tag, to_tag, key, values, seeds)")
            self.keys(t, (*TUNING_KEYS, "model"), at, f"tuning {tid!r}")
            for key in ("from_tag", "to_tag", "key"):
                self.text(t, key, at)
            self.text(t, "model", at, required=False)
            for key in ("values", "seeds"):
                if not isinstance(t.get(key), list) or not t[key]:
                    self.fail((*at, key), f"{_dot(at, key)} must be a non-empty list, got {t.get(key)!r}")
            for j, v in enumerate(t["values"]):
                if not (_is_number(v) or _is_text(v)):
                    self.fail(
                        (*at, "values", j), f"{_dot(at, 'values')}[{j}] must be a number or a text, got {v!r}"
                    )
            for j, s in enumerate(t["seeds"]):
                if not (_is_number(s) and float(s).is_integer() and s >= 0):
                    self.fail(
                        (*at, "seeds", j), f"{_dot(at, 'seeds')}[{j}] must be an integer >= 0, got {s!r}"
                    )
            if t.get("tolerance") is not None:
                self.number(t, "tolerance", at, low=0)
            self.tuning.add(str(tid))

    def claim(self, c: dict[str, Any]) -> None:
        self.keys(c, (*CLAIM_TEXT, *CLAIM_OPTIONAL, "verdict"), (), "a claim")
        for key in CLAIM_TEXT:
            self.text(c, key)
        for key in ("rule_text", "reading", "key"):
            self.text(c, key, required=False)
        measures = c.get("measure")
        if measures is None:
            measures = []
        if not isinstance(measures, list):
            self.fail(("measure",), f"measure must be a list of measurements, got {measures!r}")
        kinds: dict[str, str] = {}
        for j, m in enumerate(measures):
            self.mapping(m, ("measure", j), f"measure #{j + 1} (id, kind, run groups)")
            self.text(m, "id", ("measure", j))
            if m["id"] in kinds:
                self.fail(("measure", j, "id"), f"measurement id(s) {[m['id']]} used twice")
            kinds[m["id"]] = str(m.get("kind"))
        for j, m in enumerate(measures):
            self.measure(m, ("measure", j))
        if "key" in c and c["key"] not in kinds:
            self.fail(("key",), f"key {c['key']!r} names no measurement of this claim; measurements: "
                                f"{', '.join(kinds) or 'none'}")  # fmt: skip
        if "verdict" not in c:
            self.fail((), "verdict is missing (a mapping with a rule)")
        self.verdict(self.mapping(c["verdict"], ("verdict",), "verdict (a rule and its measurements)"), kinds)

    def measure(self, m: dict[str, Any], at: tuple[Any, ...]) -> None:
        who = self.who
        self.who = f"{who}measure {m['id']!r}: "
        kind = m.get("kind")
        if kind not in KINDS:
            self.fail(
                (*at, "kind"),
                f"measurement kind {kind!r}; {did_you_mean(kind, KINDS)}allowed: {', '.join(KINDS)}",
            )
        self.keys(m, ("id", "kind", *KIND_KEYS[kind]), at, f"a {kind} measurement")
        for key in ("label", "metric", "stat", "heldout"):
            self.text(m, key, at, required=key == "stat" and kind == "run_stat")
        sides = ("a", "b") if "b" in KIND_KEYS[kind] else ("a",)
        for side in sides:
            if side not in m:
                self.fail(at, f"{side} is missing (a run group: {{method, tag, dataset, temperature, ...}})")
            if kind == "frontier":
                self.frontier_side(m[side], (*at, side))
            else:
                self.group(m[side], (*at, side))
        if kind == "interaction":
            temps = m.get("temperatures")
            if not (isinstance(temps, list) and len(temps) == 2 and all(_is_number(t) and t >= 0 for t in temps)
                    and temps[0] < temps[1]):  # fmt: skip
                self.fail((*at, "temperatures"), "temperatures must be two numbers >= 0, the lower first, "
                                                 f"got {temps!r}")  # fmt: skip
        if kind == "run_stat":
            for key, allowed in (("steps", ("all", "reuse")), ("agg", ("mean", "min"))):
                if key in m and m[key] not in allowed:
                    self.fail((*at, key), f"{key} must be one of {', '.join(allowed)}, got {m[key]!r}")
            if "percent" in m and not isinstance(m["percent"], bool):
                self.fail((*at, "percent"), f"percent must be true or false, got {m['percent']!r}")
        if kind == "frontier":
            for key, allowed in (("fit", ("linear", "isotonic")), ("resample", ("runs", "seeds"))):
                if key in m and m[key] not in allowed:
                    self.fail((*at, key), f"{key} must be one of {', '.join(allowed)}, got {m[key]!r}")
        if kind == "val_reward" and m.get("step") is not None:
            self.number(m, "step", at, low=1, integer=True)
        self.who = who

    def group(self, g: Any, at: tuple[Any, ...], method: bool = True) -> None:
        """A run group: method, tag, dataset, temperature, model, or tuned (with point)."""
        self.mapping(g, at, f"{_dot(at[:-1], at[-1])} (a run group: method, tag, dataset, temperature, ...)")
        self.keys(g, GROUP_KEYS, at, "a run group")
        self.text(g, "method", at, required=method)
        for key in ("dataset", "model"):
            self.text(g, key, at, required=False)
        if g.get("tag") is not None and not isinstance(g["tag"], str):
            self.fail(
                (*at, "tag"), f"{_dot(at, 'tag')} must be a text (a run folder's tag), got {g['tag']!r}"
            )
        if "temperature" in g:
            self.number(g, "temperature", at, low=0)
        if "tuned" in g:
            if g["tuned"] not in self.tuning:
                self.fail((*at, "tuned"), f"{_dot(at, 'tuned')}: {g['tuned']!r} is not in the spec's tuning "
                                          f"section ({', '.join(sorted(self.tuning)) or 'none'})")  # fmt: skip
            if g.get("tag"):
                self.fail((*at, "tag"), f"{_dot(at, 'tag')}: a tuned group's tag is the selection's; give "
                                        "tuned or tag, not both")  # fmt: skip
        if "point" in g:
            if "tuned" not in g:
                self.fail((*at, "point"), f"{_dot(at, 'point')}: only a tuned group has a sweep point")
            point = self.mapping(
                g["point"], (*at, "point"), f"{_dot(at, 'point')} (the sweep point's other keys)"
            )
            for key, v in point.items():
                if not (_is_number(v) or _is_text(v)):
                    self.fail(
                        (*at, "point", key),
                        f"{_dot(at, 'point')}.{key} must be a number or a text, got {v!r}",
                    )

    def frontier_side(self, side: Any, at: tuple[Any, ...]) -> None:
        self.mapping(side, at, f"{_dot(at[:-1], at[-1])} (a method and its groups)")
        self.keys(side, ("method", "groups"), at, "a frontier side")
        self.text(side, "method", at)
        groups = side.get("groups")
        if not isinstance(groups, list) or not groups:
            self.fail(
                (*at, "groups"),
                f"{_dot(at, 'groups')} must be a non-empty list of run groups, got {groups!r}",
            )
        for k, g in enumerate(groups):
            self.group(g, (*at, "groups", k), method=False)

    def verdict(self, v: dict[str, Any], kinds: dict[str, str]) -> None:
        at = ("verdict",)
        rule = v.get("rule")
        if rule not in RULES:
            self.fail((*at, "rule"), f"rule {rule!r}; {did_you_mean(rule, RULES)}allowed: {', '.join(RULES)}")
        ids, lists, optional = RULE_KEYS[rule]
        if (
            "margin_from" in v
        ):  # retired (issue 55): a margin from the study's own intervals never gains power
            self.fail((*at, "margin_from"), "verdict.margin_from: margins are absolute and fixed before the runs "
                                            "(verdict.margin, e.g. 0.03 for 3 points), not derived from the "
                                            "study's own intervals")  # fmt: skip
        self.keys(v, ("rule", *ids, *lists, *optional), at, f"the {rule} rule")

        def known(key: str, mid: Any, where: tuple[Any, ...]) -> None:
            if mid not in kinds:
                self.fail(where, f"verdict.{key}: {mid!r} names no measurement of this claim; measurements: "
                                 f"{', '.join(kinds) or 'none'}")  # fmt: skip

        for key in ids:
            if key not in v:
                self.fail(at, f"verdict.{key} is missing (the {rule} rule reads a measurement id there)")
            known(key, v[key], (*at, key))
        for key in (*lists, *(k for k in ("differ",) if k in optional)):
            if key not in v and key not in lists:
                continue
            if not isinstance(v.get(key), list) or (key in lists and not v[key]):
                self.fail((*at, key), f"verdict.{key} must be a list of measurement ids, got {v.get(key)!r}")
            for j, mid in enumerate(v[key]):
                known(key, mid, (*at, key, j))
        if rule == "peak" and v["best"] not in v["values"]:
            self.fail((*at, "best"), f"verdict.best {v['best']!r} is not one of verdict.values {v['values']}")
        for key, low in (("margin", 0), ("threshold", None), ("tolerance", 0)):
            if key in v:
                self.number(v, key, at, low=low)
        if rule in ("non_inferior", "equivalent") and "margin" not in v:
            self.fail(at, f"the {rule} rule needs verdict.margin: an absolute margin fixed before the runs, in "
                          "accuracy units (0.03 = 3 points), never derived from the study's own intervals")  # fmt: skip
        if "test" in v:
            if v["test"] not in TESTS:
                self.fail((*at, "test"), f"verdict.test must be one of {', '.join(TESTS)}, got {v['test']!r}")
        if "diff" in ids and rule in ("greater", "interaction"):
            frontier = kinds[v["diff"]] == "frontier"
            if frontier != (v.get("test") == "bootstrap"):
                self.fail((*at, "test"), "verdict.test: bootstrap is the test of a frontier measurement (its p "
                                         f"is over runs), and only of one; {v['diff']!r} is a {kinds[v['diff']]}")  # fmt: skip
        if "why" in v:
            self.text(v, "why", at)


def _dot(at: tuple[Any, ...], key: str) -> str:
    """``a.temperature``, ``a.groups[1].tag``, ``tuning.lr.seeds``: a field's name inside its measurement (the
    claim and the measurement are named before it) or the spec."""
    if at[:1] == ("measure",):
        at = at[2:]
    out = ""
    for x in (*at, key):
        out += f"[{x}]" if isinstance(x, int) else f".{x}" if out else str(x)
    return out


def load_spec(path: Path) -> list[dict[str, Any]]:
    """The claims of ``path`` (YAML with a ``claims`` list), the whole spec checked first (``read_spec``).
    Interpolations are not resolved: a quote is text, never an environment variable's value."""
    return read_spec(path)["claims"]


def load_tuning(path: Path) -> dict[str, dict[str, Any]]:
    """The spec's ``tuning`` section: ``{id: {from_tag, to_tag, key, values, seeds[, model]}}`` (empty if none)."""
    return read_spec(path).get("tuning") or {}
