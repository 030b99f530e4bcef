"""What each stage of a CPU pipeline runs, from its config: the SFT command, the RL grid (groups, their sweep
points, seeds and run folders, the jobs of each phase), the evaluation jobs over the finished runs, and the
table commands of the aggregate stage.

An rl group is one Hydra multirun of ``python -m pspo_repro.train`` over its sweep points and seeds; a
``select`` group's points wait for their tuning runs and take the value ``analysis.tuning.select`` chooses on
validation. Every function here reads the config and the results folder; nothing is run.
"""

from __future__ import annotations

import itertools
import sys
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from pspo_repro.analysis.tuning import Selection, TuningError, select
from pspo_repro.common.names import did_you_mean_after
from pspo_repro.common.overrides import override, primitive, sweep
from pspo_repro.common.paths import CONF_DIR
from pspo_repro.common.run_dir import swept_tag, tagging_key
from pspo_repro.common.run_folder import RunFolder
from pspo_repro.evaluation.cells import cell_files, cell_paths
from pspo_repro.pipelines.jobs import Job, StageError

MODEL_NAME = "mini_sft"  # conf/model/mini_sft.yaml: the run folders' model component


def registered_methods() -> list[str]:
    """Every method of the registry, sorted: ``${registered_methods:}`` in a pipeline config (the leaderboard's
    grid), so a method added to the registry (docs/adding_a_method.md) joins the next run with no other edit.
    Imported here, where a config asks: the registry imports torch, which the pipeline's driver
    does not otherwise need (its jobs do), nor a bad setting's one-line refusal."""
    from pspo_repro.methods.registry import list_methods

    return sorted(list_methods())


OmegaConf.register_new_resolver("registered_methods", registered_methods, replace=True)


def sft_cmd(cfg: DictConfig, root: Path) -> list[str]:
    """``python -m pspo_repro.sft`` into ``work/sft``, on the same data seed and sizes as the data stage."""
    return [
        sys.executable, "-m", "pspo_repro.sft",
        override("out_dir", root / "work" / "sft"),
        override("threads", int(cfg.sft.threads)),
        override("data.seed", int(cfg.data.seed)),
        override("data.n_train", int(cfg.data.sizes.train)),
        override("data.n_val", int(cfg.data.sizes.validation)),
        override("data.heldout_n_train", int((cfg.data.get("heldout_sizes") or {}).get("train", 0))),
        override("prompt_template", str(cfg.prompt_template)),
        *map(str, cfg.sft.overrides),
    ]  # fmt: skip


def sweep_values(value: Any) -> list[str]:
    """A sweep value's entries: a list's items, or a text's parts between commas (``"clip,pspo"``)."""
    if OmegaConf.is_list(value) or isinstance(value, list | tuple):
        return [str(v) for v in value]
    return [v.strip() for v in str(value).split(",")]


def sweep_arg(what: str, key: str, values: list[str]) -> str:
    """The multirun override of one swept ``key`` (``overrides.sweep``): each value read as the plain word or
    number it must be (``overrides.primitive``; StageError naming ``what`` otherwise), never pasted."""
    try:
        return sweep(key, [primitive(f"{what}.{key}", v) for v in values])
    except ValueError as exc:
        raise StageError(str(exc)) from None


def group_seeds(cfg: DictConfig, group: DictConfig) -> list[int]:
    """The group's own ``seeds`` if it sets them, else ``rl.seeds``."""
    return [int(s) for s in (group.get("seeds") or cfg.rl.seeds)]


def _point_tag(group: DictConfig, point: dict[str, str]) -> str:
    """A sweep point's folder tag (as run_dir.tag_from_overrides builds it): the group's ``tag`` (passed as
    ``run_tag``), ``as_run`` for ``variant=as_run``, then ``{key}{value}`` of its method/trainer keys other
    than the infrastructure ones, which name no folder."""
    tag_keys = sorted(k for k in point if tagging_key(k))
    swept = swept_tag([f"{k.split('.', 1)[1]}{float(point[k]):g}" for k in tag_keys])
    # variant=as_run appends ``as_run`` to run_tag before the swept keys (training.grpo.apply_per_method)
    as_run = "as_run" if point.get("variant") == "as_run" else ""
    return "-".join(t for t in (str(group.get("tag") or ""), as_run, swept) if t)


def sweep_points(group: DictConfig) -> list[dict[str, str]]:
    """Every point of a group's sweep (the product of its keys' values), as {key: value} text."""
    sweep = {k: sweep_values(v) for k, v in group.sweep.items()}
    keys = sorted(sweep)
    return [dict(zip(keys, combo, strict=True)) for combo in itertools.product(*(sweep[k] for k in keys))]


