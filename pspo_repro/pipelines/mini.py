"""The CPU mini-reproduction, end to end: ``python -m pspo_repro.mini`` (``make mini``; conf/mini.yaml).

Stages, each through the project's own entry points so the mini run exercises the GPU grid's code paths:

1. ``data``: the synthetic splits (``pspo_repro.data.synthetic``) written to ``<root>/work/data/synthetic/``;
   every later stage reads them through ``PSPO_DATA_DIR``.
2. ``sft``: ``python -m pspo_repro.sft`` trains the base model (``<root>/work/sft/model``).
3. ``rl``: Hydra multiruns of ``python -m pspo_repro.train -m experiment=mini method=... seed=0,1,2
   hydra/launcher=<basic|slurm|...>``, ``parallel`` processes at once (largest group first).
4. ``eval``: ``python -m pspo_repro.evaluate -m run=...`` over the finished main runs, plus the SFT
   model as the ``baseline`` row, split over ``parallel`` processes.
5. ``aggregate``: ``python -m pspo_repro.aggregate results_dir=<root> out_dir=<root>``.

Layout under ``root`` (default ``results/mini``): ``runs/`` and ``eval/`` (the usual schemas), the
tables and figures, ``timings.json``; ``work/`` holds data, the SFT checkpoint, logs and stage markers.
A stage whose marker records the same settings is skipped on a rerun; inside a stage the entry points
skip finished runs and cells and resume unfinished ones, so an interrupted ``make mini`` continues.
Subprocess output goes to ``work/logs/``; the console shows one progress bar per stage and a summary.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import logging
import math
import os
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import hydra
from omegaconf import DictConfig, OmegaConf

from pspo_repro.analysis.tuning import Selection, TuningError, select
from pspo_repro.common.atomic import write_json
from pspo_repro.common.paths import CONF_DIR, PROJECT_ROOT, results_dir
from pspo_repro.common.run_dir import tagging_key
from pspo_repro.common.safe_paths import UnsafePathError, check_name
from pspo_repro.pipelines import mini_committed, warm_start
from pspo_repro.training.sft import PROGRESS

log = logging.getLogger("pspo_repro.mini")
STAGES = ("data", "sft", "rl", "eval", "aggregate")
MODEL_NAME = "mini_sft"  # conf/model/mini_sft.yaml: the run folders' model component
POLL_S = 2.0  # progress bar refresh
WAIT_S = 0.2  # how often a finished job is looked for: a core idles at most this long between jobs


def registered_methods() -> list[str]:
    """Every method of the registry, sorted: ``${registered_methods:}`` in a pipeline config (the leaderboard's
    grid), so a method added to the registry (docs/adding_a_method.md) joins the next run with no other edit.
    Imported here, where a config asks: the registry imports torch (~1.3 CPU s), which the pipeline's driver
    does not otherwise need (its jobs do), nor a bad setting's one-line refusal."""
    from pspo_repro.methods.registry import list_methods

    return sorted(list_methods())


OmegaConf.register_new_resolver("registered_methods", registered_methods, replace=True)


class StageError(RuntimeError):
    """A stage's subprocess failed; the message names its log file and ends with the log's tail."""


class SettingsError(StageError):
    """The pipeline's own settings are wrong (checked before anything runs or moves): exit status 2."""


@dataclass
class Job:
    """One subprocess of a stage: its command, a relative cost (for scheduling) and its log file."""

    name: str
    cmd: list[str]
    cost: float = 1.0
    log: Path | None = None
    priority: int = 0  # higher first (before cost): jobs whose results unlock others
    proc: subprocess.Popen | warm_start.WarmJob | None = field(default=None, repr=False)


# ---------------------------------------------------------------- paths, environment, markers


def mini_root(cfg: DictConfig) -> Path:
    """``cfg.root`` (relative to the project root), else ``<results>/mini``."""
    if cfg.get("root"):
        root = Path(str(cfg.root)).expanduser()
        return root if root.is_absolute() else PROJECT_ROOT / root
    return results_dir() / "mini"


def child_env(cfg: DictConfig, root: Path, threads: int) -> dict[str, str]:
    """The environment of every stage's subprocess: results, data and SFT folders, thread count, offline."""
    env = dict(os.environ)
    env.update(
        PSPO_RESULTS_DIR=str(root),
        PSPO_DATA_DIR=str(root / "work" / "data"),
        PSPO_MINI_SFT_DIR=str(root / "work" / "sft"),
        # One thread per process: two processes on two cores beat one with two threads (docs/benchmarks.md).
        OMP_NUM_THREADS=str(threads),
        MKL_NUM_THREADS=str(threads),
        TOKENIZERS_PARALLELISM="false",
        PYTHONUNBUFFERED="1",
    )
    for key in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_DATASETS_OFFLINE"):
        env.setdefault(key, "1")  # nothing here needs the hub; never wait on a look-up
    env.setdefault("WANDB_MODE", "offline")
    return env


def fingerprint(cfg: DictConfig, stage: str) -> str:
    """Hash of the settings a stage's output depends on (its marker must match to skip the stage)."""
    part = {
        "data": ["data"],
        "sft": ["data", "prompt_template", "sft"],
        "rl": ["data", "prompt_template", "sft", "rl"],
        "eval": ["data", "prompt_template", "sft", "rl", "eval"],
        "aggregate": ["data", "prompt_template", "sft", "rl", "eval", "aggregate"],
    }[stage]
    blob = {
        k: OmegaConf.to_container(cfg[k], resolve=True) if OmegaConf.is_config(cfg[k]) else cfg[k]
        for k in part
    }
    # Where jobs run (the launcher) does not change results; it is left out on purpose.
    if "rl" in blob:
        blob["rl"].pop("launcher", None)
    return hashlib.sha256(json.dumps(blob, sort_keys=True).encode()).hexdigest()[:16]


def marker_path(root: Path, stage: str) -> Path:
    """``<root>/work/stages/<stage>.json``: written when a stage finishes."""
    return root / "work" / "stages" / f"{stage}.json"


