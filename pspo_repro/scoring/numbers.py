"""Numbers in model text, exactly: where they stand (a number inside a larger expression such as ``2^{10}`` or
``\\sqrt{2}`` is no answer), how they parse (as fractions, from prose, LaTeX fractions and exponent forms,
with bounds on digits and exponents) and when two are equal (a tolerance only for golds stored as a binary
float's repr). Shared by ``grading`` (both accuracies) and nothing else; no torch, nothing evaluated as code.
"""

from __future__ import annotations

import re
from fractions import Fraction

# A number as written in prose: optional sign (only when it is not a subtraction "16-3"), digits with
# valid thousands grouping or plain digits, optional decimals, optional /denominator, optional %.
NUMBER = r"(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:[eE][-+]?\d{1,4}(?![\d.]))?(?:/\d+)?%?"
NUMBER_RE = re.compile(r"(?:(?<![\w)\].])-)?(?<![\w.,])" + NUMBER)


# ---------------------------------------------------------------- numbers inside larger expressions

# A number that is only part of an expression is no answer: the base or exponent of ``^`` ("10^2"), a
# subscript, the argument or coefficient of ``\\sqrt`` ("3\\sqrt{2}"), a numerator or denominator
# ("\\frac{\\sqrt{6}}{6}"), the mantissa of "2.5 \\times 10^{-6}", a number before a superscript digit
# (U+00B2 ...). A degree sign ("6^\\circ") is no power.
_ARG_COMMANDS = frozenset({"frac", "dfrac", "tfrac", "cfrac", "sqrt", "binom", "dbinom", "tbinom"})
_FUNCTION_COMMANDS = frozenset({"log", "ln", "lg", "exp", "sin", "cos", "tan", "cot", "sec", "csc"})
_OPERAND_AFTER = _ARG_COMMANDS | _FUNCTION_COMMANDS  # "\\sqrt 2", "\\log 8"
_FACTOR_BEFORE = _ARG_COMMANDS | _FUNCTION_COMMANDS | {"pi"}  # "3\\sqrt{2}", "2\\frac{1}{3}", "3\\pi"
_LATEX_TOKEN_RE = re.compile(r"\\[a-zA-Z]+|\\.|[{}\[\]^_]|[^\s\\{}\[\]^_]+")
_BEFORE_RE = re.compile(r"(?:[\^_]|\\([a-zA-Z]+))\s*$")
# group 1: a command after the number; group 2: it opens with words, a unit ("25\\frac{\\text{miles}}{\\text{day}}").
_AFTER_RE = re.compile(
    r"\s*(?:(?:\\times|\\cdot|[x*\u00d7\u00b7])\s*10\s*\^|\^(?!\s*\{?\s*\\circ(?![a-zA-Z]))"
    r"|[\u00b2\u00b3\u00b9\u2070-\u2079]"
    r"|\\([a-zA-Z]+)(\s*\{\s*\\(?:text|mathrm|mbox|textbf)(?![a-zA-Z]))?)"
)


def argument_mask(text: str) -> bytearray | None:
    """1 at each character inside an argument of ``\\frac``/``\\sqrt``/``\\binom`` (``\\sqrt[3]{..}`` too) or
    of a braced ``^``/``_``; None when there is none."""
    if "{" not in text:
        return None
    mask: bytearray | None = None
    stack: list[tuple[int, bool, str]] = []  # (content start, is an argument, opener)
    prev = ""  # the token before: "^"/"_", a command name, "arg" (an argument just closed), else ""
    for m in _LATEX_TOKEN_RE.finditer(text):
        tok = m.group(0)
        if tok == "{" or (tok == "[" and prev == "sqrt"):
            inside = bool(stack) and stack[-1][1]
            arg = inside or prev in ("^", "_", "arg") or prev in _ARG_COMMANDS
            stack.append((m.end(), arg, tok))
            prev = ""
        elif stack and (tok, stack[-1][2]) in (("}", "{"), ("]", "[")):
            start, arg, _ = stack.pop()
            if arg and not (stack and stack[-1][1]):  # the outermost argument marks its whole span
                mask = mask or bytearray(len(text))
                mask[start : m.start()] = b"\x01" * (m.start() - start)
            prev = "arg" if arg else ""
        else:
            prev = tok[1:] if tok[0] == "\\" and tok[1:].isalpha() else tok if tok in "^_" else ""
    open_args = [start for start, arg, _ in stack if arg]
    if open_args:  # an argument cut off by the end of the text
        mask = mask or bytearray(len(text))
        mask[open_args[0] :] = b"\x01" * (len(text) - open_args[0])
    return mask


def in_expression(text: str, start: int, end: int, mask: bytearray | None) -> bool:
    """Whether ``text[start:end]`` (a number) is only part of a larger expression (``mask``: ``argument_mask``)."""
    if mask is not None and mask[start]:
        return True
    before = _BEFORE_RE.search(text, max(0, start - 32), start)
    if before and (before.group(1) is None or before.group(1) in _OPERAND_AFTER):
        return True
    after = _AFTER_RE.match(text, end)
    return bool(after) and (
        after.group(1) is None or (after.group(1) in _FACTOR_BEFORE and not after.group(2))
    )


def find_numbers(text: str) -> list[str]:
    """Every number written in ``text`` that stands on its own, in order (``1,000``, ``-3``, ``2.5``, ``3/4``,
    ``20%``, ``2.5e-06``, ``6^\\circ``'s 6); not the parts of a larger expression (``10^2``, ``3\\sqrt{2}``)."""
    mask = argument_mask(text)
    return [m.group(0) for m in NUMBER_RE.finditer(text) if not in_expression(text, m.start(), m.end(), mask)]


# ---------------------------------------------------------------- numbers

