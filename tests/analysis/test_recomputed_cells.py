"""Issue 25, items 1 and 5: every table number is recomputed from the records under it, and says what it is.

Item 1: a cell's stored ``metrics`` is a cache, compared with what its per-prompt records and per-sample lists
give (``evaluation.metrics.cell_metrics``, the evaluator's own code) and never shown; a cell whose lists,
counts and metrics disagree is named in one ``warning: <file>: <why>; left out of every table`` line.
Item 5: each metric carries its unit and scale (``analysis.units``); proportion intervals are cut at
[0, 100] with a mark the caption explains; the caption gives each row's seed count and t.

The cells here are committed ones (results/mini) copied to a temporary tree, edited the way a hostile user
or a broken writer would.
"""

from __future__ import annotations

import copy
import hashlib
import json
import os
import random
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from pspo_repro.analysis.results_io import ResultsError, eval_long, load_eval_cells
from pspo_repro.analysis.table_formats import to_frame, to_markdown
from pspo_repro.analysis.tables import Names, cell_intervals, temperature_table
from pspo_repro.common.paths import PROJECT_ROOT
from pspo_repro.evaluation.metrics import cell_metrics

MINI = PROJECT_ROOT / "results" / "mini"
SOURCE = MINI / "eval" / "mini_sft" / "{method}" / "seed{seed}" / "synthetic" / "T0.8.json"
NAMES = Names({}, {}, {}, [], [], [])


def _real(method: str, seed: int, prompts: int | None = None) -> dict:
    """A committed cell (16 samples per prompt at T = 0.8); ``prompts``: only its first ones, with the
    hash and the metrics the evaluator would write for them (so the trimmed cell is consistent)."""
    cell = json.loads(Path(str(SOURCE).format(method=method, seed=seed)).read_text())
    if prompts is not None:
        cell["per_prompt"] = cell["per_prompt"][:prompts]
        cell["num_prompts"] = prompts
        cell["rows_sha256"] = hashlib.sha256(
            "\n".join(r["id"] for r in cell["per_prompt"]).encode()
        ).hexdigest()
        cell["metrics"] = cell_metrics(cell["per_prompt"])
    return cell


def _path(root: Path, method: str, seed: int) -> Path:
    return root / "eval" / "mini_sft" / method / f"seed{seed}" / "synthetic" / "T0.8.json"


def _write(root: Path, cell: dict, method: str = "pspo", seed: int | None = None) -> Path:
    path = _path(root, method, cell["seed"] if seed is None else seed)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(cell))
    return path


def _tree(root: Path, prompts: int | None = None) -> dict[int, dict]:
    cells = {s: _real("pspo", s, prompts) for s in range(3)}
    for cell in cells.values():
        _write(root, cell)
    return cells


pytestmark = pytest.mark.skipif(not Path(str(SOURCE).format(method="pspo", seed=2)).is_file(),
                                reason="results/mini has no committed T = 0.8 cells")  # fmt: skip


# ---------------------------------------------------------------- item 1: a table cell is computed


def _flip(values: list, i: int = 0) -> None:
    values[i] = 1 - values[i]


def _first_prompt_with(cell: dict, test) -> dict:
    return next(r for r in cell["per_prompt"] if test(r))


def _edit_maj16(c):
    c["metrics"]["maj@16"] = 0.99


def _edit_top1(c):
    c["metrics"]["reward_top1"] = 1.7


def _edit_mean_length_metric(c):
    c["metrics"]["mean_length"] = -3


def _edit_flags_against_counts(c):
    _flip(c["per_prompt"][0]["reward_flags"])


def _edit_flags_keeping_counts(c):
    # Swap a correct and a wrong sample of one prompt: reward_correct still matches, top-1 and maj@k do not.
    r = _first_prompt_with(c, lambda r: r["reward_flags"][0] != r["reward_flags"][-1])
    r["reward_flags"][0], r["reward_flags"][-1] = r["reward_flags"][-1], r["reward_flags"][0]


def _edit_row_mean_length(c):
    c["per_prompt"][0]["mean_length"] += 1.0


def _edit_authors_correct(c):
    r = _first_prompt_with(c, lambda r: r["authors_correct"] < r["n"])
    r["authors_correct"] += 1


def _edit_reward_maj(c):
    c["per_prompt"][0]["reward_maj"] = 1 - c["per_prompt"][0]["reward_maj"]


