"""The ``train`` command's settings checks, read in one place: everything that can be checked without a
model, before the run folder exists or torch is imported (``training.grpo`` runs them first).

Unknown ``group=choice`` names on the command line (``check_group_choices``), the method's hyperparameters,
rewards and dataset (``validate``), the trainer's ranges (``validate_trainer``) and its boolean flags
(``validate_flags``). Each problem is a ``UsageError``: one line naming the setting, the value and what is
allowed.
"""

from __future__ import annotations

import sys
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from pspo_repro.common.cli import UsageError, check_number
from pspo_repro.common.names import did_you_mean, did_you_mean_after
from pspo_repro.common.paths import CONF_DIR
from pspo_repro.training import trainer_schema

# Config groups a user picks by name on the command line (group=choice).
CHOICE_GROUPS = (
    "model",
    "method",
    "reward",
    "data",
    "trainer",
    "logger",
    "paths",
    "experiment",
    "hparams_search",
)


def group_options(group: str, extra_dirs: tuple[Path, ...] = ()) -> list[str]:
    """Names of the ``<group>/*.yaml`` files in ``conf/`` and in ``extra_dirs`` (``hydra.searchpath``)."""
    return sorted({p.stem for d in (CONF_DIR, *extra_dirs) for p in (d / group).glob("*.yaml")})


def searchpath_dirs(argv: list[str]) -> tuple[Path, ...]:
    """The folders of a ``hydra.searchpath=[file://..., pkg://...]`` override on the command line."""
    import importlib.util

    dirs: list[Path] = []
    for arg in argv:
        key, _, value = arg.lstrip("+").partition("=")
        if key != "hydra.searchpath":
            continue
        for entry in value.strip("[]").split(","):
            scheme, _, rest = entry.strip().strip("'\"").partition("://")
            if scheme == "file":
                dirs.append(Path(rest))
            elif scheme == "pkg":
                head, _, tail = rest.partition("/")
                try:
                    spec = importlib.util.find_spec(head)
                except ImportError:  # a missing parent package: Hydra reports it
                    spec = None
                if spec and spec.submodule_search_locations:
                    dirs.append(Path(next(iter(spec.submodule_search_locations))) / tail)
    return tuple(dirs)


def check_group_choices(argv: list[str]) -> None:
    """Unknown ``group=choice`` on the command line -> UsageError listing the options (Hydra's own error is
    a multi-line 'Could not find' report)."""
    extra_dirs = searchpath_dirs(argv)
    for arg in argv:
        if "=" not in arg or arg.startswith("-"):
            continue
        key, value = arg.split("=", 1)
        key = key.lstrip("+")
        if key not in CHOICE_GROUPS or value in ("null", "") or "(" in value:
            continue  # sweep functions like choice(...)/range(...) are left to Hydra
        options = group_options(key, extra_dirs)
        for choice in value.split(","):
            if choice not in options:
                raise UsageError(
                    f"unknown {key} {choice!r}; {did_you_mean(choice, options)}options: {', '.join(options)}"
                )


def user_data_args(argv: list[str]) -> list[str]:
    """``data=<source>`` -> ``data=user data.source=<source>`` where the value is no ``conf/data`` config but
    names a file, a dataset folder or a hub id (``user_sets.looks_like_source``): a researcher names their
    set as TRL does, and conf/data/user.yaml holds its column map and answer kind."""
    from pspo_repro.data.user_sets import looks_like_source

    options = group_options("data", searchpath_dirs(argv))
    out = []
    for arg in argv:
        key, sep, value = arg.partition("=")
        if sep and key == "data" and value not in options and looks_like_source(value):
            if "'" in value or "," in value:  # Hydra would read a quote or a comma as syntax (a sweep)
                raise UsageError(f"data={value}: a source's name may not hold a quote or a comma")
            out += ["data=user", f"data.source='{value}'"]
        else:
            out.append(arg)
    return out


def lr_token_budget(t: DictConfig) -> int | None:
    """The token count at which the learning rate reaches 0 (``lr_horizon=run`` with a budget), else None
    (HF's own schedule over max_steps / num_train_epochs)."""
    if t.get("token_budget") and t.get("lr_horizon", "run") == "run":
        return int(t.token_budget)
    return None


def import_plugins(modules) -> None:
    """Import the ``plugins`` modules (user code that registers methods or rewards) before validation."""
    import importlib

    for name in modules:
        try:
            importlib.import_module(name)
        except ImportError as exc:
            raise UsageError(f"plugins: cannot import {name!r}: {exc}") from None


