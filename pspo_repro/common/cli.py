"""Shared command-line helpers: how every command starts, and bad input as one ``error: ...`` line, exit 2.

``run_command`` is every entry point's start: the checks that need no model (the command's own, relative
folders made absolute, the overrides, the output folders), then the command as a Hydra app (``--help``,
``--cfg job``, ``-m``). Hydra reports a bad override (a typo in a key, a wrong type) in five lines ending
with a hint about ``HYDRA_FULL_ERROR``; ``override_error`` composes the config first and turns that into one
line that names the override. ``check_number`` is the one number check of every command's settings.

Inside a multirun job that a launcher runs away from the driver process (``-m hydra/launcher=slurm``;
any launcher but ``basic``) ``fail`` raises ``UsageError`` with that line instead of exiting, so the
launcher reports the job as failed with the message (the Slurm driver: "failed (the task raised):
UsageError: ...") rather than a job that died without a result. The basic launcher runs jobs in the
driver itself, where one line and exit 2 is what the user sees, as in a single run. No torch imports.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pspo_repro.common.names import closest, did_you_mean

USAGE_EXIT = 2


class UsageError(ValueError):
    """Bad user input: reported as one line ``error: ...`` with exit status 2, no traceback."""


def in_launcher_job() -> bool:
    """True inside a Hydra multirun job of a launcher other than ``basic`` (e.g. submitit's Slurm jobs)."""
    try:
        from hydra.core.hydra_config import HydraConfig
        from hydra.types import RunMode
    except ImportError:
        return False
    if not HydraConfig.initialized():
        return False
    hc = HydraConfig.get()
    return hc.mode == RunMode.MULTIRUN and hc.runtime.choices.get("hydra/launcher") != "basic"


def fail(message: str) -> None:
    """Print ``error: <message>`` (newlines folded, so it stays one line) and exit with status 2; in a
    launcher job raise ``UsageError(<message>)`` instead (see the module doc)."""
    from pspo_repro.common.redact import redact_text

    # A value in the message may be a resolved ${oc.env:...}: a credential's value never reaches the line.
    one_line = redact_text("; ".join(part.strip() for part in str(message).splitlines() if part.strip()))
    if in_launcher_job():
        raise UsageError(one_line) from None
    print(f"error: {one_line}", file=sys.stderr, flush=True)
    sys.exit(USAGE_EXIT)


def check_number(key: str, value: Any, kind: type = float, *, low: float | None = None,
                 high: float | None = None, low_open: bool = False, high_open: bool = False, null: bool = False,
                 text: bool = False, error: type[Exception] = UsageError) -> Any:  # fmt: skip
    """``value`` as a finite number of ``kind`` within the bounds, else ``error`` (UsageError) naming the key,
    the value and what is allowed: the one number check of every command's settings. Hydra types
    ``expected_seeds=abc`` as a string and ``1.9`` as a float: both are refused for an integer setting, as is
    infinity for any setting. ``null``: None is allowed (and returned); ``text``: a string that spells a number
    is read as that number (a quoted ``'0.8'``)."""
    import math

    def show(x: float) -> str:
        return str(int(x)) if float(x).is_integer() else f"{x:g}"

    what = "an integer" if kind is int else "a number"
    if low is not None or high is not None:
        lo = "-inf" if low is None else show(low)
        hi = "inf" if high is None else show(high)
        what += f" in {'(' if low_open or low is None else '['}{lo}, {hi}{')' if high_open or high is None else ']'}"
    if null:
        what += " or null"
    if value is None:
        if null:
            return None
        raise error(f"{key} must be {what}, got null")
    number = value
    if text and isinstance(value, str):
        try:
            number = float(value)
        except ValueError:
            number = None
    ok = isinstance(number, int | float) and not isinstance(number, bool) and math.isfinite(number)
    ok = ok and (kind is not int or float(number).is_integer())
    if ok and low is not None:
        ok = number > low if low_open else number >= low
    if ok and high is not None:
        ok = number < high if high_open else number <= high
    if not ok:
        raise error(f"{key} must be {what}, got {value!r}")
    return int(number) if kind is int else float(number)


def secret_args_error(argv: list[str]) -> str | None:
    """One line when a command-line argument holds a credential's value (None when none does): Hydra saves
    the overrides in its log folder and wandb records the command line, so the value would reach files that
    redaction never sees."""
    from pspo_repro.common.redact import secret_names_in

    names = secret_names_in(argv)
    if not names:
        return None
    return (
        f"a command-line argument holds the value of {', '.join(names)}; pass credentials through the "
        f"environment only (e.g. ${{oc.env:{names[0]}}}): the command line is saved in logs"
    )


# Settings whose value names a folder, tag, quote or label (run_tag, model.name, a rung's name, the
# leaderboard's tags, a table's caption), matched on the key's last part.
_NAME_KEY_RE = re.compile(
    r"(?:^|[._/])(?:run_tag|\w*tags?|\w*names?|labels?|quotes?|titles?|captions?|\w*prefix(?:es)?|only|rungs"
    r"|method|experiment)$"
)
# An interpolation that reads the environment: OmegaConf's ``oc.env`` and the legacy ``env`` resolver.
_ENV_REF_RE = re.compile(r"\$\{\s*(?:oc\.env|env)\s*:")


def env_name_error(argv: list[str]) -> str | None:
    """One line when an override reads the environment (``${oc.env:...}``, ``${env:...}``) into a setting
    that names a folder, tag, quote or label (None when none does): such a name is written into folder
    names, tables and error lines, so an environment value (a credential) would reach them. The line names
    the key, never the value."""
    for arg in argv:
        key, sep, value = arg.partition("=")
        key = key.lstrip("+~")
        if sep and _NAME_KEY_RE.search(key) and _ENV_REF_RE.search(value):
            return (
                f"{key} reads the environment (an oc.env/env interpolation); a setting that names a folder, "
                "tag, quote or label takes the name itself"
            )
    return None


def first_line(exc: BaseException | None) -> str:
    """The first non-empty line of an exception's message ("" when it has none)."""
    text = str(exc or "").strip()
    return text.splitlines()[0].strip() if text else ""


def compose_error(config_dir: Path, config_name: str, overrides: list[str]) -> str | None:
    """Hydra's complaint about ``overrides`` as one line (None when the config composes).

    Multirun sweeps (``-m``), Hydra flags (``--cfg``) and ``hydra.*`` / ``hydra/...`` overrides are left to
    Hydra itself: compose() does not expand sweeps or load launcher plugins. ``hydra.searchpath`` is kept
    (it decides which group options exist).
    """
    return _checked_compose(config_dir, config_name, overrides)[0]


def _initialize(config_dir: Path | None) -> Any:
    """Hydra's compose API over ``config_dir`` (None: the configs registered in Hydra's ConfigStore)."""
    from hydra import initialize, initialize_config_dir

    if config_dir is None:
        return initialize(config_path=None, version_base="1.3")
    return initialize_config_dir(config_dir=str(config_dir), version_base="1.3")


def _checked_compose(
    config_dir: Path | None, config_name: str, overrides: list[str]
) -> tuple[str | None, Any]:
    """(``compose_error``'s line, None) or (None, (the overrides it composed, the config with Hydra's settings));
    (None, None) where it leaves the overrides to Hydra."""
    if any(a.startswith("-") for a in overrides):
        return None, None
    plain = [
        a
        for a in overrides
        if not a.lstrip("+~").startswith(("hydra.", "hydra/"))
        or a.lstrip("+").startswith("hydra.searchpath=")
    ]
    from hydra import compose
    from hydra.core.global_hydra import GlobalHydra

    GlobalHydra.instance().clear()
    try:
        with _initialize(config_dir):
            # hydra/<group>=<choice> (launcher, sweeper): the choice must exist (conf/hydra/ or a plugin)
            loader = GlobalHydra.instance().config_loader()
            for arg in overrides:
                key, sep, value = arg.lstrip("+").partition("=")
                if key.startswith("hydra/") and sep and value not in ("null", ""):
                    options = sorted(loader.get_group_options(key))
                    if value not in options:
                        return (
                            f"unknown {key} {value!r}; {did_you_mean(value, options)}options: {', '.join(options)}",
                            None,
                        )
            # with Hydra's own settings (composed either way), for hydra_dir_error's first job
            cfg = compose(config_name=config_name, overrides=plain, return_hydra_config=True)
            for arg in plain:
                if err := _added_key_error(arg, cfg, loader):
                    return err, None
    except Exception as exc:  # Hydra/OmegaConf raise several types; all are bad input here
        msg = first_line(exc)
        cause = first_line(exc.__cause__)
        if cause and cause not in msg:
            msg = f"{msg.rstrip('.')}: {cause}"
        if "is not in struct" in msg:
            msg += " (a typo? check the key's spelling against the config file)"
        return f"bad override: {msg}", None
    finally:
        GlobalHydra.instance().clear()
    return None, (plain, cfg)


# Sections where ``+key=value`` may add a key: the method's parser names an unknown parameter itself.
OPEN_SECTIONS = ("method",)


def _added_key_error(arg: str, cfg: Any, loader: Any) -> str | None:
    """One line when ``+a.b=value`` adds a key inside an existing section (``+eval.limt=3``): nothing reads
    it, so the setting would be silently ignored. ``+group=choice`` (a config group), top-level
    ``+note=...`` (kept in the stored config as an annotation) and ``++`` (force) are left alone."""
    from omegaconf import OmegaConf

    if not arg.startswith("+") or arg.startswith("++") or "=" not in arg:
        return None
    key = arg[1:].split("=", 1)[0]
    if (
        "." not in key
        or key.split(".")[0] in OPEN_SECTIONS
        or loader.get_group_options(key.replace(".", "/"))
    ):
        return None
    parent, leaf = key.rsplit(".", 1)
    node = OmegaConf.select(cfg, parent)
    known = sorted(k for k in (node.keys() if OmegaConf.is_dict(node) else []) if k != leaf)
    close = closest(leaf, known)
    hint = f"did you mean {parent}.{close}? " if close else ""
    return (
        f"bad override {arg}: {key} is not a setting, so nothing would read it; {hint}"
        f"settings under {parent}: {', '.join(known) or 'none'}"
    )


def compose_config(config_dir: Path | None, config_name: str, overrides: list[str], **kwargs: Any) -> Any:
    """``config_name`` from ``config_dir`` composed with ``overrides`` outside a Hydra app (tests,
    scripts); Hydra's global state is cleared before and after, so one composition never leaks into the
    next. ``kwargs`` go to ``hydra.compose`` (e.g. ``return_hydra_config=True``)."""
    from hydra import compose
    from hydra.core.global_hydra import GlobalHydra

    GlobalHydra.instance().clear()
    try:
        with _initialize(config_dir):
            return compose(config_name=config_name, overrides=list(overrides), **kwargs)
    finally:
        GlobalHydra.instance().clear()


def override_error(
    config_dir: Path | None, config_name: str, overrides: list[str], full: bool = True, secrets: bool = True
) -> str | None:
    """One line when ``overrides`` hold a credential (``secret_args_error``; only with ``secrets``), read the
    environment into a name (``env_name_error``), do not compose (``compose_error``; only with ``full``) or
    would steer Hydra's own folders (``hydra_dir_error``); None when they are fine."""
    if secrets and (err := secret_args_error(overrides)):
        return err
    if err := env_name_error(overrides):
        return err
    err, composed = _checked_compose(config_dir, config_name, overrides) if full else (None, None)
    return err or hydra_dir_error(config_dir, config_name, overrides, composed)


# A command whose config lives in Hydra's ConfigStore (a typed schema, no yaml) writes nothing of Hydra's own:
# no outputs/ folder, logging to the console only, as the yaml commands set in their files.
STRUCTURED_HYDRA = ("hydra.run.dir=.", "hydra.output_subdir=null", "hydra/job_logging=stdout",
                    "hydra/hydra_logging=none")  # fmt: skip


def run_command(
    config_name: str, task: Callable[[Any], int | None], argv: list[str] | None = None, *,
    structured: bool = False, prepare: Callable[[list[str]], list[str]] | None = None,
    output_folders: str | None = None, compose_check: bool = True, exit_on_error: bool = True,
    stop_on_sigterm: bool = False,
) -> int:  # fmt: skip
    """Start a command: the set-up every entry point shares, then ``task`` as a Hydra app of ``config_name``
    (``--help``, ``--cfg job``, ``-m`` and any override work as Hydra's); returns the task's exit status.

    In order, before Hydra makes a folder or anything heavy loads: ``prepare(argv)`` (the command's own checks
    of the raw arguments and rewrites; a UsageError is the one line), relative folders made absolute
    (``paths.absolutize_args``), the overrides checked (``override_error``: a credential, a typo or bad value,
    a name that would steer Hydra's folders; ``compose_check=False`` checks the folders only), and the
    environment's output folders (``output_dirs.env_folders_problem(output_folders)``). A problem is one
    ``error:`` line and exit status 2 (returned instead when ``exit_on_error`` is false: the table commands
    report their status to their caller). ``structured``: the config is a schema in Hydra's ConfigStore, not
    a yaml under conf/. ``stop_on_sigterm``: SIGTERM (a ``kill``, a scheduler) unwinds like Ctrl-C, so a
    pipeline stops its own children."""
    import functools
    import signal

    import hydra

    from pspo_repro.common import redact
    from pspo_repro.common.output_dirs import env_folders_problem
    from pspo_repro.common.paths import CONF_DIR, absolutize_args

    redact.install()  # no credential's value in anything this command prints or logs
    args = list(sys.argv[1:] if argv is None else argv)
    config_dir = None if structured else CONF_DIR
    try:
        args = absolutize_args(prepare(args) if prepare is not None else args)
    except UsageError as exc:
        err: str | None = str(exc)
    else:
        # A structured command's few keys are given once (no layer of defaults is overridden): a repeat
        # would silently take the last value.
        err = repeated_key_error(args) if structured else None
        hydra_args = [*STRUCTURED_HYDRA, *args] if structured else args
        # A structured command keeps no Hydra log of its command line (output_subdir null), and its outputs
        # are redacted, so a credential's value there reaches no file: only the yaml commands refuse it.
        err = err or override_error(
            config_dir, config_name, hydra_args, full=compose_check, secrets=not structured
        )
        err = err or (env_folders_problem(output_folders) if output_folders else None)
    if err:
        if exit_on_error:
            fail(err)
        print(f"error: {err}", file=sys.stderr, flush=True)
        return USAGE_EXIT
    if stop_on_sigterm:
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    status: list[int | None] = [0]

    @functools.wraps(task)  # Hydra names the job after the task's module, as before
    def run_task(cfg: Any) -> None:
        status[0] = task(cfg)

    saved = sys.argv
    sys.argv = [saved[0] if saved else config_name, *hydra_args]
    try:
        hydra.main(config_path=None if structured else str(CONF_DIR), config_name=config_name,
                   version_base="1.3")(run_task)()  # fmt: skip
    finally:
        sys.argv = saved
    return status[0] or 0


def repeated_key_error(args: list[str]) -> str | None:
    """The one line naming a key that ``args`` (``key=value`` overrides) give twice, else None; flags
    (``-m``, ``--cfg``) are not keys."""
    seen: dict[str, str] = {}
    for arg in args:
        if arg.startswith("-") or "=" not in arg:
            continue
        key = arg.split("=", 1)[0].lstrip("+~")
        if key in seen:
            return f"{key} given twice ({seen[key]!r}, then {arg!r}): give each setting once"
        seen[key] = arg
    return None


def required_error(cfg: Any, keys: tuple[str, ...]) -> str | None:
    """The one line naming the required ``keys`` of a small command that ``cfg`` leaves empty (None: none)."""
    missing = [k for k in keys if not cfg.get(k)]
    return f"{', '.join(missing)} required (key=<folder>)" if missing else None


# ${a.b} references in hydra.run.dir / hydra.sweep.dir / hydra.sweep.subdir (resolver calls are not names)
_MISSING = object()
_DIR_REF = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_.]*)\}")


