"""The authors' reward, bug for bug: a table of completions with the verdict of their
``gsm8k_numeric_reward`` (``../shared/reference/peer-code/gr-pspo/maths_rewards.py``), worked out by reading
it, one or more rows per branch; where ``reward=gsm8k_numeric`` (ours, corrected) differs from it; what their
``regex`` (not ``re``) changes; and, where their file and sympy are here, the same verdicts as their module on
the tables and on thousands of adversarial strings."""

from __future__ import annotations

import importlib.util
import math
import random
from pathlib import Path

import pytest

from pspo_repro.scoring import authors_reward as ar
from pspo_repro.scoring.rewards import get_reward

BIG = "9" * 400
# (gold as the authors pass it, completion, their reward, branch)
TABLE = [
    # first '####' tail parses as a number (_to_number)
    ("72", "48 + 24 = 72 clips.\n#### 72", 1.0, "tail number, right, bonus"),
    ("72", "#### 71", 0.05, "tail number, wrong, bonus"),
    ("5", "2 + 3 = 5\n#### 5", 1.0, "single digit right: no bonus, still 1"),
    ("5", "2 + 3 = 6\n#### 6", 0.0, "single digit wrong: no bonus at the end of the line"),
    ("5", "#### 6.", 0.05, "'6.' parses; the '.' makes the bonus match"),
    ("18", "#### 18.", 1.0, "trailing dot"),
    ("18", "#### 18 ", 1.0, "tail stripped"),
    ("18", "####18", 1.0, "no space"),
    ("18", "####\n18", 1.0, "\\s* crosses the newline"),
    ("1000", "#### 1,000", 1.0, "thousands commas"),
    ("Natalia sold 48/2 = <<48/2=24>>24 clips in May.\n#### 72", "#### 72", 1.0, "GSM8K gold: its #### tail"),
    ("18", "#### 18\nQuestion: Tom has 3 cats.\n#### 25", 1.0, "two ####: the FIRST counts"),
    ("25", "#### 18\nQuestion: Tom has 3 cats.\n#### 25", 0.05, "two ####: the second is ignored"),
    ("25", "#### 25%", 0.05, "percent divides by 100: 0.25"),
    ("0.25", "#### 25%", 1.0, "percent right as 0.25"),
    ("0.75", "#### 3/4", 1.0, "fraction"),
    ("100", "#### 1e2", 1.0, "float() reads exponents"),
    ("100", "#### 1E2", 1.0, "upper-case exponent"),
    ("1000", "#### 1_000", 1.0, "float() reads underscores"),
    ("-3", "#### -3", 1.0, "negative right: no bonus (a sign is not a digit), still 1"),
    ("3", "#### -3", 0.0, "negative wrong: no bonus"),
    ("3", "#### +3", 1.0, "explicit plus"),
    ("2", "#### 2.0000001", 1.0, "rel_tol 1e-6"),
    ("2", "#### 2.01", 0.05, "outside tolerance"),
    ("0", "#### 0.0000005", 1.0, "abs_tol 1e-6"),
    ("5", "#### nan", 0.0, "nan parses, equals nothing; no bonus"),
    ("5", "#### inf", 0.0, "inf parses, wrong; no bonus"),
    ("5", "#### 1e999", 0.05, "overflows to inf: wrong, bonus"),
    # tail is not a number: the sympy branch raises TypeError, fall back to the LAST number of the text
    ("18", "Total is 18.\n#### 18 apples, 5 left over", 0.05, "tail with words: last number 5"),
    ("3", "#### 5 - 2 = 3", 1.0, "tail with an equation: last number 3"),
    ("18", "#### 18*1", 0.05, "tail expression: last number 1"),
    ("18", "#### $18", 1.0, "currency sign: fallback finds 18; no bonus"),
    ("18", "The answer is 18.\n#### $20", 0.0, "currency sign: fallback finds 20; no bonus"),
    ("0.75", "#### 3 / 4", 0.05, "spaced fraction fails Fraction(): last number 4"),
    ("0", "#### 3/0", 0.0, "zero denominator: no number anywhere, reward 0"),
    ("0.5", "#### 1/2x", 1.0, "a letter skips Fraction(): fallback token 1/2"),
    ("5", f"#### {BIG}/1", 0.0, "float(Fraction) overflows: no number"),
    ("4", "2+2=4\n####", 1.0, "bare #### at the end: no tail, last number"),
    ("4", "2+2=4\n#### \nok", 1.0, "\\s* crosses the newline into 'ok': fallback"),
    # no '####' at all: last number token (NUM_PAT)
    ("42", "so the answer is 42", 1.0, "last number"),
    ("42", "so the answer is 42 and not 41", 0.0, "last number wins"),
    ("34", "The total is 12,34", 1.0, "malformed thousands: 12 then 34"),
    ("0.5", "half is 1/2 of it", 1.0, "fraction token"),
    ("0.1", "rate 10% here", 1.0, "percent token"),
    ("-5", "the change is -5", 1.0, "signed token"),
    ("2.5", "costs 2.50 dollars", 1.0, "decimal token"),
    ("42", "I don't know", 0.0, "no number: -0.2 clipped to 0"),
    ("42", "", 0.0, "empty"),
    # gold strings from the other benchmarks, as the authors pass them
    ("9 (apples)", "#### 9", 1.0, "ASDiv gold with units"),
    ("5 (years old); 15 (years old); 20 (years old)", "#### 20", 1.0, "ASDiv multi-answer: last number"),
    (
        "5 (years old); 15 (years old); 20 (years old)",
        "#### 5",
        0.0,
        "ASDiv multi-answer: the first is wrong",
    ),
    ("3:30 p.m.", "#### 30", 1.0, "ASDiv time: last number 30"),
    ("1,234 (dollars)", "#### 1234", 1.0, "ASDiv thousands"),
    ("Mrs. Hilt", "#### 55", 0.0, "gold without a number: 0 even with the bonus"),
    ("27", "#### 27", 1.0, "SVAMP gold string"),
    ("\\frac{14}{3}", "#### 14/3", 0.05, "LaTeX gold reads its last number, 3"),
    ("\\frac{14}{3}", "#### 3", 1.0, "... so 3 scores"),
]