def _read_record(path: Path) -> dict[str, Any] | None:
    """A JSON object the pipeline wrote (a stage marker, timings.json), or None when there is none; a file
    that is not one (cut, edited, not UTF-8, another JSON type) or a folder in its place is named on stdout
    and read as None."""
    if not os.path.lexists(path):
        return None
    if not path.is_file():  # check_settings refuses these first; named, never read
        print(f"[mini] {path} is not a regular file; ignored", flush=True)
        return None
    try:
        rec = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:  # ValueError: bad JSON or bytes that are not UTF-8
        rec = exc
    if isinstance(rec, dict):
        return rec
    why = f"{type(rec).__name__}: {rec}" if isinstance(rec, Exception) else f"a JSON {type(rec).__name__}"
    print(f"[mini] {path} is unreadable ({why}); ignored", flush=True)
    return None


def stage_done(root: Path, stage: str, fp: str) -> dict[str, Any] | None:
    """The stage's marker if it finished with the same settings, else None (a corrupted marker too: the
    stage runs again, and its entry points skip the work that is finished)."""
    rec = _read_record(marker_path(root, stage))
    if rec is None or rec.get("fingerprint") != fp:
        return None
    if stage_seconds(rec) is None:
        print(f"[mini] {marker_path(root, stage)}: no time recorded (seconds); running the stage again")
        return None
    return rec


def stage_seconds(rec: dict[str, Any]) -> float | None:
    """A stage record's ``seconds`` when it is a finite number >= 0, else None."""
    seconds = rec.get("seconds")
    if isinstance(seconds, bool) or not isinstance(seconds, int | float):
        return None
    return float(seconds) if math.isfinite(seconds) and seconds >= 0 else None


# ---------------------------------------------------------------- running subprocesses


def _tail(path: Path | None, n: int = 25) -> str:
    if path is None or not path.is_file():
        return ""
    lines = path.read_text(errors="replace").splitlines()
    return "\n".join(lines[-n:])


def run_jobs(
    jobs: list[Job],
    parallel: int,
    env: dict[str, str],
    bar,
    progress,
    ready: Callable[[], list[Job]] | None = None,
) -> None:
    """Run ``jobs`` with at most ``parallel`` at once, highest priority then largest cost first;
    ``progress()`` -> units done. ``ready()``, when given, is asked for more jobs whenever one ends (jobs that
    waited on finished ones, e.g. the tuned runs on their sweeps), so no core idles at a phase boundary.
    A job whose environment is the one ``warm_start.configure`` was given starts warm (``warm_start``).

    Each job's output goes to its log file. The first failure stops the others (their finished work
    stays on disk and is reused by a rerun) and raises StageError with the failed log's tail.
    """
    queue = sorted(jobs, key=lambda j: (-j.priority, -j.cost))
    running: list[Job] = []
    next_refresh = time.monotonic() + POLL_S
    try:
        while queue or running:
            while queue and len(running) < max(1, parallel):
                job = queue.pop(0)
                assert job.log is not None
                job.log.parent.mkdir(parents=True, exist_ok=True)
                with open(job.log, "w") as fh:
                    fh.write("$ " + " ".join(job.cmd) + "\n")
                job.proc = warm_start.start(job.cmd, PROJECT_ROOT, env, job.log)
                running.append(job)
            time.sleep(WAIT_S)
            if time.monotonic() >= next_refresh:
                bar.n = progress()
                bar.refresh()
                next_refresh = time.monotonic() + POLL_S
            for job in list(running):
                rc = job.proc.poll()
                if rc is None:
                    continue
                running.remove(job)
                if rc != 0:
                    raise StageError(f"{job.name} failed (exit {rc}); log {job.log}:\n{_tail(job.log)}")
                if ready is not None:
                    queue = sorted(queue + ready(), key=lambda j: (-j.priority, -j.cost))
    finally:
        for job in running:  # only our own children, by handle
            if job.proc is not None and job.proc.poll() is None:
                job.proc.terminate()
                job.proc.wait()
    bar.n = progress()
    bar.refresh()


# ---------------------------------------------------------------- stages


def stage_data(cfg: DictConfig, root: Path) -> dict[str, Any]:
    """Write the synthetic splits as GSM8K-layout jsonl under ``work/data/synthetic``; return their hashes."""
    from pspo_repro.data.synthetic import SyntheticConfig, write_jsonl

    out: dict[str, Any] = {}
    tasks = {"synthetic": cfg.data.sizes, "synthetic_heldout": cfg.data.get("heldout_sizes")}
    for task, task_sizes in tasks.items():
        if not task_sizes:
            continue
        sizes = {k: int(v) for k, v in task_sizes.items()}
        paths = write_jsonl(
            root / "work" / "data" / task, sizes, SyntheticConfig(seed=int(cfg.data.seed)), task
        )
        record = {
            split: {"rows": sizes[split], "sha256": hashlib.sha256(p.read_bytes()).hexdigest()}
            for split, p in paths.items()
        }
        if task == "synthetic":
            out.update(record)  # the rewarded task's splits at the top level, as before
        else:
            out[task] = record
    return out


def sft_cmd(cfg: DictConfig, root: Path) -> list[str]:
    """``python -m pspo_repro.sft`` into ``work/sft``, on the same data seed and sizes as the data stage."""
    return [
        sys.executable, "-m", "pspo_repro.sft",
        f"out_dir={root / 'work' / 'sft'}",
        f"threads={int(cfg.sft.threads)}",
        f"data.seed={int(cfg.data.seed)}",
        f"data.n_train={int(cfg.data.sizes.train)}",
        f"data.n_val={int(cfg.data.sizes.validation)}",
        f"data.heldout_n_train={int((cfg.data.get('heldout_sizes') or {}).get('train', 0))}",
        f"prompt_template={cfg.prompt_template}",
        *map(str, cfg.sft.overrides),
    ]  # fmt: skip


def _sweep_text(value: Any) -> str:
    """A sweep value as Hydra's comma list (a list, e.g. ``${registered_methods:}``, is joined)."""
    if OmegaConf.is_list(value) or isinstance(value, list | tuple):
        return ",".join(str(v) for v in value)
    return str(value)


def _sweep_values(value: Any) -> list[str]:
    return [v.strip() for v in _sweep_text(value).split(",")]


def group_seeds(cfg: DictConfig, group: DictConfig) -> list[int]:
    """The group's own ``seeds`` if it sets them, else ``rl.seeds``."""
    return [int(s) for s in (group.get("seeds") or cfg.rl.seeds)]


