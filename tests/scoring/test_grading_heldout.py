"""Held-out grading cases from issue 18: gsm_hard exponent golds, large numbers, ASDiv words and times,
the time bound per response, and what reaches sympy's number constructor."""

from __future__ import annotations

import re
import time

import pytest

from pspo_repro.scoring import grading
from pspo_repro.scoring.grading import (
    answers_equivalent,
    extract_final_answer,
    gold_tolerance,
    grade,
    parse_number,
    reward_correct,
    true_correct,
)


@pytest.mark.parametrize(
    "gold, written, ok",
    [
        ("2.0107e-06", "#### 0.0000020107", True),
        ("2.0107e-06", "#### 2.0107e-06", True),
        ("2.0107e-06", r"The answer is $2.0107 \times 10^{-6}$", True),
        ("2.0107e-06", "#### 0.0000020108", False),
        ("-2.4967e-05", "#### -0.000024967", True),
        ("5.158e-07", "#### 5.158", False),
    ],
)
def test_gsm_hard_exponent_golds_parse_and_compare(gold, written, ok):
    assert reward_correct(written, gold, "numeric") is ok


def test_every_gsm_hard_gold_parses(data_dir):
    from pspo_repro.data.datasets import load_benchmark

    bad = [p.answer for p in load_benchmark("gsm_hard") if parse_number(p.answer) is None]
    assert bad == []


@pytest.mark.parametrize(
    "gold, pred, ok",
    [
        ("9284017268534.4", "9284017268535.4", False),  # off by 1 near 1e13: was accepted by a 1e-12 slack
        ("9284017268534.4", "9284017268534.4", True),
        ("123456789012345", "123456789012346", False),  # integers are exact however long
        ("1000000000000000000000", "1000000000000000000001", False),
        ("0.1", "0.1000000000000001", False),  # a short decimal is exact
        ("3244047.0999999996", "3244047.1", True),  # a binary float's repr: inexact gold, a few ulps of slack
        ("14053029.666666666", "14053029.666666667", True),
        ("14053029.666666666", "14053029.67", False),
        ("3244047.0999999996", "3244047.2", False),
    ],
)
def test_exact_for_written_numbers_tolerance_only_for_inexact_golds(gold, pred, ok):
    assert answers_equivalent(pred, gold, "numeric") is ok
    assert reward_correct(f"#### {pred}", gold, "numeric") is ok
    assert true_correct(f"#### {pred}", gold, "numeric") is ok


def test_gold_tolerance_is_zero_for_exact_golds():
    assert gold_tolerance("9284017268534.4") == 0
    assert gold_tolerance("2.0107e-06") == 0
    assert gold_tolerance("42") == 0
    assert gold_tolerance("3244047.0999999996") > 0


@pytest.mark.parametrize(
    "gold, response, reward, true",
    [
        ("Yes", "Sam has 5 and Tim has 3, so Sam has more. The answer is Yes.", True, True),
        ("No", "The answer is Yes.", False, False),
        ("No", "The answer is Not enough.", False, False),  # "No" is not a prefix match
        ("3:30 p.m.", "She leaves at 1:00 and walks 2.5 hours. The answer is 3:30 p.m.", True, True),
        ("3:30 p.m.", "The answer is 3:30 P.M.", True, True),
        ("3:30 p.m.", "The answer is 4:30 p.m.", False, False),
        ("12:50", "The answer is 12:50.", True, True),
        ("12:50", "The answer is 12:05.", False, False),
        ("February 3rd", "The answer is February 3rd.", True, True),
        ("February 3rd", "The answer is February 4th.", False, False),
        ("6th", "The answer is 6th.", True, True),
        ("6th", "She is in 6th place, so the answer is 6.", True, True),  # was reward 1, true 0
        ("6th", "The answer is 7th.", False, False),
        ("Mrs. Hilt", "The answer is Mrs Hilt.", True, True),
        ("The Cooper wedding", "The answer is the Cooper wedding.", True, True),
        ("Yes", "Yes, it fits. 3 + 4 = 7. The answer is 7.", False, True),  # true: the gold appears
        ("-", "The answer is 5.", False, False),
    ],
)
def test_asdiv_word_and_time_golds(gold, response, reward, true):
    assert reward_correct(response, gold, "text") is reward
    assert true_correct(response, gold, "text") is true


def test_answer_phrase_extraction():
    assert extract_final_answer("blah 3 and 30. The answer is 3:30 p.m.") == "3:30 p.m."
    assert extract_final_answer("so 4 + 5 = 9\n#### 9") == "9"  # #### still wins
    assert extract_final_answer(r"The answer is \boxed{7}, not 8") == "7"  # boxed still wins


RESPONSES = [
    "#### 18",
    "I think 12 + 6 = 18 so the answer is 18.",
    "She sells 16 - 3 - 4 = 9 eggs at $2 each: 9 * 2 = 18 dollars. #### 18",
    r"$\frac{14}{3}$ then \boxed{5}",
    "6th place. The answer is 6.",
    "The answer is 3:30 p.m.",
    "No number here at all",
    "#### 2.0107e-06",
]


@pytest.mark.parametrize("gold, kind", [("18", "numeric"), ("5", "latex"), (r"\frac{14}{3}", "latex"),
                                        ("6th", "text"), ("3:30 p.m.", "text"), ("2.0107e-06", "numeric")])  # fmt: skip
def test_true_accuracy_never_below_reward_accuracy(gold, kind):
    for r in RESPONSES:
        g = grade(r, gold, kind)
        assert g.true_correct >= g.reward_correct, (r, gold)


