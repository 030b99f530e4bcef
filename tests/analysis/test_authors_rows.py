"""The authors' denominators and their pooled Wilson interval (issue 24, items 3 and 4).

Their maths_plots.py ``load_runs`` skips a prompt whose gold ``_extract_final_answer`` cannot read, so
every number of theirs is over the scorable prompts; ``_pooled_binom`` rounds the pooled correct count
(half to even) before ``proportion_confint(..., method="wilson")`` and reports count / trials. The
fixture trees here are written by the tests (never the real results/), with per-sample lists as the
evaluator writes them and gold strings like ASDiv's and MATH-500's.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pytest
from statsmodels.stats.proportion import proportion_confint

from pspo_repro.analysis import aggregate
from pspo_repro.analysis.results_io import (
    ResultsError,
    authors_gold_parses,
    eval_long,
    is_proportion,
    load_eval_cells,
)
from pspo_repro.analysis.stats import wilson_pooled
from pspo_repro.analysis.tables import Names, cell_intervals, main_table, temperature_table
from pspo_repro.common.cli import compose_config
from pspo_repro.common.paths import PROJECT_ROOT
from pspo_repro.evaluation.metrics import cell_metrics, majority_vote, prompt_value

CONF = str(PROJECT_ROOT / "conf")
# Ten ASDiv-style golds: two have no number, so the authors' extractor returns None and their tables skip them.
GOLDS = ["9 (apples)", "Mrs. Hilt", "12", "3/4", "Yes", "7 (years old)", "1,200", "5", "40 (pages)", "2"]
SCORABLE = [i for i, g in enumerate(GOLDS) if g not in ("Mrs. Hilt", "Yes")]
N = 4  # samples per prompt at T = 0.8
NAMES = Names({}, {}, {}, [], [], [])


def prompt_row(i: int, seed: int, n: int) -> dict:
    """One per-prompt row with its per-sample lists; the authors' reward is 0 wherever the gold has no number."""
    rng = np.random.default_rng(100 * seed + i)
    true_flags = [int(x) for x in rng.integers(0, 2, n)]
    reward_flags = [t * int(x) for t, x in zip(true_flags, rng.integers(0, 2, n), strict=True)]
    scorable = i in SCORABLE
    rewards = [(1.0 if f else 0.05) if scorable else 0.0 for f in reward_flags]
    answers = [str(rng.integers(0, 3)) if not f else "gold" for f in reward_flags]
    return {
        "id": f"asdiv_paper/{i}", "n": n, "reward_correct": sum(reward_flags), "true_correct": sum(true_flags),
        "authors_correct": sum(r > 0.5 for r in rewards), "authors_reward_mean": sum(rewards) / n,
        "reward_maj": int(majority_vote(answers, [bool(f) for f in reward_flags])), "true_maj": int(2 * sum(true_flags) > n),
        "mean_length": 20.0, "answers": answers, "reward_flags": reward_flags, "true_flags": true_flags,
        "rewards": rewards, "lengths": [20] * n, "timeouts": 0,
    }  # fmt: skip


def write_cell(root: Path, method: str, seed: int, temp: float, golds: str | None = "completions") -> Path:
    """A cell of 10 prompts; ``golds``: "completions" (the file beside it), "rows" (per-prompt
    ``authors_gold``), or None (neither, as committed copies hold)."""
    n = 1 if temp == 0.0 else N
    rows = [prompt_row(i, seed, n) for i in range(len(GOLDS))]
    if golds == "rows":
        for row, gold in zip(rows, GOLDS, strict=True):
            row["authors_gold"] = gold
    cell = {
        "schema_version": 1, "model": "tiny", "method": method, "seed": seed, "tag": "", "run_dir": None,
        "checkpoint": "c", "dataset": "asdiv_paper", "split": "test", "num_prompts": len(GOLDS), "limit": None,
        "rows_sha256": "sha", "temperature": temp, "top_p": 1.0, "max_new_tokens": 64, "n_samples": N,
        "sampling_seed": 123, "prompt_template": "paper", "backend": "hf", "config": {}, "versions": {},
        "git_sha": "x", "grader": 2, "per_prompt": rows, "metrics": cell_metrics(rows),
    }  # fmt: skip
    folder = root / "eval" / "tiny" / method / f"seed{seed}" / "asdiv_paper"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"T{temp:.1f}.json"
    path.write_text(json.dumps(cell))
    if golds == "completions":
        lines = [
            {"id": r["id"], "gold": g, "authors_gold": g, "samples": []}
            for r, g in zip(rows, GOLDS, strict=True)
        ]
        with gzip.open(folder / f"T{temp:.1f}.completions.jsonl.gz", "wt", encoding="utf-8") as fh:
            fh.write("".join(json.dumps(x) + "\n" for x in lines))
    return path