def _job_overrides(overrides: list[str]) -> list[list[str]] | None:
    """The overrides of every job Hydra would start: one list for a single run, one per combination of
    the sweeps for ``-m`` (Hydra's basic sweeper's expansion); None when Hydra would refuse them anyway."""
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
    from hydra.core.override_parser.overrides_parser import OverridesParser

    plain = [a for a in overrides if not a.startswith("-")]
    if not any(a in ("-m", "--multirun") for a in overrides):
        return [plain]
    try:
        parsed = OverridesParser.create().parse_overrides(plain)
        return BasicSweeper.split_arguments(parsed, max_batch_size=None)[0]
    except Exception:  # a sweep Hydra cannot expand: Hydra reports it before it makes any folder
        return None


def _dir_value_error(key: str, value: Any, where: str) -> str | None:
    """Why ``value`` of config key ``key``, used in Hydra's folder ``where``, cannot be a folder name. A
    number or null cannot hold a separator (``seed=-1`` is left to the task's own message); text must
    follow ``safe_paths.check_name``."""
    from pspo_repro.common.safe_paths import UnsafePathError, check_name

    if not isinstance(value, str):
        return None
    try:
        check_name(key, value)
    except UnsafePathError as exc:
        return f"{exc} (it names Hydra's log folder, {where})"
    return None


