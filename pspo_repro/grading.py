"""Answer extraction and equivalence, shared by training rewards and evaluation.

No torch/TRL imports. Model completions are untrusted text: nothing here evaluates them as code
(no eval/sympify/parse_expr). Numbers are compared exactly as fractions; LaTeX answers go through
math-verify's LaTeX parser only (its ``ExprExtractionConfig`` calls sympy's ``parse_expr``, i.e. eval,
so it is never used).

Two notions of correctness (paper-notes section 2):
- reward-style: the *final* answer (after the last ``####``, else the last ``\\boxed{}``, else the last
  number) is equivalent to the gold;
- true accuracy: the gold appears *anywhere* in the response (any number, ``\\boxed{}`` or ``$...$`` span).
"""

from __future__ import annotations

import functools
import logging
import math
import re
import threading
from fractions import Fraction

from pspo_repro.data import last_boxed

# Per-item bound on a math-verify parse+verify (seconds). Typical cost is ~0.3 ms; rare symbolic
# comparisons take ~100 ms; pathological inputs can take far longer, hence a bound.
MATH_VERIFY_TIMEOUT_S = 5.0
# Upper bound on candidate spans tried by true_correct for LaTeX golds, so a long response cannot
# cost thousands of math-verify calls.
MAX_LATEX_CANDIDATES = 64

# A number as written in prose: optional sign (only when it is not a subtraction "16-3"), digits with
# valid thousands grouping or plain digits, optional decimals, optional /denominator, optional %.
_NUM = r"(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:/\d+)?%?"
_NUMBER_RE = re.compile(r"(?:(?<![\w)\].])-)?(?<![\w.,])" + _NUM)
# The authors' regex for the fallback "last number" (paper-notes section 2), used by their reward only.
_AUTHORS_NUMBER_RE = re.compile(r"[-+]?(\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:/\d+)?%?")
_AUTHORS_FORMAT_RE = re.compile(r"####\s*\d+[^\n]+")
_DOLLAR_SPAN_RE = re.compile(r"\$\$(.+?)\$\$|\$(.+?)\$|\\\((.+?)\\\)|\\\[(.+?)\\\]", re.S)
_BOXED_START_RE = re.compile(r"\\(?:boxed|fbox)\s*\{")


# ---------------------------------------------------------------- extraction


def _after_last_hashes(text: str) -> str | None:
    """The rest of the line after the last ``####`` (None when there is no ``####``)."""
    if "####" not in text:
        return None
    tail = text.rsplit("####", 1)[1].strip()
    return tail.split("\n", 1)[0].strip()


def all_boxed(text: str) -> list[str]:
    """Contents of every ``\\boxed{...}`` in order, with brace matching."""
    out = []
    for m in _BOXED_START_RE.finditer(text):
        depth, i = 1, m.end()
        while i < len(text) and depth:
            depth += {"{": 1, "}": -1}.get(text[i], 0)
            i += 1
        if depth == 0:
            out.append(text[m.end() : i - 1].strip())
    return out


def find_numbers(text: str) -> list[str]:
    """Every number written in ``text``, in order (``1,000``, ``-3``, ``2.5``, ``3/4``, ``20%``)."""
    return [m.group(0) for m in _NUMBER_RE.finditer(text)]


def extract_final_answer(text: str) -> str | None:
    """The response's final answer: after the last ``####``, else the last ``\\boxed{}``, else the last number."""
    tail = _after_last_hashes(text)
    if tail:
        return tail
    boxed = last_boxed(text)
    if boxed:
        return boxed
    numbers = find_numbers(text)
    return numbers[-1] if numbers else None


# ---------------------------------------------------------------- numbers

_LATEX_NOISE = re.compile(r"\\[,;!: ]|\\(?:text|mathrm|textbf|mbox)\{[^{}]*\}|\\\$|\$|\\left|\\right|\s")
_FRAC_RE = re.compile(r"^(-?)\\[dt]?frac\{(-?\d+)\}\{(-?\d+)\}$|^(-?)\\[dt]?frac(\d)(\d)$")
_PLAIN_RE = re.compile(r"^([-+]?)(" + _NUM + r")\.?$")