def test_table_covers_every_branch_with_at_least_40_rows():
    assert len(TABLE) >= 40
    values = {r[2] for r in TABLE}
    assert values == {0.0, 0.05, 1.0}


@pytest.mark.parametrize(("gold", "completion", "expected", "why"), TABLE, ids=[r[3] for r in TABLE])
def test_authors_verdict(gold, completion, expected, why):
    assert ar.authors_gsm8k_reward(completion, gold) == expected
    assert ar.authors_correct(completion, gold) == (expected > 0.5)


def test_registered_reward_reads_conversational_completions():
    fn = get_reward("authors_gsm8k")
    completions = [[{"role": "assistant", "content": "#### 18\n#### 25"}], "#### 25%"]
    assert fn(prompts=[None, None], completions=completions, answer=["18", "25"]) == [1.0, 0.05]


@pytest.mark.parametrize(
    ("completion", "gold"),
    [
        ("#### 18\nQuestion: more.\n#### 25", "25"),
        ("#### 25%", "25"),
        ("Total is 18.\n#### 18 apples, 5 left over", "18"),
        ("#### 18*1", "18"),
    ],
)
def test_ours_differs_from_theirs_where_documented(completion, gold):
    """docs/reproduction.md's reward rows: our corrected grader scores these 1.0, theirs does not."""
    ours = get_reward("gsm8k_numeric")(prompts=[None], completions=[completion], answer=[gold])[0]
    assert ours == 1.0 and ar.authors_gsm8k_reward(completion, gold) < 0.5


