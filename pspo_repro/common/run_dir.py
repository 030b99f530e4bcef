"""Where a training run's folder lives and what names it: its tag, its identity, its checkpoints' integrity
(docs/architecture.md: the contract with evaluation; its ``run.json`` is ``common.run_folder``'s).

``results/runs/{model}/{method}/seed{seed}[-{tag}]/``. The tag is empty for default hyperparameters; else a
short stable string of the ``method.*`` / ``trainer.*`` keys overridden on the command line (values taken
from the resolved config, so ``1e-6`` and ``0.000001`` give the same folder), prefixed by ``run_tag`` and,
when the reward is not the data config's ``default_reward``, by ``reward_<funcs>``.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from pspo_repro.common.atomic import write_json, write_text
from pspo_repro.common.names import did_you_mean
from pspo_repro.common.paths import CONF_DIR, results_dir
from pspo_repro.common.safe_paths import check_name, results_path, seed_folder

# Trainer keys that change how a run is observed or stored, not what it learns: never in the tag, and
# ignored when checking that a folder's stored config matches the command that reopens it.
INFRA_TRAINER_KEYS = frozenset(
    {
        "logging_steps",
        "save_total_limit",
        "stop_after_step",
        "disable_tqdm",
        "log_completions",
        "save_steps",
        "log_update_norm",  # a logged statistic, not what is learned
        "log_param_sum",  # a logged checksum of the parameters, not what is learned
        "logprob_head",  # the same log-probs computed another way (to float rounding)
        "old_logps",  # the same old log-probs from another pass (bit for bit on CPU)
        "validation_loss",  # a logged statistic of validation, not what is learned
        "skip_nonfinite",  # how a failure is handled: switching it on to get past a NaN reopens the run
        "vllm_server_host",  # where the generation server listens, not what is learned
        "vllm_server_port",
        "vllm_server_base_url",
    }
)
# conf/train.yaml's rollout-correction keys at their defaults (methods.registry.ROLLOUT_KEYS; a test checks the
# three agree): left out of a run's identity, so runs recorded before the axis existed reopen unchanged.
DEFAULT_METHOD_AXES = {
    "rollout_correction": "none",
    "rollout_correction_threshold": None,
    "rollout_correction_batch_normalize": False,
}
_MAX_TAG = 80  # the study's stale arms (61 characters) keep readable names; folder names stay far below 255
log = logging.getLogger("pspo_repro.train")


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, list | tuple):
        return "+".join(_fmt(v) for v in value)
    return str(value)


def _reward_of(node: Any) -> tuple[list[str], list[float]]:
    """A reward config's functions and weights (null weights: 1.0 each, TRL's default)."""
    funcs = [str(f) for f in (node.get("funcs") or [])]
    weights = node.get("weights")
    return funcs, [float(w) for w in weights] if weights is not None else [1.0] * len(funcs)


def reward_tag(cfg: DictConfig) -> str:
    """``""`` when the run's reward is its data's ``default_reward`` (or the data names none), else
    ``reward_<funcs>[_w<weights>]``: a run with another reward (``reward=authors_gsm8k data=math``) must
    not share a folder with the default-reward runs. ValueError when the default names no reward config."""
    name = OmegaConf.select(cfg, "data.default_reward")
    if not name:
        return ""
    path = CONF_DIR / "reward" / f"{name}.yaml"
    if not path.is_file():
        options = sorted(p.stem for p in path.parent.glob("*.yaml"))
        raise ValueError(
            f"data.default_reward {name!r} is not a reward config; {did_you_mean(name, options)}"
            f"options: {', '.join(options)}"
        )
    funcs, weights = _reward_of(cfg.reward)
    if (funcs, weights) == _reward_of(OmegaConf.load(path)):
        return ""
    tag = f"reward_{_fmt(funcs)}"
    if weights != [1.0] * len(funcs):
        tag += f"_w{_fmt(weights)}"
    return re.sub(r"[^A-Za-z0-9_.+-]", "", tag)


def tagging_key(override: str) -> str | None:
    """The key of an override that names a run's folder (a method/trainer key other than the infrastructure
    ones), or None."""
    key = override.split("=", 1)[0].lstrip("+~")
    group, _, leaf = key.partition(".")
    return key if group in ("method", "trainer") and leaf and leaf not in INFRA_TRAINER_KEYS else None


def tag_from_overrides(cfg: DictConfig, overrides: list[str]) -> str:
    """The folder tag: ``run_tag``, ``data_tag``, ``reward_tag`` and ``{key}{value}`` for each overridden
    method/trainer key, sorted."""
    keys = {k for k in map(tagging_key, overrides) if k}
    parts = [f"{k.split('.', 1)[1]}{_fmt(OmegaConf.select(cfg, k))}" for k in sorted(keys)]
    tags = (cfg.get("run_tag") or "", data_tag(cfg), reward_tag(cfg), swept_tag(parts))
    return "-".join(t for t in tags if t)


def data_tag(cfg: DictConfig) -> str:
    """``data_<name>`` for a user's data set (``data.source`` set; its name settled by the settings check),
    ``""`` for a built-in one: a run on a researcher's file never shares a folder with a gsm8k run."""
    if OmegaConf.select(cfg, "data.source") is None:
        return ""
    return "data_" + re.sub(r"[^A-Za-z0-9_.+-]", "", str(OmegaConf.select(cfg, "data.name") or "user"))


