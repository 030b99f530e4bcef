"""Aggregation end to end on fixture result trees that these tests write (never the real results/)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import matplotlib.image
import pytest

from pspo_repro.analysis import aggregate
from pspo_repro.analysis.results_io import ResultsError
from pspo_repro.common import atomic
from pspo_repro.common.cli import compose_config
from pspo_repro.common.paths import PROJECT_ROOT

CONF = str(PROJECT_ROOT / "conf")
NUM_PROMPTS = 50
# Per-seed true accuracy (seeds 0, 1, 2) per (method, dataset, temperature); reward_acc is 0.1 lower.
# Steps of 0.02 make every t interval mean +- 5.0 points: s = 0.02, 4.303 * 0.02 / sqrt(3) = 0.0497.
TRUE_ACC = {
    ("clip", "gsm8k", 0.0): (0.40, 0.42, 0.44),
    ("pspo", "gsm8k", 0.0): (0.50, 0.52, 0.54),
    ("clip", "svamp", 0.0): (0.60, 0.62, 0.64),
    ("pspo", "svamp", 0.0): (0.56, 0.58, 0.60),
    ("clip", "gsm8k", 0.8): (0.30, 0.32, 0.34),
    ("pspo", "gsm8k", 0.8): (0.40, 0.42, 0.44),
    ("clip", "svamp", 0.8): (0.50, 0.52, 0.54),
    ("pspo", "svamp", 0.8): (0.46, 0.48, 0.50),
}
BASELINE = {("gsm8k", 0.0): 0.30, ("svamp", 0.0): 0.40}


def cell_path(
    root: Path, method: str, seed: int, dataset: str, temp: float, tag: str = "", model="tiny"
) -> Path:
    suffix = f"-{tag}" if tag else ""
    return root / "eval" / model / method / f"seed{seed}{suffix}" / dataset / f"T{temp:.1f}.json"


def write_cell(
    root: Path, method: str, seed: int, dataset: str, temp: float, true_acc: float, **over
) -> Path:
    """One evaluation cell JSON in the architecture.md schema, with per-prompt counts."""
    n = 1 if temp == 0.0 else 4
    true_c = round(true_acc * NUM_PROMPTS * n)
    reward_c = round((true_acc - 0.1) * NUM_PROMPTS * n)
    per_prompt = []
    for i in range(NUM_PROMPTS):
        # Spread the correct samples over prompts, n at a time.
        t = min(n, max(0, true_c - i * n))
        r = min(n, max(0, reward_c - i * n))
        per_prompt.append(
            {"id": f"p{i}", "n": n, "true_correct": t, "reward_correct": r, "mean_length": 80.0}
        )
    cell = {
        "schema_version": 1, "model": "tiny", "method": method, "seed": seed, "tag": over.pop("tag", ""),
        "run_dir": None, "checkpoint": "ckpt", "dataset": dataset, "num_prompts": NUM_PROMPTS, "limit": None,
        "rows_sha256": f"sha-{dataset}", "temperature": temp, "top_p": 1.0, "max_new_tokens": 128,
        "n_samples": n, "sampling_seed": 123, "prompt_template": "paper", "backend": "hf", "config": {},
        "versions": {}, "git_sha": "x", "per_prompt": per_prompt,
        "metrics": {"true_acc": true_c / (NUM_PROMPTS * n), "reward_acc": reward_c / (NUM_PROMPTS * n),
                    "mean_length": 80.0},
    }  # fmt: skip
    cell.update(over)
    path = cell_path(root, method, seed, dataset, temp, cell["tag"], cell["model"])
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(cell))
    return path


def write_run(
    root: Path, method: str, seed: int, rewards: list[float], alpha=None, tag="", status="finished"
):
    """A training run folder: run.json and metrics.jsonl with validation every 100 steps."""
    run_dir = root / "runs" / "tiny" / method / (f"seed{seed}" + (f"-{tag}" if tag else ""))
    run_dir.mkdir(parents=True, exist_ok=True)
    config = {"method": {"name": method, **({"alpha": alpha} if alpha is not None else {})}}
    info = {"model": "tiny", "method": method, "seed": seed, "tag": tag, "config": config, "status": status}
    (run_dir / "run.json").write_text(json.dumps(info))
    lines = []
    for i, reward in enumerate(rewards):
        step = 100 * i
        # one line per step, training and validation merged (callbacks.MetricsJsonlCallback)
        lines.append(
            {"step": step, "num_tokens": 1000 * step + seed, "train/loss": 0.1, "eval/reward": reward}
        )
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    return run_dir


def build_tree(root: Path) -> None:
    """3 seeds x 2 methods x 2 datasets x 2 temperatures, a baseline, and training runs."""
    for (method, dataset, temp), values in TRUE_ACC.items():
        for seed, value in enumerate(values):
            write_cell(root, method, seed, dataset, temp, value)
    for (dataset, temp), value in BASELINE.items():
        write_cell(root, "baseline", 0, dataset, temp, value)
    for seed in range(3):
        write_run(root, "clip", seed, [0.1, 0.2 + 0.01 * seed, 0.3 + 0.01 * seed])
        write_run(root, "pspo", seed, [0.1, 0.25, 0.40 + 0.02 * seed], alpha=0.1)
        write_run(
            root, "pspo", seed, [0.1, 0.3, 0.50 + 0.02 * seed], alpha=0.4, tag="alpha_ablation-alpha0.4"
        )


@pytest.fixture
def tree(results_root):
    build_tree(results_root)
    return results_root


@pytest.fixture
def cfg_for():
    """Compose conf/aggregate.yaml with overrides (GlobalHydra cleared after, as the template does)."""
    return lambda *overrides: compose_config(CONF, "aggregate", list(overrides))


GOLDEN_MAIN = """\
**True accuracy (%) at T = 0: mean over seeds with 95% Student t interval over per-seed means (ci=t_seeds, n = 3 seeds per cell, t = 4.303; Base model: 1 seed, no interval). Bold: best mean per column within each model. †: fewer seeds than expected; ‡: one seed, no interval. Rows evaluated: GSM8K 50, SVAMP 50.**