def parse_number(s: str) -> Fraction | None:
    """An exact value for a string that *is* a number (``"1,000"``, ``"$18.00"``, ``"3/4"``, ``"\\frac{1}{2}"``).

    Returns None for anything else (expressions, words). A percent sign is dropped: "20%" is 20,
    never 0.2 (golds are written in the unit the question asks for, so accepting N/100 would give
    false positives). Units after the number ("18 dollars") are ignored only in the ``####`` tail;
    here the whole string must be the number.
    """
    t = _LATEX_NOISE.sub("", s)
    t = t.replace("{,}", ",").rstrip(".")
    if t.startswith("\\%") or not t or sum(c.isdigit() for c in t) > MAX_DIGITS:
        return None
    t = t.replace("\\%", "%")
    m = _PLAIN_RE.match(t)
    if m:
        body = m.group(2).rstrip("%").replace(",", "")
        try:
            value = Fraction(body)  # handles "3/4" and "2.50" exactly
        except (ValueError, ZeroDivisionError):
            return None
        return -value if m.group(1) == "-" else value
    m = _FRAC_RE.match(t)
    if m:
        sign, num, den = (
            (m.group(1), m.group(2), m.group(3)) if m.group(2) else (m.group(4), m.group(5), m.group(6))
        )
        if int(den) == 0:
            return None
        value = Fraction(int(num), int(den))
        return -value if sign == "-" else value
    return None


# A number with more digits is no answer to these benchmarks; parsing it is unbounded work on untrusted
# text (int() refuses > 4300 digits, float() overflows past ~308): such strings are "no number".
MAX_DIGITS = 100


def _leading_number(s: str) -> Fraction | None:
    """The number a ``####`` tail starts with, tolerating units and currency: "$1,200 dollars" -> 1200."""
    value = parse_number(s)
    if value is not None:
        return value
    t = _LATEX_NOISE.sub(" ", s).strip()
    m = _NUMBER_RE.search(t)
    if m is None or m.start() > 2:  # the number must lead ("x = 5" is not a bare numeric answer)
        return None
    return parse_number(m.group(0))


def numbers_equal(a: Fraction, b: Fraction) -> bool:
    """Exact equality, with a 1e-12 relative slack only for golds stored as binary floats (3244047.0999999996)."""
    if a == b:
        return True
    return abs(a - b) <= Fraction(1, 10**12) * max(abs(a), abs(b))


# ---------------------------------------------------------------- LaTeX via math-verify


class _DropTimeoutDisabledWarning(logging.Filter):
    """math-verify warns on every call made with timeouts off; off the main thread that is by design."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "Timeout is disabled" not in record.getMessage()


for _name in ("math_verify.parser", "math_verify.grader"):
    logging.getLogger(_name).addFilter(_DropTimeoutDisabledWarning())

_SPACE_RE = re.compile(r"\s+|\\[,;!: ]|\\left|\\right")


def _normalise_text(s: str) -> str:
    s = re.sub(r"\\text\{([^{}]*)\}", r"\1", s)
    s = _SPACE_RE.sub("", s).replace("\\dfrac", "\\frac").replace("\\tfrac", "\\frac").replace("$", "")
    return s.rstrip(".").lower()


def _mv_verify(pred: str, gold: str, timeouts: bool) -> bool:
    """math-verify on two LaTeX strings (boxed so only their content is parsed); LaTeX parser only."""
    from math_verify import LatexExtractionConfig, parse, verify

    cfg = [LatexExtractionConfig(boxed_match_priority=0)]
    t = int(math.ceil(MATH_VERIFY_TIMEOUT_S)) if timeouts else None
    g = parse(f"\\boxed{{{gold}}}", extraction_config=cfg, parsing_timeout=t)
    p = parse(f"\\boxed{{{pred}}}", extraction_config=cfg, parsing_timeout=t)
    if not g or not p:
        return False
    return bool(verify(g, p, timeout_seconds=t))


def _bounded(fn, *args) -> bool:
    """Run ``fn`` under a time bound that works on any thread.

    On the main thread math-verify's own ``signal.alarm`` timeouts bound it. Elsewhere (TRL may call
    rewards off the main thread) signals cannot be used, so the call runs with timeouts off in a daemon
    thread and we stop waiting after the bound (a timed-out comparison counts as not equivalent; the
    thread finishes in the background).
    """
    if threading.current_thread() is threading.main_thread():
        try:
            return fn(*args, True)
        except Exception:  # a timeout or parser failure means "not shown equivalent"
            return False
    result: list[bool] = []

    def target() -> None:
        try:
            result.append(fn(*args, False))
        except Exception:
            result.append(False)

    worker = threading.Thread(target=target, daemon=True, name="math-verify")
    worker.start()
    worker.join(MATH_VERIFY_TIMEOUT_S)
    return bool(result and result[0])


@functools.lru_cache(maxsize=65536)
def _latex_equivalent(pred: str, gold: str) -> bool:
    if _normalise_text(pred) == _normalise_text(gold):
        return True
    return _bounded(_mv_verify, pred, gold)


def answers_equivalent(pred: str | None, gold: str, kind: str) -> bool:
    """Whether a predicted answer string equals the gold: exact numbers for ``numeric``, math-verify for ``latex``."""
    if pred is None or not pred.strip():
        return False
    if kind == "numeric":
        g = parse_number(gold)
        if g is None:
            raise ValueError(f"numeric gold answer is not a number: {gold!r}")
        p = _leading_number(pred)
        return p is not None and numbers_equal(p, g)
    if kind == "latex":
        g = parse_number(gold)
        p = parse_number(pred)
        if g is not None and p is not None:  # both plain numbers: exact, no parser needed
            return numbers_equal(p, g)
        return _latex_equivalent(pred.strip(), gold.strip())
    raise ValueError(f"unknown answer kind {kind!r}; allowed: latex, numeric")


# ---------------------------------------------------------------- the two accuracies


def reward_correct(response: str, gold: str, kind: str) -> bool:
    """Reward-style correctness: the final answer (``extract_final_answer``) is equivalent to the gold."""
    return answers_equivalent(extract_final_answer(response), gold, kind)


def answer_candidates(response: str) -> list[str]:
    """Every span that could be the answer: the ``####`` tail, ``\\boxed{}`` and ``$...$`` spans, numbers."""
    spans: list[str] = []
    tail = _after_last_hashes(response)
    if tail:
        spans.append(tail)
    spans += all_boxed(response)
    for m in _DOLLAR_SPAN_RE.finditer(response):
        spans.append(next(g for g in m.groups() if g is not None).strip())
    spans += find_numbers(response)
    return list(dict.fromkeys(s for s in spans if s))  # de-duplicated, order kept