def _selection(root: Path, group: DictConfig, point: dict[str, str]) -> Selection:
    """One sweep point's choice of a ``select`` group (TuningError while its tuning runs are missing or
    unfinished)."""
    sel = group.select
    others = {k: v for k, v in point.items() if k != "method"}
    return select(root / "runs" / MODEL_NAME, point["method"], str(sel.tag), str(sel.key),
                  sweep_values(sel["values"]), [int(s) for s in sel.seeds], others)  # fmt: skip


def selections(cfg: DictConfig, root: Path, group: DictConfig) -> list[Selection]:
    """A ``select`` group's choices, one per sweep point: ``select: {tag, key, values, seeds}`` names the
    tuning runs (``{method}/seed{s}-{tag}-...{key}{value}...`` with the point's other swept keys), and
    ``analysis.tuning.select`` picks by validation reward, never the test split. TuningError while those
    runs are missing or unfinished."""
    return [_selection(root, group, point) for point in sweep_points(group)]


def group_points(cfg: DictConfig, group: DictConfig, root: Path | None) -> list[dict[str, str]]:
    """The sweep points a group runs: its sweep's product, a ``select`` group's with the chosen value of the
    selected key added (TuningError when ``root`` is None or the tuning runs are not finished)."""
    points = sweep_points(group)
    if not group.get("select"):
        return points
    if root is None:
        raise TuningError(f"rl group {group.name}: its selection needs the results folder")
    key = str(group.select.key)
    return [{**p, key: v} for p, s in zip(points, selections(cfg, root, group), strict=True)
            for v in selected_values(group, s)]  # fmt: skip


def selected_values(group: DictConfig, sel: Selection) -> list[str]:
    """The values a ``select`` group runs for one sweep point: the chosen one, or with ``select.tolerance``
    (issue 55) the whole selection set (``Selection.near``: every value within the selection's noise of the
    best), so the report can show whether a verdict hangs on the pick."""
    tol = group.select.get("tolerance")
    if tol is None:
        return [sel.chosen]
    tol = float(tol)
    if not (tol >= 0 and tol < 1):
        raise StageError(
            f"rl group {group.name}: select.tolerance must be in [0, 1) (validation reward), got {tol}"
        )
    return sel.near(tol)


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
    return RunFolder(folder).status()