| Model | Method | GSM8K | SVAMP |
|:---|:---|---:|---:|
| Tiny | Base model | 30.0‡ | 40.0‡ |
| Tiny | GRPO-clip | 42.0 [37.0, 47.0] | **62.0 [57.0, 67.0]** |
| Tiny | GR-PSPO | **52.0 [47.0, 57.0]** | 58.0 [53.0, 63.0] |
"""


def test_golden_main_table(tree, cfg_for):
    out = tree / "tables"
    aggregate.run(cfg_for(f"results_dir={tree}"))
    assert (out / "main_true_acc.md").read_text() == GOLDEN_MAIN
    for name in ("main_true_acc", "main_reward_acc", "temperature_true_acc", "alpha_ablation"):
        for ext in ("md", "tex", "csv"):
            assert (out / f"{name}.{ext}").stat().st_size > 0, f"{name}.{ext}"
    tex = (out / "main_true_acc.tex").read_text()
    assert r"\toprule" in tex and r"\textbf{52.0 [47.0, 57.0]}" in tex and r"$^\ddagger$" in tex
    # reward_acc is true_acc minus 10 points in the fixture.
    assert (
        "| Tiny | GRPO-clip | 32.0 [27.0, 37.0] | **52.0 [47.0, 57.0]** |"
        in (out / "main_reward_acc.md").read_text()
    )


def test_missing_seed_is_marked_and_listed(tree, cfg_for):
    cell_path(tree, "pspo", 1, "svamp", 0.0).unlink()
    aggregate.run(cfg_for(f"results_dir={tree}"))
    md = (tree / "tables" / "main_true_acc.md").read_text()
    # Seeds 0 and 2 (0.56, 0.60): mean 58.0, s = 0.0283, t_{0.975,1} = 12.706 -> +- 25.4 points.
    assert "| Tiny | GR-PSPO | **52.0 [47.0, 57.0]** | 58.0 [32.6, 83.4]† |" in md
    assert "† Tiny / GR-PSPO / SVAMP: 2 of 3 expected seeds (seeds 0, 2)" in md
    assert "2 of 3 expected seeds (seeds 0, 2)" in (tree / "tables" / "summary.md").read_text()


def test_mismatched_setting_names_the_files(tree, cfg_for):
    bad = write_cell(tree, "clip", 2, "gsm8k", 0.0, 0.44, max_new_tokens=256)
    with pytest.raises(ResultsError) as err:
        aggregate.run(cfg_for(f"results_dir={tree}"))
    msg = str(err.value)
    assert "max_new_tokens differs" in msg and str(bad) in msg
    assert str(cell_path(tree, "clip", 0, "gsm8k", 0.0)) in msg
    assert not (tree / "tables").exists()  # nothing written


@pytest.mark.parametrize("top_k", [50, None])
def test_cells_with_another_top_k_never_share_a_table_cell(tree, cfg_for, top_k):
    """A cell sampled with top-k 50 next to seeds that recorded none (or, for a T = 0.0 cell written before
    eval.top_k existed, recorded nothing): one error naming the files; a cell without the field is legacy
    (no top-k) and pools with top_k None."""
    bad = write_cell(tree, "clip", 2, "gsm8k", 0.8, 0.44, top_k=top_k)
    if top_k is None:  # None is what a legacy cell means: the tree aggregates
        aggregate.run(cfg_for(f"results_dir={tree}"))
        return
    with pytest.raises(ResultsError) as err:
        aggregate.run(cfg_for(f"results_dir={tree}"))
    assert "top_k differs" in str(err.value) and str(bad) in str(err.value)


def test_duplicate_cell_is_an_error(tree, cfg_for):
    src = cell_path(tree, "clip", 0, "gsm8k", 0.0)
    copy = tree / "eval" / "tiny" / "clip" / "seed0-copy" / "gsm8k" / "T0.0.json"
    copy.parent.mkdir(parents=True)
    copy.write_text(src.read_text())  # same identity inside, different folder
    with pytest.raises(ResultsError, match="duplicate results") as err:
        aggregate.run(cfg_for(f"results_dir={tree}"))
    assert str(src) in str(err.value) and str(copy) in str(err.value)


def test_wilson_pooled_caption_and_values(tree, cfg_for):
    aggregate.run(cfg_for(f"results_dir={tree}", "ci=wilson_pooled"))
    md = (tree / "tables" / "main_true_acc.md").read_text()
    caption = "pooled over seeds with 95% Wilson interval, trials = prompts x seeds (the authors' interval;"
    assert caption in md and "ci=wilson_pooled, n = 3 seeds" in md
    from statsmodels.stats.proportion import proportion_confint

    low, high = proportion_confint(20 + 21 + 22, 150, alpha=0.05, method="wilson")
    assert f"| Tiny | GRPO-clip | 42.0 [{low * 100:.1f}, {high * 100:.1f}] |" in md
    # T = 0.8, 4 samples per prompt: the authors' trials are prompts x seeds = 150, not 600 samples.
    temp = (tree / "tables" / "temperature_true_acc.md").read_text()
    row = next(line for line in temp.splitlines() if line.startswith("| Tiny | GRPO-clip | GSM8K |"))
    low, high = proportion_confint(0.32 * 150, 150, alpha=0.05, method="wilson")
    assert f"32.0 [{low * 100:.1f}, {high * 100:.1f}]" in row
    narrow = proportion_confint(0.32 * 600, 600, alpha=0.05, method="wilson")
    assert f"[{narrow[0] * 100:.1f}," not in row
    # One seed still has a sampling interval under Wilson: no ‡ on the baseline.
    assert "‡ |" not in md.split("\n| Tiny | Base model |")[1].split("\n")[0]


def test_ablation_and_curves(tree, cfg_for):
    aggregate.run(cfg_for(f"results_dir={tree}", "ablation.tag_prefix=null"))
    md = (tree / "tables" / "alpha_ablation.md").read_text()
    # alpha 0.4 runs end at 0.50, 0.52, 0.54 (mean 0.520, +- 0.0497); alpha 0.1 at 0.40, 0.42, 0.44.
    assert "| Tiny | 0.1 | - | 200 | 0.420 [0.370, 0.470] |" in md
    assert "| Tiny | 0.4 | alpha_ablation-alpha0.4 | 200 | **0.520 [0.470, 0.570]** |" in md
    for stem in ("training_curves", "temperature_true_acc", "temperature_reward_acc"):
        for ext in ("png", "pdf"):
            path = tree / "tables" / f"{stem}.{ext}"
            assert path.stat().st_size > 0
        img = matplotlib.image.imread(tree / "tables" / f"{stem}.png")
        assert img.ndim == 3 and img.shape[0] > 100 and img.shape[1] > 100


def test_ablation_keeps_only_the_ablation_runs_by_default(tree, cfg_for):
    """experiment=alpha_ablation's runs (tag alpha_ablation-...) make Table 8; the main pspo runs (untagged,
    another lr and budget) are left out and listed in the summary."""
    for seed in range(3):
        write_run(
            tree, "pspo", seed, [0.1, 0.2, 0.30 + 0.01 * seed], alpha=0.3, tag="alpha_ablation-alpha0.3"
        )
    aggregate.run(cfg_for(f"results_dir={tree}"))
    md = (tree / "tables" / "alpha_ablation.md").read_text()
    assert "(runs tagged alpha_ablation*)" in md
    assert "| Tiny | 0.3 | alpha_ablation-alpha0.3 | 200 | 0.310 [0.285, 0.335] |" in md
    assert "| Tiny | 0.4 | alpha_ablation-alpha0.4 | 200 | **0.520 [0.470, 0.570]** |" in md
    assert "| 0.1 |" not in md
    summary = (tree / "tables" / "summary.md").read_text()
    assert "3 pspo run(s) with alpha left out: their tag does not start with 'alpha_ablation'" in summary


def test_unfinished_run_left_out_and_noted(tree, cfg_for):
    write_run(tree, "pspo", 3, [0.1, 0.2], alpha=0.1, status="running")
    aggregate.run(cfg_for(f"results_dir={tree}", "ablation.tag_prefix=null"))
    assert "left out unfinished run" in (tree / "tables" / "summary.md").read_text()


def test_differing_final_steps_raise(tree, cfg_for):
    write_run(tree, "pspo", 2, [0.1, 0.25], alpha=0.1)  # overwrites seed 2: ends at step 100
    with pytest.raises(ResultsError, match="steps differ across seeds"):
        aggregate.run(cfg_for(f"results_dir={tree}", "ablation.tag_prefix=null"))


def test_temperature_table(tree, cfg_for):
    aggregate.run(cfg_for(f"results_dir={tree}"))
    md = (tree / "tables" / "temperature_true_acc.md").read_text()
    assert "| Model | Method | Dataset | T=0 | T=0.8 |" in md
    assert "| Tiny | GRPO-clip | GSM8K | 42.0 [37.0, 47.0] | 32.0 [27.0, 37.0] |" in md
    assert "| Tiny | Base model | GSM8K | 30.0‡ | – |" in md


def test_reproduction_report(results_root, cfg_for, tmp_path):
    for seed, value in enumerate((0.38, 0.40, 0.42)):
        write_cell(results_root, "pspo", seed, "gsm8k", 0.0, value, model="qwen2p5_0p5b")
    aggregate.run(cfg_for(f"results_dir={results_root}"))
    text = (results_root / "tables" / "reproduction_report.md").read_text()
    assert "| Qwen2.5-0.5B | GR-PSPO | GSM8K | true_acc | 0 | 40.0 [35.0, 45.0] | 3 | 39.7 | +0.3 |" in text
    assert "Qwen2.5-0.5B / GRPO-clip / GSM8K / true_acc / T=0: paper 17.6" in text
    assert "Qwen2-Math-1.5B / GR-PSPO / MATH-500 / true_acc / T=0: paper 59.6" in text


def test_only_runs_skips_eval_tables(results_root, cfg_for):
    for seed in range(3):
        write_run(results_root, "pspo", seed, [0.1, 0.4 + 0.02 * seed], alpha=0.1, tag="alpha_ablation")
    aggregate.run(cfg_for(f"results_dir={results_root}"))
    summary = (results_root / "tables" / "summary.md").read_text()
    assert f"no evaluation cells under {results_root / 'eval'}" in summary
    assert not (results_root / "tables" / "main_true_acc.md").exists()
    assert (results_root / "tables" / "alpha_ablation.md").exists()


def test_empty_tree_is_one_line_error(results_root, cfg_for):
    with pytest.raises(ResultsError) as err:
        aggregate.run(cfg_for(f"results_dir={results_root}"))
    assert str(results_root) in str(err.value) and "\n" not in str(err.value)


def test_a_bad_run_record_stops_before_any_table_or_figure_is_made(tree, cfg_for, monkeypatch):
    """Every record (cells and runs) is read and checked first: a bad metrics line is reported without the
    tables and figures of the (good) cells being made for nothing."""
    from pspo_repro.analysis import plots

    def made(*a, **k):
        raise AssertionError("an output was made before the records were checked")

    for module, name in ((plots, "temperature_figure"), (plots, "curves_figure"), (aggregate, "main_table")):
        monkeypatch.setattr(module, name, made)
    bad = '{"step": -1, "eval/reward": 0.1}\n'
    (tree / "runs" / "tiny" / "clip" / "seed1" / "metrics.jsonl").write_text(bad)
    with pytest.raises(ResultsError, match="step=-1 is not an integer >= 0"):
        aggregate.run(cfg_for(f"results_dir={tree}"))


def test_out_dir_option(tree, cfg_for, tmp_path):
    out = tmp_path / "mini"
    aggregate.run(cfg_for(f"results_dir={tree}", f"out_dir={out}", "expected_seeds=2"))
    md = (out / "main_true_acc.md").read_text()
    # The caption gives the seeds the cells hold (3, t = 4.303), not the number expected (issue 25 item 5).
    assert "n = 3 seeds per cell, t = 4.303" in md and "12.706" not in md
    assert not (tree / "tables").exists()


def test_failed_write_keeps_previous_file(tree, cfg_for, monkeypatch):
    cfg = cfg_for(f"results_dir={tree}")
    aggregate.run(cfg)
    target = tree / "tables" / "main_true_acc.md"
    before = target.read_text()
    build_tree(tree)  # unchanged numbers, but force a rewrite that fails midway
    write_cell(tree, "baseline", 0, "gsm8k", 0.0, 0.20)
    real_write = atomic.write_text

    def failing_write(path, text):
        if Path(path).name.startswith(f".{target.name}."):  # its staged copy (atomic.write_set)
            with atomic.atomic_open(path, "w", encoding="utf-8") as fh:
                fh.write(text[:10])  # half the file, then the disk "fills up"
                raise OSError(28, "No space left on device")
        return real_write(path, text)

    monkeypatch.setattr(atomic, "write_text", failing_write)
    with pytest.raises(OSError) as err:
        aggregate.run(cfg)
    assert str(target) in str(err.value)
    assert target.read_text() == before
    assert not list(target.parent.glob(".main_true_acc.md.*"))  # no temp file left behind
    assert not list(target.parent.glob(".*"))  # nor any other output's staged copy: the old set, whole


def _cli(*args, cwd):
    return subprocess.run(
        [sys.executable, "-m", "pspo_repro.aggregate", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_cli_unknown_ci_method(tree, tmp_path):
    proc = _cli(f"results_dir={tree}", "ci=jackknife", cwd=PROJECT_ROOT)
    assert proc.returncode != 0
    err = proc.stderr.strip()
    assert err == "error: unknown ci method 'jackknife'; allowed: t_seeds, wilson_pooled, bootstrap"
    assert not (tree / "tables").exists()


def test_cli_empty_tree(results_root, tmp_path):
    results_root.mkdir()
    proc = _cli(f"results_dir={results_root}", cwd=tmp_path)
    assert proc.returncode == 2
    assert proc.stderr.strip().count("\n") == 0 and str(results_root) in proc.stderr
    assert list(tmp_path.iterdir()) == [results_root] and not list(results_root.iterdir())  # nothing written


def test_outputs_name_files_relative_to_the_results_root(tmp_path, cfg_for):
    """long_eval.csv's ``file`` column and summary.md's ``results:`` line hold paths relative to the results
    root, so the same tree aggregated in two checkouts gives the same bytes (they used to differ by the
    checkout's absolute path on every row); a relative ``file`` still names one cell under the root."""
    import csv
    import shutil

    first = tmp_path / "a" / "results"
    build_tree(first)
    second = tmp_path / "elsewhere" / "deeper" / "results"
    shutil.copytree(first, second)
    texts = {}
    for root in (first, second):
        aggregate.run(cfg_for(f"results_dir={root}", f"out_dir={root}"))
        summary = (root / "summary.md").read_text().splitlines()
        texts[root] = ((root / "long_eval.csv").read_bytes(), summary[2])  # notes name files as found
        with open(root / "long_eval.csv", newline="") as f:
            files = {r["file"] for r in csv.DictReader(f)}
        assert files and all(not Path(f).is_absolute() and f.startswith("eval/") for f in files), files
        assert all((root / f).is_file() for f in files)
        assert summary[2].startswith("results: .; ")
    assert texts[first] == texts[second]
    aggregate.run(cfg_for(f"results_dir={first}"))  # the default out_dir, <root>/tables
    assert "results: ..; " in (first / "tables" / "summary.md").read_text()
    out = tmp_path / "out"  # an out_dir outside the root: the root as given, absolute
    aggregate.run(cfg_for(f"results_dir={first}", f"out_dir={out}"))
    assert f"results: {first}; " in (out / "summary.md").read_text()