def _edit_true_maj(c):
    c["per_prompt"][0]["true_maj"] = 1 - c["per_prompt"][0]["true_maj"]


def _edit_short_list(c):
    c["per_prompt"][0]["lengths"] = c["per_prompt"][0]["lengths"][:-1]


def _edit_answer_number(c):
    c["per_prompt"][0]["answers"][0] = 12


def _edit_unique_answers(c):
    c["metrics"]["unique_answers"] = 60.0


def _edit_agreement(c):
    c["metrics"]["agreement"] = 0.5


def _edit_id(c):
    c["per_prompt"][0]["id"] = "synthetic/test/elsewhere"


def _edit_no_records(c):
    del c["per_prompt"]


def _edit_metric_records_cannot_give(c):
    c["metrics"]["maj@32"] = 0.2  # 16 samples per prompt: no maj@32 exists


def _edit_mixed_rows(c):
    del c["per_prompt"][3]["answers"]


def _edit_method(c):
    c["method"] = "clip"  # the file stays under pspo/: its numbers would move into clip's row


def _edit_timeouts(c):
    c["per_prompt"][0]["timeouts"] = 2


def _edit_temperature_decimals(c):
    c["temperature"] = 0.84  # still "T0.8.json", but a column of its own


EDITS = [
    ("maj16-0.99", _edit_maj16, "metric maj@16=0.99 but its per-prompt records give"),
    ("reward_top1-1.7", _edit_top1, "metric reward_top1=1.7 but its per-prompt records give 0.215"),
    ("mean_length-minus-3", _edit_mean_length_metric, "metric mean_length=-3 but its per-prompt records give"),
    ("flags-contradict-counts", _edit_flags_against_counts, "per_prompt[0] reward_correct="),
    ("flags-swapped-counts-kept", _edit_flags_keeping_counts, "but its per-"),
    ("row-mean_length", _edit_row_mean_length, "per_prompt[0] mean_length="),
    ("authors_correct", _edit_authors_correct, "authors_correct="),
    ("reward_maj-not-the-vote", _edit_reward_maj, "per_prompt[0] reward_maj="),
    ("true_maj", _edit_true_maj, "per_prompt[0] true_maj="),
    ("list-short", _edit_short_list, "per_prompt[0] lengths is not a list of n=16 entries"),
    ("answer-not-text", _edit_answer_number, "per_prompt[0] answers holds 12"),
    ("unique_answers", _edit_unique_answers, "metric unique_answers=60.0 but its per-prompt records give"),
    ("agreement", _edit_agreement, "metric agreement=0.5 but its per-prompt records give"),
    ("prompt-id", _edit_id, "rows_sha256 is not the hash of its per_prompt ids"),
    ("no-records", _edit_no_records, "no per_prompt records, so no metric of it can be recomputed"),
    ("metric-beyond-records", _edit_metric_records_cannot_give, "metric maj@32 is stored but its per-prompt"),
    ("rows-mixed", _edit_mixed_rows, "per_prompt[3] and per_prompt[0] differ in holding the per-sample lists"),
    ("method-elsewhere", _edit_method, "its fields say mini_sft/clip/seed1/synthetic/T0.8.json but it sits at"),
    ("timeouts", _edit_timeouts, "metric grading_timeouts=0.0 but its per-prompt records give 2"),
    ("temperature-decimals", _edit_temperature_decimals, "temperature=0.84 has more than the one decimal"),
]  # fmt: skip


@pytest.mark.parametrize("name, edit, reason", EDITS, ids=[e[0] for e in EDITS])
def test_an_edited_cell_is_named_in_one_line_and_left_out(name, edit, reason, tmp_path):
    cells = _tree(tmp_path)
    edit(cells[1])
    bad = _write(tmp_path, cells[1], seed=1)
    left_out: list[str] = []
    loaded = load_eval_cells(tmp_path, left_out)
    assert len(left_out) == 1 and left_out[0].startswith(f"{bad}: "), left_out
    assert reason in left_out[0] and left_out[0].endswith("; left out of every table"), left_out[0]
    assert sorted(loaded["seed"]) == [0, 2]
    with pytest.raises(ResultsError, match="seed1"):
        load_eval_cells(tmp_path)


