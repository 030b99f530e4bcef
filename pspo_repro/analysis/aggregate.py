"""Hydra entry point: ``python -m pspo_repro.aggregate`` builds the paper's tables and figures.

Reads ``{results_dir}/eval/**/*.json`` and ``{results_dir}/runs/**/metrics.jsonl`` (+ ``run.json``)
and writes under ``out_dir``: the main tables (paper Table 2, one per metric), temperature tables
and figures, the alpha ablation (Table 8), training curves, the long tables as CSV, the
reproduction report and a summary. Every output is built in memory first and written atomically
at the end, so invalid input writes nothing and a crash leaves earlier outputs intact.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
from omegaconf import DictConfig

from pspo_repro.analysis.results_io import (
    ResultsError,
    eval_files,
    eval_long,
    is_proportion,
    load_eval_cells,
    load_runs,
    run_dirs,
)
from pspo_repro.analysis.stats import check_ci_method
from pspo_repro.analysis.table_formats import to_frame, to_latex, to_markdown
from pspo_repro.analysis.tables import (
    Names,
    Table,
    ablation_table,
    cell_intervals,
    ci_caption,
    main_table,
    seed_counts,
    temperature_table,
    wilson_refusal,
)
from pspo_repro.analysis.units import unit_of
from pspo_repro.common.atomic import STALE_DIR, recover_folder, write_set
from pspo_repro.common.output_dirs import folder_problem
from pspo_repro.common.paths import PROJECT_ROOT, results_dir
from pspo_repro.common.redact import redact, redact_files
from pspo_repro.common.safe_paths import UnsafePathError, check_file_name, check_name, no_symlink_escape


class ConfigError(ValueError):
    """An aggregate option is invalid (reported before anything is read or written)."""


@dataclass
class Outputs:
    """Files to write (path -> text or bytes) and the messages for the summary."""

    files: dict[Path, str | bytes] = field(default_factory=dict)
    messages: list[str] = field(default_factory=list)
    short: list[str] = field(default_factory=list)
    out: Path | None = None  # the output folder
    stale: list[str] = field(default_factory=list)  # the previous set's files this one does not write

    def add_table(self, out: Path, table: Table) -> None:
        """Queue the Markdown, LaTeX and CSV renderings of ``table``."""
        self.files[out / f"{table.name}.md"] = to_markdown(table)
        self.files[out / f"{table.name}.tex"] = to_latex(table)
        self.files[out / f"{table.name}.csv"] = to_frame(table).to_csv(index=False)
        self.short += [f"{table.name}: {n}" for n in table.notes]

    def add_figure(self, out: Path, stem: str, rendered: dict[str, bytes]) -> None:
        """Queue one figure's rendered formats as ``<out>/<stem>.<fmt>``."""
        for fmt, data in rendered.items():
            self.files[out / f"{stem}.{fmt}"] = data


def validate(cfg: DictConfig) -> None:
    """Check options before touching any file, so a typo costs one line and writes nothing."""
    from pspo_repro.common.cli import check_number

    try:
        check_ci_method(cfg.ci)
        check_number("expected_seeds", cfg.expected_seeds, int, low=1)
        for method, n in (cfg.expected_seeds_by_method or {}).items():
            check_number(f"expected_seeds_by_method.{method}", n, int, low=1)
        check_number("confidence", cfg.confidence, low=0, high=1, low_open=True, high_open=True)
        check_number("main_temperature", cfg.main_temperature, low=0)
        if cfg.ablation.get("step") is not None:
            check_number("ablation.step", cfg.ablation.step, int, low=1)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    check_metric_names("add_metrics", cfg.add_metrics or [])
    check_metric_names("paired.metrics", cfg.paired.metrics or [])
    check_metric_names("metrics", list(cfg.metrics or {}))
    pairs = cfg.paired.pairs or []
    for pair in pairs:
        if not isinstance(pair, Sequence) or isinstance(pair, str) or len(pair) != 2 or pair[0] == pair[1]:
            raise ConfigError(f"paired.pairs takes [method_a, method_b] pairs of two methods, got {pair!r}")
        for method in pair:  # each names the paired tables' files: one plain name, as a method folder is
            try:
                check_name("paired.pairs method", method)
            except UnsafePathError as exc:
                raise ConfigError(str(exc)) from None
    if cfg.ci == "wilson_pooled":  # before reading anything: a table of mean lengths has no Wilson interval
        for metric in table_metrics(cfg):
            if not is_proportion(metric):
                raise ConfigError(wilson_refusal(metric))
    from pspo_repro.analysis.plots import CURVE_X

    if cfg.curves.x not in CURVE_X:
        raise ConfigError(f"curves.x must be one of {', '.join(CURVE_X)}, got {cfg.curves.x!r}")


