"""The evaluation metrics of one cell, from its per-prompt records (pure Python + numpy, no torch).

Besides our two accuracies (reward-style and true, see ``grading``) these are the metrics the authors'
analysis code reports (``maths_plots.py`` in MCDwyer/GR-PSPO, read for its definitions):

- ``maj@k``: their majority vote over the first k samples. "No answer" is a candidate and can win (then
  the prompt counts as wrong); ties go to the answer seen first (``Counter.most_common``); the winner is
  graded reward-style (its final answer against the gold).
- ``reward_top1`` / ``true_top1``: the first sample's correctness (their "top-1" at T > 0).
- ``reward_best_of_n`` / ``true_best_of_n``: any of the n samples is correct.
- ``authors_acc`` / ``authors_pass@k``: the same with a sample counted correct when the authors' reward
  exceeds 0.5 (``pspo_repro.scoring.authors_reward``): the numbers comparable with the paper's.
- ``reward_pass@k`` / ``true_pass@k``: the unbiased estimator, k <= n (their ``pass_at_k_estimate``).
- ``agreement``: the winning answer's share of the n samples ("no answer" included), mean over prompts.
- ``unique_answers``: distinct non-empty final answers per prompt, mean over prompts with at least one.
- ``mean_length``: completion tokens per sample.
- ``reward_corr``: Pearson correlation over all samples between the authors' reward value and
  reward-style correctness (omitted when either is constant or there are 5 samples or fewer, as theirs).
"""

from __future__ import annotations

import functools
from collections.abc import Hashable, Sequence
from typing import Any

import numpy as np


@functools.lru_cache(maxsize=4096)  # a handful of (n, c, k) across a whole results tree; millions of calls
def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k for one prompt: 1 - C(n-c, k) / C(n, k) (Chen et al. 2021).

    ``n`` samples of which ``c`` are correct. Requires 1 <= k <= n and 0 <= c <= n.
    """
    if not (0 <= c <= n) or not (1 <= k <= n):
        raise ValueError(f"pass_at_k needs 0 <= c <= n and 1 <= k <= n, got n={n}, c={c}, k={k}")
    if n - c < k:
        return 1.0
    # Product form avoids huge binomials: prod_{i=n-c+1}^{n} (1 - k/i).
    return float(1.0 - np.prod(1.0 - k / np.arange(n - c + 1, n + 1)))


def majority_vote(answers: Sequence[Hashable | None], correct: Sequence[bool]) -> bool:
    """Whether the most frequent non-empty answer is a correct one (ties: first seen wins).

    ``answers[i]`` is sample i's normalised final answer (None when none was found) and
    ``correct[i]`` whether sample i was graded correct.
    """
    if len(answers) != len(correct):
        raise ValueError(f"majority_vote: {len(answers)} answers but {len(correct)} grades")
    counts = _tally(answers)
    counts.pop(None, None)  # "no answer" is no candidate here; the others keep their first-seen order
    if not counts:
        return False
    winner = _first_most_frequent(counts)
    return bool(next(c for a, c in zip(answers, correct, strict=True) if a == winner))


def _tally(answers: Sequence[Hashable | None]) -> dict[Hashable | None, int]:
    """How often each answer occurs, keys in the order first seen (a dict keeps insertion order)."""
    counts: dict[Hashable | None, int] = {}
    for a in answers:
        counts[a] = counts.get(a, 0) + 1
    return counts


def _first_most_frequent(counts: dict[Any, int]) -> Any:
    """The first-seen of the most frequent answers of a ``_tally``: ``max`` returns the first of equal maxima
    (``Counter.most_common``'s tie rule; a plain dict and this ``max`` cost ~half of building a Counter and
    scanning for its top, and analysis votes millions of times)."""
    return max(counts, key=counts.__getitem__)


PASS_KS = (1, 2, 4, 8, 16)
# Per-prompt fields (lists, one entry per sample) the metrics beyond the two accuracies need.
SAMPLE_FIELDS = ("answers", "reward_flags", "true_flags", "rewards", "lengths")


def authors_vote(answers: Sequence[str | None]) -> tuple[str | None, int]:
    """The authors' majority vote: (winning answer or None for "no answer", its count); ties: first seen."""
    if not answers:
        raise ValueError("authors_vote needs at least one answer")
    counts = _tally(answers)
    winner = _first_most_frequent(counts)
    return winner, counts[winner]