_LATEX_NOISE = re.compile(
    r"\\[,;!: ]|\\(?:text|mathrm|textbf|mbox)\{[^{}]*\}|\\\$|\$|\\left|\\right|\^\{?\\circ\}?|\s"
)
_UNIT_RE = re.compile(r"\\(?:text|mathrm|textbf|mbox)\{[^{}]*\}|\^\{?\\circ\}?")
_FRAC_RE = re.compile(r"^(-?)\\[dt]?frac\{(-?\d+)\}\{(-?\d+)\}$|^(-?)\\[dt]?frac(\d)(\d)$")
_PLAIN_RE = re.compile(r"^([-+]?)(" + NUMBER + r")\.?$")
FRAC_ANY_RE = re.compile(r"-?\\[dt]?frac\{-?\d+\}\{-?\d+\}")
DIGIT_BEFORE_RE = re.compile(r"\d\s*$")
# "2.5 \times 10^{-6}" / "2.5\cdot10^6": scientific notation as LaTeX writes it.
_TIMES_TEN_RE = re.compile(r"^([-+]?\d+(?:\.\d+)?)\\(?:times|cdot)10\^\{?([-+]?\d{1,4})\}?$")
# A number with more digits is no answer to these benchmarks; parsing it is unbounded work on untrusted
# text (int() refuses > 4300 digits, float() overflows past ~308): such strings are "no number".
MAX_DIGITS = 100
# Exponents beyond this are no answer either (Fraction("1e99999") would build a 99999-digit integer).
MAX_EXPONENT = 400
_EXP_RE = re.compile(r"[eE]([-+]?\d+)")


def _exponent_ok(body: str) -> bool:
    m = _EXP_RE.search(body)
    return m is None or abs(int(m.group(1))) <= MAX_EXPONENT


def parse_number(s: str) -> Fraction | None:
    """An exact value for a string that *is* a number (``"1,000"``, ``"$18.00"``, ``"3/4"``, ``"\\frac{1}{2}"``,
    ``"2.0107e-06"``, ``"2.5 \\times 10^{-6}"``).

    Returns None for anything else (expressions, words). Parsed with ``fractions.Fraction`` only (no
    eval, no sympy). A percent sign is dropped: "20%" is 20, never 0.2 (golds are written in the unit the
    question asks for, so accepting N/100 would give false positives). Units after the number
    ("18 dollars") are ignored only in the ``####`` tail; here the whole string must be the number.
    """
    # A unit or degree sign may end (or start) a number; between two numbers it separates them
    # ("19 \\text{ and }43", "45^\\circ, 135^\\circ" are two answers, not 1943 and 45135).
    t = _LATEX_NOISE.sub("", _UNIT_RE.sub("\0", s))
    t = t.replace("{,}", ",").rstrip(".").strip("\0").rstrip(".")
    if (
        "\0" in t
        or t.startswith("\\%")
        or not t
        or sum(c.isdigit() for c in t) > MAX_DIGITS
        or not t.isascii()
    ):
        return None
    t = t.replace("\\%", "%")
    m = _PLAIN_RE.match(t)
    if m:
        body = m.group(2).rstrip("%").replace(",", "")
        if not _exponent_ok(body):
            return None
        try:
            value = Fraction(body)  # handles "3/4", "2.50" and "2.0107e-06" exactly
        except (ValueError, ZeroDivisionError):
            return None
        return -value if m.group(1) == "-" else value
    m = _TIMES_TEN_RE.match(t)
    if m:
        if abs(int(m.group(2))) > MAX_EXPONENT:
            return None
        return Fraction(m.group(1)) * Fraction(10) ** int(m.group(2))
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


def leading_number(s: str) -> Fraction | None:
    """The number a ``####`` tail starts with, tolerating units and currency: "$1,200 dollars" -> 1200."""
    value = parse_number(s)
    if value is not None:
        return value
    t = _LATEX_NOISE.sub(" ", s).strip()
    m = NUMBER_RE.search(t)
    if m is None or m.start() > 2:  # the number must lead ("x = 5" is not a bare numeric answer)
        return None
    if in_expression(t, m.start(), m.end(), argument_mask(t)):  # "2^{10}", "3\\sqrt{2}": not 2, not 3
        return None
    return parse_number(m.group(0))


# A gold written with this many significant digits and a fractional part is a binary float's repr
# (gsm_hard's 3244047.0999999996, 14053029.666666666): the only inexact golds. Any decimal with fewer
# digits is exactly what its author meant, so it is compared exactly.
INEXACT_GOLD_DIGITS = 15
# Relative slack for an inexact gold: a few float64 ulps (2.2e-16) of accumulated rounding, no more.
INEXACT_GOLD_RTOL = Fraction(1, 10**14)
_MANTISSA_RE = re.compile(r"^[-+]?(\d*)\.(\d+)$")


def gold_tolerance(gold: str) -> Fraction:
    """Relative tolerance for comparing with ``gold``: 0 (exact) unless the gold itself is inexact."""
    m = _MANTISSA_RE.match(gold.strip().replace(",", ""))
    if m is None:  # an integer, a fraction, an exponent form with a short mantissa, LaTeX: exact
        return Fraction(0)
    digits = (m.group(1) + m.group(2)).lstrip("0")
    return INEXACT_GOLD_RTOL if len(digits) >= INEXACT_GOLD_DIGITS else Fraction(0)


def numbers_equal(a: Fraction, b: Fraction, rtol: Fraction = Fraction(0)) -> bool:
    """Equality, exact unless a relative tolerance is given (``gold_tolerance``: only for inexact golds)."""
    if a == b:
        return True
    return bool(rtol) and abs(a - b) <= rtol * max(abs(a), abs(b))