def _rl_job(
    cfg: DictConfig, root: Path, group: DictConfig, name: str, points: dict[str, list[str]], cost: float
) -> Job:
    """One Hydra multirun of pspo_repro.train: the group's sweep point(s) (``{key: values}``) over its seeds."""
    what = f"rl group {group.name}: sweep"
    cmd = [
        sys.executable, "-m", "pspo_repro.train", "-m",
        override("experiment", str(group.get("experiment") or cfg.rl.experiment)),
        override("data.prompt_template", str(cfg.prompt_template)),
        *([override("run_tag", str(group.tag))] if group.get("tag") else []),
        *[sweep_arg(what, k, v) for k, v in points.items()],
        sweep("seed", group_seeds(cfg, group)),
        override("hydra/launcher", str(cfg.rl.launcher)),
        override("hydra.sweep.dir", root / "work" / "hydra" / name),
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
    values = selected_values(group, _selection(root, group, points[i]))
    point = {
        **{k: [v] for k, v in points[i].items()},
        str(group.select.key): values,
    }  # over the selection set
    return _rl_job(cfg, root, group, _select_name(group, i, len(points)), point,
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
                points = sweep_points(group)
                jobs += [_select_job(cfg, root, group, i, points) for i in range(len(points))]
        elif phase != "select":
            points = {k: sweep_values(v) for k, v in group.sweep.items()}
            jobs.append(_rl_job(cfg, root, group, f"rl-{group.name}", points, float(group.get("cost", 1.0))))
    return jobs


def ready_select_jobs(cfg: DictConfig, root: Path, issued: set[str]) -> list[Job]:
    """The ``select`` groups' jobs whose tuning runs have all finished, except those named in ``issued``
    (which this adds them to): each tuned point starts as soon as its own sweep is done."""
    jobs = []
    for group in cfg.rl.groups:
        if not group.get("select"):
            continue
        points = sweep_points(group)
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


def n_temperatures(overrides: list[str]) -> int:
    """Temperatures in the last ``temperatures=[...]`` among evaluate overrides (conf/evaluate.yaml's 5 if none)."""
    found = _last(overrides, "temperatures")
    return max(1, len([t for t in found.strip("[]").split(",") if t.strip()])) if found is not None else 5


def _evaluate_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "pspo_repro.evaluate", *args]


def _run_targets(chunk: list[Path]) -> str:
    # Each folder one quoted value, so a comma or bracket in its name cannot split Hydra's sweep list.
    return sweep("run", chunk)


def _eval_runs(cfg: DictConfig, root: Path) -> list[tuple[str, str, Path]]:
    """(method, tag, run folder) of every run the eval stage evaluates: ``eval.methods``' runs, untagged or
    tagged with an ``eval.tags`` tag or an ``eval.tag_prefixes`` prefix; StageError while one is unfinished."""
    methods, tags = set(cfg.eval.methods), {"", *map(str, cfg.eval.get("tags") or [])}
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
    return runs


def _overrides_by_run(cfg: DictConfig, extra: dict[str, list[str]]) -> Any:
    """The evaluate overrides a run of (method, tag) adds to the common ones: ``method_overrides`` for the
    untagged main runs; for a tagged run, its prefix's ``prefix_method_overrides`` entry (e.g. the
    tuning-matched runs whose temperature sweep a claim reads), else ``tagged_overrides`` (e.g. the study's
    regimes at T = 0 only, while its main runs get the temperature sweep)."""
    tagged = [str(o) for o in (cfg.eval.get("tagged_overrides") or [])]
    by_prefix = {str(p): {str(m): [str(o) for o in ov] for m, ov in v.items()}
                 for p, v in (cfg.eval.get("prefix_method_overrides") or {}).items()}  # fmt: skip

    def overrides_of(m: str, t: str) -> list[str]:
        if not t:
            return extra.get(m, [])
        for p, table in by_prefix.items():
            if t.startswith(p + "-") and m in table:
                return table[m]
        return tagged

    return overrides_of


def _run_jobs(
    root: Path, common: list[str], groups: dict[tuple[str, ...], list[Path]], parts: int
) -> list[Job]:
    """One evaluation multirun per part of each group of runs that share their added overrides."""
    jobs = []
    for g, (added, folders) in enumerate(groups.items()):
        # Runs whose cells are all there already need no job (nor their checkpoints: a committed run has none).
        folders = [r for r in folders if not cells_done(root, r, [*common, *added])]
        # Cost ~ completions per model: 1 greedy + n samples per prompt at each sampled temperature.
        per_model = 1 + _n_samples([*common, *added]) * (n_temperatures([*common, *added]) - 1)
        for i in range(parts):
            chunk = folders[i::parts]
            if not chunk:
                continue
            name = f"eval-{i}" if g == 0 else f"eval-{g}-{i}"
            cmd = _evaluate_cmd("-m", _run_targets(chunk), override("hydra.sweep.dir", root / "work" / "hydra" / name),
                                *common, *added)  # fmt: skip
            jobs.append(Job(name, cmd, float(len(chunk) * per_model)))
    return jobs


def _heldout_jobs(
    cfg: DictConfig, root: Path, common: list[str], folders: list[Path], parts: int
) -> list[Job]:
    """The held-out skill (``eval.heldout``: its own overrides over the common ones, e.g.
    eval=synthetic_heldout temperatures=[0.0]): every evaluated model, the baseline included, a job per part."""
    heldout = [str(o) for o in (cfg.eval.get("heldout") or [])]
    if not heldout:
        return []
    keys = {o.split("=", 1)[0] for o in heldout}
    held_common = [o for o in common if o.split("=", 1)[0] not in keys] + heldout
    folders = [r for r in folders if not cells_done(root, r, held_common)]
    base_cells = root / "eval" / MODEL_NAME / "baseline" / "seed0"
    jobs = []
    for i in range(parts):
        chunk = folders[i::parts]
        if i == parts - 1 and cfg.eval.baseline and not cells_done(root, base_cells, held_common):
            jobs.append(
                Job("eval-heldout-baseline", _evaluate_cmd(override("model", MODEL_NAME), *held_common), 0.5)
            )
        if chunk:
            cmd = _evaluate_cmd("-m", _run_targets(chunk),
                                override("hydra.sweep.dir", root / "work" / "hydra" / f"eval-heldout-{i}"), *held_common)  # fmt: skip
            jobs.append(Job(f"eval-heldout-{i}", cmd, float(len(chunk)) * 0.5))
    return jobs


def eval_jobs(cfg: DictConfig, root: Path) -> tuple[list[Job], int]:
    """Evaluation multiruns over the finished main runs, split in ``parallel`` parts, and the baseline.

    ``eval.method_overrides`` adds settings for the untagged runs of some methods (``baseline``: the SFT
    model), e.g. the paper's 16 samples for the pair a paired comparison reads; runs with the same
    additions share jobs.
    Returns the jobs and the number of models evaluated (for the progress total).
    """
    methods = set(cfg.eval.methods)
    extra = {str(k): [str(o) for o in v] for k, v in (cfg.eval.get("method_overrides") or {}).items()}
    unknown = sorted(set(extra) - methods - {"baseline"})
    if unknown:
        raise StageError(
            f"eval.method_overrides: {', '.join(unknown)} not in eval.methods ({', '.join(sorted(methods))}) or "
            f"baseline{did_you_mean_after(unknown[0], [*methods, 'baseline']) if len(unknown) == 1 else ''}"
        )
    runs = _eval_runs(cfg, root)
    common = [override("prompt_template", str(cfg.prompt_template)), *map(str, cfg.eval.overrides)]
    parts = max(1, int(cfg.parallel))
    overrides_of = _overrides_by_run(cfg, extra)
    groups: dict[tuple[str, ...], list[Path]] = {}
    for m, t, r in runs:
        groups.setdefault(tuple(overrides_of(m, t)), []).append(r)
    jobs = _run_jobs(root, common, groups, parts)
    n = len(runs)
    # The base model's cells are filed under eval/<model>/baseline/seed0 (a committed one names the SFT folder
    # of the machine that made it: reused as it is, never re-evaluated against another path).
    base_cells = root / "eval" / MODEL_NAME / "baseline" / "seed0"
    if cfg.eval.baseline and not cells_done(root, base_cells, [*common, *extra.get("baseline", [])]):
        added = extra.get("baseline", [])
        cmd = _evaluate_cmd(override("model", MODEL_NAME), *common, *added)
        jobs.append(Job("eval-baseline", cmd, float(1 + _n_samples([*common, *added]))))
        n += 1
    jobs += _heldout_jobs(cfg, root, common, [r for _, _, r in runs], parts)
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
        cell_paths(root / "eval" / rel / d, t)["json"].is_file() for d in datasets for t in values
    )