def test_the_committed_cells_pass_and_tables_show_their_recomputed_metrics(tmp_path):
    """Every stored metric of the real cells equals its recomputation exactly; the long table holds the
    recomputed values, also when the stored cache was changed within the tolerance (1e-12)."""
    cells = _tree(tmp_path)
    cells[1]["metrics"]["mean_length"] += 1e-12
    _write(tmp_path, cells[1])
    left_out: list[str] = []
    long = eval_long(load_eval_cells(tmp_path, left_out))
    assert left_out == []
    row = long[(long["seed"] == 1) & (long["metric"] == "mean_length")]
    assert row["value"].tolist() == [cell_metrics(cells[1]["per_prompt"])["mean_length"]]
    assert set(long["metric"]) == set(cell_metrics(cells[1]["per_prompt"]))


def test_unknown_metric_keys_are_tolerated_but_never_tabled(tmp_path):
    cells = _tree(tmp_path, prompts=20)
    cells[1]["metrics"]["answer_agreement"] = 7.5  # not a metric a cell can hold: ignored, not shown
    _write(tmp_path, cells[1])
    left_out: list[str] = []
    long = eval_long(load_eval_cells(tmp_path, left_out))
    assert left_out == [] and "answer_agreement" not in set(long["metric"])


def test_regime_reads_the_recomputed_accuracy_and_leaves_an_edited_cell_out(tmp_path, capsys):
    from pspo_repro.analysis import regime

    root = tmp_path
    cell = json.loads((MINI / "eval" / "mini_sft" / "pspo" / "seed0" / "synthetic" / "T0.0.json").read_text())
    path = root / "eval" / "mini_sft" / "pspo" / "seed0" / "synthetic" / "T0.0.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(cell))
    assert regime._test_acc(root, "mini_sft", "pspo", "seed0") == cell["metrics"]["reward_acc"]
    cell["metrics"]["reward_acc"] = 0.99  # the old reader printed this
    path.write_text(json.dumps(cell))
    assert regime._test_acc(root, "mini_sft", "pspo", "seed0") is None
    err = capsys.readouterr().err
    assert f"warning: {path}: metric reward_acc=0.99 but its per-prompt records give" in err


# ---------------------------------------------------------------- the property: random edits


def _leaves(obj, prefix=()):
    """Every path into ``obj`` (dict keys, list indices), containers included."""
    yield prefix
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield from _leaves(v, (*prefix, k))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            yield from _leaves(v, (*prefix, i))


VALUES = [0, 1, -1, 2, 3, 16, 0.5, 1.7, -3, 1e9, 0.2, float("nan"), float("inf"), "", "x", "clip", "10",
          None, True, False, [], {}, [0, 1], {"a": 1}]  # fmt: skip


def _random_edit(cell: dict, rng: random.Random) -> str:
    """Change one thing in ``cell`` (any field, any value); returns what was done."""
    area = rng.random()
    if area < 0.25:
        paths = [p for p in _leaves(cell) if len(p) == 1]
    elif area < 0.45:
        paths = [p for p in _leaves(cell["metrics"], ("metrics",)) if len(p) == 2]
    else:
        i = rng.randrange(len(cell["per_prompt"]))
        paths = [p for p in _leaves(cell["per_prompt"][i], ("per_prompt", i)) if len(p) >= 3]
    path = rng.choice(paths)
    parent = cell
    for key in path[:-1]:
        parent = parent[key]
    key, old = path[-1], parent[path[-1]]
    op = rng.random()
    if op < 0.15:
        del parent[key]  # a dict key or a list entry
        return f"delete {path}"
    if op < 0.5 and isinstance(old, int | float) and not isinstance(old, bool):
        new = rng.choice([old + 1, old - 1, old * 1.5, old + 1e-6, old + 1e-13, -old])
    elif op < 0.6 and isinstance(old, list):
        old.append(rng.choice(old) if old else 0)
        return f"append to {path}"
    elif op < 0.7 and isinstance(parent, dict) and len(path) >= 3:
        key, new = rng.choice(["extra", "reward_maj", "grading_error", "authors_gold"]), rng.choice(VALUES)
    else:
        new = rng.choice(VALUES)
    parent[key] = new
    return f"set {(*path[:-1], key)} = {new!r}"