def _point_tag(group: DictConfig, point: dict[str, str]) -> str:
    """A sweep point's folder tag (as run_dir.tag_from_overrides builds it): the group's ``tag`` (passed as
    ``run_tag``), ``as_run`` for ``variant=as_run``, then ``{key}{value}`` of its method/trainer keys other
    than the infrastructure ones, which name no folder."""
    tag_keys = sorted(k for k in point if tagging_key(k))
    swept = "_".join(f"{k.split('.', 1)[1]}{float(point[k]):g}" for k in tag_keys)
    # variant=as_run appends ``as_run`` to run_tag before the swept keys (training.grpo.apply_per_method)
    as_run = "as_run" if point.get("variant") == "as_run" else ""
    return "-".join(t for t in (str(group.get("tag") or ""), as_run, swept) if t)


def _points(group: DictConfig) -> list[dict[str, str]]:
    sweep = {k: _sweep_values(v) for k, v in group.sweep.items()}
    keys = sorted(sweep)
    return [dict(zip(keys, combo, strict=True)) for combo in itertools.product(*(sweep[k] for k in keys))]


def _selection(root: Path, group: DictConfig, point: dict[str, str]) -> Selection:
    """One sweep point's choice of a ``select`` group (TuningError while its tuning runs are missing or
    unfinished)."""
    sel = group.select
    others = {k: v for k, v in point.items() if k != "method"}
    return select(root / "runs" / MODEL_NAME, point["method"], str(sel.tag), str(sel.key),
                  _sweep_values(sel["values"]), [int(s) for s in sel.seeds], others)  # fmt: skip


def selections(cfg: DictConfig, root: Path, group: DictConfig) -> list[Selection]:
    """A ``select`` group's choices, one per sweep point: ``select: {tag, key, values, seeds}`` names the
    tuning runs (``{method}/seed{s}-{tag}-...{key}{value}...`` with the point's other swept keys), and
    ``analysis.tuning.select`` picks by validation reward, never the test split. TuningError while those
    runs are missing or unfinished."""
    return [_selection(root, group, point) for point in _points(group)]


def group_points(cfg: DictConfig, group: DictConfig, root: Path | None) -> list[dict[str, str]]:
    """The sweep points a group runs: its sweep's product, a ``select`` group's with the chosen value of the
    selected key added (TuningError when ``root`` is None or the tuning runs are not finished)."""
    points = _points(group)
    if not group.get("select"):
        return points
    if root is None:
        raise TuningError(f"rl group {group.name}: its selection needs the results folder")
    key = str(group.select.key)
    return [{**p, key: s.chosen} for p, s in zip(points, selections(cfg, root, group), strict=True)]


def rl_runs(
    cfg: DictConfig, root: Path | None = None, unresolved: bool = False
) -> list[tuple[str, str, int]]:
    """Every (method, tag, seed) the rl groups produce (tags: ``_point_tag``). A ``select`` group's runs
    need its tuning runs under ``root``; ``unresolved=True`` leaves out the groups that cannot be resolved
    yet instead of raising TuningError."""
    out = []
    for group in cfg.rl.groups:
        try:
            points = group_points(cfg, group, root)
        except TuningError:
            if unresolved:
                continue
            raise
        for point in points:
            tag = _point_tag(group, point)
            for seed in group_seeds(cfg, group):
                out.append((point["method"], tag, seed))
    return out


def run_dir_of(root: Path, method: str, tag: str, seed: int) -> Path:
    """``<root>/runs/mini_sft/{method}/seed{seed}[-{tag}]``."""
    return root / "runs" / MODEL_NAME / method / (f"seed{seed}" + (f"-{tag}" if tag else ""))


def run_status(folder: Path) -> str | None:
    """``run.json``'s status (None when there is none)."""
    try:
        return json.loads((folder / "run.json").read_text()).get("status")
    except (OSError, json.JSONDecodeError):
        return None


def _rl_job(
    cfg: DictConfig, root: Path, group: DictConfig, name: str, sweep: dict[str, str], cost: float
) -> Job:
    """One Hydra multirun of pspo_repro.train: the group's sweep point(s) over its seeds."""
    seeds = ",".join(map(str, group_seeds(cfg, group)))
    cmd = [
        sys.executable, "-m", "pspo_repro.train", "-m",
        f"experiment={group.get('experiment') or cfg.rl.experiment}",
        f"data.prompt_template={cfg.prompt_template}",
        *([f"run_tag={group.tag}"] if group.get("tag") else []),
        *[f"{k}={v}" for k, v in sweep.items()],
        f"seed={seeds}",
        f"hydra/launcher={cfg.rl.launcher}",
        f"hydra.sweep.dir={root / 'work' / 'hydra' / name}",
        *map(str, cfg.rl.overrides),
    ]  # fmt: skip
    # A sweep whose runs a select group reads goes first: the tuned runs can start as soon as it ends.
    unlocks = any(str(g.select.tag) == str(group.get("tag")) for g in cfg.rl.groups if g.get("select"))
    return Job(name, cmd, cost, priority=int(unlocks and not group.get("select")))


def _check_rl_overrides(cfg: DictConfig) -> None:
    # infrastructure keys (run_dir.INFRA_TRAINER_KEYS) name no folder: allowed
    tagged = [o for o in map(str, cfg.rl.overrides) if tagging_key(o)]
    if tagged:  # they would add a tag to every run folder; settings belong in the experiment file
        raise StageError(f"rl.overrides: put method./trainer. settings in conf/experiment/ instead: {tagged}")


def _select_job(cfg: DictConfig, root: Path, group: DictConfig, i: int, points: list[dict[str, str]]) -> Job:
    """The ``select`` group's job of sweep point ``i`` at the value its tuning runs chose (TuningError while
    they are missing or unfinished)."""
    point = {**points[i], str(group.select.key): _selection(root, group, points[i]).chosen}
    return _rl_job(cfg, root, group, _select_name(group, i, len(points)), {k: str(v) for k, v in point.items()},
                   float(group.get("cost", 1.0)) / len(points))  # fmt: skip


def _select_name(group: DictConfig, i: int, n_points: int) -> str:
    return f"rl-{group.name}" + (f"-{i}" if n_points > 1 else "")


def rl_jobs(cfg: DictConfig, root: Path, phase: str = "all") -> list[Job]:
    """One Hydra multirun of pspo_repro.train per rl group (the GRPO grid's own code path).

    ``phase``: ``sweep`` (the groups without ``select``), ``select`` (those with it: one job per group and
    sweep point, at the value chosen from its tuning group's finished runs) or ``all``.
    """
    _check_rl_overrides(cfg)
    jobs = []
    for group in cfg.rl.groups:
        if group.get("select"):
            if phase != "sweep":
                points = _points(group)
                jobs += [_select_job(cfg, root, group, i, points) for i in range(len(points))]
        elif phase != "select":
            sweep = {k: _sweep_text(v) for k, v in group.sweep.items()}
            jobs.append(_rl_job(cfg, root, group, f"rl-{group.name}", sweep, float(group.get("cost", 1.0))))
    return jobs


