"""Answer extraction and equivalence, shared by training rewards and evaluation.

No torch/TRL imports. Model completions are untrusted text: nothing here evaluates them as code
(no eval/sympify/parse_expr). Numbers are compared exactly as fractions; LaTeX answers go through
math-verify's LaTeX parser only (its ``ExprExtractionConfig`` calls sympy's ``parse_expr``, i.e. eval,
so it is never used).

Two notions of correctness (paper-notes section 2):
- reward-style: the *final* answer (after the last ``####``, else the last ``\\boxed{}``, else the last
  number) is equivalent to the gold;
- true accuracy: the gold appears *anywhere* in the response (any number, ``\\boxed{}`` or ``$...$`` span).
  A response that is reward-correct is always true-correct (true accuracy >= reward accuracy per item).

Gold kinds: ``numeric`` (compared as numbers only, never through math-verify), ``latex`` (MATH: exact numbers
when both sides are numbers, else math-verify) and ``text`` (ASDiv's word and time answers such as "Yes",
"3:30 p.m.", "6th": a normalised string comparison) and ``list`` (a MATH gold of several answers, ``70,110``:
the response's answers split at commas, each matched as ``latex``, in any order, so ``110, 70`` is right and
``70110`` is not) and ``choice`` (the knowledge sets: a choice's letter, MMLU's ``B``, or BoolQ's ``yes``/``no``,
read from the start of the final-answer span, else of the response). The grading of one response has a total
time bound
(``GRADE_BUDGET_S``) however many spans it holds.
"""

from __future__ import annotations

import logging
import re
import signal
import threading
import time
from dataclasses import dataclass
from fractions import Fraction

from pspo_repro.common.names import did_you_mean
from pspo_repro.data.datasets import last_boxed
from pspo_repro.data.problems import list_items
from pspo_repro.scoring.numbers import (
    DIGIT_BEFORE_RE,
    FRAC_ANY_RE,
    argument_mask,
    find_numbers,
    gold_tolerance,
    in_expression,
    leading_number,
    numbers_equal,
    parse_number,
)

# Per-item bound on a math-verify parse+verify (seconds): a typical item is far below it, a rare symbolic
# comparison takes longer, and a pathological input can take unboundedly long, hence a bound.
MATH_VERIFY_TIMEOUT_S = 5.0
# Upper bound on candidate spans tried by true_correct for LaTeX golds, so a long response cannot
# cost thousands of math-verify calls.
MAX_LATEX_CANDIDATES = 64
# Total bound on math-verify time spent grading one response (reward- and true-correctness together):
# past it, the remaining comparisons count as "not shown equivalent". Numeric and text golds never use it.
GRADE_BUDGET_S = 5.0

# The authors' regex for the fallback "last number" (paper-notes section 2), used by their reward only.
_AUTHORS_NUMBER_RE = re.compile(r"[-+]?(\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:/\d+)?%?")
_AUTHORS_FORMAT_RE = re.compile(r"####\s*\d+[^\n]+")
_DOLLAR_SPAN_RE = re.compile(r"\$\$(.+?)\$\$|\$(.+?)\$|\\\((.+?)\\\)|\\\[(.+?)\\\]", re.S)
_BOXED_START_RE = re.compile(r"\\(?:boxed|fbox)\s*\{")


# ---------------------------------------------------------------- extraction

# "The answer is X." / "Final answer: X" (ASDiv's word and time answers are written this way).
_ANSWER_PHRASE_RE = re.compile(r"(?i)\b(?:the\s+)?(?:final\s+)?answer\s*(?:is|:)\s*:?\s*([^\n]+)")


def _after_last_hashes(text: str) -> str | None:
    """The rest of the line after the last ``####`` (None when there is no ``####``)."""
    if "####" not in text:
        return None
    tail = text.rsplit("####", 1)[1].strip()
    return tail.split("\n", 1)[0].strip()


def _answer_phrase(text: str) -> str | None:
    """What follows the last "the answer is" / "answer:" up to the end of its line (None when absent)."""
    tail = None
    for m in _ANSWER_PHRASE_RE.finditer(text):
        tail = m.group(1).strip()
    return tail or None


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


def extract_final_answer(text: str) -> str | None:
    """The response's final answer: after the last ``####``, else the last ``\\boxed{}``, else what follows
    the last "the answer is", else the last number."""
    tail = _after_last_hashes(text)
    if tail:
        return tail
    boxed = last_boxed(text)
    if boxed:
        return boxed
    phrase = _answer_phrase(text)
    if phrase:
        return phrase
    numbers = find_numbers(text)
    return numbers[-1] if numbers else None