def swept_tag(parts: list[str]) -> str:
    """The swept keys' part of a folder tag: ``{key}{value}`` parts joined by ``_``, cut to a readable head
    and a hash of the whole when longer than 80 characters. The one rule for the trainer, which names the
    folder, and the pipelines, which find it again."""
    tag = re.sub(r"[^A-Za-z0-9_.+-]", "", "_".join(parts))
    if len(tag) > _MAX_TAG:
        tag = f"{tag[:32]}-h{hashlib.sha256(tag.encode()).hexdigest()[:8]}"
    return tag


def run_folder(cfg: DictConfig, tag: str) -> Path:
    """``<results>/runs/{model}/{method}/seed{seed}[-{tag}]`` (``paths.results_dir`` wins if set).

    Every component passes ``safe_paths``' one name rule (``run_tag=x/../..`` or a secret from an
    ``${oc.env:...}`` is refused with UnsafePathError) and the folder is proven to lie under ``runs/``.
    """
    root = Path(cfg.paths.results_dir) if cfg.paths.get("results_dir") else results_dir()
    if cfg.get("run_tag"):
        check_name("run_tag", str(cfg.run_tag), max_len=100)
    return results_path(
        root / "runs",
        ("model.name", cfg.model.name),
        ("method.name", cfg.method.name),
        ("seed folder", seed_folder(cfg.seed, tag)),
    )


RUN_FOLDER_RE = re.compile(r"seed(?P<seed>[0-9]+)(?:-(?P<tag>.+))?")
RUN_LAYOUT = "runs/<model>/<method>/seed<N>[-<tag>]"


def folder_identity(folder: Path) -> dict[str, Any] | None:
    """model, method, seed and tag as ``folder``'s place says (``RUN_LAYOUT``), or None when its name is
    not ``seed<N>[-<tag>]``."""
    m = RUN_FOLDER_RE.fullmatch(folder.name)
    if not m:
        return None
    return {"model": folder.parent.parent.name, "method": folder.parent.name, "seed": int(m["seed"]),
            "tag": m["tag"] or ""}  # fmt: skip