def ready_select_jobs(cfg: DictConfig, root: Path, issued: set[str]) -> list[Job]:
    """The ``select`` groups' jobs whose tuning runs have all finished, except those named in ``issued``
    (which this adds them to): each tuned point starts as soon as its own sweep is done."""
    jobs = []
    for group in cfg.rl.groups:
        if not group.get("select"):
            continue
        points = _points(group)
        for i in range(len(points)):
            if _select_name(group, i, len(points)) in issued:  # its tuning runs are not read again
                continue
            try:
                job = _select_job(cfg, root, group, i, points)
            except TuningError:
                continue
            issued.add(job.name)
            jobs.append(job)
    return jobs


def _hydra_quote(path: Path) -> str:
    # Quoted, so a comma or bracket in a folder name cannot split Hydra's sweep list (as scripts/eval_grid.py).
    return "'" + str(path).replace("\\", "\\\\").replace("'", "\\'") + "'"


def _last(overrides: list[str], key: str) -> str | None:
    found = [o.split("=", 1)[1] for o in overrides if o.startswith(f"{key}=")]
    return found[-1] if found else None


def _n_samples(overrides: list[str]) -> int:
    """The last ``n_samples=`` among evaluate overrides (conf/evaluate.yaml's 16 when none)."""
    found = _last(overrides, "n_samples")
    try:
        return int(found) if found is not None else 16
    except ValueError:
        raise StageError(f"eval overrides: n_samples must be an integer, got {found!r}") from None


def _n_temps(overrides: list[str]) -> int:
    """Temperatures in the last ``temperatures=[...]`` among evaluate overrides (conf/evaluate.yaml's 5 if none)."""
    found = _last(overrides, "temperatures")
    return max(1, len([t for t in found.strip("[]").split(",") if t.strip()])) if found is not None else 5


def eval_jobs(cfg: DictConfig, root: Path) -> tuple[list[Job], int]:
    """Evaluation multiruns over the finished main runs, split in ``parallel`` parts, and the baseline.

    ``eval.method_overrides`` adds settings for the untagged runs of some methods (``baseline``: the SFT
    model), e.g. the paper's 16 samples for the pair a paired comparison reads; runs with the same
    additions share jobs.
    Returns the jobs and the number of models evaluated (for the progress total).
    """
    methods, tags = set(cfg.eval.methods), {"", *map(str, cfg.eval.get("tags") or [])}
    extra = {str(k): [str(o) for o in v] for k, v in (cfg.eval.get("method_overrides") or {}).items()}
    unknown = sorted(set(extra) - methods - {"baseline"})
    if unknown:
        raise StageError(
            f"eval.method_overrides: {', '.join(unknown)} not in eval.methods ({', '.join(sorted(methods))}) or baseline"
        )
    prefixes = [str(p) for p in (cfg.eval.get("tag_prefixes") or [])]
    try:
        every = rl_runs(cfg, root)
    except TuningError as exc:
        raise StageError(f"eval: {exc} (rerun the rl stage)") from None

    def wanted(t: str) -> bool:
        return t in tags or any(t.startswith(p + "-") for p in prefixes)

    runs = [(m, t, run_dir_of(root, m, t, s)) for m, t, s in every if m in methods and wanted(t)]
    missing = [str(r) for _, _, r in runs if run_status(r) != "finished"]
    if missing:
        raise StageError(f"eval: runs not finished (rerun the rl stage): {', '.join(missing)}")
    common = [f"prompt_template={cfg.prompt_template}", *map(str, cfg.eval.overrides)]
    parts = max(1, int(cfg.parallel))
    groups: dict[tuple[str, ...], list[Path]] = {}
    # method_overrides act on the untagged main runs only; eval.tagged_overrides on every tagged run
    # (e.g. the study's regimes at T = 0 only, while its main runs get the temperature sweep).
    tagged = [str(o) for o in (cfg.eval.get("tagged_overrides") or [])]
    # eval.prefix_method_overrides: {prefix: {method: [...]}} for the tagged runs of a prefix (e.g. the
    # tuning-matched runs whose temperature sweep a claim reads), in place of tagged_overrides.
    by_prefix = {str(p): {str(m): [str(o) for o in ov] for m, ov in v.items()}
                 for p, v in (cfg.eval.get("prefix_method_overrides") or {}).items()}  # fmt: skip

    def overrides_of(m: str, t: str) -> list[str]:
        if not t:
            return extra.get(m, [])
        for p, table in by_prefix.items():
            if t.startswith(p + "-") and m in table:
                return table[m]
        return tagged

    for m, t, r in runs:
        groups.setdefault(tuple(overrides_of(m, t)), []).append(r)
    jobs = []
    for g, (added, folders) in enumerate(groups.items()):
        # Runs whose cells are all there already need no job (nor their checkpoints: a committed run has none).
        folders = [r for r in folders if not cells_done(root, r, [*common, *added])]
        # Cost ~ completions per model: 1 greedy + n samples per prompt at each sampled temperature.
        per_model = 1 + _n_samples([*common, *added]) * (_n_temps([*common, *added]) - 1)
        for i in range(parts):
            chunk = folders[i::parts]
            if not chunk:
                continue
            name = f"eval-{i}" if g == 0 else f"eval-{g}-{i}"
            cmd = [
                sys.executable, "-m", "pspo_repro.evaluate", "-m",
                "run=" + ",".join(_hydra_quote(r) for r in chunk),
                f"hydra.sweep.dir={root / 'work' / 'hydra' / name}",
                *common, *added,
            ]  # fmt: skip
            jobs.append(Job(name, cmd, float(len(chunk) * per_model)))
    n = len(runs)
    # The base model's cells are filed under eval/<model>/baseline/seed0 (a committed one names the SFT folder
    # of the machine that made it: reused as it is, never re-evaluated against another path).
    base_cells = root / "eval" / MODEL_NAME / "baseline" / "seed0"
    if cfg.eval.baseline and not cells_done(root, base_cells, [*common, *extra.get("baseline", [])]):
        added = extra.get("baseline", [])
        cmd = [sys.executable, "-m", "pspo_repro.evaluate", f"model={MODEL_NAME}", *common, *added]
        jobs.append(Job("eval-baseline", cmd, float(1 + _n_samples([*common, *added]))))
        n += 1
    # The held-out skill (eval.heldout: its own overrides over the common ones, e.g. eval=synthetic_heldout
    # temperatures=[0.0]): every evaluated model, the baseline included, in one job per part.
    heldout = [str(o) for o in (cfg.eval.get("heldout") or [])]
    if heldout:
        keys = {o.split("=", 1)[0] for o in heldout}
        held_common = [o for o in common if o.split("=", 1)[0] not in keys] + heldout
        folders = [r for _, _, r in runs if not cells_done(root, r, held_common)]
        for i in range(parts):
            chunk = folders[i::parts]
            targets = ["run=" + ",".join(_hydra_quote(r) for r in chunk)] if chunk else []
            if i == parts - 1 and cfg.eval.baseline and not cells_done(root, base_cells, held_common):
                cmd = [sys.executable, "-m", "pspo_repro.evaluate", f"model={MODEL_NAME}", *held_common]
                jobs.append(Job("eval-heldout-baseline", cmd, 0.5))
            if targets:
                cmd = [
                    sys.executable, "-m", "pspo_repro.evaluate", "-m", *targets,
                    f"hydra.sweep.dir={root / 'work' / 'hydra' / f'eval-heldout-{i}'}", *held_common,
                ]  # fmt: skip
                jobs.append(Job(f"eval-heldout-{i}", cmd, float(len(chunk)) * 0.5))
    return jobs, n