def build(root: Path, golds: str | None = "completions") -> None:
    for seed in range(3):
        for temp in (0.0, 0.8):
            write_cell(root, "pspo", seed, temp, golds)


def per_seed_rows(root: Path, temp: float) -> list[list[dict]]:
    return [json.loads((root / "eval" / "tiny" / "pspo" / f"seed{s}" / "asdiv_paper" / f"T{temp:.1f}.json")
                       .read_text())["per_prompt"] for s in range(3)]  # fmt: skip


def long_of(root: Path):
    return eval_long(load_eval_cells(root))


# ---------------------------------------------------------------- item 3: the rows they used


def test_the_authors_extractor_drops_the_text_golds():
    assert [authors_gold_parses(g) for g in GOLDS].count(False) == 2
    assert not authors_gold_parses(r"\text{east}") and not authors_gold_parses(r"\pi")
    assert authors_gold_parses(r"\frac{14}{3}")  # read as 3, their last number: scorable, if wrongly


def test_benchmark_counts_of_unparseable_golds(data_dir):
    """The counts the captions report for the paper's sets: 11 of MATH-500's 500 golds and 56 of ASDiv's
    2305 (eval=asdiv_paper) have no number the authors' extractor reads; GSM8K and ChilleD/SVAMP none."""
    from pspo_repro.data.datasets import load_benchmark

    def dropped(name):
        problems = load_benchmark(name)  # the gold the evaluator gives their reward: authors_gold or answer
        return len(problems), sum(not authors_gold_parses(p.authors_gold or p.answer) for p in problems)

    assert dropped("math500") == (500, 11)
    assert dropped("asdiv_paper") == (2305, 56)
    assert dropped("gsm8k") == (1319, 0) and dropped("svamp_paper") == (300, 0)


@pytest.mark.parametrize("golds", ["completions", "rows"])
def test_authors_columns_use_only_the_scorable_rows(results_root, golds):
    build(results_root, golds)
    long = long_of(results_root)
    for temp in (0.0, 0.8):
        for s, rows in enumerate(per_seed_rows(results_root, temp)):
            kept = [r for i, r in enumerate(rows) if i in SCORABLE]
            sel = long[(long["seed"] == s) & (long["temperature"] == temp)].set_index("metric")
            samples = len(kept) * rows[0]["n"]
            assert sel.loc["authors_acc", "value"] == sum(r["authors_correct"] for r in kept) / samples
            assert sel.loc["authors_acc", "prompts"] == 8 and sel.loc["authors_acc", "rows"] == 10
            assert sel.loc["authors_acc", "total"] == samples
            # Our own columns keep every row.
            assert sel.loc["true_acc", "value"] == sum(r["true_correct"] for r in rows) / (10 * rows[0]["n"])
            assert sel.loc["true_acc", "prompts"] == 10
            if temp == 0.8:
                want = np.mean([prompt_value(r, "authors_pass@2") for r in kept])
                assert sel.loc["authors_pass@2", "value"] == pytest.approx(want, abs=1e-12)
                assert sel.loc["authors_pass@2", "prompts"] == 8
                assert sel.loc["reward_pass@2", "prompts"] == 10


def test_caption_names_the_rows_used_and_why(results_root):
    build(results_root)
    long = long_of(results_root)
    table = main_table(long, "authors_acc", "Paper-comparable accuracy", 0.0, "t_seeds", 0.95, 3, {}, NAMES)
    assert (
        "Rows used: authors_acc over the rows whose gold the authors' extractor parses, as their "
        "maths_plots.py drops the rest: asdiv_paper 8 of 10 (2 golds the authors' extractor cannot parse "
        "dropped)." in table.caption
    )
    ours = main_table(long, "true_acc", "True accuracy", 0.0, "t_seeds", 0.95, 3, {}, NAMES)
    assert "Rows evaluated: asdiv_paper 10." in ours.caption


