"""What ``python -m pspo_repro.evaluate`` evaluates and under which identity its cells are filed: a training run's
best (or named) checkpoint from ``run=`` (its run.json read as untrusted input, its identity checked against
where the folder sits, its checkpoint checked to be its own and whole), or a model preset, the tiny model, a
local folder or a hub id from ``model=`` (the ``baseline`` row). Every problem is a one-line EvalError.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from pspo_repro.common.paths import CONF_DIR, results_dir
from pspo_repro.common.run_folder import RunFolder, run_json
from pspo_repro.common.safe_paths import UnsafePathError, check_name, check_seed, ensure_under
from pspo_repro.evaluation.settings import EvalError


@dataclass(frozen=True)
class Target:
    """What is evaluated and under which identity the results are stored."""

    model: str
    method: str
    seed: int
    tag: str
    run_dir: str | None
    checkpoint: str  # a local folder or a hub id
    # With allow_foreign_checkpoint=true: the resolved checkpoint that lies outside the run folder (after
    # symlinks); its cells carry it as ``foreign_checkpoint`` and aggregation lists them.
    foreign_checkpoint: str | None = None
    # A checkpoint named with checkpoint= although its run is unfinished or its save has no completion
    # marker: why (its cells carry it as ``provisional``).
    provisional: str | None = None


def _has_tokenizer(folder: Path) -> bool:
    return any((folder / f).is_file() for f in ("tokenizer.json", "tokenizer_config.json", "tokenizer.model"))


def _check_checkpoint(folder: Path) -> None:
    if not folder.is_dir():
        raise EvalError(f"checkpoint not found: {folder}")
    if not (folder / "config.json").is_file():
        raise EvalError(f"checkpoint {folder} has no config.json (not a saved model)")
    if not _has_tokenizer(folder):
        raise EvalError(f"checkpoint {folder} has no tokenizer files (tokenizer.json/tokenizer_config.json)")
    # Weights are read as safetensors only: a pickle (pytorch_model.bin) can run code when loaded.
    shards = sorted(folder.glob("*.safetensors"))
    if not shards:
        raise EvalError(f"checkpoint {folder} has no *.safetensors weights (pickled weights are not loaded)")
    from pspo_repro.common.run_dir import _safetensors_problem

    for shard in shards:
        if why := _safetensors_problem(shard):
            raise EvalError(f"checkpoint {folder}: {why}")


def _check_finished(info: dict[str, Any], info_path: Path, folder: Path, by_name: bool) -> str | None:
    """An unfinished run or a checkpoint without its completion marker is refused (its best checkpoint can
    still change, or its save was cut short), unless the checkpoint was named with ``checkpoint=``: then
    one warning line, and why the cells are provisional is returned (None: the checkpoint is final)."""
    from pspo_repro.common.run_dir import COMPLETE_MARKER

    problems = []
    if info.get("status") != "finished":
        problems.append(
            f"the run is {info.get('status', 'of unknown status')!r}, not 'finished' ({info_path})"
        )
    if not (folder / COMPLETE_MARKER).is_file():
        problems.append(f"{folder} has no {COMPLETE_MARKER} (its save may have been cut short)")
    if not problems:
        return None
    if not by_name:
        raise EvalError(
            f"{'; '.join(problems)}: refusing to write final-looking results; wait for the run to finish, "
            f"or name a checkpoint with checkpoint=<folder> to evaluate it anyway"
        )
    print(f"warning: evaluating {folder} as asked by name, although {'; '.join(problems)}", file=sys.stderr)
    return "; ".join(problems)


def resolve_target(cfg: Any) -> Target:
    """The model/checkpoint to evaluate and its result identity, from ``run=`` or ``model=``."""
    if cfg.run and cfg.model_ref:
        raise EvalError("give run=<run folder> or model=<name|path|hub id>, not both")
    local = cfg.get("model_path")
    if local and not cfg.model_ref:  # with run= it would be ignored
        raise EvalError("model_path= needs model=<preset>: the folder holds that preset's weights")
    if cfg.run:
        return _run_target(cfg)
    return _model_target(cfg, local)


def _run_target(cfg: Any) -> Target:
    """Step for ``run=``: the run's best checkpoint (or ``checkpoint=``), filed under the run's identity."""
    run_dir = _find_run_dir(cfg.run)
    info_path = run_json(run_dir)
    info = _read_run_info(RunFolder(run_dir))
    ckpt = cfg.checkpoint or info.get("best_checkpoint")
    if not ckpt:
        raise EvalError(f"{info_path} has no best_checkpoint; pass checkpoint=<folder>")
    if not isinstance(ckpt, str):
        raise EvalError(f"{info_path}: best_checkpoint must be a folder name, got {ckpt!r}")
    folder = Path(str(ckpt)).expanduser()
    folder = folder if folder.is_absolute() else run_dir / folder
    # Results are filed under the run's identity: only a checkpoint of that run may carry it, unless the user
    # opts in (allow_foreign_checkpoint=true), and then the cells say so.
    source = "checkpoint=" if cfg.checkpoint else f"best_checkpoint in {info_path}:"
    foreign = _foreign_checkpoint(run_dir, folder, source)
    if foreign and not cfg.get("allow_foreign_checkpoint", False):
        raise EvalError(
            f"{foreign}; evaluate another model as model=<folder>, or pass allow_foreign_checkpoint=true to "
            "file it under this run, its cells marked foreign_checkpoint"
        )
    _check_checkpoint(folder)
    try:  # run.json is a file on disk: its names are untrusted like any other (safe_paths)
        target = Target(
            check_name(f"model in {info_path}", info["model"]),
            check_name(f"method in {info_path}", info["method"]),
            check_seed(f"seed in {info_path}", info["seed"]),
            check_name(f"tag in {info_path}", info["tag"]) if info.get("tag") else "",
            str(run_dir),
            str(folder.resolve()),
            str(folder.resolve()) if foreign else None,
        )
    except UnsafePathError as exc:
        raise EvalError(str(exc)) from None
    from pspo_repro.common.run_dir import identity_problem

    if why := identity_problem(run_dir, info, info_path):  # run.json names the run its folder is
        raise EvalError(why)
    provisional = _check_finished(info, info_path, folder, by_name=bool(cfg.checkpoint))
    if foreign:
        print(f"warning: evaluating a foreign checkpoint as asked (allow_foreign_checkpoint=true): {foreign}; "
              "its cells are marked foreign_checkpoint", file=sys.stderr)  # fmt: skip
    return replace(target, provisional=provisional)


def _foreign_checkpoint(run_dir: Path, folder: Path, source: str) -> str | None:
    """Why ``folder`` is not one of ``run_dir``'s own checkpoints (None when it is): it lies outside the run
    folder as written, or after following symlinks (the folder itself, or any file in it, such as a
    ``model.safetensors`` linked from another run)."""
    try:
        ensure_under(run_dir, folder, source)
    except UnsafePathError as exc:
        return f"{exc}, the run folder"
    home = run_dir.resolve()
    real = folder.resolve()
    if real == home or not real.is_relative_to(home):
        return f"{source} {folder} resolves to {real}, outside the run folder {home} (a symlink)"
    for p in sorted(folder.rglob("*")) if folder.is_dir() else []:
        target = p.resolve()
        if not target.is_relative_to(home):
            return f"{source} {folder}: {p.relative_to(folder)} resolves to {target}, outside the run folder {home}"
    return None


def _find_run_dir(run: Any) -> Path:
    """The run folder ``run=`` names: a path, else a folder under ``<results>/runs``."""
    run_dir = Path(str(run)).expanduser()
    if not run_dir.is_dir() and (results_dir() / "runs" / str(run)).is_dir():
        run_dir = results_dir() / "runs" / str(run)
    if not run_dir.is_dir():
        raise EvalError(f"run folder not found: {run} (also tried {results_dir() / 'runs' / str(run)})")
    return run_dir


def _read_run_info(run: RunFolder) -> dict[str, Any]:
    """The run's ``run.json``, read as untrusted input: a JSON object with model, method and seed."""
    info_path = run.info_path
    if not run.exists():
        raise EvalError(f"{info_path} not found: not a training run folder")
    try:
        info = run.load()
    except json.JSONDecodeError as exc:
        raise EvalError(f"{info_path}: malformed JSON ({exc.msg})") from None
    except UnicodeDecodeError as exc:
        raise EvalError(f"{info_path}: not UTF-8 text (byte {exc.start}: {exc.reason})") from None
    if not isinstance(info, dict):
        raise EvalError(f"{info_path}: expected a JSON object, got {type(info).__name__}")
    missing = [k for k in ("model", "method", "seed") if info.get(k) is None]
    if missing:
        raise EvalError(f"{info_path}: missing field(s) {', '.join(missing)}")
    return info