def check_metric_names(key: str, names) -> None:
    """``names`` must be a list of metric keys a cell can hold (``metrics.is_metric_name``), else ConfigError.
    A bare ``add_metrics=maj@16`` is one string, which would be read one character at a time."""
    from pspo_repro.evaluation.metrics import K_METRICS, NAMED_METRICS, is_metric_name

    if isinstance(names, str) or not isinstance(names, Sequence):
        raise ConfigError(
            f'{key} must be a list of metric names, got {names!r}; write {key}=["{names}"] (the quotes keep "@")'
        )
    for name in names:
        if not isinstance(name, str) or not is_metric_name(name):
            families = ", ".join(f"{f}@k" for f in K_METRICS)
            raise ConfigError(
                f"{key}: unknown metric {name!r}; known: {', '.join(NAMED_METRICS)}, and {families} "
                "with k an integer >= 1"
            )


def check_pairs_have_cells(pairs, cells: pd.DataFrame) -> None:
    """Every method a paired comparison names must have evaluation cells (ConfigError naming those that do):
    a misspelt method would otherwise give empty paired tables and exit 0."""
    have = sorted(set(cells["method"].astype(str)))
    for a, b in pairs:
        for method in (str(a), str(b)):
            if method not in have:
                raise ConfigError(
                    f"paired.pairs pair [{a}, {b}] names {method!r}, which has no evaluation cells; "
                    f"methods with cells: {', '.join(have)}"
                )


def names_from(cfg: DictConfig) -> Names:
    """Display names and orders from the config."""
    n = cfg.names
    return Names(dict(n.models), dict(n.methods), dict(n.datasets),
                 list(cfg.model_order), list(cfg.method_order), list(cfg.dataset_order))  # fmt: skip


def prompt_set_warnings(cells: pd.DataFrame) -> list[str]:
    """Columns (dataset, T) whose rows used different prompt sets: comparable only with care."""
    notes = []
    for (ds, temp), grp in cells.groupby(["dataset", "temperature"], sort=True):
        if grp["rows_sha256"].astype(str).nunique() > 1:
            groups = grp.groupby(grp["rows_sha256"].astype(str))["file"].first()
            listing = "; ".join(f"{sha[:12]}: e.g. {f}" for sha, f in groups.items())
            notes.append(f"warning: {ds} T={temp:g} mixes prompt sets across methods ({listing})")
    return notes


def load_inputs(cfg: DictConfig, root: Path, outputs: Outputs, has_eval: bool, has_runs: bool):
    """``(cells, (runs, runs_long))``, each None where absent: every record is read and checked before any
    table or figure is made, so a bad record stops the aggregation before that work. A cell or run that is
    left out (a failed run, a torn last line, a cell failing its checks) is warned about and noted in the
    summary."""
    ab = cfg.ablation
    cells_left_out: list[str] = []
    cells = load_eval_cells(root, cells_left_out) if has_eval else None
    warn_left_out(cells_left_out, outputs)
    runs_left_out: list[str] = []
    runs = load_runs(root, {ab.param: list(ab.config_keys)}, runs_left_out) if has_runs else None
    warn_left_out(runs_left_out, outputs)
    return cells, runs


def warn_left_out(lines: list[str], outputs: Outputs) -> None:
    """Each left-out line on stderr (as it is found) and in the summary."""
    for line in lines:
        print(f"warning: {line}", file=sys.stderr, flush=True)
    outputs.messages += lines


