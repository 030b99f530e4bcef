"""The authors' reward, bug for bug: a table of completions with the verdict of their
``gsm8k_numeric_reward`` (``../shared/reference/peer-code/gr-pspo/maths_rewards.py``), worked out by reading
it, one or more rows per branch; and where ``reward=gsm8k_numeric`` (ours, corrected) differs from it."""

from __future__ import annotations

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
