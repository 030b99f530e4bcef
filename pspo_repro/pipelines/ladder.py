"""The model-size ladder end to end (``make scale``, conf/scale.yaml, docs/scale.md).

One rung is a CPU pipeline (``pspo_repro.pipelines.cpu_pipeline``, conf/pipeline/scale_rung.yaml) in its own folder with
the SFT model's size set by the rung's ``arch``; the general/specialised pair adds a second base of one rung's
size whose SFT mix differs. Each rung runs as a subprocess (``python -m pspo_repro.mini``), so it resumes and
compares itself with its committed copy exactly as ``make mini`` does; then ``analysis.scale`` writes the
ladder's tables, figure and claim-13 verdict from every rung's records.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from pspo_repro.common.atomic import write_json
from pspo_repro.common.cli import check_number, run_command
from pspo_repro.common.overrides import override
from pspo_repro.common.paths import CONF_DIR, results_dir
from pspo_repro.common.safe_paths import UnsafePathError, check_name, no_symlink_escape
from pspo_repro.pipelines.markers import read_record


class ScaleError(RuntimeError):
    """A bad ladder setting (exit 2, nothing ran) or a failed rung (exit 1)."""


# The Qwen2Config sizes a rung's ``arch`` may set (each a positive integer), and the SFT mix keys of the
# specialisation pair with their bounds: a value is checked here, where it enters, not by the SFT stage.
ARCH_KEYS = ("hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
             "num_key_value_heads", "head_dim", "max_position_embeddings")  # fmt: skip
SFT_MIX = {
    "data.n_train": (int, 1, None),
    "data.heldout_n_train": (int, 0, None),
    "data.habit_frac": (float, 0, 1),
}


def _checked_arch(name: str, arch: dict[str, Any]) -> dict[str, Any]:
    """A rung's ``arch`` with every key among ``ARCH_KEYS`` and every value a positive integer (ScaleError)."""
    for key, value in arch.items():
        if key not in ARCH_KEYS:
            raise ScaleError(
                f"rung {name!r}: arch.{key} is not a size the ladder sets; allowed: {', '.join(ARCH_KEYS)}"
            )
        check_number(f"rung {name!r}: arch.{key}", value, int, low=1, error=ScaleError)
    return arch


def _checked_mix(sft: dict[str, Any]) -> dict[str, Any]:
    """The specialisation's SFT mix with each value of its key's type and bounds (``SFT_MIX``; ScaleError)."""
    for key, value in sft.items():
        kind, low, high = SFT_MIX[key]
        sft[key] = check_number(
            f"specialisation.sft.{key}", value, kind, low=low, high=high, error=ScaleError
        )
    return sft


@dataclass
class Base:
    """One SFT base of the ladder: its folder name, model arch and extra SFT overrides."""

    name: str
    arch: dict[str, Any]
    sft: dict[str, Any] = field(default_factory=dict)
    general_of: str | None = None  # the rung whose size this "general" base shares


def scale_root(cfg: DictConfig) -> Path:
    """``root`` or ``<results>/scale``."""
    return Path(str(cfg.root)).resolve() if cfg.get("root") else results_dir() / "scale"


def bases(cfg: DictConfig) -> list[Base]:
    """The rungs in order, then the general base of the specialisation pair; settings checked (ScaleError)."""
    rungs = cfg.get("rungs")
    if not OmegaConf.is_list(rungs) or len(rungs) < 2:
        raise ScaleError(f"rungs must be a list of at least 2 {{name, arch}} entries, got {rungs!r}")
    out: list[Base] = []
    for i, r in enumerate(rungs):
        if not OmegaConf.is_dict(r):
            raise ScaleError(f"rungs[{i}] must be a mapping {{name, arch}}, got {r!r}")
        arch = r.get("arch")
        if arch is None or not OmegaConf.is_dict(arch):
            raise ScaleError(
                f"rung {r.get('name')!r}: arch must be a mapping of Qwen2Config fields, got {arch!r}"
            )
        name = _name(f"rungs[{i}].name", r.get("name"))
        out.append(Base(name, _checked_arch(name, OmegaConf.to_container(arch))))
    _check_names([b.name for b in out])
    spec = cfg.get("specialisation")
    if spec:
        by_name = {b.name: b for b in out}
        if str(spec.get("rung")) not in by_name:
            raise ScaleError(
                f"specialisation.rung={spec.get('rung')!r}: not a rung; rungs: {', '.join(by_name)}"
            )
        sft = OmegaConf.to_container(spec.get("sft") or {})
        if not isinstance(sft, dict) or not sft or set(sft) - set(SFT_MIX):
            raise ScaleError(
                f"specialisation.sft={sft!r}: give the SFT mix, keys among {', '.join(sorted(SFT_MIX))}"
            )
        name = _name("specialisation.name", spec.get("name"))
        out.append(Base(name, by_name[str(spec.rung)].arch, _checked_mix(sft), str(spec.rung)))
        _check_names([b.name for b in out])
    names = [b.name for b in out]
    only = cfg.get("only")
    if only is not None and (not OmegaConf.is_list(only) or set(map(str, only)) - set(names)):
        raise ScaleError(f"only={only!r}: a list of base names among {', '.join(names)}")
    return out