def eval_outputs(cfg: DictConfig, root: Path, out: Path, names: Names, outputs: Outputs,
                 cells: pd.DataFrame) -> None:  # fmt: skip
    """Main and temperature tables, temperature figures and the reproduction report from the loaded ``cells``."""
    from pspo_repro.analysis import plots, report

    if cells.empty:
        outputs.messages.append(
            f"no valid evaluation cell under {root / 'eval'}: skipped the evaluation tables"
        )
        return
    if "provisional" in cells:
        for f, why in zip(cells["file"], cells["provisional"], strict=True):
            if isinstance(why, str):
                outputs.messages.append(f"provisional cell (checkpoint asked for by name): {f}: {why}")
    if "foreign_checkpoint" in cells:
        for f, ckpt in zip(cells["file"], cells["foreign_checkpoint"], strict=True):
            if isinstance(ckpt, str):
                outputs.messages.append(
                    f"foreign checkpoint (allow_foreign_checkpoint=true, not this run's own): {f}: {ckpt}"
                )
    long = eval_long(cells)
    # Each cell's file relative to the results root: the CSV is the same in every checkout of the tree.
    shown = long.drop(columns=["per_prompt"]).assign(file=[relative_to(Path(f), root) for f in long["file"]])
    outputs.files[out / "long_eval.csv"] = shown.to_csv(index=False)
    outputs.messages += prompt_set_warnings(cells)
    by_method = dict(cfg.expected_seeds_by_method or {})
    common = dict(ci=cfg.ci, confidence=float(cfg.confidence), expected_seeds=int(cfg.expected_seeds),
                  by_method=by_method, names=names)  # fmt: skip
    for metric, label in table_metrics(cfg).items():
        if note := missing_metric_note(cells, metric):
            outputs.messages.append(note)
        if not (long["metric"] == metric).any():
            outputs.messages.append(f"no evaluation cell reports metric {metric!r}: skipped its tables")
            continue
        table = main_table(long, metric, label, float(cfg.main_temperature), **common)
        if table is None:
            outputs.messages.append(
                f"no {metric} results at T = {cfg.main_temperature:g}: skipped main_{metric}"
            )
        else:
            outputs.add_table(out, table)
        outputs.add_table(out, temperature_table(long, metric, label, **common))
        sub = long[long["metric"] == metric]
        stats = cell_intervals(sub, cfg.ci, float(cfg.confidence))
        ci_text = ci_caption(cfg.ci, float(cfg.confidence), seed_counts(stats, names))
        outputs.add_figure(
            out,
            f"temperature_{metric}",
            plots.temperature_figure(stats, names, label, ci_text, unit_of(metric)),
        )

    paired_outputs(cfg, cells, long, out, names, outputs)

    ref_path = (
        Path(cfg.paper_reference) if cfg.paper_reference else PROJECT_ROOT / "results" / "paper_reference.csv"
    )
    if not ref_path.is_file():
        outputs.messages.append(f"no paper reference at {ref_path}: skipped reproduction_report.md")
        return
    cache: dict[str, dict] = {}

    def lookup(model, method, dataset, metric, temp):
        if metric not in cache:
            cache[metric] = cell_intervals(long[long["metric"] == metric], cfg.ci, float(cfg.confidence))
        hits = [v for k, v in cache[metric].items()
                if k[:4] == (model, method, "", dataset) and np.isclose(k[4], temp)]  # fmt: skip
        return hits[0] if hits else None

    counts: dict[str, set[int]] = {}
    for (method, tag), grp in long.groupby(["method", "tag"], sort=True):
        per_cell = grp.groupby(["model", "dataset", "temperature", "metric"])["seed"].nunique()
        counts[names.method(method, tag)] = {int(n) for n in per_cell}
    ci_text = ci_caption(cfg.ci, float(cfg.confidence), counts)
    text = report.reproduction_report(report.load_reference(ref_path), lookup, names, ci_text, ref_path)
    outputs.files[out / "reproduction_report.md"] = text


