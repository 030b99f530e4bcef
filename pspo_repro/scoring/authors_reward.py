"""The PSPO authors' GSM8K reward, bug for bug (``gsm8k_numeric_reward`` of their ``maths_rewards.py``).

Written from a reading of their code (``../shared/reference/peer-code/gr-pspo/maths_rewards.py``), not
copied. It is what the paper's runs were trained with and what the paper's "accuracy" counts (reward >
0.5), so the paper experiments train with it (``reward=authors_gsm8k``) and the evaluator reports it as
``authors_acc`` next to our careful grader (``pspo_repro.scoring.grading``). Their behaviour, kept on purpose:

- the answer is the tail of the FIRST ``####`` line (``re.search``), even when the model runs on into a
  new question with its own ``####``; ``\\s*`` after ``####`` may cross a newline;
- the tail must parse whole as a number (``float``/``Fraction`` after removing commas; ``%`` divides by
  100, so ``#### 25%`` reads 0.25); anything else (``18 apples``, ``5 - 2 = 3``) falls back to the LAST
  number-looking token of the whole text, because their sympy fallback never runs: they call
  ``sympify(text, transformations=...)``, a keyword sympify does not take, so it raises TypeError, which
  a bare ``except`` swallows. We reproduce that observable effect without calling sympy on model text;
- the format bonus (+0.05) needs ``####`` followed by a digit and at least one more character on the
  line, so a single-digit answer at the end of a line (``#### 5``) gets no bonus;
- values are clipped to [0, 1]: 1.0 (right), 0.05 (wrong, formatted), 0.0 (wrong, or no number found);
- equality is ``a == b or math.isclose(a, b, rel_tol=1e-6, abs_tol=1e-6)`` on floats.

The gold answer goes through the same extraction (the authors pass the raw dataset string: GSM8K's
whole solution, ASDiv's ``9 (apples)``, SVAMP's ``27``); a gold with no number scores 0 for every
completion. No torch or sympy imports here.

Their patterns are compiled with the ``regex`` package (``import regex as re``, pinned ``regex==2025.7.34``,
Unicode 16.0), not ``re``, and so are ours: ``regex``'s ``\\s`` is Unicode White_Space, which leaves out the
control characters U+001C..U+001F that ``re``'s ``\\s`` takes; its ``\\d`` is every Unicode decimal digit
of its tables, including digits newer than Python's ``unicodedata`` (3.11: Unicode 14.0), which
``float``/``Fraction`` then reject (a last token such as U+10D41 makes the answer None, not an earlier
number). Their version cannot be installed here (transformers 5.17 needs ``regex>=2025.10.22``); the one
later addition to ``\\d``, Unicode 17.0's digits U+11DE0..U+11DE9, is excluded by ``DIGIT``, so our patterns
match what 2025.7.34 matched.
"""

from __future__ import annotations

import math
from fractions import Fraction

import regex

# Digits the installed regex (Unicode 17.0 tables) counts as \d but their 2025.7.34 (Unicode 16.0) did not:
# the Tolong Siki digits. A regex with newer tables fails tests/scoring/test_authors_reward.py's digit count.
NEWER_DIGITS = "\U00011de0-\U00011de9"
# Their \d, as regex 2025.7.34 matched it.
DIGIT = rf"(?:(?![{NEWER_DIGITS}])\d)"

# Their token pattern: optional sign, digits with thousands commas or plain, optional decimals, optional
# /denominator, optional %.
NUMBER_TOKEN = regex.compile(
    rf"[-+]?({DIGIT}{{1,3}}(?:,{DIGIT}{{3}})+|{DIGIT}+)(?:\.{DIGIT}+)?(?:/{DIGIT}+)?%?"
)
ANSWER_LINE = regex.compile(r"####\s*([^\n]+)")
FORMAT_BONUS = regex.compile(rf"####\s*{DIGIT}+[^\n]+")
_LETTER = regex.compile(r"[a-zA-Z]")
REL_TOL = ABS_TOL = 1e-6


def to_number(token: str) -> float | None:
    """Their ``_to_number``: a float from ``1,234``, ``12.5``, ``3/4``, ``12.5%``, ``-7``, ... else None.

    Python's own ``Fraction``/``float`` parsers decide, as in theirs, so ``1e2``, ``1_000``, ``inf`` and
    ``nan`` parse too; a trailing ``%`` divides by 100.
    """
    s = token.strip()
    percent = s.endswith("%")
    if percent:
        s = s[:-1]
    scale = 100.0 if percent else 1.0
    if "/" in s and not _LETTER.search(s):
        try:
            return float(Fraction(s.replace(",", ""))) / scale
        except (ValueError, ZeroDivisionError, TypeError, OverflowError):
            pass
    try:
        return float(s.replace(",", "")) / scale
    except (ValueError, OverflowError):
        return None


def extract_final_answer(text: str) -> float | None:
    """Their ``_extract_final_answer``: the first ``####`` tail if it is a number, else the last number
    token of the whole text (their sympy branch in between never succeeds), else None."""
    m = ANSWER_LINE.search(text)
    if m:
        value = to_number(m.group(1).strip())
        if value is not None:
            return value
        # Their sympify(..., transformations=...) raises TypeError here, always: fall through.
    tokens = [t.group(0) for t in NUMBER_TOKEN.finditer(text)]
    if tokens:
        return to_number(tokens[-1])
    return None


def numeric_equal(a: float, b: float) -> bool:
    """Their ``numeric_equal``: exact, or within 1e-6 relative / absolute."""
    return a == b or math.isclose(a, b, rel_tol=REL_TOL, abs_tol=ABS_TOL)


def has_format_bonus(response: str) -> bool:
    """Whether the response earns their +0.05: ``####``, a digit, and one more character on the line."""
    return FORMAT_BONUS.search(response) is not None


def authors_gsm8k_reward(response: str, gold: str) -> float:
    """Their ``gsm8k_numeric_reward(gold, response)``: 1.0, 0.05 or 0.0 (see the module docstring)."""
    gold_value = extract_final_answer(str(gold))
    pred = extract_final_answer(response)
    shaped = 0.05 if has_format_bonus(response) else 0.0
    if pred is None or gold_value is None:
        return max(0.0, min(1.0, shaped - 0.2))
    base = 1.0 if numeric_equal(pred, gold_value) else 0.0
    return max(0.0, min(1.0, base + shaped))


def authors_correct(response: str, gold: str) -> bool:
    """Correct as the authors' evaluation counts it: reward > 0.5."""
    return authors_gsm8k_reward(response, gold) > 0.5