def maj_correct(answers: Sequence[str | None], flags: Sequence[int]) -> int:
    """1 if the authors' vote winner is a graded-correct answer (a "no answer" winner is wrong)."""
    if len(answers) != len(flags):
        raise ValueError(f"maj_correct: {len(answers)} answers but {len(flags)} grades")
    winner, _ = authors_vote(answers)
    if winner is None:
        return 0
    return int(next(f for a, f in zip(answers, flags, strict=True) if a == winner))


# The metric keys a cell can hold (``cell_metrics``): these names, and ``<family>@k`` of these families.
NAMED_METRICS = (
    "true_acc", "reward_acc", "authors_acc", "reward_maj", "true_maj", "mean_length", "reward_top1",
    "true_top1", "reward_best_of_n", "true_best_of_n", "agreement", "unique_answers", "reward_corr",
    "grading_timeouts", "grading_errors",
)  # fmt: skip
K_METRICS = ("maj", "reward_pass", "true_pass", "authors_pass")


def is_metric_name(name: str) -> bool:
    """Whether ``name`` is a metric key a cell can hold: one of ``NAMED_METRICS`` or ``<family>@k`` for a
    family of ``K_METRICS`` and k an integer >= 1 written plainly (``maj@16``; not ``maj@0``, ``maj@abc``)."""
    family, at, k = name.partition("@")
    if at:
        return family in K_METRICS and k.isdigit() and k.isascii() and not k.startswith("0")
    return name in NAMED_METRICS


def has_samples(row: dict[str, Any]) -> bool:
    """Whether a per-prompt row carries the per-sample lists (cells written before they existed do not)."""
    return all(f in row for f in SAMPLE_FIELDS)


_KINDS = ("reward", "true", "authors")


def prompt_value(row: dict[str, Any], metric: str) -> float | None:
    """One prompt's contribution to a cell metric (the cell value is the mean over prompts, NaN excluded).

    None when the row lacks what the metric needs. ``reward_corr`` is not a mean over prompts: ValueError.
    """
    n = int(row["n"])
    # Dispatch on the metric's kind prefix once (analysis calls this for every prompt of every cell).
    kind, sep, what = metric.partition("_")
    if sep and kind in _KINDS:
        if kind == "authors" and "authors_correct" not in row:
            return None
        if what == "acc":
            return row[f"{kind}_correct"] / n
        if what.startswith("pass@"):
            k = int(metric.split("@", 1)[1])
            return pass_at_k(n, int(row[f"{kind}_correct"]), k) if k <= n else None
        if what == "maj":
            return float(row[metric]) if metric in row else None
        if what == "best_of_n":
            return float(row[f"{kind}_correct"] > 0)
    if metric == "mean_length":
        return float(row["mean_length"])
    if metric == "reward_corr":
        raise ValueError("reward_corr is a correlation over samples, not a mean over prompts")
    if not has_samples(row):
        return None
    if metric.startswith("maj@"):
        k = int(metric.split("@", 1)[1])
        return float(maj_correct(row["answers"][:k], row["reward_flags"][:k])) if k <= n else None
    if metric == "reward_top1":
        return float(row["reward_flags"][0])
    if metric == "true_top1":
        return float(row["true_flags"][0])
    if metric == "agreement":
        return authors_vote(row["answers"])[1] / n
    if metric == "unique_answers":
        distinct = {a for a in row["answers"] if a is not None}
        return float(len(distinct)) if distinct else float("nan")
    raise ValueError(f"unknown per-prompt metric {metric!r}")


def sample_lists(samples: list[dict[str, Any]]) -> dict[str, list]:
    """The per-sample lists of a per-prompt row, from a prompt's graded samples (``evaluate.grade_samples``)."""
    return {
        "answers": [s["answer_key"] for s in samples],
        "reward_flags": [int(s["reward_correct"]) for s in samples],
        "true_flags": [int(s["true_correct"]) for s in samples],
        "rewards": [float(s["reward"]) for s in samples],
        "lengths": [len(s["token_ids"]) for s in samples],
    }