def validate(cfg: DictConfig):
    """Check everything that can be checked without a model; returns the parsed method config."""
    import_plugins(cfg.get("plugins") or [])
    # The settings' own ranges first: they need no torch, which the method registry imports, so a mistyped
    # seed or step count is reported at once.
    validate_trainer(cfg)
    validate_flags(cfg)
    from pspo_repro.methods import list_methods, parse_method_config
    from pspo_repro.scoring.rewards import get_reward

    name = cfg.method.get("name")
    if name not in list_methods():
        raise UsageError(
            f"unknown method {name!r}; {did_you_mean(name, list_methods())}options: {', '.join(list_methods())}"
        )
    method_cfg = OmegaConf.to_container(cfg.method, resolve=True)
    try:
        method = parse_method_config(method_cfg)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    funcs = list(cfg.reward.funcs)
    if not funcs:
        raise UsageError("reward.funcs is empty")
    for name in funcs:
        try:
            get_reward(name)
        except ValueError as exc:
            raise UsageError(str(exc)) from None
    warn_reward_data(cfg, funcs)
    weights = cfg.reward.get("weights")
    if weights is not None and len(weights) != len(funcs):
        raise UsageError(f"reward.weights has {len(weights)} entries for {len(funcs)} reward.funcs")
    from pspo_repro.data import datasets as data
    from pspo_repro.data.user_sets import UserSet

    try:
        if "source" in cfg.data.keys():  # a user's set: its name (the folder tag) settled here
            cfg.data.name = UserSet.from_config(cfg.data, "data", cfg.data.get("split") or "train").name
        else:
            data.get_spec(cfg.data.name)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    t = cfg.trainer
    G = t.num_generations
    if (t.per_device_train_batch_size * t.gradient_accumulation_steps) % G:
        raise UsageError(
            f"per_device_train_batch_size x gradient_accumulation_steps must be divisible by num_generations={G}"
        )
    if t.eval_steps and t.save_steps != t.eval_steps:
        # HF keeps the best checkpoint only if the best validation step was saved: with save_steps a larger
        # multiple of eval_steps a best validation between saves leaves no best checkpoint (or a stale one).
        raise UsageError(
            f"trainer.save_steps={t.save_steps} must equal trainer.eval_steps={t.eval_steps}: every validation"
            " must be a saved checkpoint for best-checkpoint selection"
        )
    # Resume regenerates the buffered rollout; it is exact only at a generation boundary.
    spg = t.steps_per_generation or t.gradient_accumulation_steps
    cycle = spg * method.num_iterations / t.gradient_accumulation_steps
    for key in ("save_steps", "stop_after_step"):
        v = t.get(key)
        if v and cycle >= 1 and v % cycle:
            raise UsageError(
                f"trainer.{key}={v} must be a multiple of {cycle:g} (one rollout reused num_iterations times)"
            )
    if t.token_budget is None and (t.max_steps is None or t.max_steps <= 0) and not t.num_train_epochs:
        raise UsageError("set trainer.token_budget, trainer.max_steps or trainer.num_train_epochs")
    if lr_token_budget(t) and t.lr_scheduler_type != "linear":
        raise UsageError(
            f"trainer.lr_horizon=run decays linearly to 0 at the token budget; trainer.lr_scheduler_type="
            f"{t.lr_scheduler_type} needs trainer.lr_horizon=epochs (or trainer.token_budget=null)"
        )
    method = method._replace(rollout_correction=effective_rollout_correction(cfg, method))
    check_old_logps(cfg, method)
    return method


def check_old_logps(cfg: DictConfig, method) -> None:
    """``trainer.old_logps=first_pass`` where the first pass cannot supply them: UsageError naming why."""
    t = cfg.trainer
    if t.get("old_logps", "auto") != "first_pass":
        return
    from pspo_repro.training.trainer_checks import first_pass_problem

    why = first_pass_problem(
        use_vllm=bool(t.use_vllm),
        rollout_correction_active=method.rollout_correction.active,
        method_name=method.name,
        beta=float(t.beta),
        gradient_accumulation_steps=int(t.gradient_accumulation_steps),
        steps_per_generation=t.steps_per_generation,
    )
    if why:
        raise UsageError(f"trainer.old_logps=first_pass: {why}; use recompute or auto")