def _table_numbers(root: Path) -> tuple[list[str], dict, pd.DataFrame] | str:
    """(left-out lines, every table's CSV, the long table) as aggregate builds them, or the error."""
    left_out: list[str] = []
    try:
        long = eval_long(load_eval_cells(root, left_out))
        frames = {}
        positions: dict[str, list[int]] = {}  # each metric's rows, found in one pass (not a mask per metric)
        for pos, metric in enumerate(long["metric"].tolist()):
            positions.setdefault(metric, []).append(pos)
        for metric in sorted(positions):
            # Every metric's numbers; the rendered tables (both interval kinds) for the examples.
            if metric in ("reward_acc", "maj@16", "reward_top1", "mean_length"):
                for ci in ("t_seeds", "bootstrap"):
                    table = temperature_table(long, metric, metric, ci, 0.95, 3, {}, NAMES)
                    frames[(metric, ci)] = (to_frame(table), to_markdown(table))
            else:  # (key, seeds, mean, low, high) per cell of the table
                stats = cell_intervals(long.iloc[positions[metric]], "t_seeds", 0.95)
                rows = [(str(k), " ".join(map(str, s)), iv.mean, iv.low, iv.high)
                        for k, (iv, s) in sorted(stats.items())]  # fmt: skip
                frames[(metric, "t_seeds")] = (rows, "")
    except ResultsError as exc:
        return str(exc)
    return left_out, frames, long


def _same(got: dict, base: dict) -> bool:
    """The same tables: the same Markdown (what a reader sees) and CSV numbers equal to within the cell
    check's float tolerance (1e-9: a record nudged by 1e-13 moves a correlation by 1e-16, which the
    comparison of a cell's cache with its recomputation allows by design)."""
    if got.keys() != base.keys():
        return False
    for key, (frame, md) in got.items():
        old_frame, old_md = base[key]
        if isinstance(frame, list):  # a metric's intervals as rows (key, seeds, mean, low, high)
            if len(frame) != len(old_frame) or any(
                a[:2] != b[:2] or not np.allclose(a[2:], b[2:], rtol=1e-9, atol=1e-9, equal_nan=True)
                for a, b in zip(frame, old_frame, strict=True)
            ):
                return False
            continue
        if md != old_md or list(frame.columns) != list(old_frame.columns) or len(frame) != len(old_frame):
            return False
        for col in frame.columns:
            a, b = frame[col], old_frame[col]
            if pd.api.types.is_float_dtype(a) and pd.api.types.is_float_dtype(b):
                if not np.allclose(a, b, rtol=1e-9, atol=1e-9, equal_nan=True):
                    return False
            elif a.tolist() != b.tolist():
                return False
    return True


# Hundreds of edits (about 0.3 s each); PSPO_EDIT_COUNT raises it for a longer search.
EDIT_COUNT = int(os.environ.get("PSPO_EDIT_COUNT", "200"))


def test_no_random_edit_changes_a_table_number_unless_the_cell_is_named_and_left_out(tmp_path):
    """Seeded random edits of a committed cell (a field of the file, a stored metric, a per-prompt count or
    flag or list entry; set to any value, deleted, nudged, appended to): every table the aggregate would
    build is either identical to the unedited one, or the edited cell is named in one left-out line and
    its seed is in no table, or the aggregate stops with an error naming the file (a setting that must
    match its other seeds, a missing field). Never a changed number without a word."""
    cells = _tree(tmp_path, prompts=25)
    base = _table_numbers(tmp_path)
    assert not isinstance(base, str) and base[0] == []
    rng = random.Random(int(os.environ.get("PSPO_FAULT_SEED", "0")))
    target = _path(tmp_path, "pspo", 1)
    outcomes = {"same": 0, "left out": 0, "error": 0}
    for _ in range(EDIT_COUNT):
        cell = copy.deepcopy(cells[1])
        what = _random_edit(cell, rng)
        target.write_text(json.dumps(cell))
        got = _table_numbers(tmp_path)
        if isinstance(got, str):
            assert str(target) in got, (what, got)
            outcomes["error"] += 1
        elif _same(got[1], base[1]):
            outcomes["same"] += 1
        else:
            left_out, frames, long = got
            assert [line for line in left_out if line.startswith(f"{target}: ")], (what, left_out)
            assert str(target) not in set(long["file"]), what
            for frame, _ in frames.values():
                seeds = [row[1] for row in frame] if isinstance(frame, list) else frame["seeds"].astype(str)
                assert not any("1" in str(s).split() for s in seeds), what
            outcomes["left out"] += 1
    target.write_text(json.dumps(cells[1]))
    # The edits reach every outcome (a test whose edits all land in ignored fields could not fail).
    assert outcomes["left out"] > EDIT_COUNT // 4 and outcomes["same"] > 10 and outcomes["error"] > 0, (
        outcomes
    )