def true_correct(response: str, gold: str, kind: str) -> bool:
    """True accuracy: the gold appears anywhere in the response (any number, boxed or ``$`` span)."""
    candidates = answer_candidates(response)
    if kind == "numeric" or parse_number(gold) is not None:
        g = parse_number(gold)
        if g is not None:
            for c in candidates:
                p = parse_number(c) if kind == "latex" else _leading_number(c)
                if p is not None and numbers_equal(p, g):
                    return True
            if kind == "numeric":
                return False
    # LaTeX gold (or a numeric one written in LaTeX, e.g. "10\\sqrt{2}"): math-verify over the spans,
    # longest-structured first is not needed: any match counts. Capped to bound the cost.
    for c in [c for c in candidates if parse_number(c) is None][:MAX_LATEX_CANDIDATES]:
        if answers_equivalent(c, gold, "latex"):
            return True
    return False


def final_answer_key(response: str, kind: str) -> str | None:
    """A hashable normal form of the final answer, for majority voting (None when there is none)."""
    pred = extract_final_answer(response)
    if pred is None:
        return None
    value = _leading_number(pred) if kind == "numeric" else parse_number(pred)
    if value is not None:
        return str(value)
    return None if kind == "numeric" else _normalise_text(pred)


# ---------------------------------------------------------------- the authors' reward


_TOL = Fraction(1, 10**6)


def _authors_isclose(a: Fraction, b: Fraction) -> bool:
    """``math.isclose(a, b, rel_tol=1e-6, abs_tol=1e-6)`` in exact arithmetic (no float overflow)."""
    return abs(a - b) <= max(_TOL * max(abs(a), abs(b)), _TOL)


def gsm8k_numeric_reward(response: str, gold: str) -> float:
    """The authors' ``gsm8k_numeric_reward``: effective values {0, 0.05, 1}.

    Parse the answer after ``####`` (else the last number of the text, their regex); 1.0 if it is
    ``math.isclose`` (rel and abs 1e-6) to the gold, +0.05 if ``####\\s*\\d+[^\\n]+`` matches (their
    format bonus, quirks included: a single-digit answer alone on the line does not match), -0.2 when no
    number is found; clipped to [0, 1]. Their sympy fallback for non-numeric tails is not reproduced
    (it evaluates model text); such tails fall back to the last number.
    """
    value: Fraction | None = None
    tail = _after_last_hashes(response)
    if tail:
        value = _leading_number(tail)
    if value is None:
        matches = [m.group(0) for m in _AUTHORS_NUMBER_RE.finditer(response)]
        value = parse_number(matches[-1]) if matches else None
    score = 0.0
    gold_value = parse_number(gold)
    if value is None:
        score -= 0.2
    elif gold_value is not None and _authors_isclose(value, gold_value):
        score += 1.0
    if _AUTHORS_FORMAT_RE.search(response):
        score += 0.05
    return min(1.0, max(0.0, score))