def test_numeric_gold_never_reaches_math_verify(monkeypatch):
    calls = []
    monkeypatch.setattr(grading, "_mv_verify", lambda *a: calls.append(a) or False)
    spans = " ".join(f"$\\sqrt{{{i}}} + x^{{{i}}}$" for i in range(80))
    assert not true_correct(spans + " #### 7", "800", "numeric")
    assert not true_correct(spans + r" \boxed{7}", "800", "latex")
    assert calls == []


def test_one_response_has_a_total_time_bound(slow_math_verify):
    slow_math_verify(10, False)
    spans = " ".join(f"$\\sqrt{{{i}}} + y_{{{i}}}$" for i in range(64))
    start = time.monotonic()
    g = grade(spans + r" \boxed{x+1}", r"x^2+2", "latex", budget_s=0.5)
    elapsed = time.monotonic() - start
    assert not g.true_correct and not g.reward_correct and g.timed_out
    assert elapsed < 1.5, elapsed


def test_time_bound_off_the_main_thread(slow_math_verify):
    import threading

    slow_math_verify(3, True)
    out = {}

    def run():
        start = time.monotonic()
        out["grade"] = grade(r"\boxed{x+1}", r"1+x", "latex", budget_s=0.3)
        out["elapsed"] = time.monotonic() - start

    t = threading.Thread(target=run)
    t.start()
    t.join(5)
    assert out["elapsed"] < 1.0 and out["grade"].timed_out and not out["grade"].reward_correct


def test_real_math_verify_still_decides_latex_golds():
    assert grade(r"so \boxed{\frac{\sqrt{2}}{2}}", r"\frac{1}{\sqrt{2}}", "latex").reward_correct
    assert not grade(r"so \boxed{\frac{\sqrt{3}}{2}}", r"\frac{1}{\sqrt{2}}", "latex").true_correct


INJECTIONS = [
    r"\boxed{__import__('os').system('echo pwned')}",
    r"\boxed{1e100000}",
    r"\boxed{2^{10^{10}}}",
    r"$\frac{1}{2}$ $12,345.678$ $0,5$ $3.14\%$ $007$ $1{,}000$",
    r"\boxed{\text{eval('1+1')}}",
    r"\boxed{lambda: 0}",
    r"$x = 12.5e3$ and $\sqrt{0012}$ and \boxed{-0.25}",
    "\\boxed{\u0663\u0664}",  # Arabic-Indic digits
    r"\boxed{1_000}",
    r"\boxed{0x1F}",
    r"\boxed{(1, 2.5, 3)}",
    r"$\left[ 1.5, 2 \right)$ \boxed{\pi r^2 + 0.001}",
]
_SAFE_NUMBER = re.compile(r"^[0-9]*\.?[0-9]*$")


def test_only_digit_strings_reach_sympy_number(monkeypatch):
    """latex2sympy2 builds numbers with ``sympy.Number(text)`` (a sympify, i.e. eval, of the text): prove
    that only digits and a point get there, whatever the response holds."""
    import latex2sympy2_extended.latex2sympy2 as l2s
    import sympy
    import sympy.parsing.sympy_parser as sp

    seen: list[str] = []
    real_number = sympy.Number

    def recording_number(*args, **kwargs):
        if args and isinstance(args[0], str):
            seen.append(args[0])
        return real_number(*args, **kwargs)

    def no_parse_expr(*args, **kwargs):
        raise AssertionError(f"parse_expr reached with {args!r}")

    monkeypatch.setattr(sympy, "Number", recording_number)
    monkeypatch.setattr(l2s, "Number", recording_number)
    monkeypatch.setattr(l2s, "parse_expr", no_parse_expr)
    monkeypatch.setattr(sp, "parse_expr", no_parse_expr)
    monkeypatch.setattr(grading, "_MV_CACHE", {})
    golds = [r"x^2+1", r"\frac{\sqrt{3}}{2}", r"(1,2.5,3)", r"\pi r^2", r"12,345.678"]
    for text in INJECTIONS:
        for gold in golds:
            grade(text, gold, "latex")
    assert seen, "the recorder saw no number: the test no longer exercises latex2sympy2"
    bad = [s for s in seen if not (s.isascii() and _SAFE_NUMBER.match(s.replace(",", "")))]
    assert bad == []


def test_gsm_hard_sweep_finishes_with_exponent_golds(results_root, monkeypatch):
    """The evaluator over gsm_hard's first 370 rows (6 exponent golds, 16 float-repr golds) with a backend
    that answers every gold written as a plain decimal: nothing aborts and everything is graded right."""
    from decimal import Decimal

    from pspo_repro.data.datasets import load_benchmark
    from pspo_repro.evaluation import evaluator as ev
    from pspo_repro.evaluation.backends import Completion

    problems = load_benchmark("gsm_hard", limit=370)
    assert sum("e" in p.answer for p in problems) == 6
    golds = {p.question: format(Decimal(p.answer), "f") for p in problems}

    class Answering:
        name = "fake"

        def generate(self, requests, max_new_tokens, top_p, top_k=None):
            out = []
            for r in requests:
                gold = next(g for q, g in golds.items() if q in r.prompt)
                out.append([Completion(f"So it is {gold}.\n#### {gold}", (1, 2, 3))] * r.n)
            return out

    monkeypatch.setattr("pspo_repro.evaluation.backends.make_backend", lambda *a, **k: Answering())
    cfg = ev.compose_config(["model=tiny", "eval=gsm_hard", "eval.limit=370", "temperatures=[0.0]"])
    (cell,) = ev.evaluate(cfg)
    m = cell["metrics"]
    assert cell["num_prompts"] == 370 and m["grading_errors"] == 0
    assert m["reward_acc"] == 1.0 and m["true_acc"] == 1.0 and m["maj@1"] == 1.0