def cells_done(root: Path, run: Path, overrides: list[str]) -> bool:
    """Whether every cell an evaluate call with ``overrides`` would write for ``run`` exists already
    (``eval=<set>``'s datasets x ``temperatures``; the evaluator itself checks each cell's settings when it
    runs, so a run with any missing cell gets a job)."""
    name = _last(overrides, "eval") or "synthetic"
    spec = CONF_DIR / "eval" / f"{name}.yaml"
    temps = _last(overrides, "temperatures")
    if not spec.is_file() or temps is None:
        return False
    datasets = [str(d) for d in OmegaConf.load(spec).get("datasets") or []]
    try:
        values = [float(t) for t in temps.strip("[]").split(",") if t.strip()]
    except ValueError:
        return False
    rel = (
        run.relative_to(root / "runs")
        if run.is_relative_to(root / "runs")
        else run.relative_to(root / "eval")
    )
    return bool(datasets and values) and all(
        (root / "eval" / rel / d / f"T{t:.1f}.json").is_file() for d in datasets for t in values
    )


def count_cells(root: Path) -> int:
    """Finished evaluation cells (final JSONs) under ``<root>/eval``."""
    return sum(1 for _ in (root / "eval").glob("**/T*.json")) if (root / "eval").is_dir() else 0


def ablation_runs(cfg: DictConfig) -> list[tuple[str, str, int]]:
    """The alpha ablation's runs: pspo runs whose tag starts with ``aggregate.ablation_tag_prefix``."""
    prefix = cfg.aggregate.get("ablation_tag_prefix")
    runs = rl_runs(cfg, unresolved=True)  # the ablation is a plain sweep: no selection to resolve
    return [r for r in runs if r[0] == "pspo" and prefix and r[1].startswith(str(prefix))]


def ablation_step(cfg: DictConfig, root: Path) -> int | None:
    """The last validation step every ablation run reached (the ablation's common step; the paper's is 250).

    Token budgets end runs at slightly different steps (completion lengths differ), so the alpha table
    compares all seeds at the largest multiple of ``eval_steps`` that each of them logged.
    """
    finals, every = [], None
    for m, t, s in ablation_runs(cfg):
        info = json.loads((run_dir_of(root, m, t, s) / "run.json").read_text())
        finals.append(int(info["final_step"]))
        every = int(info["config"]["trainer"]["eval_steps"])
    if not finals or not every:
        return None
    return min(finals) // every * every


def aggregate_cmd(cfg: DictConfig, root: Path) -> list[str]:
    """``python -m pspo_repro.aggregate`` over ``root`` into ``root`` (the committed tables and figures)."""
    cmd = [sys.executable, "-m", "pspo_repro.aggregate", f"results_dir={root}", f"out_dir={root}"]
    # Table 8 from the runs tagged with the ablation prefix only. None set: aggregate's own default
    # (alpha_ablation, the tag of experiment=alpha_ablation runs), which no mini run carries: no table.
    prefix = cfg.aggregate.get("ablation_tag_prefix")
    if prefix:
        cmd.append(f"ablation.tag_prefix={prefix}")
    step = ablation_step(cfg, root) if (root / "runs").is_dir() else None
    if step:
        cmd.append(f"ablation.step={step}")
    return [*cmd, *map(str, cfg.aggregate.overrides)]


# ---------------------------------------------------------------- the pipeline


def _bar(total: int | None, desc: str, unit: str):
    from tqdm.auto import tqdm

    return tqdm(total=total, desc=desc, unit=unit)


def do_data(cfg: DictConfig, root: Path) -> dict[str, Any]:
    """Stage 1: the synthetic splits as files."""
    with _bar(1, "data", "stage") as bar:
        info = {"splits": stage_data(cfg, root)}
        bar.update(1)
    return info


def do_sft(cfg: DictConfig, root: Path) -> dict[str, Any]:
    """Stage 2: the base model (``pspo_repro.sft`` skips itself when its marker matches)."""
    job = Job("sft", sft_cmd(cfg, root), log=root / "work" / "logs" / "sft.log")
    marker = root / "work" / "sft" / "sft.json"
    progress_file = root / "work" / "sft" / PROGRESS

    def progress() -> int:  # training steps from the SFT process's progress file; total once it is known
        if marker.is_file():
            bar.total = max(bar.total or 0, bar.n, 1)
            return bar.total
        try:
            p = json.loads(progress_file.read_text())
        except (OSError, ValueError):
            return 0
        bar.total = int(p["max_steps"]) + 1  # + 1: the greedy validation after training
        return int(p["step"])

    with _bar(None, "sft", "step") as bar:
        run_jobs([job], 1, child_env(cfg, root, int(cfg.sft.threads)), bar, progress)
    return {
        "val_accuracy": json.loads(marker.read_text())["val"]["accuracy"],
        "model_sha256": model_sha256(root / "work" / "sft" / "model"),
    }