def warn_reward_data(cfg: DictConfig, funcs: list[str]) -> None:
    """One ``warning:`` line when a reward that grades a final number only (``rewards.NUMBER_ONLY``, GSM8K's)
    trains on a data set whose own reward is not one (``data=math``: LaTeX answers it scores 0)."""
    from pspo_repro.scoring.rewards import NUMBER_ONLY

    default = OmegaConf.select(cfg, "data.default_reward")
    path = CONF_DIR / "reward" / f"{default}.yaml"
    if not default or not path.is_file():  # an unknown default is refused by reward_tag, naming it
        return
    default_funcs = OmegaConf.load(path).get("funcs") or []
    narrow = [f for f in funcs if f in NUMBER_ONLY]
    if narrow and not any(f in NUMBER_ONLY for f in default_funcs):
        print(
            f"warning: reward {', '.join(narrow)} grades a final number only (GSM8K's answers); data={cfg.data.name} "
            f"has answers it may score 0 (LaTeX); its own reward is {default}",
            file=sys.stderr,
            flush=True,
        )


# Settings that are booleans. Hydra passes ``trainer.eval_on_start=maybe`` (or ``yes``, ``1``) through as
# that string or number, which ``bool()`` reads as true: only true and false are accepted.
BOOL_KEYS = (
    "dry_run",
    *(f"trainer.{k}" for k in trainer_schema.flags()),
    "model.random_init",
    "model.trust_remote_code",
)
_ABSENT = object()


def validate_flags(cfg: DictConfig) -> None:
    """Boolean settings are true or false (``trainer.bf16`` also ``auto``), and ``trainer.eval_on_start``
    needs validation to be on; a key a config does not have is left alone."""
    for key in BOOL_KEYS:
        value = OmegaConf.select(cfg, key, default=_ABSENT)
        if value is not _ABSENT and not isinstance(value, bool):
            raise UsageError(f"{key} must be true or false, got {value!r}")
    bf16 = cfg.trainer.get("bf16", "auto")
    if bf16 != "auto" and not isinstance(bf16, bool):
        raise UsageError(f"trainer.bf16 must be auto, true or false, got {bf16!r}")
    head = cfg.trainer.get("logprob_head", "auto")
    if head not in ("auto", "fused", "plain"):
        raise UsageError(f"trainer.logprob_head must be auto, fused or plain, got {head!r}")
    draw = cfg.trainer.get("token_draw", "multinomial")
    if draw not in ("inverse_cdf", "multinomial"):
        raise UsageError(f"trainer.token_draw must be inverse_cdf or multinomial, got {draw!r}")
    old = cfg.trainer.get("old_logps", "auto")
    if old not in ("auto", "recompute", "first_pass"):
        raise UsageError(f"trainer.old_logps must be auto, recompute or first_pass, got {old!r}")
    if cfg.trainer.get("eval_on_start") and not cfg.trainer.get("eval_steps"):
        # HF validates only with an eval strategy: the step-0 point would silently not be logged.
        raise UsageError(
            "trainer.eval_on_start=true needs validation, but trainer.eval_steps=null means no validation; "
            "set trainer.eval_steps or trainer.eval_on_start=false"
        )


# TRL's advantage scaling (GRPOConfig.scale_rewards): group divides R - mean by the group's std (TRL's default,
# what the authors' code ran), batch by the batch's, none not at all (the paper text's A = R - mean R).
SCALE_REWARDS = ("group", "batch", "none")