def identity_problem(folder: Path, info: dict[str, Any], info_path: Path | str) -> str | None:
    """One line when ``info`` (a run.json read from ``info_path``) names another model, method, seed or tag
    than where ``folder`` sits (``RUN_LAYOUT``): a run.json edited or copied into another run's folder would
    otherwise file that run's results under another identity. The place is taken as written (normalised)
    and, should that differ, after following symlinks: either may agree. A field run.json does not hold is
    taken from the folder (an absent tag: none). None when they agree."""
    places = [Path(os.path.normpath(os.path.abspath(folder)))]
    if places[0].resolve() != places[0]:
        places.append(places[0].resolve())
    first = None
    for place in places:
        where = folder_identity(place)
        if where is None:
            first = first or f"{info_path}: its folder {place.name!r} is not seed<N>[-<tag>] ({RUN_LAYOUT})"
            continue
        for key, want in where.items():
            got = info.get(key)
            if key == "tag":  # absent or null: the default hyperparameters, no tag (as evaluation reads it)
                got = got or ""
            elif got is None:
                continue  # not recorded: the folder says it (aggregation reads it from there)
            if key == "seed" and isinstance(got, str) and got.isascii() and got.isdigit():
                got = int(got)
            if got != want or isinstance(got, bool):
                first = first or (
                    f"{info_path}: {key} {info.get(key)!r} disagrees with its folder {place} ({key} {want!r}, "
                    f"as {RUN_LAYOUT} says); a run is filed where it sits: move the run or correct run.json"
                )
                break
        else:
            return None
    return first


def identity_config(resolved: dict[str, Any]) -> dict[str, Any]:
    """The part of the resolved config that defines what a run learns (for the reopen check)."""
    keep = {k: resolved.get(k) for k in ("model", "method", "reward", "data", "seed", "run_tag")}
    if isinstance(keep["data"], dict):  # default_reward names the folder (reward_tag), not what is learned
        keep["data"] = {k: v for k, v in keep["data"].items() if k != "default_reward"}
    keep["trainer"] = {k: v for k, v in resolved.get("trainer", {}).items() if k not in INFRA_TRAINER_KEYS}
    if isinstance(keep["method"], dict):
        keep["method"] = {
            k: v
            for k, v in keep["method"].items()
            if k not in DEFAULT_METHOD_AXES or v != DEFAULT_METHOD_AXES[k]
        }
    return keep


def portable_identity(identity: dict[str, Any] | None, folder: Path | str | None) -> dict[str, Any] | None:
    """``identity`` with a ``model.path`` inside the run's results root (``folder``'s ``runs/`` parent: the
    mini's SFT base under ``<root>/work/sft``) written relative to that root, so a committed run compares
    equal to the same run reopened from another checkout of the results (``reuse_committed``)."""
    if not isinstance(identity, dict) or folder is None:
        return identity
    model = identity.get("model")
    path = model.get("path") if isinstance(model, dict) else None
    folder = Path(folder)
    if not isinstance(path, str) or len(folder.parents) < 4 or folder.parents[2].name != "runs":
        return identity
    root = folder.parents[3]
    try:
        rel = Path(path).relative_to(root)
    except ValueError:
        return identity
    return {**identity, "model": {**model, "path": f"<results root>/{rel.as_posix()}"}}


# Written into a checkpoint folder by ``callbacks.CheckpointMarkerCallback`` once the Trainer has saved
# every file of it (and metrics.jsonl holds its step): a folder without it was cut short by a kill.
COMPLETE_MARKER = "pspo_complete.json"


def _safetensors_problem(path: Path) -> str | None:
    """Why ``path`` is not a whole safetensors file (header length + JSON header + data size), or None."""
    try:
        size = path.stat().st_size
        with open(path, "rb") as fh:
            n = int.from_bytes(fh.read(8), "little")
            if n <= 0 or 8 + n > size:
                return f"{path}: truncated safetensors header"
            header = json.loads(fh.read(n))
    except (OSError, ValueError) as exc:
        return f"{path}: unreadable safetensors ({exc})"
    ends = [v["data_offsets"][1] for k, v in header.items() if k != "__metadata__"]
    if 8 + n + max(ends, default=0) != size:
        return f"{path}: size {size} does not match its header (truncated or corrupted)"
    return None