# ---------------------------------------------------------------- item 5: a table says what its numbers are


def test_every_metric_a_cell_holds_has_a_unit():
    from pspo_repro.analysis.units import PERCENT, unit_of

    metrics = cell_metrics(_real("pspo", 0)["per_prompt"])
    units = {m: unit_of(m) for m in metrics}
    assert units["maj@16"] == units["reward_acc"] == units["true_pass@8"] == units["agreement"] == PERCENT
    assert (units["mean_length"].unit, units["mean_length"].scale) == ("tokens", 1.0)
    assert (units["unique_answers"].scale, units["reward_corr"].scale) == (1.0, 1.0)
    with pytest.raises(ValueError, match="no unit known for metric 'answer_agreement'"):
        unit_of("answer_agreement")


@pytest.mark.parametrize(
    "metric, title, first",
    [("mean_length", "(tokens)", "29.5"), ("unique_answers", "(distinct answers per prompt)", "5.66")],
)
def test_a_non_proportion_is_shown_in_its_own_unit(metric, title, first, tmp_path):
    """The issue's 2274.8 under "(%)": a length in tokens, answers as a count, never x100."""
    _tree(tmp_path)
    long = eval_long(load_eval_cells(tmp_path))
    long = long[long["seed"] == 0]
    table = temperature_table(long, metric, metric, "t_seeds", 0.95, 1, {}, NAMES)
    md = to_markdown(table)
    assert f"**{metric} {title} against sampling temperature" in md and "(%)" not in md
    assert f"| {first}‡ |" in md, md
    frame = to_frame(table)
    assert frame["unit"].tolist() == [title[1:-1]] and frame["scale"].tolist() == [1.0]


def test_a_percentage_keeps_its_unit_and_scale(tmp_path):
    _tree(tmp_path, prompts=25)
    long = eval_long(load_eval_cells(tmp_path))
    table = temperature_table(long, "reward_acc", "Reward acc", "t_seeds", 0.95, 3, {}, NAMES)
    assert "Reward acc (%) against" in table.caption
    assert to_frame(table)[["unit", "scale"]].values.tolist() == [["%", 100.0]]


def _clipped_long(values: list[float]) -> pd.DataFrame:
    rows = [{"model": "m", "method": "pspo", "tag": "", "seed": s, "dataset": "d", "temperature": 0.0,
             "metric": "reward_acc", "value": v, "prompts": 200, "rows": 200, "per_prompt": []}
            for s, v in enumerate(values)]  # fmt: skip
    return pd.DataFrame(rows)


def test_a_proportion_interval_is_cut_at_0_and_100_with_a_mark_and_a_caption():
    """An interval like the committed mini's 3.5 [-2.9, 9.9]: now [0.0, ...] with the mark, the caption saying why."""
    from pspo_repro.analysis.table_formats import to_latex
    from pspo_repro.analysis.tables import CLIPPED, main_table

    table = main_table(
        _clipped_long([0.0, 0.05, 0.055]), "reward_acc", "Acc", 0.0, "t_seeds", 0.95, 3, {}, NAMES
    )
    md = to_markdown(table)
    assert f"| 3.5 [0.0, 11.1]{CLIPPED} |" in md, md
    assert f"{CLIPPED}: the interval reached past the range of reward_acc ([0, 100]) and is cut at it" in md
    frame = to_frame(table)
    assert frame["ci_low"].tolist() == [0.0] and frame["ci_clipped"].tolist() == [True]
    assert r"$^\S$" in to_latex(table)


def test_an_interval_inside_the_range_is_neither_cut_nor_marked():
    from pspo_repro.analysis.tables import CLIPPED, main_table

    table = main_table(
        _clipped_long([0.4, 0.5, 0.45]), "reward_acc", "Acc", 0.0, "t_seeds", 0.95, 3, {}, NAMES
    )
    md = to_markdown(table)
    assert CLIPPED not in md and not to_frame(table)["ci_clipped"].any()


