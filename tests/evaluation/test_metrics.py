"""The authors' evaluation metrics, the bootstrap CI over prompts and paired comparisons, by hand."""

from __future__ import annotations

import json
import math
import random
from pathlib import Path

import pytest

from pspo_repro.analysis import aggregate
from pspo_repro.analysis.stats import bootstrap_interval, paired_comparison
from pspo_repro.common.cli import compose_config
from pspo_repro.common.paths import PROJECT_ROOT
from pspo_repro.data.problems import Problem
from pspo_repro.evaluation import cells
from pspo_repro.evaluation import evaluator as ev
from pspo_repro.evaluation.metrics import authors_vote, cell_metrics, maj_correct, pass_at_k, prompt_value

# ---------------------------------------------------------------- the authors' vote


@pytest.mark.parametrize(
    "answers, flags, winner, count, correct",
    [
        ([None, None, "5"], [0, 0, 1], None, 2, 0),  # "no answer" wins: wrong (ours skips it: right)
        (["4", "3"], [0, 1], "4", 1, 0),  # tie: first seen
        (["3", None, None, "3"], [1, 0, 0, 1], "3", 2, 1),  # tie with no answer: "3" seen first
        ([None, "3", "3", None], [0, 1, 1, 0], None, 2, 0),  # tie: no answer seen first wins
        (["7", "7", "2"], [1, 1, 0], "7", 2, 1),
    ],
)
def test_authors_vote_counts_no_answer_and_breaks_ties_first_seen(answers, flags, winner, count, correct):
    assert authors_vote(answers) == (winner, count)
    assert maj_correct(answers, flags) == correct


def test_cell_votes_equal_the_vote_of_each_prompt_taken_alone():
    """cell_metrics votes every prefix of a prompt's samples in one pass; each of its maj@k, agreement and
    unique_answers must equal the per-prompt definition (``prompt_value``: ``maj_correct`` over the first k
    samples, ``authors_vote``'s count), on random answers with ties, "no answer" and repeats."""
    rng = random.Random(0)
    for _ in range(300):
        n = rng.choice([1, 2, 3, 4, 8, 16])
        pool = [None, "1", "2", "3", "10"][: rng.randint(1, 5)]
        rows = []
        for i in range(rng.randint(1, 5)):
            answers = [rng.choice(pool) for _ in range(n)]
            flags = [int(a == "2") for a in answers]
            rows.append({"id": f"p{i}", "n": n, "answers": answers, "reward_flags": flags,
                         "true_flags": flags, "rewards": [float(f) for f in flags], "lengths": [1] * n,
                         "reward_correct": sum(flags), "true_correct": sum(flags)})  # fmt: skip
        got = cell_metrics(rows)
        for metric in [f"maj@{k}" for k in (1, 2, 4, 8, 16) if k <= n] + ["agreement", "unique_answers"]:
            values = [prompt_value(r, metric) for r in rows]
            if all(math.isnan(v) for v in values):
                assert metric not in got
            else:
                assert got[metric] == pytest.approx(
                    sum(v for v in values if v == v) / sum(v == v for v in values)
                )


@pytest.mark.parametrize("n, c", [(16, 0), (16, 1), (16, 3), (16, 8), (16, 15), (16, 16), (4, 2), (1, 1)])
def test_pass_at_k_matches_the_authors_formula_on_the_same_counts(n, c):
    # Their _pass_at_k_from_counts / pass_at_k_estimate: 1 - C(n-c, k) / C(n, k), 1 when n - c < k.
    for k in (1, 2, 4, 8, 16):
        if k > n:
            continue
        theirs = 1.0 if n - c < k else 1 - math.comb(n - c, k) / math.comb(n, k)
        assert pass_at_k(n, c, k) == pytest.approx(theirs, abs=1e-12)
    assert pass_at_k(16, 3, 4) == pytest.approx(1 - 715 / 1820)


def _row(answers, rflags, tflags, rewards, lengths, pid="p"):
    samples = [
        {
            "answer_key": a,
            "reward_correct": r,
            "true_correct": t,
            "reward": w,
            "token_ids": [0] * n,
            "timed_out": 0,
        }
        for a, r, t, w, n in zip(answers, rflags, tflags, rewards, lengths, strict=True)
    ]
    return cells.per_prompt_row({"id": pid, "samples": samples})