def _name(where: str, value: Any) -> str:
    """A base's ``name`` as given; ScaleError when it is missing (``str(None)`` would name the folder ``None``)."""
    if value is None or value == "":
        raise ScaleError(f"{where} is required: each base names its folder under the ladder's root")
    return str(value)


def _check_names(names: list[str]) -> None:
    """Each name a safe folder name (it names a folder under the ladder's root), all distinct."""
    for name in names:
        try:
            check_name("rung name", name)
        except UnsafePathError as exc:
            raise ScaleError(str(exc)) from None
    if len(set(names)) != len(names):
        raise ScaleError(f"rung names must be distinct, got {names}")


def sft_overrides(base: Base) -> list[str]:
    """The rung's ``sft.overrides``: its arch (``++``: added or replaced in conf/sft.yaml's model.arch) and mix,
    each rendered by ``overrides.override``."""
    out = [override(f"++model.arch.{k}", v) for k, v in base.arch.items()]
    return out + [override(k, v) for k, v in base.sft.items()]


def only_rungs(cfg: DictConfig) -> set[str] | None:
    """The rungs ``only`` names (None: every rung), the ones this invocation runs."""
    return None if cfg.get("only") is None else set(map(str, cfg.only))


def rung_cmd(cfg: DictConfig, root: Path, base: Base) -> list[str]:
    """``python -m pspo_repro.mini pipeline=<rung_pipeline>`` for one base, in ``<root>/<name>``."""
    # The rung's SFT overrides travel as one list of texts (each quoted by the grammar), never pasted.
    return [
        sys.executable, "-m", "pspo_repro.mini", override("pipeline", str(cfg.rung_pipeline)),
        override("root", root / base.name), override("reuse_committed", bool(cfg.reuse_committed)),
        override("sft.overrides", sft_overrides(base)), *map(str, cfg.get("rung_args") or []),
    ]  # fmt: skip


def run_ladder(cfg: DictConfig) -> dict[str, Any]:
    """Every rung's pipeline in order (each resumes itself), then the ladder's table; returns the timings."""
    # The table's and the precision check's imports (pandas, scipy, torch) wait until the settings have been
    # checked: a bad one is refused at once.
    if not isinstance(cfg.get("reuse_committed"), bool):
        raise ScaleError(f"reuse_committed must be true or false, got {cfg.get('reuse_committed')!r}")
    if not (CONF_DIR / "pipeline" / f"{cfg.rung_pipeline}.yaml").is_file():
        raise ScaleError(f"rung_pipeline={cfg.rung_pipeline!r}: no conf/pipeline/{cfg.rung_pipeline}.yaml")
    ladder = bases(cfg)
    root = scale_root(cfg)
    only = only_rungs(cfg)
    for base in ladder:  # a rung folder linked out of the root: its pipeline would write there
        try:
            no_symlink_escape(root, root / base.name, f"rung {base.name}")
        except UnsafePathError as exc:
            raise ScaleError(str(exc)) from None
    timings_path = root / "timings.json"
    previous = (read_record(timings_path) or {}).get("rungs", {})
    timings: dict[str, Any] = {"rungs": previous if isinstance(previous, dict) else {}}
    t_all = time.time()
    from pspo_repro.training.models import EMULATED_BF16, native_bf16_cpu

    if (only is None or only) and not native_bf16_cpu():  # the rungs' RL runs: conf/experiment/scale.yaml
        print(
            f"[scale] warning: the ladder's RL runs train under {EMULATED_BF16}", file=sys.stderr, flush=True
        )
    for i, base in enumerate(ladder):
        if only is not None and base.name not in only:
            continue
        print(f"[scale] rung {i + 1}/{len(ladder)}: {base.name} (arch {base.arch or 'the mini SFT model'}"
              f"{', SFT mix ' + str(base.sft) if base.sft else ''})", flush=True)  # fmt: skip
        t0 = time.time()
        proc = subprocess.run(rung_cmd(cfg, root, base), env=os.environ.copy())
        if proc.returncode != 0:
            raise ScaleError(f"rung {base.name} failed (exit {proc.returncode}); its logs: "
                             f"{root / base.name / 'work' / 'logs'}; rerun to resume")  # fmt: skip
        timings["rungs"][base.name] = {"this_invocation_seconds": round(time.time() - t0, 1)}
        write_json(timings_path, timings)
    for base in ladder:  # each rung's stages, whichever invocation ran them (a resumed rung's own record)
        timings["rungs"].setdefault(base.name, {}).update(rung_time(root / base.name))
    timings["total_seconds"] = round(sum(r.get("seconds") or 0.0 for r in timings["rungs"].values()), 1)
    timings["total_cpu_seconds"] = round(
        sum(r.get("cpu_seconds") or 0.0 for r in timings["rungs"].values()), 1
    )
    t0 = time.time()
    from pspo_repro.analysis import scale as scale_table

    scale_table.write(root, root, ladder_spec(ladder))
    timings["table_seconds"] = round(time.time() - t0, 1)
    timings["this_invocation_seconds"] = round(time.time() - t_all, 1)
    write_json(timings_path, timings)
    return timings


