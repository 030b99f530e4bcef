"""Benchmark: time to grade one response (reward- and true-correctness) on the MATH test set.

    .venv/bin/python scripts/bench_grading.py [--dataset math] [--limit N]

For every problem two responses are graded with ``grading.grade`` (one total time bound per response):
its reference solution (correct, ends in the gold's ``\\boxed{}``), and the same solution with the boxed
answer replaced by a wrong one, so true-correctness scans every span of a wrong answer (the slow path the
bound exists for). Prints p50 / p99 / max seconds per response, the number that hit the bound, and the
accuracies (1.0 / 0.0 expected, less what the bound or the grader misses).
"""

from __future__ import annotations

import argparse
import time

import numpy as np


def _wrong(solution: str, gold: str) -> str:
    """The solution with its last boxed answer swapped for a wrong one of the same shape."""
    from pspo_repro.scoring.grading import parse_number

    value = parse_number(gold)
    wrong = str(value + 7) if value is not None else f"{gold}+7"
    i = solution.rfind("\\boxed{")
    if i < 0:
        return solution + f" \\boxed{{{wrong}}}"
    depth, j = 1, i + len("\\boxed{")
    while j < len(solution) and depth:
        depth += {"{": 1, "}": -1}.get(solution[j], 0)
        j += 1
    # Also drop the gold where it is written verbatim elsewhere, so the wrong response is really wrong.
    body = solution[:i].replace(gold, wrong) if len(gold) > 2 else solution[:i]
    return body + f"\\boxed{{{wrong}}}" + solution[j:]


def main() -> None:
    """Grade every response, time each, print the distribution."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", default="math")
    parser.add_argument("--limit", type=int, default=None)
    parser.add_argument("--slowest", type=int, default=10, help="print the N slowest responses")
    args = parser.parse_args()

    from pspo_repro.data.datasets import load_benchmark
    from pspo_repro.scoring import grading

    problems = [p for p in load_benchmark(args.dataset, limit=args.limit) if p.solution]
    grading._warm_up()
    times, timeouts, right, wrong_accepted, labels = [], 0, 0, 0, []
    start = time.monotonic()
    for k, p in enumerate(problems):
        for correct, text in ((True, p.solution), (False, _wrong(p.solution, p.answer))):
            t0 = time.perf_counter()
            g = grading.grade(text, p.answer, p.answer_kind)
            times.append(time.perf_counter() - t0)
            labels.append((k, "reference" if correct else "wrong", p.answer, g.timed_out))
            timeouts += g.timed_out
            if correct:
                right += g.reward_correct
            else:
                wrong_accepted += g.reward_correct
        if (k + 1) % 250 == 0:
            t = np.array(times)
            print(f"  {k + 1}/{len(problems)} problems, {time.monotonic() - start:.0f} s; so far p50 "
                  f"{np.quantile(t, 0.5):.4f} p99 {np.quantile(t, 0.99):.3f} max {t.max():.3f}, "
                  f"hit the bound {timeouts}", flush=True)  # fmt: skip
    t = np.array(times)
    spans = sum(len(grading.answer_candidates(p.solution)) for p in problems) / len(problems)
    print(
        f"{args.dataset}: {len(problems)} problems, {t.size} responses (mean {spans:.1f} candidate spans each); "
        f"seconds per response: p50 {np.quantile(t, 0.5):.4f}, p99 {np.quantile(t, 0.99):.3f}, "
        f"max {t.max():.3f} (bound {grading.GRADE_BUDGET_S:g} s); hit the bound: {timeouts}; "
        f"reference solutions reward-correct: {right / len(problems):.4f}; "
        f"wrong answers accepted (reward): {wrong_accepted}; total {time.monotonic() - start:.0f} s"
    )
    # The items behind the tail, so an overshoot of the bound can be traced to its input.
    for i in np.argsort(t)[::-1][: args.slowest]:
        k, which, gold, hit = labels[i]
        print(
            f"  slow: {t[i]:.3f} s  problem {k} ({which} response, gold {gold[:60]!r}, hit the bound: {hit})"
        )


if __name__ == "__main__":
    main()