def validate_trainer(cfg: DictConfig) -> None:
    """Ranges of the trainer, data and model settings, checked before anything loads or is written."""
    from pspo_repro.data.prompts import TEMPLATES

    t = cfg.trainer
    check_number("seed", cfg.get("seed"), int, low=0, high=2**32 - 1)  # numpy's and torch's seed range
    for key, m in trainer_schema.numbers():  # each number's range, declared once (training.trainer_schema)
        if key in t:
            check_number(f"trainer.{key}", t.get(key), m["kind"], low=m["low"], high=m["high"],
                         low_open=m["low_open"], null=m["null"])  # fmt: skip
    check_number("data.n_train", cfg.data.get("n_train"), int, low=1, null=True)
    check_number("data.n_val", cfg.data.get("n_val"), int, low=0, null=True)
    if t.get("scale_rewards", "group") not in SCALE_REWARDS:
        raise UsageError(
            f"trainer.scale_rewards must be one of {', '.join(SCALE_REWARDS)}, got {t.scale_rewards!r}"
            f"{did_you_mean_after(t.scale_rewards, SCALE_REWARDS)}"
        )
    if t.vllm_mode not in ("colocate", "server"):
        raise UsageError(f"trainer.vllm_mode must be colocate or server, got {t.vllm_mode!r}")
    if cfg.data.prompt_template not in TEMPLATES:
        raise UsageError(
            f"unknown data.prompt_template {cfg.data.prompt_template!r}; "
            f"{did_you_mean(cfg.data.prompt_template, TEMPLATES)}options: {', '.join(sorted(TEMPLATES))}"
        )
    from pspo_repro.training.models import train_dtype_name

    try:
        train_dtype_name(cfg.model)  # fp32 master weights unless model.train_dtype opts out
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    for key in ("path", "tokenizer"):
        value = cfg.model.get(key)
        # a local folder must exist (a tokenizer may also be a hub id: no slash-led or dotted path)
        if value and (key == "path" or str(value).startswith(("/", ".", "~"))):
            if not Path(str(value)).expanduser().is_dir():
                raise UsageError(f"model.{key}={value} is not a folder (a local model folder is expected)")
    if cfg.model.get("path"):
        # Weights load as safetensors only: a folder with a pickled checkpoint is refused here, before
        # the run folder exists, not as a traceback from from_pretrained after run.json says "running".
        from pspo_repro.common.run_dir import _safetensors_problem

        folder = Path(str(cfg.model.path)).expanduser()
        shards = sorted(folder.glob("*.safetensors"))
        if not shards:
            raise UsageError(
                f"model.path={cfg.model.path} has no *.safetensors weights (pickled weights are not loaded)"
            )
        for shard in shards:
            if why := _safetensors_problem(shard):
                raise UsageError(f"model.path={cfg.model.path}: {why}")


def effective_rollout_correction(cfg: DictConfig, method):
    """The rollout correction the run applies (``methods.rollout_correction``), or UsageError when it cannot.

    ``method.rollout_correction=none`` under vLLM with ``trainer.vllm_importance_sampling_correction=true``
    (TRL's default) is TRL's default correction, ``seq_mis`` at 3.0, computed by the same code as every mode.
    Refused: a correction without the sampler's log-probs (only vLLM returns them; tests set
    ``MethodGRPOTrainer.sampler_logps_hook``), a correction of vLLM samples drawn with top_p / top_k / min_p
    (vLLM's log-probs are renormalised over the kept tokens, the trainer's are not: TRL #6789, verl #6240),
    and a sequence-level IS mode for a method that folds the weight into its own (VESPO).
    """
    from pspo_repro.methods.rollout_correction import parse_rollout_correction

    t = cfg.trainer
    correction = method.rollout_correction
    if not correction.active and t.use_vllm and t.vllm_importance_sampling_correction:
        correction = parse_rollout_correction("seq_mis")
    if not correction.active:
        return correction
    what = f"method.rollout_correction={correction.describe()}"
    if not method.rollout_correction.active:
        what += " (under vLLM, TRL's default correction: trainer.vllm_importance_sampling_correction=true)"
    if not t.use_vllm:
        from pspo_repro.training.trainer import MethodGRPOTrainer

        if MethodGRPOTrainer.sampler_logps_hook is None:
            raise UsageError(
                f"{what} needs the sampler's log-probs, which only vLLM generation returns: set"
                " trainer.use_vllm=true (transformers' generate samples with the trainer's own weights)"
            )
    else:
        # the sampling settings that truncate the distribution (TRL passes these to vLLM); each off value
        off = {"top_p": (None, 1, 1.0), "top_k": (None, 0, -1), "min_p": (None, 0, 0.0)}
        truncated = [f"trainer.{k}={t.get(k)}" for k, values in off.items() if t.get(k) not in values]
        if truncated:
            raise UsageError(
                f"{what} with {', '.join(truncated)}: vLLM's log-probs are renormalised over the kept"
                " tokens and the trainer's are not (TRL #6789, verl #6240), so the ratio is biased; set"
                " trainer.top_p=1.0, or no correction (method.rollout_correction=none"
                " trainer.vllm_importance_sampling_correction=false)"
            )
    from pspo_repro.training.trainer_checks import check_rollout_correction

    try:
        check_rollout_correction(method.name, correction)
    except ValueError as exc:
        raise UsageError(f"{what}: {exc}") from None
    return correction
