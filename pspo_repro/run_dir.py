"""The training run's folder and ``run.json`` (docs/architecture.md: the contract with evaluation).

``results/runs/{model}/{method}/seed{seed}[-{tag}]/``. The tag is empty for default hyperparameters; else a
short stable string of the ``method.*`` / ``trainer.*`` keys overridden on the command line (values taken
from the resolved config, so ``1e-6`` and ``0.000001`` give the same folder), prefixed by ``run_tag``.
"""

from __future__ import annotations

import hashlib
import json
import re
import subprocess
import time
from importlib import metadata
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from pspo_repro.atomic import write_json, write_text
from pspo_repro.paths import PROJECT_ROOT, results_dir

# Trainer keys that change how a run is observed or stored, not what it learns: never in the tag, and
# ignored when checking that a folder's stored config matches the command that reopens it.
INFRA_TRAINER_KEYS = frozenset(
    {"logging_steps", "save_total_limit", "stop_after_step", "disable_tqdm", "log_completions", "save_steps"}
)
_MAX_TAG = 48
PACKAGES = ("torch", "transformers", "trl", "accelerate", "hydra-core", "vllm", "deepspeed", "math-verify")


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, list | tuple):
        return "+".join(_fmt(v) for v in value)
    return str(value)


def tag_from_overrides(cfg: DictConfig, overrides: list[str]) -> str:
    """The folder tag: ``run_tag`` plus ``{key}{value}`` for each overridden method/trainer key, sorted."""
    keys = set()
    for ov in overrides:
        key = ov.split("=", 1)[0].lstrip("+~")
        group, _, leaf = key.partition(".")
        if group in ("method", "trainer") and leaf and leaf not in INFRA_TRAINER_KEYS:
            keys.add(key)
    parts = [f"{k.split('.', 1)[1]}{_fmt(OmegaConf.select(cfg, k))}" for k in sorted(keys)]
    tag = "_".join(parts)
    tag = re.sub(r"[^A-Za-z0-9_.+-]", "", tag)
    if len(tag) > _MAX_TAG:  # long sweeps: a readable head and a hash of the whole
        tag = f"{tag[:32]}-h{hashlib.sha256(tag.encode()).hexdigest()[:8]}"
    return "-".join(t for t in (cfg.get("run_tag") or "", tag) if t)


def run_folder(cfg: DictConfig, tag: str) -> Path:
    root = Path(cfg.paths.results_dir) if cfg.paths.get("results_dir") else results_dir()
    suffix = f"-{tag}" if tag else ""
    return root / "runs" / cfg.model.name / cfg.method.name / f"seed{cfg.seed}{suffix}"


def identity_config(resolved: dict[str, Any]) -> dict[str, Any]:
    """The part of the resolved config that defines what a run learns (for the reopen check)."""
    keep = {k: resolved.get(k) for k in ("model", "method", "reward", "data", "seed", "run_tag")}
    keep["trainer"] = {k: v for k, v in resolved.get("trainer", {}).items() if k not in INFRA_TRAINER_KEYS}
    return keep


def git_sha() -> str | None:
    try:
        out = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=10
        )
        return out.stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        return None


def versions() -> dict[str, str | None]:
    found: dict[str, str | None] = {}
    for name in PACKAGES:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            found[name] = None
    return found


def read_run_json(folder: Path) -> dict[str, Any] | None:
    path = folder / "run.json"
    if not path.exists():
        return None
    return json.loads(path.read_text(encoding="utf-8"))


def write_run_json(folder: Path, record: dict[str, Any]) -> None:
    record = {**record, "updated_at": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
    write_json(folder / "run.json", record)


def last_checkpoint(folder: Path) -> Path | None:
    """The highest-step ``checkpoint-N`` folder that holds a complete save (trainer_state.json)."""
    best: tuple[int, Path] | None = None
    for child in folder.glob("checkpoint-*"):
        m = re.fullmatch(r"checkpoint-(\d+)", child.name)
        if m and (child / "trainer_state.json").exists() and (best is None or int(m.group(1)) > best[0]):
            best = (int(m.group(1)), child)
    return best[1] if best else None


def truncate_metrics(path: Path, max_step: int) -> None:
    """Drop metrics.jsonl lines logged after ``max_step`` (a resumed run logs them again)."""
    if not path.exists():
        return
    kept = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            if json.loads(line).get("step", 0) <= max_step:
                kept.append(line)
        except json.JSONDecodeError:  # a line cut by a kill: drop it
            continue
    write_text(path, "".join(f"{line}\n" for line in kept))