def table_metrics(cfg: DictConfig) -> dict[str, str]:
    """Metric key -> label for every table and temperature figure: ``metrics`` then ``add_metrics``."""
    out = {str(k): str(v) for k, v in cfg.metrics.items()}
    labels = dict(cfg.metric_labels or {})
    for key in cfg.add_metrics or []:
        out.setdefault(str(key), str(labels.get(key, key)))
    return out


def missing_metric_note(cells: pd.DataFrame, metric: str) -> str | None:
    """One line when some cells lack ``metric``, saying why (per-sample lists not stored) and what to do."""
    from pspo_repro.evaluation.metrics import has_samples

    # Cells whose rows lack the per-sample lists (a k above the samples per prompt, e.g. maj@16 at T = 0
    # with one greedy sample, is absent by design and not noted).
    old = [
        rec
        for rec in cells.to_dict("records")
        if metric not in rec["metrics"] and not all(has_samples(p) for p in rec["per_prompt"] or [{}])
    ]
    if not old:
        return None
    return (
        f"{metric}: missing from {len(old)} of {len(cells)} evaluation cells (e.g. {old[0]['file']}), written "
        "before per-prompt rows held the per-sample lists (answers, reward_flags, ...) it needs: rerun their eval stage"
    )


def paired_outputs(cfg: DictConfig, cells: pd.DataFrame, long: pd.DataFrame, out: Path, names: Names,
                   outputs: Outputs) -> None:  # fmt: skip
    """``paired_{a}_vs_{b}_{metric}.md/.csv`` for every configured pair and metric."""
    from pspo_repro.analysis.paired import paired_frame, paired_markdown

    check_pairs_have_cells(cfg.paired.pairs or [], cells)
    for a, b in cfg.paired.pairs or []:
        for metric in cfg.paired.metrics:
            if not (long["metric"] == metric).any():
                outputs.messages.append(
                    missing_metric_note(cells, metric)
                    or f"no evaluation cell reports metric {metric!r}: skipped paired {a} vs {b}"
                )
                continue
            frame = paired_frame(long, metric, str(a), str(b), float(cfg.confidence))
            label = table_metrics(cfg).get(metric, dict(cfg.metric_labels).get(metric, metric))
            stem = f"paired_{a}_vs_{b}_{metric}".replace("@", "_at_")
            outputs.files[out / f"{stem}.md"] = paired_markdown(frame, label, str(a), str(b),
                                                                float(cfg.confidence), names, unit_of(metric))  # fmt: skip
            outputs.files[out / f"{stem}.csv"] = frame.to_csv(index=False)
            if frame.empty:
                outputs.messages.append(f"paired {a} vs {b}: no (model, dataset, T) has both methods")


def run_outputs(cfg: DictConfig, out: Path, names: Names, outputs: Outputs, runs: pd.DataFrame,
                runs_long: pd.DataFrame) -> None:  # fmt: skip
    """Alpha ablation table and training curves from the loaded training runs."""
    from pspo_repro.analysis import plots

    ab = cfg.ablation
    outputs.files[out / "long_runs.csv"] = runs_long.to_csv(index=False)
    table, notes = ablation_table(
        runs, runs_long, method=ab.method, param=ab.param, metric=ab.metric,
        step=None if ab.step is None else int(ab.step), confidence=float(cfg.confidence),
        expected_seeds=int(cfg.expected_seeds), names=names, ci=cfg.ci, tag_prefix=ab.get("tag_prefix"),
    )  # fmt: skip
    outputs.messages += notes
    if table is None:
        outputs.messages.append(
            f"no finished {ab.method} runs with {ab.param} and {ab.metric}: skipped alpha_ablation"
        )
    else:
        outputs.add_table(out, table)
    if (runs_long["metric"] == cfg.curves.metric).any():
        fig = plots.curves_figure(
            runs_long, cfg.curves.metric, float(cfg.confidence), names, str(cfg.curves.x)
        )
        outputs.add_figure(out, "training_curves", fig)
    else:
        outputs.messages.append(f"no run logged {cfg.curves.metric}: skipped training_curves")


def relative_to(path: Path, base: Path) -> str:
    """``path`` relative to ``base`` (posix, ``.`` for ``base`` itself) when it lies under it, else as given:
    outputs then name files the same in every checkout, and a path outside the tree stays unambiguous."""
    try:
        return path.relative_to(base).as_posix() or "."
    except ValueError:
        return str(path)