def test_wilson_trials_and_bootstrap_use_the_scorable_rows(results_root):
    build(results_root)
    long = long_of(results_root)
    sub = long[long["metric"] == "authors_acc"]
    iv, _ = cell_intervals(sub, "wilson_pooled", 0.95)[("tiny", "pspo", "", "asdiv_paper", 0.0)]
    correct = sum(r["authors_correct"] for rows in per_seed_rows(results_root, 0.0) for r in rows)
    assert (iv.low, iv.high) == pytest.approx(proportion_confint(correct, 3 * 8, method="wilson"))
    assert iv.mean == correct / 24
    boot, _ = cell_intervals(sub, "bootstrap", 0.95)[("tiny", "pspo", "", "asdiv_paper", 0.0)]
    assert boot.mean == pytest.approx(correct / 24)  # the mean over the 8 scorable prompts


def test_cells_without_golds_keep_every_row_and_say_so(results_root):
    build(results_root, golds=None)
    long = long_of(results_root)
    assert set(long.loc[long["metric"] == "authors_acc", "prompts"]) == {10}
    table = main_table(long, "authors_acc", "Paper-comparable accuracy", 0.0, "t_seeds", 0.95, 3, {}, NAMES)
    assert "asdiv_paper 10 of 10 (golds not stored with the cells: no row could be dropped)" in table.caption


def test_golds_of_one_cell_serve_every_cell_of_the_same_rows(results_root):
    """Completions files are large: one per prompt set is read, and cells without one get its golds."""
    build(results_root, golds=None)
    write_cell(results_root, "pspo", 1, 0.8, golds="completions")
    long = long_of(results_root)
    assert set(long.loc[long["metric"] == "authors_acc", "prompts"]) == {8}


def test_golds_that_contradict_the_rewards_are_an_error(results_root):
    """A row their extractor cannot score has authors' reward 0; an authors_correct > 0 there means the
    completions file belongs to other rows."""
    build(results_root)
    path = write_cell(results_root, "pspo", 2, 0.0)
    cell = json.loads(path.read_text())
    cell["per_prompt"][1].update(authors_correct=1, rewards=[1.0], authors_reward_mean=1.0)
    cell["metrics"] = cell_metrics(cell["per_prompt"])
    path.write_text(json.dumps(cell))
    with pytest.raises(ResultsError, match="asdiv_paper/1 has authors_correct > 0") as err:
        long_of(results_root)
    assert str(path) in str(err.value) and "\n" not in str(err.value)


def test_a_completions_file_of_other_prompts_is_an_error(results_root):
    path = write_cell(results_root, "pspo", 0, 0.0)
    gz = path.with_name("T0.0.completions.jsonl.gz")
    with gzip.open(gz, "wt", encoding="utf-8") as fh:
        fh.write(json.dumps({"id": "other/0", "gold": "1", "authors_gold": None, "samples": []}) + "\n")
    with pytest.raises(ResultsError, match="prompt ids differ"):
        long_of(results_root)


# ---------------------------------------------------------------- item 4: their pooled Wilson


def test_wilson_pooled_rounds_the_pooled_count_half_to_even():
    # 0.2 x 5 + 0.3 x 5 = 2.5 prompts: theirs rounds to 2 (numpy, half to even) and reports 2 / 10.
    iv = wilson_pooled([1.0, 1.5], [5, 5])
    assert iv.mean == 0.2
    assert (iv.low, iv.high) == pytest.approx(proportion_confint(2, 10, method="wilson"))
    assert (iv.low, iv.high) != pytest.approx(proportion_confint(2.5, 10, method="wilson"))
    assert wilson_pooled([1.5, 2.0], [5, 5]).mean == 0.4  # 3.5 rounds up to 4
    with pytest.raises(ValueError, match="whole trials"):
        wilson_pooled([1.0], [4.5])


