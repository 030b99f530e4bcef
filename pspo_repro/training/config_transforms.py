"""How a composed ``train`` config becomes this run's settings, before anything is checked (no torch): the
experiment files' per-method values merged in (``variant=as_run``: the values the authors' released script
ran, in a folder tagged ``as_run``), and the run's length (``trainer.length=as_run``: the script's 3 epochs,
no token budget). A key set on the command line always wins; a bad choice is a one-line UsageError.
"""

from __future__ import annotations

from omegaconf import DictConfig, OmegaConf

from pspo_repro.common.cli import UsageError
from pspo_repro.common.names import did_you_mean

VARIANTS = ("intended", "as_run")


def apply_per_method(cfg: DictConfig, overrides: list[str]) -> None:
    """Merge ``per_method[<method.name>]`` (experiment files) into cfg, except keys set on the command line.

    ``variant=as_run`` then merges ``per_method_as_run[<method.name>]`` (the values the authors' released
    script actually ran) and adds ``as_run`` to ``run_tag``, so those runs get their own folders.
    """
    variant = cfg.get("variant") or "intended"
    if variant not in VARIANTS:
        raise UsageError(
            f"unknown variant {variant!r}; {did_you_mean(variant, VARIANTS)}options: {', '.join(VARIANTS)}"
        )
    tables = [cfg.get("per_method")]
    if variant == "as_run":
        as_run = cfg.get("per_method_as_run") or {}
        if cfg.method.name not in as_run:
            have = ", ".join(as_run) or "none (choose an experiment=paper_* file)"
            raise UsageError(
                f"variant=as_run has no values for method {cfg.method.name!r}; methods with an as-run variant: {have}"
            )
        tables.append(as_run)
        cfg.run_tag = "-".join(t for t in (cfg.get("run_tag") or "", "as_run") if t)
    given = {ov.split("=", 1)[0].lstrip("+~") for ov in overrides}
    for table in tables:
        if not table or cfg.method.name not in table:
            continue
        entry = OmegaConf.to_container(table[cfg.method.name], resolve=True)
        for group, values in entry.items():
            for key, value in values.items():
                if f"{group}.{key}" not in given:
                    OmegaConf.update(cfg, f"{group}.{key}", value, force_add=True)


RUN_LENGTHS = ("token_budget", "as_run")
LR_HORIZONS = ("run", "epochs")
# The authors' script sets no num_train_epochs, so it trains HF's default of 3 epochs (with no token budget).
AS_RUN_EPOCHS = 3


def apply_run_length(cfg: DictConfig, overrides: list[str]) -> None:
    """``trainer.length=as_run``: the authors' script's length (3 epochs, no token budget) instead of the
    paper text's token budget; a token budget or step count on the command line beside it is an error."""
    t = cfg.trainer
    length = t.get("length", "token_budget")
    if length not in RUN_LENGTHS:
        raise UsageError(
            f"unknown trainer.length {length!r}; {did_you_mean(length, RUN_LENGTHS)}options: {', '.join(RUN_LENGTHS)}"
        )
    if t.get("lr_horizon", "run") not in LR_HORIZONS:
        raise UsageError(
            f"unknown trainer.lr_horizon {t.get('lr_horizon')!r}; {did_you_mean(t.get('lr_horizon'), LR_HORIZONS)}"
            f"options: {', '.join(LR_HORIZONS)}"
        )
    if length != "as_run":
        return
    given = {ov.split("=", 1)[0].lstrip("+~") for ov in overrides}
    clash = sorted(given & {"trainer.token_budget", "trainer.max_steps", "trainer.num_train_epochs"})
    if clash:
        raise UsageError(
            f"trainer.length=as_run sets the script's length ({AS_RUN_EPOCHS} epochs, no token budget); "
            f"drop {', '.join(clash)}"
        )
    t.token_budget = None
    t.max_steps = -1
    t.num_train_epochs = AS_RUN_EPOCHS