def test_sympy_is_never_called(monkeypatch):
    """Their sympy branch is dead; ours never imports sympy for model text."""
    import builtins

    real_import = builtins.__import__

    def guard(name, *a, **k):
        if name.startswith("sympy"):
            raise AssertionError("sympy imported while scoring")
        return real_import(name, *a, **k)

    monkeypatch.setattr(builtins, "__import__", guard)
    assert ar.authors_gsm8k_reward("#### __import__('os').system('true')", "5") == 0.0


# ---------------------------------------------------------------- their `regex`, not `re` (issue 24, item 5)

GARAY_1 = "\U00010d41"  # a Unicode 16.0 digit: regex's \d, not Python 3.11's float()/Fraction()
TOLONG_SIKI_1 = "\U00011de1"  # a Unicode 17.0 digit: the installed regex's \d, not their 2025.7.34's

# (gold, completion, their reward, why): worked out from their code with regex's \s (White_Space, without
# U+001C..U+001F) and \d (Unicode 16.0 digits); ``re`` would give the other value named in ``why``.
REGEX_TABLE = [
    ("54", "####\x1c55", 0.0, "\\s* stops at U+001C: no bonus (re: 0.05)"),
    ("54", "####\x1f 55", 0.0, "U+001F, then a space: no bonus (re: 0.05)"),
    ("55", "####\x1d55", 1.0, "tail '\\x1d55' is stripped by str.strip (Python's whitespace): right"),
    ("12", "####\x1c\n12\nso 13", 0.0, "tail is '\\x1c', empty once stripped: last number 13 (re: 1.0)"),
    ("13", "####\x1e\n12\nso 13", 1.0, "... so the fallback's 13 is right (re: 0.05)"),
    ("11", "####\x1c\x1d\x1e\x1f12", 0.0, "no \\d right after ####: no bonus (re: 0.05)"),
    ("18", f"The total is 18 then {GARAY_1}", 0.0, "last token is a Garay digit float() rejects (re: 1.0)"),
    ("18", f"#### 18{GARAY_1}", 0.0, "tail '18𐵁' fails float; last token '18𐵁' too (re: 1.0)"),
    ("6", f"#### {GARAY_1}x\nanswer 5", 0.05, "a Garay digit earns the bonus (re: 0.0)"),
    (f"9 {GARAY_1}", "#### 9", 0.0, "gold's last token fails float: no gold, 0 (re: 1.0)"),
    ("42", "#### \u0664\u0662", 1.0, "Arabic-Indic digits: both \\d and float() know them"),
    ("18", f"The total is 18 then {TOLONG_SIKI_1}", 1.0, "a Unicode 17.0 digit is no \\d to their regex"),
]


@pytest.mark.parametrize(
    ("gold", "completion", "expected", "why"), REGEX_TABLE, ids=[r[3] for r in REGEX_TABLE]
)
def test_authors_verdict_with_their_regex_semantics(gold, completion, expected, why):
    assert ar.authors_gsm8k_reward(completion, gold) == expected


def test_digit_is_unicode_16_decimal_digits():
    """``DIGIT`` is regex 2025.7.34's ``\\d``: the 760 decimal digits (Nd) of Unicode 16.0. A newer regex
    with more digits fails here: add them to ``NEWER_DIGITS``."""
    import regex

    digit = regex.compile(ar.DIGIT)
    matched = [cp for cp in range(0x110000) if digit.match(chr(cp))]
    assert len(matched) == 760
    assert digit.match(GARAY_1) and digit.match("\u0664") and digit.match("7")
    assert not digit.match(TOLONG_SIKI_1) and not digit.match("\u00b2")  # superscript two is No, not Nd
    float_rejects = [cp for cp in matched if not chr(cp).isdecimal()]
    assert len(float_rejects) == 100 and 0x10D41 in float_rejects  # Unicode 15.0-16.0 digits, for Python 3.11


