"""Shared command-line helpers: bad input ends as one ``error: ...`` line and exit status 2.

Inside a multirun job that a launcher runs away from the driver process (``-m hydra/launcher=slurm``;
any launcher but ``basic``) ``fail`` raises ``UsageError`` with that line instead of exiting, so the
launcher reports the job as failed with the message (the Slurm driver: "failed (the task raised):
UsageError: ...") rather than a job that died without a result. The basic launcher runs jobs in the
driver itself, where one line and exit 2 is what the user sees, as in a single run.

Hydra reports a bad override (a typo in a key, a wrong type) in five lines ending with a hint about
``HYDRA_FULL_ERROR``; ``precheck_overrides`` composes the config first and turns that into one line that
names the override. No torch imports.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

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
    one_line = "; ".join(part.strip() for part in str(message).splitlines() if part.strip())
    if in_launcher_job():
        raise UsageError(one_line) from None
    print(f"error: {one_line}", file=sys.stderr, flush=True)
    sys.exit(USAGE_EXIT)


def refuse_secret_args(argv: list[str]) -> None:
    """Fail when a command-line argument holds a credential's value: Hydra saves the overrides in its log
    folder and wandb records the command line, so the value would reach files that redaction never sees."""
    from pspo_repro.redact import secret_names_in

    names = secret_names_in(argv)
    if names:
        fail(
            f"a command-line argument holds the value of {', '.join(names)}; pass credentials through the "
            f"environment only (e.g. ${{oc.env:{names[0]}}}): the command line is saved in logs"
        )


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
    if any(a.startswith("-") for a in overrides):
        return None
    plain = [
        a
        for a in overrides
        if not a.lstrip("+~").startswith(("hydra.", "hydra/"))
        or a.lstrip("+").startswith("hydra.searchpath=")
    ]
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(config_dir=str(config_dir), version_base="1.3"):
            # hydra/<group>=<choice> (launcher, sweeper): the choice must exist (conf/hydra/ or a plugin)
            loader = GlobalHydra.instance().config_loader()
            for arg in overrides:
                key, sep, value = arg.lstrip("+").partition("=")
                if key.startswith("hydra/") and sep and value not in ("null", ""):
                    options = sorted(loader.get_group_options(key))
                    if value not in options:
                        return f"unknown {key} {value!r}; options: {', '.join(options)}"
            compose(config_name=config_name, overrides=plain)
    except Exception as exc:  # Hydra/OmegaConf raise several types; all are bad input here
        msg = first_line(exc)
        cause = first_line(exc.__cause__)
        if cause and cause not in msg:
            msg = f"{msg.rstrip('.')}: {cause}"
        if "is not in struct" in msg:
            msg += " (a typo? prefix the key with + to add a new one)"
        return f"bad override: {msg}"
    finally:
        GlobalHydra.instance().clear()
    return None


def compose_config(config_dir: Path, config_name: str, overrides: list[str], **kwargs: Any) -> Any:
    """``config_name`` from ``config_dir`` composed with ``overrides`` outside a Hydra app (tests,
    scripts); Hydra's global state is cleared before and after, so one composition never leaks into the
    next. ``kwargs`` go to ``hydra.compose`` (e.g. ``return_hydra_config=True``)."""
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(config_dir=str(config_dir), version_base="1.3"):
            return compose(config_name=config_name, overrides=list(overrides), **kwargs)
    finally:
        GlobalHydra.instance().clear()


def precheck_overrides(config_dir: Path, config_name: str, overrides: list[str]) -> None:
    """Exit with a one-line error when ``overrides`` hold a credential (``refuse_secret_args``) or do not
    compose (see ``compose_error``)."""
    refuse_secret_args(overrides)
    err = compose_error(config_dir, config_name, overrides)
    if err:
        fail(err)