def summary_text(root: Path, out: Path, cfg: DictConfig, outputs: Outputs) -> str:
    """What was read, what was written or skipped, and every cell with fewer seeds than expected. The results
    root is shown relative to the summary's folder (``.``, or ``..`` for ``<root>/tables``) when it holds it,
    so a committed summary is the same in every checkout; else as given."""
    where = os.path.relpath(root, out) if out == root or root in out.parents else str(root)
    lines = [
        "# Aggregation summary",
        "",
        f"results: {where}; ci: {cfg.ci}; expected seeds: {cfg.expected_seeds}",
        "",
    ]
    lines += ["## Written", ""] + [f"- {p.relative_to(out)}" for p in sorted(outputs.files)] + [""]
    lines += ["## Notes", ""] + ([f"- {m}" for m in outputs.messages] or ["- none"]) + [""]
    lines += ["## Cells with fewer seeds than expected", ""] + (
        [f"- {s}" for s in outputs.short] or ["- none"]
    )
    if outputs.stale:  # a set is one set: what the previous aggregation wrote and this one did not
        lines += ["", f"## Set aside as stale ({STALE_DIR}/)", "",
                  "Written by the previous aggregation into this folder, not by this one (other options); "
                  f"moved into {STALE_DIR}/ so that they are not read as part of this set:", ""]  # fmt: skip
        lines += [f"- {STALE_DIR}/{n}" for n in outputs.stale]
    return "\n".join(lines) + "\n"


# Extensions of aggregate's outputs: temp files of these names left by a kill are cleaned on the next run.
OUTPUT_SUFFIXES = (".md", ".tex", ".csv", ".png", ".pdf", ".svg")


def write_outputs(outputs: Outputs) -> None:
    """Write every queued file (text as UTF-8, figures as bytes) as one set per folder
    (``atomic.write_set``): after a kill the folder holds the previous outputs or, once the next run
    finishes the switch, the new ones, never half of each; stale temporaries of earlier kills are removed,
    and the previous set's files the new one does not have (``outputs.stale``) are moved into ``stale/``."""
    by_folder: dict[Path, dict[Path, str | bytes]] = {}
    for path, content in outputs.files.items():
        by_folder.setdefault(Path(path).parent, {})[Path(path)] = content
    for folder, files in by_folder.items():
        aside = outputs.stale if folder == outputs.out else []
        write_set(redact_files(files), OUTPUT_SUFFIXES, aside)


def check_output_names(out: Path, outputs: Outputs) -> None:
    """Every queued file lies directly in ``out`` and has a plain file name (``safe_paths.check_file_name``),
    else ConfigError: the options that make names (metrics, paired pairs) are checked in ``validate``; this
    is the proof over the final paths, before anything is written."""
    for path in outputs.files:
        try:
            check_file_name("output file", path.name)
        except UnsafePathError as exc:
            raise ConfigError(str(exc)) from None
        if path.parent != out:
            raise ConfigError(f"output file {path} would not lie in out_dir {out}")


SUMMARY_TITLE = "# Aggregation summary"


def previous_outputs(out: Path) -> list[str]:
    """The files the previous aggregation into ``out`` wrote, as its ``summary.md`` lists them under
    "## Written" (the set's manifest, switched with the set): those still in ``out`` as regular files, with
    an output suffix and a plain name. A summary.md that aggregation did not write (another title) lists
    nothing, and neither does a folder without one; files of other writers (regime, claims, evaluation
    cells) are never listed, so never touched."""
    summary = out / "summary.md"
    if summary.is_symlink() or not summary.is_file():
        return []
    try:
        lines = summary.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError):
        return []
    if not lines or lines[0] != SUMMARY_TITLE or "## Written" not in lines:
        return []
    names = []
    for line in lines[lines.index("## Written") + 1 :]:
        if line.startswith("## "):
            break
        name = line[2:] if line.startswith("- ") else ""
        try:
            check_file_name("listed output", name)
        except UnsafePathError:
            continue
        path = out / name
        if name.endswith(OUTPUT_SUFFIXES) and not path.is_symlink() and path.is_file():
            names.append(name)
    return names