def _override_dirname_error(dirname: str, where: str) -> str | None:
    """A ``..`` component in ``hydra.job.override_dirname`` (``run_tag=x/../../..``) moves the job's folder."""
    if ".." in dirname.replace("\\", "/").split("/"):
        return (
            f"bad override: a value with a '..' path component ({dirname!r}) would move Hydra's job folder "
            f"out of {where}; write the value without '..'"
        )
    return None


def hydra_dir_error(
    config_dir: Path | None,
    config_name: str,
    overrides: list[str],
    composed: tuple[list[str], Any] | None = None,
) -> str | None:
    """One line when a name Hydra builds its own output folder from is not a plain folder name, else None.

    Hydra makes ``hydra.run.dir`` (or, with ``-m``, ``hydra.sweep.dir`` and each job's ``hydra.sweep.subdir``)
    and writes ``.hydra/`` there before the task's own checks run: ``model.name=../../x`` would land it
    outside the log folder. Every config value those settings interpolate (``${model.name}``, ``${seed}``;
    ``paths.*`` is the root the user chose, other ``hydra.*`` values are Hydra's own) that is text must pass
    ``safe_paths.check_name``, for every job of a sweep; ``${hydra.job.override_dirname}``
    (the overrides, joined) must hold no ``..`` path component. A folder the user sets outright
    (``hydra.run.dir=/somewhere``) is theirs to choose. Configs that do not compose are left to Hydra, which
    refuses them before it makes a folder. ``composed``: (overrides, the config with Hydra's settings) already
    composed, reused for a job with those very overrides.
    """
    from omegaconf import OmegaConf

    jobs = _job_overrides(overrides)
    if not jobs:
        return None
    multirun = "-m" in overrides or "--multirun" in overrides
    keys = (("sweep", "dir"), ("sweep", "subdir")) if multirun else (("run", "dir"),)
    cfg, refs = None, []
    for i, job in enumerate(jobs):
        if i == 0 and composed is not None and composed[0] == job:
            cfg = composed[1]
        elif i == 0 or any(not ref.startswith(("hydra.", "paths.")) for _, ref in refs):
            try:
                cfg = compose_config(config_dir, config_name, job, return_hydra_config=True)
            except Exception:  # Hydra reports it (compose_error has, for a single run) before any folder
                return None
        if i == 0:
            raw = OmegaConf.to_container(cfg.hydra, resolve=False)
            refs = [
                (f"hydra.{a}.{b}", ref)
                for a, b in keys
                for ref in _DIR_REF.findall(str((raw.get(a) or {}).get(b, "")))
            ]
        for where, ref in refs:
            if ref == "hydra.job.override_dirname":
                err = _override_dirname_error(_override_dirname(job, cfg.hydra.job.config), where)
            elif ref.startswith(("hydra.", "paths.")):
                continue
            else:
                try:
                    value = OmegaConf.select(cfg, ref, default=_MISSING, throw_on_missing=True)
                except Exception as exc:  # ${oc.env:UNSET} and the like
                    return f"bad config value: {ref}: {first_line(exc)}"
                if value is _MISSING:
                    return f"bad config value: {where} refers to {ref}, which is not a setting"
                err = _dir_value_error(ref, value, where)
            if err:
                return err
    return None