def test_cell_metrics_authors_hand_computed():
    rows = [
        _row(
            ["5", "5", None, "4"], [1, 1, 0, 0], [1, 1, 0, 1], [1.05, 1.0, 0.0, 0.05], [10, 20, 30, 40], "a"
        ),
        _row([None, None, "9", "8"], [0, 0, 0, 1], [0, 1, 0, 1], [0.0, 0.0, 0.05, 1.05], [5, 5, 5, 5], "b"),
        _row([None, None, None, None], [0, 0, 0, 0], [0, 0, 0, 0], [0.0, 0.0, 0.0, 0.0], [1, 1, 1, 1], "c"),
    ]
    m = cell_metrics(rows)
    assert m["maj@4"] == pytest.approx(1 / 3)  # a: "5" wins, right; b: no answer wins; c: no answer
    assert m["maj@1"] == pytest.approx(1 / 3)  # first sample alone: a right, b/c no answer
    assert m["maj@2"] == pytest.approx(1 / 3)
    assert m["reward_top1"] == pytest.approx(1 / 3) and m["true_top1"] == pytest.approx(1 / 3)
    assert m["reward_best_of_n"] == pytest.approx(2 / 3) and m["true_best_of_n"] == pytest.approx(2 / 3)
    assert m["agreement"] == pytest.approx((2 / 4 + 2 / 4 + 4 / 4) / 3)
    assert m["unique_answers"] == pytest.approx((2 + 2) / 2)  # c has no answer: left out, as theirs
    assert m["mean_length"] == pytest.approx((100 + 20 + 4) / 12)
    rewards = [1.05, 1.0, 0.0, 0.05, 0.0, 0.0, 0.05, 1.05] + [0.0] * 4
    flags = [1, 1, 0, 0, 0, 0, 0, 1] + [0] * 4
    import numpy as np

    assert m["reward_corr"] == pytest.approx(float(np.corrcoef(rewards, flags)[0, 1]))
    assert m["grading_timeouts"] == 0 and m["grading_errors"] == 0


def test_cell_metrics_are_the_means_of_prompt_value():
    """cell_metrics computes the per-prompt means inline (the hot loop of every table); each must equal the
    mean of prompt_value, the definition, exactly, on rows of varied n, answers and flags."""
    import random

    import numpy as np

    rng = random.Random(0)
    rows = []
    for i in range(40):
        n = rng.choice([4, 8, 16])
        answers = [rng.choice([None, "1", "2", "3"]) for _ in range(n)]
        rflags = [int(a == "1") for a in answers]
        tflags = [int(rng.random() < 0.4) for _ in range(n)]
        rewards = [rng.choice([0.0, 0.05, 1.0, 1.05]) for _ in range(n)]
        rows.append(_row(answers, rflags, tflags, rewards, [rng.randint(1, 9) for _ in range(n)], f"p{i}"))
    m = cell_metrics(rows)
    per_prompt = {k for k in m if "pass@" in k or k.startswith("maj@") or k.endswith(("top1", "best_of_n"))}
    per_prompt |= {"agreement", "unique_answers"}
    assert len(per_prompt) == 3 * 3 + 3 + 4 + 2, sorted(per_prompt)  # n_min 4: k in 1, 2, 4
    for name in sorted(per_prompt):
        values = np.array([np.nan if (v := prompt_value(r, name)) is None else v for r in rows], dtype=float)
        assert m[name] == float(np.nanmean(values)), name


def test_old_rows_without_sample_lists_give_only_the_old_metrics():
    old = {"id": "x", "n": 4, "reward_correct": 1, "true_correct": 2, "reward_maj": 0, "true_maj": 0,
           "mean_length": 3.0}  # fmt: skip
    m = cell_metrics([old])
    assert "maj@4" not in m and m["reward_acc"] == 0.25
    assert prompt_value(old, "maj@4") is None and prompt_value(old, "true_acc") == 0.5


# ---------------------------------------------------------------- bootstrap and paired


def test_bootstrap_interval_over_prompts():
    rng = random.Random(1)
    values = {f"p{i}": float(rng.random() < 0.4) for i in range(400)}
    iv = bootstrap_interval([values])
    assert iv.method == "bootstrap" and iv.low < iv.mean < iv.high
    assert iv.mean == pytest.approx(sum(values.values()) / 400)
    se = math.sqrt(iv.mean * (1 - iv.mean) / 400)  # the interval is about +-1.96 standard errors
    assert (iv.high - iv.low) == pytest.approx(2 * 1.96 * se, rel=0.15)
    assert bootstrap_interval([values]) == iv  # deterministic (fixed seed)
    # seeds are averaged per prompt; prompts missing from one seed are left out
    two = bootstrap_interval([{"a": 1.0, "b": 0.0}, {"a": 0.0, "b": 0.0, "c": 1.0}])
    assert two.mean == pytest.approx(0.25) and two.n == 2


def test_paired_comparison():
    a = {f"p{i}": float(i % 2) for i in range(200)}
    same = paired_comparison([a], [a])
    assert same.diff == 0 and same.p_value == 1.0 and same.low == same.high == 0
    b = {k: (1.0 if i < 20 else v) for i, (k, v) in enumerate(a.items())}  # b right on 10 more prompts
    res = paired_comparison([a], [b])
    assert res.diff == pytest.approx(-10 / 200) and res.high < 0 and res.p_value < 0.01
    assert res.wins == 0 and res.losses == 10 and res.n_prompts == 200
    import scipy.stats

    rng = random.Random(3)
    x = {f"p{i}": rng.random() for i in range(50)}
    y = {f"p{i}": rng.random() for i in range(50)}
    ids = sorted(x)
    assert paired_comparison([x], [y]).p_value == pytest.approx(
        scipy.stats.ttest_rel([x[i] for i in ids], [y[i] for i in ids]).pvalue
    )