def test_every_proportion_metric_has_the_authors_wilson_in_the_tables(results_root):
    """Through the table API: each proportion metric's interval is their _pooled_binom over the rows used."""
    build(results_root)
    long = long_of(results_root)
    metrics = sorted(m for m in long["metric"].unique() if is_proportion(m))
    families = ("true_acc", "reward_acc", "authors_acc", "reward_maj", "true_maj", "maj@4", "reward_top1",
                "true_top1", "reward_best_of_n", "true_best_of_n", "reward_pass@4", "true_pass@2", "authors_pass@4")  # fmt: skip
    assert set(families) <= set(metrics)
    rows = per_seed_rows(results_root, 0.8)
    for metric in metrics:
        table = temperature_table(long, metric, metric, "wilson_pooled", 0.95, 3, {}, NAMES)
        cell = table.rows[0][1][table.columns.index("T=0.8")]
        used = SCORABLE if metric.startswith("authors_") else range(10)
        # Per seed: mean over the rows used x their number; pooled, rounded half to even.
        pooled = sum(np.mean([prompt_value(r[i], metric) for i in used]) * len(used) for r in rows)
        count, trials = int(np.round(pooled)), 3 * len(used)
        low, high = proportion_confint(count, trials, method="wilson")
        assert cell.interval.mean == pytest.approx(count / trials, abs=1e-12), metric
        assert (cell.interval.low, cell.interval.high) == pytest.approx((low, high), abs=1e-12), metric
        assert "successes = sum over seeds of mean x prompts rounded to a whole count" in table.caption


def test_rounding_changes_the_table_interval(results_root):
    """Two seeds at 2 and 3 of 10 samples correct over 5 prompts: the pool is 2.5 prompts, theirs 2."""
    for seed, correct in enumerate((2, 3)):
        rows = [{"id": f"p{i}", "n": 2, "reward_correct": int(i < correct), "true_correct": int(i < correct),
                 "reward_maj": 0, "true_maj": 0, "mean_length": 5.0} for i in range(5)]  # fmt: skip
        cell = {"schema_version": 1, "model": "tiny", "method": "pspo", "seed": seed, "tag": "",
                "dataset": "gsm8k", "temperature": 0.8, "max_new_tokens": 64, "n_samples": 2, "top_p": 1.0,
                "prompt_template": "paper", "rows_sha256": "abc", "num_prompts": 5, "per_prompt": rows,
                "metrics": cell_metrics(rows)}  # fmt: skip
        path = results_root / "eval" / "tiny" / "pspo" / f"seed{seed}" / "gsm8k" / "T0.8.json"
        path.parent.mkdir(parents=True)
        path.write_text(json.dumps(cell))
    iv, _ = cell_intervals(long_of(results_root).query("metric == 'true_acc'"), "wilson_pooled", 0.95)[
        ("tiny", "pspo", "", "gsm8k", 0.8)
    ]
    assert iv.mean == 0.2 and (iv.low, iv.high) == pytest.approx(proportion_confint(2, 10, method="wilson"))


@pytest.mark.parametrize("metric", ["mean_length", "agreement", "unique_answers"])
def test_wilson_pooled_refuses_what_is_not_a_proportion(results_root, metric):
    build(results_root)
    long = long_of(results_root)
    with pytest.raises(ResultsError, match=f"ci=wilson_pooled takes proportions only.*'{metric}' is not one"):
        cell_intervals(long[long["metric"] == metric], "wilson_pooled", 0.95)


def test_aggregate_refuses_a_non_proportion_under_wilson_before_reading(results_root):
    build(results_root)
    cfg = compose_config(CONF, "aggregate", [f"results_dir={results_root}", "ci=wilson_pooled",
                                              'add_metrics=["maj@4",mean_length]'])  # fmt: skip
    with pytest.raises(aggregate.ConfigError, match="'mean_length' is not one: use ci=t_seeds") as err:
        aggregate.run(cfg)
    assert "\n" not in str(err.value) and not (results_root / "tables").exists()


def test_aggregate_writes_wilson_tables_for_added_proportions(results_root):
    build(results_root)
    cfg = compose_config(CONF, "aggregate", [f"results_dir={results_root}", "ci=wilson_pooled",
                                              'add_metrics=["maj@4",authors_pass@2,reward_best_of_n]'])  # fmt: skip
    aggregate.run(cfg)
    for metric in ("maj@4", "authors_pass@2", "reward_best_of_n", "authors_acc"):
        text = (results_root / "tables" / f"temperature_{metric}.md").read_text()
        assert "ci=wilson_pooled" in text, metric
    text = (results_root / "tables" / "main_authors_acc.md").read_text()
    assert "ASDiv (EleutherAI) 8 of 10 (2 golds the authors' extractor cannot parse dropped)" in text