def model_sha256(folder: Path) -> str | None:
    """sha256 over the SFT model's weight files (sorted by name), or None when there are none."""
    files = sorted(folder.glob("*.safetensors")) if folder.is_dir() else []
    if not files:
        return None
    h = hashlib.sha256()
    for f in files:
        h.update(f.name.encode())
        with open(f, "rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                h.update(block)
    return h.hexdigest()


def check_same_base(info: dict[str, Any], committed: dict[str, Any] | None, root: Path) -> None:
    """``reuse_committed``: the recomputed SFT base must be the one the committed runs were trained from
    (same weights hash where the committed record has one, else the same validation accuracy), or the new
    runs would be compared with runs of another base. StageError otherwise."""
    if not isinstance(committed, dict):
        raise StageError(
            f"reuse_committed: {root / 'timings.json'} has no sft record to check the base against"
        )
    want, got = committed.get("model_sha256"), info.get("model_sha256")
    if want is not None and want != got:
        raise StageError(f"reuse_committed: the recomputed SFT base (sha256 {got}) differs from the committed "
                         f"runs' ({want}); rerun without reuse_committed to recompute every run")  # fmt: skip
    if committed.get("val_accuracy") != info.get("val_accuracy"):
        raise StageError(
            f"reuse_committed: the recomputed SFT base's validation accuracy {info.get('val_accuracy')} differs "
            f"from the committed runs' base ({committed.get('val_accuracy')}); rerun without reuse_committed"
        )
    print(f"[mini] reuse_committed: SFT base matches the committed one (validation accuracy "
          f"{info.get('val_accuracy')}{', weights sha256 ' + got[:12] if want else ''})", flush=True)  # fmt: skip


def _with_logs(root: Path, jobs: list[Job]) -> list[Job]:
    for j in jobs:
        j.log = root / "work" / "logs" / f"{j.name}.log"
    return jobs


def do_rl(cfg: DictConfig, root: Path) -> dict[str, Any]:
    """Stage 3: the GRPO grid as Hydra multiruns; progress = finished run folders.

    When a group selects a value from another's runs (``select``, the tuning-matched protocol), its jobs
    wait for their sweeps: each starts, at the value its tuning runs chose, once they have finished.
    """
    env = child_env(cfg, root, int(cfg.threads))
    info: dict[str, Any] = {}
    total = len(rl_runs(cfg, root, unresolved=True)) + sum(
        len(_points(g)) * len(group_seeds(cfg, g)) for g in cfg.rl.groups if g.get("select")
    )
    with _bar(total, "rl runs", "run") as bar:
        # The sweeps first (those the tuned groups read at the head of the queue); each tuned point joins
        # the queue as soon as its own sweep has finished, beside the sweeps still running.
        jobs = rl_jobs(cfg, root, "sweep")
        issued: set[str] = set()
        jobs += ready_select_jobs(cfg, root, issued)  # a resumed stage: sweeps already finished
        runs = rl_runs(cfg, root, unresolved=True)

        def ready() -> list[Job]:
            new = ready_select_jobs(cfg, root, issued)
            if new:
                runs[:] = rl_runs(cfg, root, unresolved=True)  # now with the new jobs' runs
            return _with_logs(root, new)

        run_jobs(_with_logs(root, jobs), int(cfg.parallel), env, bar,
                 lambda: sum(run_status(run_dir_of(root, *r)) == "finished" for r in runs), ready)  # fmt: skip
        info["runs"] = len(rl_runs(cfg, root))
        chosen = {
            f"{g.name}/{s.method}": {"key": s.key, "chosen": s.chosen, "scores": s.scores}
            for g in cfg.rl.groups if g.get("select") for s in selections(cfg, root, g)
        }  # fmt: skip
        if chosen:
            info["selected"] = chosen
    return info


def do_eval(cfg: DictConfig, root: Path) -> dict[str, Any]:
    """Stage 4: temperature sweeps of every main run and the baseline; progress = finished cells."""
    jobs, n_models = eval_jobs(cfg, root)
    for j in jobs:
        j.log = root / "work" / "logs" / f"{j.name}.log"

    overrides = [str(o) for o in cfg.eval.overrides]
    heldout = [str(o) for o in (cfg.eval.get("heldout") or [])]
    tagged = [str(o) for o in (cfg.eval.get("tagged_overrides") or [])]
    tags = {"", *map(str, cfg.eval.get("tags") or [])}
    prefixes = tuple(f"{p}-" for p in (cfg.eval.get("tag_prefixes") or []))
    n_tagged = sum(1 for m, t, _ in rl_runs(cfg, root)
                   if t and (t in tags or t.startswith(prefixes)) and m in set(cfg.eval.methods))  # fmt: skip
    n_cells = (n_models - n_tagged) * _n_temps(overrides) + n_tagged * _n_temps(overrides + tagged)
    n_cells += n_models * _n_temps(overrides + heldout) if heldout else 0
    with _bar(n_cells, "eval cells", "cell") as bar:
        run_jobs(
            jobs, int(cfg.parallel), child_env(cfg, root, int(cfg.threads)), bar, lambda: count_cells(root)
        )
    return {"models": n_models}


def regime_cmds(cfg: DictConfig, root: Path) -> list[Job]:
    """``python -m pspo_repro.regime`` per ``aggregate.regime`` entry (table name -> run tag; null: none)."""
    return [
        Job(f"regime-{name}", [sys.executable, "-m", "pspo_repro.regime", f"results_dir={root}",
                               f"out_dir={root}", f"tag={tag or ''}", f"name={name}"],
            log=root / "work" / "logs" / f"regime-{name}.log")
        for name, tag in (cfg.aggregate.get("regime") or {}).items()
        if tag is not None  # null: that table is switched off
    ]  # fmt: skip


def claims_cmds(cfg: DictConfig, root: Path) -> list[Job]:
    """``python -m pspo_repro.claims`` with ``aggregate.claims`` (a spec under conf/, or a path; null: none)."""
    spec = cfg.aggregate.get("claims")
    if not spec:
        return []
    path = Path(str(spec)) if Path(str(spec)).is_absolute() else CONF_DIR / str(spec)
    if not path.is_file():
        raise StageError(f"aggregate.claims={spec!r}: no such file (looked at {path})")
    cmd = [
        sys.executable,
        "-m",
        "pspo_repro.claims",
        f"results_dir={root}",
        f"out_dir={root}",
        f"spec={path}",
    ]
    return [Job("claims", cmd, log=root / "work" / "logs" / "claims.log")]


def leaderboard_cmds(cfg: DictConfig, root: Path) -> list[Job]:
    """``python -m pspo_repro.leaderboard`` with ``aggregate.leaderboard`` ({tag, offpolicy_tag}; null: none)."""
    spec = cfg.aggregate.get("leaderboard")
    if not spec:
        return []
    cmd = [sys.executable, "-m", "pspo_repro.leaderboard", f"results_dir={root}", f"out_dir={root}"]
    cmd += [f"{key}={spec[key] or ''}" for key in ("tag", "offpolicy_tag") if key in spec]
    return [Job("leaderboard", cmd, log=root / "work" / "logs" / "leaderboard.log")]


def do_aggregate(cfg: DictConfig, root: Path) -> dict[str, Any]:
    """Stage 5: tables and figures into ``root`` (pspo_repro.aggregate, the regime, claims and leaderboard
    tables)."""
    job = Job("aggregate", aggregate_cmd(cfg, root), log=root / "work" / "logs" / "aggregate.log")
    regime = [*regime_cmds(cfg, root), *claims_cmds(cfg, root), *leaderboard_cmds(cfg, root)]
    env = child_env(cfg, root, int(cfg.threads))
    with _bar(1 + len(regime), "aggregate", "table set") as bar:
        for j in (job, *regime):
            run_jobs([j], 1, env, bar, lambda: bar.n)
            bar.update(1)
    return {"args": job.cmd[3:]}


STAGE_FUNCS = {"data": do_data, "sft": do_sft, "rl": do_rl, "eval": do_eval, "aggregate": do_aggregate}


def _positive_int(key: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise SettingsError(f"{key} must be an integer >= 1, got {value!r}")
    return value


def check_settings(cfg: DictConfig) -> list[str]:
    """The pipeline's own settings, checked before anything runs or moves; returns the wanted stages."""
    stages = cfg.get("stages")
    if not OmegaConf.is_list(stages) or not len(stages):
        raise SettingsError(f"stages must be a non-empty list of {', '.join(STAGES)}, got {stages!r}")
    wanted = [str(s) for s in stages]
    unknown = [s for s in wanted if s not in STAGES]
    if unknown:
        raise SettingsError(f"unknown stage(s) {unknown}; stages: {', '.join(STAGES)}")
    _positive_int("parallel", cfg.get("parallel"))
    _positive_int("threads", cfg.get("threads"))
    _positive_int("sft.threads", cfg.sft.get("threads", 1))
    for key in ("force", "warm_start"):
        if not isinstance(cfg.get(key), bool):
            raise SettingsError(f"{key} must be true or false, got {cfg.get(key)!r}")
    try:
        check_file_names(cfg)
    except UnsafePathError as exc:
        raise SettingsError(str(exc)) from None
    check_output_folders(cfg)
    check_table_settings(cfg)
    check_record_paths(mini_root(cfg))
    return wanted


LEADERBOARD_KEYS = ("tag", "offpolicy_tag")


def check_table_settings(cfg: DictConfig) -> None:
    """``aggregate.claims`` (null, or a spec file: a path, or one under conf/, as ``claims_cmds`` reads it,
    whose contents pass ``claims_spec.read_spec``) and ``aggregate.leaderboard`` (null, or {tag, offpolicy_tag} with run tags, null or "" for none),
    checked before the training stages rather than after them (SettingsError)."""
    spec = cfg.aggregate.get("claims")
    if spec is not None and spec != "":
        if not isinstance(spec, str):
            raise SettingsError(
                f"aggregate.claims must be a spec file (e.g. claims.yaml) or null, got {spec!r}"
            )
        path = Path(spec) if Path(spec).is_absolute() else CONF_DIR / spec
        if not path.is_file():
            raise SettingsError(f"aggregate.claims={spec!r}: no such file (looked at {path})")
        from pspo_repro.analysis.claims_spec import ClaimsError, read_spec

        try:  # its contents too: a typo in the spec is found now, not after the training stages
            read_spec(path)
        except ClaimsError as exc:
            raise SettingsError(f"aggregate.claims={spec!r}: {exc}") from None
    board = cfg.aggregate.get("leaderboard")
    if board is None:
        return
    if not OmegaConf.is_dict(board):
        raise SettingsError(
            f"aggregate.leaderboard must be null or a mapping with keys {', '.join(LEADERBOARD_KEYS)}, got {board!r}"
        )
    for key, tag in board.items():
        if key not in LEADERBOARD_KEYS:
            raise SettingsError(
                f"aggregate.leaderboard.{key}: not a setting; settings: {', '.join(LEADERBOARD_KEYS)}"
            )
        if tag is not None and tag != "":
            try:
                check_name(f"aggregate.leaderboard.{key}", str(tag), max_len=100)
            except UnsafePathError as exc:
                raise SettingsError(str(exc)) from None


def check_record_paths(root: Path) -> None:
    """Every stage marker and ``timings.json`` the pipeline will write is a file or absent: a folder (or
    anything else) there would fail the write after the stage's work, so it is refused first."""
    for path in (*(marker_path(root, s) for s in STAGES), root / "timings.json"):
        if os.path.lexists(path) and not path.is_file():
            kind = "a folder" if path.is_dir() else "not a regular file"
            raise SettingsError(f"{path} is {kind}: the pipeline writes its record there; move or remove it")


def check_output_folders(cfg: DictConfig) -> None:
    """The pipeline's root (every stage writes under it) and a set ``PSPO_LOG_DIR`` (its training runs'
    Hydra logs) can be written (``output_dirs.folder_problem``), else SettingsError in one line."""
    from pspo_repro.common.output_dirs import env_folders_problem, folder_problem

    if why := env_folders_problem(results=not cfg.get("root")):  # root= set: PSPO_RESULTS_DIR is not read
        raise SettingsError(why)
    root = mini_root(cfg)
    if why := folder_problem(root):
        raise SettingsError(f"cannot write the pipeline's outputs under root={root}: {why}")


def check_file_names(cfg: DictConfig) -> None:
    """Settings that become file or folder names pass ``safe_paths.check_name`` (UnsafePathError): an rl
    group's ``name`` (its log and Hydra folder under work/), ``tag`` and swept methods (run folders), the
    ``eval.tags`` and the ``aggregate.regime`` table names (their log and table files)."""
    for i, group in enumerate(cfg.rl.groups):
        check_name(f"rl.groups[{i}].name", group.get("name"))
        if group.get("tag"):
            check_name(f"rl.groups[{i}].tag", str(group.tag), max_len=100)
        for method in _sweep_values((group.get("sweep") or {}).get("method")):
            check_name(f"rl.groups[{i}].sweep.method", method)
    for tag in cfg.eval.get("tags") or []:
        if tag:  # "": the untagged runs
            check_name("eval.tags", str(tag), max_len=100)
    for name in cfg.aggregate.get("regime") or {}:
        check_name("aggregate.regime", str(name))


def run_pipeline(cfg: DictConfig) -> dict[str, Any]:
    """Run the configured stages in order (skipping finished ones); returns the timings record."""
    root = mini_root(cfg)
    wanted = check_settings(cfg)
    if {"rl", "eval"} & set(wanted):
        fresh = not (root / "work").exists() and any((root / d).is_dir() for d in ("runs", "eval"))
        missing = [s for s in STAGES[: STAGES.index("eval")] if s not in wanted]
        if fresh and missing:  # checked before anything moves: the committed copy stays where it is
            raise SettingsError(
                f"stages={wanted}: {root} holds committed results and no work/ folder (a fresh clone), so the "
                f"stages before them ({', '.join(missing)}) have no outputs here; run every stage to recompute "
                "and compare with the committed copy (nothing was moved)"
            )
        if cfg.get("reuse_committed"):
            if not isinstance(cfg.reuse_committed, bool):
                raise SettingsError(f"reuse_committed must be true or false, got {cfg.reuse_committed!r}")
            print(f"[mini] reuse_committed: the finished runs and cells under {root} are kept and skipped; only "
                  "what is missing runs (the SFT base is recomputed and checked against the committed one)",
                  flush=True)  # fmt: skip
        else:
            mini_committed.set_aside(root)
    # reuse_committed acts only where there are results to reuse (a first run has nothing to check against)
    reusing = bool(cfg.get("reuse_committed")) and any((root / d).is_dir() for d in ("runs", "eval"))
    timings_path = root / "timings.json"
    previous = (_read_record(timings_path) or {}).get("stages")
    timings: dict[str, Any] = {
        "parallel": int(cfg.parallel),
        "threads": int(cfg.threads),
        "cpus": os.cpu_count(),
        # earlier stages' records, those that hold a time (a stage rerun now replaces its own)
        "stages": {
            k: v
            for k, v in (previous.items() if isinstance(previous, dict) else [])
            if isinstance(v, dict) and stage_seconds(v) is not None
        },
    }
    t_all = time.time()
    # The jobs with the pipeline's own environment (every one but an SFT at other sft.threads) start warm.
    warm_start.configure(child_env(cfg, root, int(cfg.threads)) if cfg.warm_start else None)
    try:
        for stage in (s for s in STAGES if s in wanted):
            fp = fingerprint(cfg, stage)
            done = None if cfg.force else stage_done(root, stage, fp)
            if done is not None:
                print(
                    f"[mini] {stage}: done already ({done['seconds']:.0f} s when it ran); skipped", flush=True
                )
                continue
            t0, c0 = time.time(), warm_start.children_cpu()
            info = STAGE_FUNCS[stage](cfg, root)
            if stage == "sft" and reusing:
                check_same_base(
                    info, (previous or {}).get("sft") if isinstance(previous, dict) else None, root
                )
            rec = {
                "seconds": round(time.time() - t0, 1),
                "cpu_seconds": round(warm_start.children_cpu() - c0, 1),
                **info,
            }
            write_json(marker_path(root, stage), {"fingerprint": fp, **rec})
            timings["stages"][stage] = rec
            write_json(timings_path, timings)  # each finished stage's record survives a later stage's failure
    finally:
        warm_start.stop()
    timings["this_invocation_seconds"] = round(time.time() - t_all, 1)
    timings["total_seconds"] = round(sum(s["seconds"] for s in timings["stages"].values()), 1)
    committed = mini_committed.committed_dir(root)
    if committed.is_dir() and "aggregate" in wanted:
        # Two statements: agreement within seed variance (what another machine can check) and bitwise
        # identity (the same machine only); mini_committed's docstring says why both.
        timings["vs_committed"] = {
            "agreement": mini_committed.agreement(committed, root),
            "bitwise": mini_committed.compare(committed, root),
        }
    write_json(timings_path, timings)
    return timings


def summary(root: Path, timings: dict[str, Any]) -> str:
    """Where everything is, the stage times and the main table."""
    lines = ["", "== mini reproduction: done ==", f"results: {root}"]
    for stage, rec in timings["stages"].items():
        lines.append(f"  {stage:<10} {rec['seconds']:>7.1f} s wall, {rec.get('cpu_seconds', 0):>7.1f} s CPU")
    lines.append(
        f"  {'total':<10} {timings['total_seconds']:>7.1f} s "
        f"(this invocation {timings['this_invocation_seconds']:.1f} s)"
    )
    if "vs_committed" in timings:
        vs = timings["vs_committed"]
        lines.append(f"  {mini_committed.describe_agreement(vs['agreement'])}")
        lines.append(f"  {mini_committed.describe(vs['bitwise'])} ({mini_committed.committed_dir(root)})")
    names = ("main_reward_acc.md", "temperature_reward_acc.png", "training_curves.png", "alpha_ablation.md")
    for name in (*names, "summary.md"):
        path = root / name
        lines.append(f"  {'ok ' if path.is_file() else 'missing'} {path}")
    lines.append(f"  runs: {root / 'runs'}  eval cells: {root / 'eval'}  logs: {root / 'work' / 'logs'}")
    main = root / "main_reward_acc.md"
    if main.is_file():
        lines += ["", main.read_text()]
    return "\n".join(lines)


@hydra.main(config_path=str(CONF_DIR), config_name="mini", version_base="1.3")
def main(cfg: DictConfig) -> None:
    """Hydra entry point: ``python -m pspo_repro.mini [key=value ...]``."""
    import signal

    # SIGTERM (a `kill`, a scheduler) unwinds like Ctrl-C, so run_jobs stops its own children.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    try:
        timings = run_pipeline(cfg)
    except StageError as exc:  # bad settings (nothing ran or moved): 2, as every command; a failed stage: 1
        print(f"error: {exc}", file=sys.stderr, flush=True)
        sys.exit(2 if isinstance(exc, SettingsError) else 1)
    print(summary(mini_root(cfg), timings), flush=True)
