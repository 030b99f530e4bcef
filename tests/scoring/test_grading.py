"""Grading: hand cases, the authors' reward, and gold solutions of real benchmarks as responses."""

from __future__ import annotations

import threading

import pytest

from pspo_repro.data.datasets import load_benchmark
from pspo_repro.data.problems import list_items
from pspo_repro.scoring.grading import (
    answers_equivalent,
    extract_final_answer,
    final_answer_key,
    find_numbers,
    grade,
    gsm8k_numeric_reward,
    parse_number,
    reward_correct,
    true_correct,
)


@pytest.mark.parametrize(
    "text, expected",
    [
        ("so 3 + 4 = 7\n#### 7", "7"),
        ("#### 5\nthen more text #### 9 apples", "9 apples"),
        (r"the area is \boxed{\frac{1}{2}} square units, 3 times", r"\frac{1}{2}"),
        (r"\boxed{1} then \boxed{x^{2}+1}", "x^{2}+1"),
        ("We have 3 apples and 12 pears.", "12"),
        ("no numbers here", None),
    ],
)
def test_extract_final_answer(text, expected):
    assert extract_final_answer(text) == expected


@pytest.mark.parametrize(
    "pred, gold, ok",
    [
        ("18", "18", True),
        ("18.0", "18", True),
        ("18.00", "18", True),
        ("$1,000", "1000", True),
        ("1,000 dollars", "1000", True),
        ("1/2", "0.5", True),
        (r"\frac{1}{2}", "0.5", True),
        ("-3", "-3", True),
        ("3", "-3", False),
        ("20%", "20", True),
        ("20%", "0.2", False),  # never read a percentage as N/100
        ("0.2", "20", False),
        ("10001", "10000", False),  # no loose tolerance: N+1 is wrong
        ("1,00", "100", False),  # invalid thousands grouping is not 100
        ("x = 5", "5", False),  # the tail must be the number, not an equation
        ("seven", "7", False),
        ("", "7", False),
    ],
)
def test_numeric_equivalence(pred, gold, ok):
    assert answers_equivalent(pred, gold, "numeric") is ok


@pytest.mark.parametrize(
    "pred, gold, ok",
    [
        (r"\dfrac{14}{3}", r"\frac{14}{3}", True),
        (r"2\sqrt{50}", r"10\sqrt{2}", True),
        (r"3\sqrt{50}", r"10\sqrt{2}", False),
        (r"\left( 3, \frac{\pi}{2} \right)", r"\left( 3, \frac{\pi}{2} \right)", True),
        (r"(3, \pi/2)", r"\left( 3, \frac{\pi}{2} \right)", True),
        ("4", r"\frac{14}{3}", False),
        (r"\text{Yes}", "Yes", True),
    ],
)
def test_latex_equivalence(pred, gold, ok):
    assert answers_equivalent(pred, gold, "latex") is ok


def test_latex_equivalence_off_main_thread():
    # math-verify's signal.alarm timeouts raise off the main thread; our bound must not.
    out = []
    worker = threading.Thread(
        target=lambda: out.append(
            (
                answers_equivalent(r"2\sqrt{50}", r"10\sqrt{2}", "latex"),
                answers_equivalent(r"2\sqrt{51}", r"10\sqrt{2}", "latex"),
            )
        )
    )
    worker.start()
    worker.join(30)
    assert out == [(True, False)]


def test_reward_vs_true_accuracy():
    response = "First 12 + 30 = 42 apples, but then half are eaten.\n#### 21"
    assert reward_correct(response, "21", "numeric") and true_correct(response, "21", "numeric")
    assert not reward_correct(response, "42", "numeric")
    assert true_correct(response, "42", "numeric")  # appears mid-response
    assert not true_correct(response, "43", "numeric")
    latex = r"We find $x = \frac{14}{3}$, hence the answer is \boxed{5}."
    assert true_correct(latex, r"\frac{14}{3}", "latex")
    assert not reward_correct(latex, r"\frac{14}{3}", "latex")
    assert reward_correct(latex, "5", "latex")


def test_final_answer_key_groups_equal_answers():
    assert final_answer_key("#### 1,000", "numeric") == final_answer_key("so #### 1000.0 dollars", "numeric")
    assert final_answer_key("nothing", "numeric") is None


@pytest.mark.parametrize(
    "response, gold, score",
    [
        ("3 + 4 = 7\n#### 7 apples", "7", 1.0),  # correct (+0.05 bonus clipped to 1)
        ("#### 12", "7", 0.05),  # wrong, format bonus
        ("#### 7", "7", 1.0),  # correct without bonus (one digit does not match their format regex)
        ("#### 8", "7", 0.0),  # wrong, no bonus
        ("the answer is 7", "7", 1.0),  # last-number fallback
        ("no number at all", "7", 0.0),  # -0.2 clipped
        ("#### 7.0000001", "7", 1.0),  # their isclose tolerance
        ("#### 1,234", "1234", 1.0),
    ],
)
def test_gsm8k_numeric_reward(response, gold, score):
    assert gsm8k_numeric_reward(response, gold) == pytest.approx(score)