def test_an_interval_above_100_is_cut_too():
    from pspo_repro.analysis.tables import CLIPPED, main_table

    table = main_table(
        _clipped_long([1.0, 0.8, 0.9]), "reward_acc", "Acc", 0.0, "t_seeds", 0.95, 3, {}, NAMES
    )
    assert f"[65.2, 100.0]{CLIPPED}" in to_markdown(table)


def test_the_caption_gives_each_rows_seed_count_and_t():
    """results/study: rows of 10 and 5 seeds under a caption that said "n = 3 seeds per cell, t = 4.303"."""
    from pspo_repro.analysis.tables import main_table

    parts = []
    for method, n in (("pspo", 10), ("clip", 3), ("sapo", 3), ("noclip", 5), ("baseline", 1)):
        part = _clipped_long([0.4 + 0.01 * s for s in range(n)])
        parts.append(part.assign(method=method))
    long = pd.concat(parts, ignore_index=True)
    table = main_table(long, "reward_acc", "Acc", 0.0, "t_seeds", 0.95, 3, {"baseline": 1}, NAMES)
    assert (
        "(ci=t_seeds, n = 3 seeds per cell, t = 4.303; baseline: 1 seed, no interval; noclip: 5 seeds, "
        "t = 2.776; pspo: 10 seeds, t = 2.262)" in table.caption
    ), table.caption


@pytest.mark.parametrize("ci, text", [("bootstrap", "ci=bootstrap, n = 3 seeds per cell; pspo: 10 seeds)"),
                                      ("wilson_pooled", "ci=wilson_pooled, n = 3 seeds per cell; pspo: 10 seeds)")])  # fmt: skip
def test_other_interval_methods_state_the_seed_counts_without_t(ci, text):
    from pspo_repro.analysis.tables import ci_caption

    assert ci_caption(ci, 0.95, {"clip": {3}, "sapo": [3], "pspo": {10}}).endswith(text)


def test_paired_table_of_a_length_is_in_tokens_not_percentage_points():
    from pspo_repro.analysis.paired import paired_markdown
    from pspo_repro.analysis.units import unit_of

    frame = pd.DataFrame([{"model": "m", "dataset": "d", "temperature": 0.0, "mean_a": 31.25, "mean_b": 30.0,
                           "diff": 1.25, "ci_low": 0.5, "ci_high": 2.0, "p_value": 0.01, "n_prompts": 200,
                           "a_better": 120, "b_better": 60}])  # fmt: skip
    md = paired_markdown(frame, "Length", "pspo", "clip", 0.95, NAMES, unit_of("mean_length"))
    assert "(tokens)" in md and "percentage points" not in md and "| 31.2 | 30.0 | +1.2 [+0.5, +2.0] |" in md


def test_the_aggregate_cli_titles_added_metrics_by_unit(tmp_path, monkeypatch):
    from pspo_repro.analysis import aggregate

    results, out = tmp_path / "results", tmp_path / "tables"
    _tree(results, prompts=25)
    monkeypatch.setattr(sys, "argv", ["pspo_repro.aggregate", f"results_dir={results}", f"out_dir={out}",
                                      'add_metrics=["mean_length","unique_answers"]'])  # fmt: skip
    aggregate.main()
    assert "(tokens) against sampling temperature" in (out / "temperature_mean_length.md").read_text()
    assert "(distinct answers per prompt)" in (out / "temperature_unique_answers.md").read_text()
    for name in ("temperature_reward_acc.md", "temperature_maj@16.md"):
        assert not (out / name).exists() or "(%)" in (out / name).read_text()


@pytest.mark.parametrize("root", ["mini", "study"])
def test_no_committed_table_prints_a_percentage_outside_0_100(root):
    """The committed tables as regenerated: no proportion interval below 0 or above 100."""
    import re

    folder = PROJECT_ROOT / "results" / root
    tables = sorted(folder.glob("main_*.md")) + sorted(folder.glob("temperature_*.md"))
    assert tables
    for path in tables:
        text = path.read_text()
        if "(%)" not in text.splitlines()[0]:
            continue
        for low, high in re.findall(r"\[(-?[\d.]+), (-?[\d.]+)\]", text):
            assert 0 <= float(low) <= float(high) <= 100, (path.name, low, high)
    if root == "study":  # ten seeds of pspo, clip and noclip: their own t in the caption
        assert "10 seeds, t = 2.262" in (folder / "main_reward_acc.md").read_text()