def checkpoint_problems(ckpt: Path) -> list[str]:
    """Reasons ``ckpt`` must not be resumed from: no completion marker, a file missing or of another
    size than when it was saved, a cut safetensors file, a file whose sha256 changed since it was saved,
    an unreadable trainer_state.json. Empty: good."""
    marker = ckpt / COMPLETE_MARKER
    if not marker.is_file():
        return [f"{marker} missing (save interrupted)"]
    try:
        recorded = json.loads(marker.read_text(encoding="utf-8"))
        files = recorded["files"]
    except (OSError, ValueError, KeyError) as exc:
        return [f"{marker}: unreadable ({exc})"]
    digests = recorded.get("sha256", {})  # absent in older markers
    problems = []
    for name, size in sorted(files.items()):
        path = ckpt / name
        if not path.is_file():
            problems.append(f"{path} missing")
        elif path.stat().st_size != size:
            problems.append(f"{path} has {path.stat().st_size} bytes, {size} when saved")
        elif name.endswith(".safetensors") and (why := _safetensors_problem(path)):
            problems.append(why)
        elif name in digests and _sha256(path) != digests[name]:
            problems.append(f"{path}: contents differ from when it was saved (sha256 mismatch)")
    state = ckpt / "trainer_state.json"
    try:
        json.loads(state.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        problems.append(f"{state}: unreadable ({exc.__class__.__name__})")
    return problems


def _sha256(path: Path) -> str:
    with open(path, "rb") as fh:
        return hashlib.file_digest(fh, "sha256").hexdigest()


def write_checkpoint_marker(ckpt: Path, step: int) -> None:
    """Record every file of a just-saved checkpoint with its size and sha256 (``checkpoint_problems`` checks
    them): sizes catch a cut file, digests a same-size corruption (zeroed pages, flipped bytes). Hashing
    reads the files the Trainer has just written (page cache), about 1 s per GB of checkpoint."""
    paths = [p for p in sorted(ckpt.rglob("*")) if p.is_file() and p.name != COMPLETE_MARKER]
    files = {str(p.relative_to(ckpt)): p.stat().st_size for p in paths}
    digests = {str(p.relative_to(ckpt)): _sha256(p) for p in paths}
    write_json(ckpt / COMPLETE_MARKER, {"step": int(step), "files": files, "sha256": digests})


def last_checkpoint(folder: Path) -> Path | None:
    """The highest-step ``checkpoint-N`` folder that is complete and intact (``checkpoint_problems``).

    A newer folder that fails the check (a kill mid-save, a truncated file) is renamed
    ``bad-checkpoint-N`` (outside the Trainer's ``checkpoint-*`` rotation, kept for inspection) with a
    warning naming the bad files, and the previous good checkpoint is used.
    """
    found = []
    for child in folder.glob("checkpoint-*"):
        m = re.fullmatch(r"checkpoint-(\d+)", child.name)
        if m and child.is_dir():
            found.append((int(m.group(1)), child))
    for _, child in sorted(found, reverse=True):
        problems = checkpoint_problems(child)
        if not problems:
            return child
        aside = child.with_name(f"bad-{child.name}")
        i = 1
        while aside.exists():
            aside, i = child.with_name(f"bad-{child.name}.{i}"), i + 1
        child.rename(aside)
        log.warning(
            "checkpoint %s is incomplete or corrupted, not resuming from it (moved to %s): %s",
            child, aside.name, "; ".join(problems),
        )  # fmt: skip
    return None


def truncate_metrics(path: Path, max_step: int | None) -> None:
    """Keep the metrics.jsonl lines of steps up to ``max_step``, the step of the checkpoint a run resumes
    from: the resumed run logs every later step again. ``None`` (no checkpoint: the run starts afresh)
    keeps nothing, the step-0 validation included: the fresh start logs it again (a kill during the first
    checkpoint's save used to leave it in, and the curve read steps 0, 0, 1, ...). A line cut by a kill,
    one without an integer step, or a step already kept (a file from before this rule), is dropped."""
    if not path.exists():
        return
    kept, seen = [], set()
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            step = json.loads(line).get("step", 0)
        except (json.JSONDecodeError, AttributeError):  # a line cut by a kill, or not an object
            continue
        if not isinstance(step, int) or isinstance(step, bool):
            continue
        if max_step is not None and step <= max_step and step not in seen:
            kept.append(line)
            seen.add(step)
    write_text(path, "".join(f"{line}\n" for line in kept))