def rung_time(folder: Path) -> dict[str, float | None]:
    """A rung's wall and CPU seconds summed over its stages (its timings.json; None where it has none)."""
    stages = (read_record(folder / "timings.json") or {}).get("stages")
    try:
        return {"seconds": round(sum(float(v["seconds"]) for v in stages.values()), 1),
                "cpu_seconds": round(sum(float(v.get("cpu_seconds") or 0.0) for v in stages.values()), 1)}  # fmt: skip
    except (ValueError, KeyError, TypeError, AttributeError):  # no stages, or a stage record without seconds
        return {"seconds": None, "cpu_seconds": None}


def full_arch(arch: dict[str, Any]) -> dict[str, Any]:
    """``arch`` over conf/sft.yaml's model.arch (the keys a rung leaves out take the SFT stage's values)."""
    defaults = OmegaConf.to_container(OmegaConf.load(CONF_DIR / "sft.yaml").model.arch or {})
    return {**defaults, **arch}


def ladder_spec(ladder: list[Base]) -> list[dict[str, Any]]:
    """The bases as ``analysis.scale`` reads them: name, arch, its SFT model's parameter count (counted on the
    meta device: no weights allocated), SFT mix, and the rung a general base belongs to."""
    from pspo_repro.training.sft import num_parameters

    return [{"name": b.name, "arch": b.arch, "params": num_parameters(full_arch(b.arch)), "general_of": b.general_of,
             "sft": b.sft} for b in ladder]  # fmt: skip


def agreement_lines(root: Path, ladder: list[Base], ran: set[str] | None = None) -> list[str]:
    """Each rung's comparison with its committed copy, as the mini printed it (its timings.json). A rung not in
    ``ran`` (None: every rung ran) did not run now: its line is the record of its last run, and says so (a
    committed rung's record compares that run with the copy before it)."""
    from pspo_repro.pipelines import committed_copy

    lines = []
    for b in ladder:
        vs = (read_record(root / b.name / "timings.json") or {}).get("vs_committed")
        if isinstance(vs, dict):
            when = "" if ran is None or b.name in ran else " (not run now; the record of its last run)"
            lines.append(f"  {b.name}{when}: {committed_copy.describe_agreement(vs['agreement'])}")
    return lines


def _task(cfg: DictConfig) -> None:
    """The Hydra task: every rung, the ladder's table, then the times and the table."""
    try:
        timings = run_ladder(cfg)
    except ScaleError as exc:
        print(f"error: {exc}", file=sys.stderr, flush=True)
        sys.exit(1 if "failed" in str(exc) else 2)
    except (
        ValueError,
        KeyError,
    ) as exc:  # the table's records (missing or bad): one line, as every table command
        print(f"error: {exc}", file=sys.stderr, flush=True)
        sys.exit(1)
    except OSError as exc:  # writing the table set (atomic.write_set left the previous one)
        print(f"error: cannot write the ladder's table: {exc.strerror or exc}", file=sys.stderr, flush=True)
        sys.exit(2)
    root = scale_root(cfg)
    print("\n== model-size ladder: done ==", f"results: {root}", sep="\n")
    for name, rec in timings["rungs"].items():
        wall, cpu = rec.get("seconds"), rec.get("cpu_seconds")
        print(f"  {name:<18} {wall if wall is not None else float('nan'):>7.1f} s wall, "
              f"{cpu if cpu is not None else float('nan'):>7.1f} s CPU (its stages, whenever they ran)")  # fmt: skip
    print(
        f"  total {timings['total_seconds']:.1f} s wall, {timings['total_cpu_seconds']:.1f} s CPU; "
        f"this invocation {timings['this_invocation_seconds']:.1f} s"
    )
    print("\n".join(agreement_lines(root, bases(cfg), only_rungs(cfg))))
    table = root / "scale.md"
    if table.is_file():
        print("\n" + table.read_text(), flush=True)


def main() -> int:
    """Entry point of ``python -m pspo_repro.scale [key=value ...]``: ``cli.run_command`` (SIGTERM unwinds like
    Ctrl-C), then Hydra."""
    return run_command("scale", _task, stop_on_sigterm=True)