# ---------------------------------------------------------------- text answers (ASDiv words and times)

_ORDINAL_RE = re.compile(r"^(\d+)(?:st|nd|rd|th)$")
_ARTICLE_RE = re.compile(r"^(?:the|a|an)\s+")


def normalise_words(s: str) -> str:
    """A word/time answer in a comparable form: "The 3:30 P.M." -> "3:30 pm" (case, periods, articles)."""
    s = re.sub(r"\\text\{([^{}]*)\}", r"\1", s).replace("$", "")
    s = re.sub(r"[.\u2019'`\"*]", lambda m: "'" if m.group(0) in "\u2019'`" else "", s.lower())
    s = re.sub(r"\s+", " ", s).strip(" ,;:!")
    return _ARTICLE_RE.sub("", s)


def _text_equivalent(pred: str, gold: str) -> bool:
    p, g = normalise_words(pred), normalise_words(gold)
    if p == g and p:
        return True
    m = _ORDINAL_RE.match(g)  # "6th": the position written as a number ("6") is the same answer
    if m:
        value = leading_number(pred)
        return value is not None and value == int(m.group(1))
    return False


def _text_appears(response: str, gold: str) -> bool:
    """Whether the normalised gold phrase occurs in the normalised response as whole words."""
    g = normalise_words(gold)
    if not any(c.isalnum() for c in g):  # "-": a bare symbol anywhere proves nothing
        return False
    return re.search(r"(?<!\w)" + re.escape(g) + r"(?!\w)", normalise_words(response)) is not None


# ---------------------------------------------------------------- LaTeX via math-verify