def _votes(answers: list[str | None], flags: list[int], ks: list[int]) -> tuple[list[int], int, int]:
    """One prompt's votes in one pass over its samples: ``maj_correct`` over the first k samples for each k
    of ``ks`` (ascending), the winning count of the vote over all of them (``authors_vote``) and the number of
    distinct non-empty answers. Lists of unequal or short length take ``maj_correct``'s own path (its error)."""
    if not answers or len(answers) != len(flags) or (ks and len(answers) < ks[-1]):
        maj = [maj_correct(answers[:k], flags[:k]) for k in ks]
        top = authors_vote(answers)[1]
        return maj, top, len({a for a in answers if a is not None})
    counts: dict[str | None, int] = {}
    first: dict[str | None, int] = {}
    maj, pending = [], iter(ks)
    k = next(pending, None)
    for i, a in enumerate(answers):
        if a in counts:
            counts[a] += 1
        else:
            counts[a], first[a] = 1, i
        if i + 1 == k:  # the vote of the first k samples: the first seen of the most frequent so far
            winner = _first_most_frequent(counts)
            maj.append(0 if winner is None else int(flags[first[winner]]))
            k = next(pending, None)
    return maj, max(counts.values()), len(counts) - (None in counts)


def _mean(values: list[float | None]) -> float:
    arr = np.array([np.nan if v is None else v for v in values], dtype=float)
    return float(np.nanmean(arr)) if np.isfinite(arr).any() else float("nan")


def cell_metrics(per_prompt: list[dict[str, Any]]) -> dict[str, float]:
    """Every metric of one cell from its per-prompt rows (the authors' ones only when rows carry samples).

    A metric whose per-prompt field some row lacks is left out (the evaluator writes every field; older
    cells and hand-made ones may not), so analysis can recompute whatever a cell's records can give.
    """
    total = sum(r["n"] for r in per_prompt)
    n_min = min(r["n"] for r in per_prompt)

    def have(field: str) -> bool:
        return all(field in r for r in per_prompt)

    metrics: dict[str, float] = {}
    for name, field in (("reward_acc", "reward_correct"), ("true_acc", "true_correct")):
        if have(field):
            metrics[name] = sum(r[field] for r in per_prompt) / total
    for name in ("reward_maj", "true_maj"):
        if have(name):
            metrics[name] = sum(r[name] for r in per_prompt) / len(per_prompt)
    if have("mean_length"):
        metrics["mean_length"] = sum(r["mean_length"] * r["n"] for r in per_prompt) / total
    # Rows from before the authors' column existed have no authors_correct: no authors_* metrics then.
    kinds = [kind for kind in ("reward", "true") if have(f"{kind}_correct")]
    if have("authors_correct"):
        kinds.append("authors")
        metrics["authors_acc"] = sum(r["authors_correct"] for r in per_prompt) / total
    ns = [int(r["n"]) for r in per_prompt]
    for k in PASS_KS:
        if k > n_min:
            break
        for kind in kinds:  # prompt_value's pass@k, without its per-call dispatch (the hot loop of analysis)
            field = f"{kind}_correct"
            metrics[f"{kind}_pass@{k}"] = _mean(
                [
                    pass_at_k(n, int(r[field]), k) if k <= n else None
                    for r, n in zip(per_prompt, ns, strict=True)
                ]
            )
    if not all(has_samples(r) for r in per_prompt):
        return metrics
    vote_ks = [k for k in PASS_KS if k <= n_min]
    votes = [_votes(r["answers"], r["reward_flags"], vote_ks) for r in per_prompt]
    for j, k in enumerate(vote_ks):
        metrics[f"maj@{k}"] = _mean([float(maj[j]) for maj, _, _ in votes])
    metrics["reward_top1"] = _mean([float(r["reward_flags"][0]) for r in per_prompt])
    metrics["true_top1"] = _mean([float(r["true_flags"][0]) for r in per_prompt])
    for kind in ("reward", "true"):
        if kind in kinds:
            metrics[f"{kind}_best_of_n"] = _mean([float(r[f"{kind}_correct"] > 0) for r in per_prompt])
    metrics["agreement"] = _mean([top / n for (_, top, _), n in zip(votes, ns, strict=True)])
    metrics["unique_answers"] = _mean([float(d) if d else float("nan") for _, _, d in votes])
    rewards = np.array([x for r in per_prompt for x in r["rewards"]], dtype=float)
    flags = np.array([x for r in per_prompt for x in r["reward_flags"]], dtype=float)
    if rewards.size > 5 and rewards.std() > 0 and flags.std() > 0:
        metrics["reward_corr"] = float(np.corrcoef(rewards, flags)[0, 1])
    metrics["grading_timeouts"] = float(sum(r.get("timeouts", 0) for r in per_prompt))
    metrics["grading_errors"] = float(sum(1 for r in per_prompt if r.get("grading_error")))
    return {k: v for k, v in metrics.items() if v == v}  # NaN (no prompt had an answer) is left out