def test_parse_number_rejects_expressions():
    assert parse_number("3/4") == parse_number("0.75")
    assert parse_number("2+2") is None
    assert parse_number("__import__('os')") is None


# ---------------------------------------------------------------- gold solutions on real data


def _replace_last_boxed(text: str, new: str) -> str:
    start = text.index("{", text.rfind("\\boxed")) + 1
    depth, i = 1, start
    while depth:
        depth += {"{": 1, "}": -1}.get(text[i], 0)
        i += 1
    return text[:start] + new + text[i - 1 :]


def test_gsm8k_gold_solutions(data_dir):
    problems = load_benchmark("gsm8k")
    assert len(problems) == 1319
    acc = sum(reward_correct(p.solution, p.answer, p.answer_kind) for p in problems) / len(problems)
    assert acc >= 0.995
    wrong = [p.solution.rsplit("####", 1)[0] + f"#### {parse_number(p.answer) + 1}" for p in problems]
    fp = sum(reward_correct(w, p.answer, "numeric") for w, p in zip(wrong, problems, strict=True))
    assert fp / len(problems) < 0.01
    # The authors' reward agrees on gold solutions (their measured 100%).
    assert sum(gsm8k_numeric_reward(p.solution, p.answer) == 1.0 for p in problems) / len(problems) >= 0.995


def test_math500_gold_solutions(data_dir):
    problems = load_benchmark("math500")
    assert len(problems) == 500
    acc = sum(reward_correct(p.solution, p.answer, p.answer_kind) for p in problems) / len(problems)
    assert acc >= 0.98
    fp = 0
    for k, p in enumerate(problems):
        value = parse_number(p.answer)
        if value is not None:
            wrong = str(value + 1)
        else:  # another problem's (textually different) answer
            wrong = next(
                q.answer
                for q in problems[k + 1 :] + problems[:k]
                if q.answer.replace(" ", "") != p.answer.replace(" ", "")
            )
        fp += reward_correct(_replace_last_boxed(p.solution, wrong), p.answer, "latex")
    assert fp / len(problems) < 0.01


def test_math500_gold_from_solution_box_matches_answer_field(data_dir):
    # The MATH full test set has no answer field: the gold is the last \boxed{} of the solution.
    # On the MATH-500 rows (which have both) the two must agree under our equivalence.
    full = {p.id.split("/", 1)[1]: p for p in load_benchmark("math")}
    rows = load_benchmark("math500")
    agree = sum(answers_equivalent(full[p.id.split("/", 1)[1]].answer, p.answer, "latex") for p in rows)
    assert agree / len(rows) >= 0.98


# ---------------------------------------------------------------- a number inside an expression (issue 24, item 6)


@pytest.mark.parametrize(
    "response, gold, kind",
    [
        ("#### 2^{10}", "2", "numeric"),  # the base of a power was read as the answer
        ("It is 10^2", "2", "numeric"),  # ... and the exponent, by the last-number fallback
        ("It is 10^2", "10", "numeric"),
        ("The answer is 2^{10}", "2", "numeric"),
        (r"Thus $x = \sqrt{2}$.", "2", "latex"),  # the argument of a root
        (r"so the length is 3\sqrt{2}", "2", "latex"),
        (r"so the length is 3\sqrt{2}", "3", "latex"),  # its coefficient
        (r"so the length is \sqrt[3]{2}", "3", "latex"),  # its index
        (r"so x = \frac{\sqrt{6}}{6}", "6", "latex"),  # a numerator or denominator
        (r"so it takes 2\frac{1}{3} cups", "2", "numeric"),  # the whole part of a mixed number
        (r"the area is 3\pi", "3", "latex"),
        (r"it weighs 2.5 \times 10^{-6} grams", "2.5", "numeric"),  # a mantissa
        (r"it is \log 8", "8", "numeric"),
        ("it is 10\u00b2", "10", "numeric"),  # the base of a superscript power
    ],
)
def test_a_number_inside_an_expression_is_not_the_answer(response, gold, kind):
    assert not reward_correct(response, gold, kind)
    assert not true_correct(response, gold, kind)  # nor does it make the gold "appear"
    if kind == "numeric":
        assert gsm8k_numeric_reward(response, gold) < 0.5