def redacted_config(cfg: DictConfig) -> DictConfig:
    """``cfg`` resolved, with every credential value in it replaced (``redact``): display names, labels and
    captions come from here, so a ``${oc.env:HF_TOKEN}`` (or a pasted token) never reaches a table, a
    figure or the summary. An interpolation that cannot resolve fails here, before any work."""
    from omegaconf import OmegaConf

    return OmegaConf.create(redact(OmegaConf.to_container(cfg, resolve=True)))


def run(cfg: DictConfig) -> Outputs:
    """Aggregate the results tree named by ``cfg``; returns what was written."""
    cfg = redacted_config(cfg)
    validate(cfg)
    root = Path(cfg.results_dir) if cfg.results_dir else results_dir()
    out = Path(cfg.out_dir) if cfg.out_dir else root / "tables"
    try:  # results/tables -> /elsewhere: not written through unless PSPO_RESULTS_DIR says so
        no_symlink_escape(root, out, "out_dir")
    except UnsafePathError as exc:
        raise ConfigError(str(exc)) from None
    if why := folder_problem(out):  # a file, read-only, a name too long, a full disk: before any work
        raise ConfigError(f"cannot write the outputs under out_dir={out}: {why}")
    stale = out / STALE_DIR
    if stale.is_symlink() or (stale.exists() and not stale.is_dir()):  # before anything is read or switched
        raise ConfigError(
            f"{stale} is not a folder: aggregation moves the previous set's extra files into {STALE_DIR}/; "
            "move or rename it"
        )
    has_eval, has_runs = bool(eval_files(root)), bool(run_dirs(root))
    if not has_eval and not has_runs:
        raise ResultsError(
            f"no results found under {root} (searched eval/**/*.json and runs/**/metrics.jsonl)"
        )
    names, outputs = names_from(cfg), Outputs(out=out)
    cells, runs = load_inputs(cfg, root, outputs, has_eval, has_runs)
    if has_eval:
        eval_outputs(cfg, root, out, names, outputs, cells)
    else:
        outputs.messages.append(
            f"no evaluation cells under {root / 'eval'}: skipped the main and temperature tables, "
            "their figures and the reproduction report"
        )
    if has_runs:
        run_outputs(cfg, out, names, outputs, *runs)
    else:
        outputs.messages.append(
            f"no training runs under {root / 'runs'}: skipped the alpha ablation and the training curves"
        )
    summary = out / "summary.md"
    outputs.files[summary] = ""  # listed in itself
    check_output_names(out, outputs)
    recover_folder(out, OUTPUT_SUFFIXES)  # a switch cut by a kill is finished: summary.md lists one set
    written = {p.name for p in outputs.files}
    outputs.stale = [n for n in previous_outputs(out) if n not in written]
    outputs.files[summary] = summary_text(root, out, cfg, outputs)
    write_outputs(outputs)
    return outputs


def _task(cfg: DictConfig) -> None:
    """CLI: a one-line error (file listings folded into it) and exit status 2 on invalid input or options."""
    from omegaconf.errors import OmegaConfBaseException

    from pspo_repro.common.cli import fail, first_line

    try:
        outputs = run(cfg)
    except (ConfigError, ResultsError) as exc:
        fail(str(exc))
    except OmegaConfBaseException as exc:  # an ${oc.env:UNSET} resolved only when read
        fail(f"bad config value: {first_line(exc)}")
    except OSError as exc:  # a read-only or full out_dir: the message names the target (atomic.write_set)
        fail(f"cannot write the outputs: {exc.strerror or exc}")
    summary = next(p for p in outputs.files if p.name == "summary.md")
    print(redact(outputs.files[summary]), end="")


def main() -> int:
    """Entry point of ``python -m pspo_repro.aggregate``: ``cli.run_command`` (relative folders as the user
    meant them, a typo in a key as one line), then Hydra."""
    from pspo_repro.common.cli import run_command

    return run_command("aggregate", _task)