def test_whitespace_is_unicode_white_space_without_file_separators():
    r"""Their ``\s`` is regex's: the 25 White_Space characters, not U+001C..U+001F (``re``'s ``\s`` has them)."""
    found = {cp for cp in range(0x110000) if ar.ANSWER_LINE.match(f"####{chr(cp)}5").group(1) == "5"}
    white_space = {*range(0x09, 0x0E), 0x20, 0x85, 0xA0, 0x1680, *range(0x2000, 0x200B), 0x2028, 0x2029,
                   0x202F, 0x205F, 0x3000}  # fmt: skip
    assert found == white_space and not found & set(range(0x1C, 0x20))


# ---------------------------------------------------------------- differential check against their module

THEIR_MODULE = Path(__file__).resolve().parents[3] / "shared/reference/peer-code/gr-pspo/maths_rewards.py"


@pytest.fixture(scope="module")
def theirs():
    """Their ``maths_rewards`` module, imported from the reference copy (skipped where it or sympy is absent).

    Safe to run on arbitrary text only because their sympify call raises TypeError before parsing anything;
    that is checked first."""
    if not THEIR_MODULE.is_file():
        pytest.skip(f"their module is not here: {THEIR_MODULE}")
    pytest.importorskip("sympy")
    spec = importlib.util.spec_from_file_location("_their_maths_rewards", THEIR_MODULE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    with pytest.raises(TypeError):
        module.sympify("1", transformations=module.TRANSFORMS)
    return module


def _same(a: float | None, b: float | None) -> bool:
    return a == b or (a is not None and b is not None and math.isnan(a) and math.isnan(b))


# Both tables, but the Unicode 17.0 row: their module runs on the installed regex here, not on 2025.7.34.
THEIR_ROWS = [r for r in TABLE + REGEX_TABLE if TOLONG_SIKI_1 not in r[1]]


# Pieces that hit every branch and both regex-vs-re differences (the control characters, Unicode 15.0-16.0
# digits); the Unicode 17.0 digits are left out: their module here runs on the installed regex, not 2025.7.34.
PIECES = ["####", "#### ", "\n", " ", "\t", "\x1c", "\x1d", "\x1e", "\x1f", "\x85", "\xa0", "\u2028", "\u3000",
          "0", "1", "2", "5", "7", "9", "12", "1,000", "12,34", "3/4", "3/0", "/", ".", ",", "%", "-", "+",
          "e", "E5", "_", "x", "apples", "inf", "nan", "$", "1e999", "\u0663", "\u0664\u0662", "\uff15",
          GARAY_1, "\U00010d40", "\U00011f52", "\U000116d3", "\u00b2", "(", ")", "=", "*"]  # fmt: skip
GOLDS = [
    "5",
    "42",
    "0.75",
    "1000",
    "-3",
    "0.05",
    "9 (apples)",
    "#### 12",
    "3/4",
    GARAY_1,
    "\u0664\u0662",
    "x",
]


def _random_texts(n: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    return ["".join(rng.choice(PIECES) for _ in range(rng.randint(0, 12))) for _ in range(n)]


def test_same_reward_as_their_module_on_adversarial_strings(theirs, capsys):
    texts = _random_texts(4000, seed=24) + [r[1] for r in THEIR_ROWS]
    golds = GOLDS + _random_texts(40, seed=25)
    diffs = []
    for i, text in enumerate(texts):
        if not _same(ar.extract_final_answer(text), theirs._extract_final_answer(text)):
            diffs.append(("extract", text))
        for gold in golds[i % 7 :: 7]:
            if ar.authors_gsm8k_reward(text, gold) != theirs.gsm8k_numeric_reward(gold, text):
                diffs.append((gold, text))
    capsys.readouterr()  # their "This shouldn't have happened...." for golds without a number
    assert diffs[:10] == []


@pytest.mark.parametrize(
    ("gold", "completion", "expected", "why"), THEIR_ROWS, ids=[r[3] for r in THEIR_ROWS]
)
def test_tables_agree_with_their_module(theirs, gold, completion, expected, why, capsys):
    assert theirs.gsm8k_numeric_reward(gold, completion) == expected