def test_true_accuracy_a_digit_inside_a_fraction_is_not_the_gold_angle():
    gold = r"6^{\circ}"
    assert not true_correct(r"The answer is $\boxed{\frac{\sqrt{6}}{6}}$.", gold, "latex")
    assert not true_correct(r"so $\sin x = \frac{1}{6}$ and $x^6 = 1$", gold, "latex")
    for response in [r"the angle is 6^\circ", "the angle is 6 degrees", r"so $\angle A = 6^{\circ}$, done"]:
        assert true_correct(response, gold, "latex") and reward_correct(response, gold, "latex"), response


@pytest.mark.parametrize(
    "response, gold, kind",
    [
        ("So 2^{10} = 1024.", "1024", "numeric"),
        ("x^2 = 4, so x = 2", "2", "numeric"),
        (r"$\sqrt{16} = 4$", "4", "latex"),
        (r"\frac{1}{2} \cdot 10 = 5 apples", "5", "numeric"),
        (r"she walks $25\frac{\text{miles}}{\text{day}}$.", "25", "numeric"),  # a unit, not a mixed number
        (r"the angle is $60^\circ$.", r"60^\circ", "latex"),
        ("It costs $18 in total.", "18", "numeric"),
        ("The answer is **18**.", "18", "numeric"),
        (r"#### 5\text{ cm}", "5", "numeric"),
    ],
)
def test_numbers_on_their_own_still_count(response, gold, kind):
    assert reward_correct(response, gold, kind) and true_correct(response, gold, kind)


def test_find_numbers_skips_the_parts_of_expressions():
    text = r"Since $x^2 = 9$ and $3\sqrt{2} \approx 4.24$, $\frac{1}{2} + 2^{10} = 1024.5$; 6^\circ, 7 apples"
    assert find_numbers(text) == ["9", "4.24", "1024.5", "6", "7"]
    assert find_numbers(r"\sqrt[3]{8} \binom{5}{2} x_{12} e^{-3} 10^ 4 \log 8") == []


# ---------------------------------------------------------------- list answers


@pytest.mark.parametrize(
    ("text", "items"),
    [
        ("70,110", ["70", "110"]),
        ("70, 110", ["70", "110"]),
        (r"19 \text{ and }43", ["19", "43"]),
        (r"6, 8\text{, and }10", ["6", "8", "10"]),
        ("70 and 110", ["70", "110"]),
        (r"1+\sqrt 2,\ 1-\sqrt 2", [r"1+\sqrt 2", r"1-\sqrt 2"]),
        # one answer each: brackets, braces, a thousands separator written \!, a thin space \,
        ("(1,2)", ["(1,2)"]),
        ("[0, 1)", ["[0, 1)"]),
        (r"\{1, 2\}", [r"\{1, 2\}"]),
        (r"10{,}000", [r"10{,}000"]),
        (r"111, \! 111, \! 111", [r"111, \! 111, \! 111"]),
        (r"0.25\,\text{ cm}", [r"0.25\,\text{ cm}"]),
        (r"\text{cats and dogs}", [r"\text{cats and dogs}"]),
        (r"\text{(E)},", [r"\text{(E)}"]),
    ],
)
def test_list_items(text, items):
    assert list_items(text) == items


@pytest.mark.parametrize(
    ("response", "ok"),
    [
        ("#### 70, 110", True),
        ("#### 70,110", True),
        ("#### 110, 70", True),  # "Enter all the solutions": any order
        (r"The solutions are $\boxed{70^\circ, 110^\circ}$.", True),
        ("#### 70 and 110", True),
        ("#### 70110", False),  # the number the gold was once read as
        ("#### 70", False),  # one of the two
        ("#### 70, 110, 250", False),  # one too many
        ("#### 70, 70", False),
    ],
)
def test_a_list_gold_is_graded_as_a_list(response, ok):
    g = grade(response, "70,110", "list")
    assert (g.reward_correct, g.true_correct) == (ok, ok)


def test_list_true_accuracy_needs_the_whole_list_in_one_span():
    assert true_correct(r"Candidates: $70, 110$. Checking ... #### 5", "70,110", "list")
    assert not true_correct("x = 70 works, and x = 110 works too. #### 5", "70,110", "list")
    assert answers_equivalent(r"\sqrt{5}, -\sqrt{5}", r"-\sqrt{5}, \sqrt{5}", "list")


def test_list_answers_vote_together_in_any_order():
    keys = {final_answer_key(r, "list") for r in ("#### 110, 70", "#### 70,110", r"\boxed{70, 110}")}
    assert keys == {"110,70"}


@pytest.mark.parametrize("response", ["#### 1,000", "#### 1,000 dollars", "#### $1,000.00"])
def test_a_thousands_separator_is_still_one_number(response):
    """GSM8K-style numeric golds: "1,000" is 1000, never the list 1, 000."""
    assert reward_correct(response, "1000", "numeric")
    assert true_correct(f"It costs 1,000 dollars.\n{response}", "1000", "numeric")
    assert not reward_correct(response, "1", "numeric")
    assert final_answer_key(response, "numeric") == "1000"