def _model_target(cfg: Any, local: Any) -> Target:
    """``model=``: a model preset, the tiny model, a local folder or a hub id, as a baseline."""
    if not cfg.model_ref:
        raise EvalError("nothing to evaluate: give run=<run folder> or model=<name|path|hub id>")
    if cfg.checkpoint:
        raise EvalError("checkpoint= selects a checkpoint of a run; use it with run=, or pass model=<path>")
    name = str(cfg.model_ref)
    preset = CONF_DIR / "model" / f"{name}.yaml"
    if local and not ("/" not in name and preset.is_file()):
        presets = sorted(p.stem for p in (CONF_DIR / "model").glob("*.yaml"))
        raise EvalError(
            f"model_path= gives a preset's weights and needs model=<preset> ({', '.join(presets)}), "
            f"got model={name}"
        )
    if "/" not in name and preset.is_file():
        return _preset_target(name, preset, local)
    if name == "tiny":
        from pspo_repro.training.tiny_model import tiny_model_path

        return Target("tiny", "baseline", 0, "", None, str(tiny_model_path()))
    path = Path(name).expanduser()
    if path.exists():
        _check_checkpoint(path)
        try:
            label = check_name(f"model={name} (its folder name names the results)", path.resolve().name)
        except UnsafePathError as exc:
            raise EvalError(str(exc)) from None
        return Target(label, "baseline", 0, "", None, str(path.resolve()))
    if name.startswith((".", "/", "~")) or name.count("/") > 1:
        raise EvalError(f"model path not found: {name}")
    try:
        label = check_name(f"model={name}", name.split("/")[-1])
    except UnsafePathError as exc:
        raise EvalError(str(exc)) from None
    return Target(label, "baseline", 0, "", None, name)  # a hub id


def _preset_target(name: str, preset: Path, local: Any) -> Target:
    """``model=<preset>``: its weights from ``model_path=``, its ``path`` or its ``hub_id``."""
    # A training model preset (conf/model/<name>.yaml): the same name as its training runs, so the
    # baseline row lines up with them in tables.
    from omegaconf import OmegaConf

    spec = OmegaConf.load(preset)
    # model_path= (the preset's weights from a local folder, offline) before the preset's own path; both
    # are stored under the preset's name.
    weights = local or spec.get("path")
    if weights:
        path = Path(str(weights)).expanduser()
        _check_checkpoint(path)
        return Target(str(spec.name), "baseline", 0, "", None, str(path.resolve()))
    if spec.get("hub_id"):
        return Target(str(spec.name), "baseline", 0, "", None, str(spec.hub_id))
    if name == "tiny":
        from pspo_repro.training.tiny_model import tiny_model_path

        return Target("tiny", "baseline", 0, "", None, str(tiny_model_path()))
    raise EvalError(f"{preset} names neither path nor hub_id")