def count_cells(root: Path) -> int:
    """Finished evaluation cells (final JSONs) under ``<root>/eval``."""
    return len(cell_files(root / "eval"))


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
        info = RunFolder(run_dir_of(root, m, t, s)).load()
        finals.append(int(info["final_step"]))
        every = int(info["config"]["trainer"]["eval_steps"])
    if not finals or not every:
        return None
    return min(finals) // every * every


def aggregate_cmd(cfg: DictConfig, root: Path) -> list[str]:
    """``python -m pspo_repro.aggregate`` over ``root`` into ``root`` (the committed tables and figures)."""
    cmd = [
        sys.executable,
        "-m",
        "pspo_repro.aggregate",
        override("results_dir", root),
        override("out_dir", root),
    ]
    # Table 8 from the runs tagged with the ablation prefix only. None set: aggregate's own default
    # (alpha_ablation, the tag of experiment=alpha_ablation runs), which no mini run carries: no table.
    prefix = cfg.aggregate.get("ablation_tag_prefix")
    if prefix:
        cmd.append(override("ablation.tag_prefix", str(prefix)))
    step = ablation_step(cfg, root) if (root / "runs").is_dir() else None
    if step:
        cmd.append(override("ablation.step", int(step)))
    return [*cmd, *map(str, cfg.aggregate.overrides)]


def regime_cmds(cfg: DictConfig, root: Path) -> list[Job]:
    """``python -m pspo_repro.regime`` per ``aggregate.regime`` entry (table name -> run tag; null: none)."""
    return [
        Job(f"regime-{name}", [sys.executable, "-m", "pspo_repro.regime", override("results_dir", root),
                               override("out_dir", root), override("tag", str(tag or "")), override("name", str(name))],
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
        override("results_dir", root),
        override("out_dir", root),
        override("spec", path),
    ]
    return [Job("claims", cmd, log=root / "work" / "logs" / "claims.log")]


def leaderboard_cmds(cfg: DictConfig, root: Path) -> list[Job]:
    """``python -m pspo_repro.leaderboard`` with ``aggregate.leaderboard`` ({tag, offpolicy_tag}; null: none)."""
    spec = cfg.aggregate.get("leaderboard")
    if not spec:
        return []
    cmd = [
        sys.executable,
        "-m",
        "pspo_repro.leaderboard",
        override("results_dir", root),
        override("out_dir", root),
    ]
    cmd += [override(key, str(spec[key] or "")) for key in ("tag", "offpolicy_tag") if key in spec]
    return [Job("leaderboard", cmd, log=root / "work" / "logs" / "leaderboard.log")]