# ---------------------------------------------------------------- evaluate: a bad row never aborts


def test_a_bad_gold_row_is_recorded_not_raised():
    class C:
        text, token_ids = "#### 5", [1, 2]

    bad = Problem("x/0", "q", "not a number", "numeric", None)
    rec = ev.grade_samples(bad, [C(), C()])
    assert all(s["reward_correct"] == 0 and "grading_error" in s for s in rec["samples"])
    row = cells.per_prompt_row(rec)
    assert row["grading_error"].startswith("ValueError: numeric gold answer is not a number")
    assert cell_metrics([row])["grading_errors"] == 1
    good = ev.grade_samples(Problem("gsm_hard/218", "q", "2.0107e-06", "numeric", None), [C()])
    assert "grading_error" not in good["samples"][0]


# ---------------------------------------------------------------- aggregate from fabricated cells

CONF = PROJECT_ROOT / "conf"


def _cell(root: Path, method: str, seed: int, temp: float, rows: list[dict], with_lists: bool = True) -> None:
    if not with_lists:
        keep = ("id", "n", "reward_correct", "true_correct", "reward_maj", "true_maj", "mean_length")
        rows = [{k: r[k] for k in keep} for r in rows]
    cell = {
        "schema_version": 1, "model": "tiny", "method": method, "seed": seed, "tag": "", "run_dir": None,
        "checkpoint": "c", "dataset": "gsm8k", "num_prompts": len(rows), "limit": None, "rows_sha256": "s",
        "temperature": temp, "top_p": 1.0, "max_new_tokens": 128, "n_samples": rows[0]["n"],
        "sampling_seed": 123, "prompt_template": "paper", "backend": "hf", "config": {}, "versions": {},
        "git_sha": "x", "per_prompt": rows, "metrics": cell_metrics(rows),
    }  # fmt: skip
    path = root / "eval" / "tiny" / method / f"seed{seed}" / "gsm8k" / f"T{temp:.1f}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(cell))


def _tree(root: Path, with_lists: bool) -> None:
    for method, p_right in (("clip", 0.3), ("pspo", 0.6)):
        for seed in (0, 1):
            rng = random.Random(hash((method, seed)) % 1000)
            for temp, n in ((0.0, 1), (0.8, 16)):
                rows = []
                for i in range(30):
                    ans = [rng.choice(["1", "2", None]) if rng.random() > p_right else "7" for _ in range(n)]
                    flags = [int(a == "7") for a in ans]
                    rows.append(_row(ans, flags, flags, [f + 0.05 for f in flags], [10] * n, f"p{i}"))
                _cell(root, method, seed, temp, rows, with_lists)


def _run(root: Path, out: Path, *overrides: str):
    cfg = compose_config(CONF, "aggregate", [f"results_dir={root}", f"out_dir={out}", *overrides])
    return aggregate.run(cfg)


def test_aggregate_maj16_table_paired_and_bootstrap(tmp_path):
    root, out = tmp_path / "res", tmp_path / "out"
    _tree(root, with_lists=True)
    outputs = _run(root, out, 'add_metrics=["maj@16",reward_top1]', "paired.pairs=[[pspo,clip]]",
                   'paired.metrics=["maj@16",true_acc]', "ci=bootstrap")  # fmt: skip
    table = (out / "temperature_maj@16.md").read_text()
    assert "Majority vote (maj@16)" in table and "T=0.8" in table and "bootstrap" in table
    assert (out / "temperature_maj@16.png").is_file() and (out / "temperature_reward_top1.md").is_file()
    paired = (out / "paired_pspo_vs_clip_maj_at_16.md").read_text()
    assert "GR-PSPO minus GRPO-clip" in paired and "| 0.8 |" in paired
    import pandas as pd

    frame = pd.read_csv(out / "paired_pspo_vs_clip_true_acc.csv")
    assert set(frame["temperature"]) == {0.0, 0.8} and (frame["diff"] > 0).all()
    assert not any("maj@16: missing" in m for m in outputs.messages)


def test_aggregate_says_in_one_line_what_old_cells_lack(tmp_path):
    root, out = tmp_path / "res", tmp_path / "out"
    _tree(root, with_lists=False)
    outputs = _run(root, out, 'add_metrics=["maj@16"]', "paired.pairs=[[pspo,clip]]")
    notes = [m for m in outputs.messages if m.startswith("maj@16: missing")]
    assert len(notes) == 1 and "\n" not in notes[0] and "rerun their eval stage" in notes[0]
    assert not (out / "temperature_maj@16.md").exists()
    assert (out / "paired_pspo_vs_clip_true_acc.md").is_file()  # computable from the old counts


def test_bad_pair_is_a_config_error(tmp_path):
    with pytest.raises(aggregate.ConfigError, match="paired.pairs"):
        _run(tmp_path, tmp_path / "o", "paired.pairs=[[pspo,pspo]]")
