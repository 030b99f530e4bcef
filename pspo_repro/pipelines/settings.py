"""A CPU pipeline's own settings, checked before anything runs or moves (:class:`SettingsError`: one line,
exit 2): the stages, counts and flags, the names that become files and folders, the output folders, the claims
and leaderboard tables, and the records the pipeline will write.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from pspo_repro.common.names import did_you_mean_each
from pspo_repro.common.paths import CONF_DIR, PROJECT_ROOT, results_dir
from pspo_repro.common.safe_paths import UnsafePathError, check_name
from pspo_repro.pipelines.grid import sweep_arg, sweep_values
from pspo_repro.pipelines.jobs import StageError
from pspo_repro.pipelines.markers import STAGES, marker_path


class SettingsError(StageError):
    """The pipeline's own settings are wrong (checked before anything runs or moves): exit status 2."""


def pipeline_root(cfg: DictConfig) -> Path:
    """``cfg.root`` (relative to the project root), else ``<results>/mini``."""
    if cfg.get("root"):
        root = Path(str(cfg.root)).expanduser()
        return root if root.is_absolute() else PROJECT_ROOT / root
    return results_dir() / "mini"


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
        raise SettingsError(
            f"unknown stage(s) {unknown}; {did_you_mean_each(unknown, STAGES)}stages: {', '.join(STAGES)}"
        )
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
    check_sweeps(cfg)
    check_output_folders(cfg)
    check_groups(cfg)
    check_table_settings(cfg)
    check_record_paths(pipeline_root(cfg))
    return wanted


def _same(value: str) -> str | float:
    """What makes two sweep entries one run: numbers by value (``1e-4`` is ``0.0001``, one run folder)."""
    try:
        return float(value)
    except ValueError:
        return value


def _listed_twice(where: str, values: list[Any]) -> None:
    """SettingsError naming the first entry of ``values`` given twice (each would run, or count, twice)."""
    seen: dict[Any, Any] = {}
    for v in values:
        key = _same(str(v))
        if key in seen:
            shown = f"{v!r}" if str(seen[key]) == str(v) else f"{seen[key]!r} and {v!r}"
            raise SettingsError(f"{where} lists {shown} twice: give each value once")
        seen[key] = v


def check_groups(cfg: DictConfig) -> None:
    """Each rl group's sweep values, seeds and selection values listed once, and a ``select`` group's
    selection seeds disjoint from the seeds it reports (a run that chose its learning rate would be counted
    as a test of it), else SettingsError in one line."""
    from pspo_repro.pipelines.grid import group_seeds

    _listed_twice("rl.seeds", list(cfg.rl.get("seeds") or []))
    for i, group in enumerate(cfg.rl.groups):
        for key, value in (group.get("sweep") or {}).items():
            _listed_twice(f"rl.groups[{i}].sweep.{key}", sweep_values(value))
        _listed_twice(f"rl.groups[{i}].seeds", list(group.get("seeds") or []))
        sel = group.get("select")
        if not sel:
            continue
        _listed_twice(f"rl.groups[{i}].select.values", sweep_values(sel.get("values")))
        shared = sorted({int(s) for s in sel.get("seeds") or []} & set(group_seeds(cfg, group)))
        if shared:
            raise SettingsError(
                f"rl.groups[{i}] ({group.get('name')}): select.seeds {list(sel.seeds)} and the seeds it reports "
                f"{group_seeds(cfg, group)} share {shared}: a selection seed cannot be a reported seed"
            )


LEADERBOARD_KEYS = ("tag", "offpolicy_tag")


def check_table_settings(cfg: DictConfig) -> None:
    """``aggregate.claims`` (null, or a spec file: a path, or one under conf/, as ``claims_cmds`` reads it,
    whose contents pass ``claims_spec.read_spec``) and ``aggregate.leaderboard`` (null, or {tag, offpolicy_tag} with run tags, null or "" for none),
    checked before the training stages rather than after them (SettingsError)."""
    spec = cfg.aggregate.get("claims")
    if spec is not None and spec != "":
        if not isinstance(spec, str):
            raise SettingsError(
                f"aggregate.claims must be a spec file (e.g. claims/study.yaml) or null, got {spec!r}"
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
    root = pipeline_root(cfg)
    if why := folder_problem(root):
        raise SettingsError(f"cannot write the pipeline's outputs under root={root}: {why}")


def check_sweeps(cfg: DictConfig) -> None:
    """Every rl group's swept values and ``select.values`` are plain words or numbers (``grid.sweep_arg``, the
    rendering the rl stage uses), refused here in one line rather than when the stage starts."""
    for i, group in enumerate(cfg.rl.groups):
        swept = dict(group.get("sweep") or {})
        if group.get("select"):
            swept[str(group.select.key)] = group.select.get("values")
        for key, value in swept.items():
            try:
                sweep_arg(f"rl.groups[{i}].sweep", str(key), sweep_values(value))
            except StageError as exc:
                raise SettingsError(str(exc)) from None


def check_file_names(cfg: DictConfig) -> None:
    """Settings that become file or folder names pass ``safe_paths.check_name`` (UnsafePathError): an rl
    group's ``name`` (its log and Hydra folder under work/), ``tag`` and swept methods (run folders), the
    ``eval.tags`` and the ``aggregate.regime`` table names (their log and table files)."""
    for i, group in enumerate(cfg.rl.groups):
        check_name(f"rl.groups[{i}].name", group.get("name"))
        if group.get("tag"):
            check_name(f"rl.groups[{i}].tag", str(group.tag), max_len=100)
        for method in sweep_values((group.get("sweep") or {}).get("method")):
            check_name(f"rl.groups[{i}].sweep.method", method)
    for tag in cfg.eval.get("tags") or []:
        if tag:  # "": the untagged runs
            check_name("eval.tags", str(tag), max_len=100)
    for name in cfg.aggregate.get("regime") or {}:
        check_name("aggregate.regime", str(name))