class _DropTimeoutDisabledWarning(logging.Filter):
    """math-verify warns on every call made with timeouts off; we bound its time ourselves."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "Timeout is disabled" not in record.getMessage()


for _name in ("math_verify.parser", "math_verify.grader"):
    logging.getLogger(_name).addFilter(_DropTimeoutDisabledWarning())

_SPACE_RE = re.compile(r"\s+|\\[,;!: ]|\\left|\\right")


def _normalise_text(s: str) -> str:
    s = re.sub(r"\\text\{([^{}]*)\}", r"\1", s)
    s = _SPACE_RE.sub("", s).replace("\\dfrac", "\\frac").replace("\\tfrac", "\\frac").replace("$", "")
    return s.rstrip(".").lower()


def _mv_verify(pred: str, gold: str) -> bool:
    """math-verify on two LaTeX strings (boxed so only their content is parsed); LaTeX parser only."""
    from math_verify import LatexExtractionConfig, parse, verify

    cfg = [LatexExtractionConfig(boxed_match_priority=0)]
    # Its own (signal, whole-second) timeouts stay off: _bounded bounds the whole call instead.
    g = parse(f"\\boxed{{{gold}}}", extraction_config=cfg, parsing_timeout=None)
    p = parse(f"\\boxed{{{pred}}}", extraction_config=cfg, parsing_timeout=None)
    if not g or not p:
        return False
    return bool(verify(g, p, timeout_seconds=None))


_WARM = threading.Lock()
_warmed = False


def _warm_up() -> float:
    """Import math-verify and build its parser once, outside any time bound (a cold start takes seconds
    that belong to no response); returns the seconds this call spent doing so."""
    global _warmed
    start = time.monotonic()
    with _WARM:
        if not _warmed:
            _mv_verify("1", "1")
            _warmed = True
    return time.monotonic() - start


class GradingTimeout(BaseException):
    """Raised by the interval timer inside math-verify; a BaseException so its ``except Exception`` cannot eat it."""


class Deadline:
    """The time left for grading one response (``GRADE_BUDGET_S`` in total across all comparisons)."""

    def __init__(self, budget_s: float = GRADE_BUDGET_S) -> None:
        self.end = time.monotonic() + budget_s
        self.expired = False

    def remaining(self) -> float:
        """Seconds left (<= 0 once spent)."""
        return self.end - time.monotonic()


def _on_alarm(signum, frame):  # noqa: ARG001 - signal handler signature
    raise GradingTimeout


def _bounded(fn, args: tuple, timeout: float) -> bool | None:
    """``fn(*args)`` under a time bound that works on any thread; None when the bound was hit.

    On the main thread a one-shot interval timer (fractions of a second) interrupts the call; another
    armed timer (e.g. a test-timeout plugin's) is left alone and the thread path is used instead.
    Elsewhere (TRL may call rewards off the main thread) the call runs in a daemon thread and we stop
    waiting after the bound (the thread finishes in the background). A parser failure is False.
    """
    if timeout <= 0:
        return None
    if threading.current_thread() is threading.main_thread() and signal.getitimer(signal.ITIMER_REAL)[0] == 0:
        previous = signal.signal(signal.SIGALRM, _on_alarm)
        try:
            signal.setitimer(signal.ITIMER_REAL, timeout)
            try:
                return bool(fn(*args))
            finally:
                signal.setitimer(signal.ITIMER_REAL, 0)
        except GradingTimeout:
            return None
        except Exception:  # a parser failure means "not shown equivalent"
            return False
        finally:
            signal.signal(signal.SIGALRM, previous)
    result: list[bool] = []

    def target() -> None:
        try:
            result.append(bool(fn(*args)))
        except Exception:
            result.append(False)

    worker = threading.Thread(target=target, daemon=True, name="math-verify")
    worker.start()
    worker.join(timeout)
    return result[0] if result else None


# Definite math-verify verdicts only (a timed-out comparison is not cached: it may finish with more time).
_MV_CACHE: dict[tuple[str, str], bool] = {}
_MV_CACHE_SIZE = 65536


def _latex_equivalent(pred: str, gold: str, deadline: Deadline | None = None) -> bool:
    if _normalise_text(pred) == _normalise_text(gold):
        return True
    key = (pred, gold)
    if key in _MV_CACHE:
        return _MV_CACHE[key]
    deadline = deadline or Deadline()
    deadline.end += _warm_up()  # a cold start is charged to no response
    verdict = _bounded(_mv_verify, key, min(MATH_VERIFY_TIMEOUT_S, deadline.remaining()))
    if verdict is None:
        deadline.expired = True
        return False
    if len(_MV_CACHE) >= _MV_CACHE_SIZE:
        _MV_CACHE.clear()
    _MV_CACHE[key] = verdict
    return verdict


def _gold_number(gold: str, kind: str) -> Fraction | None:
    g = parse_number(gold)
    if g is None and kind == "numeric":
        raise ValueError(f"numeric gold answer is not a number: {gold!r}")
    return g


def answers_equivalent(pred: str | None, gold: str, kind: str, deadline: Deadline | None = None) -> bool:
    """Whether a predicted answer string equals the gold.

    ``numeric``: as numbers only (exact; ``gold_tolerance`` for inexact golds); ``latex``: as numbers
    when the gold is a number, else math-verify (time-bounded by ``deadline``); ``text``: normalised words;
    ``list``: the same answers in any order (``_list_equivalent``).
    """
    if kind not in KINDS:
        raise ValueError(
            f"unknown answer kind {kind!r}; {did_you_mean(kind, KINDS)}allowed: {', '.join(KINDS)}"
        )
    if pred is None or not pred.strip():
        return False
    if kind == "text":
        return _text_equivalent(pred, gold)
    if kind == "list":
        return _list_equivalent(pred, gold, deadline)
    if kind == "choice":
        return choice_label(pred) == _choice_gold(gold)
    g = _gold_number(gold, kind)
    if g is not None:  # a numeric gold is compared numerically only, whatever its kind
        p = leading_number(pred) if kind == "numeric" else parse_number(pred)
        return p is not None and numbers_equal(p, g, gold_tolerance(gold))
    return _latex_equivalent(pred.strip(), gold.strip(), deadline)


KINDS = ("numeric", "latex", "text", "list", "choice")

# A choice's label at the start of an answer span: "B", "(B)", "B.", "B) Paris", "**B**", "Option B", "\\text{(B)}".
# A letter must stand alone (end of line, or closed by punctuation): "A city ..." and "I think ..." are words,
# and a lower-case letter is never a label.
_SPAN_LEAD = r"^(?:[\s(\[{*\"'$:]|\\text(?:bf)?\{|\\boxed\{|\\mathrm\{)*"
_LETTER_RE = re.compile(
    _SPAN_LEAD + r"(?:(?i:option|choice)\s*\(?([A-J])(?![A-Za-z0-9])|([A-J])(?=[.):,*}\]$]|[ \t]*(?:\n|$)))"
)
_YES_NO_RE = re.compile(_SPAN_LEAD + r"(yes|no|true|false)(?![A-Za-z0-9])", re.I)


def choice_label(span: str | None) -> str | None:
    """The choice a span answers with: a letter ``A``-``J``, or ``yes``/``no`` (``true``/``false`` read as
    those), from the span's start; None when it starts with neither."""
    if not span:
        return None
    m = _LETTER_RE.match(span)
    if m:
        return m.group(1) or m.group(2)
    m = _YES_NO_RE.match(span)
    if m:
        return {"true": "yes", "false": "no"}.get(m.group(1).lower(), m.group(1).lower())
    return None


def _choice_gold(gold: str) -> str:
    g = gold.strip()
    if len(g) == 1 and g in "ABCDEFGHIJ":
        return g
    if g.lower() in ("yes", "no"):
        return g.lower()
    raise ValueError(f"choice gold answer must be a letter A-J, yes or no: {gold!r}")


def _choice_final(response: str) -> str | None:
    """A choice response's final answer: after the last ``####``, else the last ``\\boxed{}``, else what
    follows the last "the answer is", else the response itself (its start is read: "B) Paris", "Yes, ...")."""
    return _after_last_hashes(response) or last_boxed(response) or _answer_phrase(response) or response


# A list answer longer than this is no answer to these benchmarks (each pair of items may cost a math-verify call).
MAX_LIST_ITEMS = 16


def _list_equivalent(pred: str, gold: str, deadline: Deadline | None = None) -> bool:
    """The same answers as a list gold, in any order: every gold item equals some predicted item and every
    predicted item some gold item (items compared as ``latex``: numbers exactly, the rest by math-verify)."""
    want, got = list_items(gold), list_items(pred)
    if not got or len(got) > MAX_LIST_ITEMS or len(want) > MAX_LIST_ITEMS:
        return False
    deadline = deadline or Deadline()
    same = [[answers_equivalent(p, g, "latex", deadline) for g in want] for p in got]
    return all(any(row) for row in same) and all(any(col) for col in zip(*same, strict=True))


# ---------------------------------------------------------------- the two accuracies


def reward_correct(response: str, gold: str, kind: str, deadline: Deadline | None = None) -> bool:
    """Reward-style correctness: the final answer (``extract_final_answer``; for a choice ``_choice_final``)
    is equivalent to the gold."""
    final = _choice_final(response) if kind == "choice" else extract_final_answer(response)
    return answers_equivalent(final, gold, kind, deadline)


def answer_candidates(response: str) -> list[str]:
    """Every span that could be the answer: the ``####`` tail, ``\\boxed{}`` and ``$...$`` spans, the
    "answer is" phrase, numbers."""
    spans: list[str] = []
    tail = _after_last_hashes(response)
    if tail:
        spans.append(tail)
    spans += all_boxed(response)
    for m in _DOLLAR_SPAN_RE.finditer(response):
        spans.append(next(g for g in m.groups() if g is not None).strip())
    phrase = _answer_phrase(response)
    if phrase:
        spans.append(phrase)
    spans += find_numbers(response)
    return list(dict.fromkeys(s for s in spans if s))  # de-duplicated, order kept


def true_correct(
    response: str, gold: str, kind: str, deadline: Deadline | None = None, reward_ok: bool | None = None
) -> bool:
    """True accuracy: the gold appears anywhere in the response (any number, boxed or ``$`` span).

    Never below reward-style correctness: a response whose final answer is correct is true-correct
    (``reward_ok`` passes that verdict in when it is already known).
    """
    deadline = deadline or Deadline()
    if reward_ok is None:
        reward_ok = reward_correct(response, gold, kind, deadline)
    if reward_ok:
        return True
    candidates = answer_candidates(response)
    if kind == "choice":  # an answer span reading as the gold's label; a bare letter in the text never counts
        g = _choice_gold(gold)
        return any(choice_label(c) == g for c in candidates)
    if kind == "list":  # a span that is the whole list ("70, 110", "\\boxed{110, 70}"), never a lone item
        n = len(list_items(gold))
        spans = [c for c in candidates if len(list_items(c)) == n][:MAX_LATEX_CANDIDATES]
        return any(_list_equivalent(c, gold, deadline) for c in spans)
    if kind == "text":
        return _text_appears(response, gold) or any(_text_equivalent(c, gold) for c in candidates)
    g = _gold_number(gold, kind)
    if g is not None:  # numeric golds: numbers only, no math-verify (its cost is per span)
        rtol = gold_tolerance(gold)
        # Also the right-hand side of "x = \\frac{14}{3}" and every LaTeX fraction written inline on its own
        # (not "\\sqrt{\\frac{1}{2}}", not the 1/2 of the mixed number "3\\frac{1}{2}").
        mask = argument_mask(response)
        fractions = [
            m.group(0)
            for m in FRAC_ANY_RE.finditer(response)
            if not in_expression(response, m.start(), m.end(), mask)
            and not DIGIT_BEFORE_RE.search(response, max(0, m.start() - 16), m.start())
        ]
        extra = [c.rsplit("=", 1)[1] for c in candidates if "=" in c] + fractions
        for c in candidates + extra:
            p = parse_number(c) if kind == "latex" else leading_number(c)
            if p is not None and numbers_equal(p, g, rtol):
                return True
        return False
    # A LaTeX gold: math-verify over the non-numeric spans, capped in number and bounded in total time.
    for c in [c for c in candidates if parse_number(c) is None][:MAX_LATEX_CANDIDATES]:
        if deadline.remaining() <= 0:
            deadline.expired = True
            return False
        if answers_equivalent(c, gold, "latex", deadline):
            return True
    return False


def final_answer_key(response: str, kind: str) -> str | None:
    """A hashable normal form of the final answer, for majority voting (None when there is none)."""
    if kind == "choice":
        return choice_label(_choice_final(response))
    pred = extract_final_answer(response)
    if pred is None:
        return None
    if kind == "text":
        return normalise_words(pred) or None
    if kind == "list":  # the items' keys, sorted: "110, 70" and "70,110" vote together
        keys = [final_item_key(item) for item in list_items(pred)]
        return ",".join(sorted(dict.fromkeys(keys))) or None
    value = leading_number(pred) if kind == "numeric" else parse_number(pred)
    if value is not None:
        return str(value)
    return None if kind == "numeric" else _normalise_text(pred)


def final_item_key(item: str) -> str:
    """One list item's vote key: a number as its exact fraction, else its normalised LaTeX."""
    value = parse_number(item)
    return str(value) if value is not None else _normalise_text(item)


@dataclass(frozen=True)
class Grade:
    """Both gradings of one response, under one total time bound."""

    final_answer: str | None
    answer_key: str | None
    reward_correct: bool
    true_correct: bool
    timed_out: bool  # the time bound cut a comparison short (counted as not equivalent)


def grade(response: str, gold: str, kind: str, budget_s: float = GRADE_BUDGET_S) -> Grade:
    """Grade one response: final answer, vote key, reward- and true-correctness (true >= reward)."""
    deadline = Deadline(budget_s)
    rc = reward_correct(response, gold, kind, deadline)
    tc = true_correct(response, gold, kind, deadline, reward_ok=rc)
    return Grade(extract_final_answer(response), final_answer_key(response, kind), rc, tc, deadline.expired)


# ---------------------------------------------------------------- the authors' reward


_TOL = Fraction(1, 10**6)


def _authors_isclose(a: Fraction, b: Fraction) -> bool:
    """``math.isclose(a, b, rel_tol=1e-6, abs_tol=1e-6)`` in exact arithmetic (no float overflow)."""
    return abs(a - b) <= max(_TOL * max(abs(a), abs(b)), _TOL)


def gsm8k_numeric_reward(response: str, gold: str) -> float:
    """Our corrected version of the authors' ``gsm8k_numeric_reward`` (``reward=gsm8k_numeric``; their
    function bug for bug is ``pspo_repro.scoring.authors_reward``): effective values {0, 0.05, 1}.

    Parse the answer after the last ``####`` (else the last number their regex finds in the text, skipping the
    parts of a larger expression such as ``10^2`` as ``find_numbers`` does); 1.0 if it is
    ``math.isclose`` (rel and abs 1e-6) to the gold, +0.05 if ``####\\s*\\d+[^\\n]+`` matches (their
    format bonus, quirks included: a single-digit answer alone on the line does not match), -0.2 when no
    number is found; clipped to [0, 1]. Their sympy fallback for non-numeric tails is not reproduced
    (it evaluates model text); such tails fall back to the last number.
    """
    value: Fraction | None = None
    tail = _after_last_hashes(response)
    if tail:
        value = leading_number(tail)
    if value is None:
        mask = argument_mask(response)
        matches = [
            m.group(0)
            for m in _AUTHORS_NUMBER_RE.finditer(response)
            if not in_expression(response, m.start(), m.end(), mask)
        ]
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