def _override_dirname(job: list[str], job_config: Any) -> str:
    """``hydra.job.override_dirname`` of a job with overrides ``job`` (Hydra's own function and settings)."""
    from hydra._internal.config_loader_impl import get_overrides_dirname
    from hydra.core.override_parser.overrides_parser import OverridesParser

    parsed = [o for o in OverridesParser.create().parse_overrides(job) if not o.is_hydra_override()]
    opts = job_config.override_dirname
    return get_overrides_dirname(
        parsed, exclude_keys=list(opts.exclude_keys), item_sep=opts.item_sep, kv_sep=opts.kv_sep
    )


def run_writer(write: Any, *args: Any) -> int:
    """Run a table command's ``write(*args)`` (it returns the paths it wrote) as a CLI: each path on
    stdout, exit 0; a ValueError or KeyError (bad or missing records) is one ``error:`` line, exit 1; an
    OSError of the write (a full disk: ``atomic.write_set`` names the target and leaves the previous set) is
    one ``error:`` line, exit 2, as aggregate's."""
    try:
        paths = write(*args)
    except (ValueError, KeyError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except OSError as exc:
        print(f"error: cannot write the outputs: {exc.strerror or exc}", file=sys.stderr)
        return USAGE_EXIT
    for path in paths:
        print(f"wrote {path}")
    return 0
