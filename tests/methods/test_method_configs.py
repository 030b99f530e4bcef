"""conf/method/*.yaml and the registry agree; parameters validate with one-line errors."""

from __future__ import annotations

from pathlib import Path

import pytest
from omegaconf import OmegaConf

from pspo_repro.common.cli import compose_config
from pspo_repro.common.paths import PROJECT_ROOT
from pspo_repro.methods import (
    AGGREGATION_MODES,
    METHOD_ALIASES,
    RESERVED_KEYS,
    get_method,
    get_spec,
    list_methods,
    method_aliases,
    parse_method_config,
    validate_params,
)

CONF = PROJECT_ROOT / "conf" / "method"
# a method's own config; an alias's file only names its method in a defaults list
YAMLS = sorted(p for p in CONF.glob("*.yaml") if p.stem not in METHOD_ALIASES)
ALIAS_YAMLS = sorted(p for p in CONF.glob("*.yaml") if p.stem in METHOD_ALIASES)
# Methods whose yaml default aggregation is not the paper's shared "dapo", and why (the yaml comment says it too)
OWN_AGGREGATION = {
    "luspo": "luspo",  # LUSPO is GSPO's loss with its own (length-scaled) aggregation
    "geo_mean": "grpo",  # verl's GMPO averages over sequences whatever loss_agg_mode says
}


def load(path: Path) -> dict:
    return OmegaConf.to_container(OmegaConf.load(path), resolve=True)


def test_registry_and_configs_hold_the_same_names():
    assert sorted(p.stem for p in YAMLS) == list_methods()
    assert [p.stem for p in ALIAS_YAMLS] == list(method_aliases()) == ["kimi15", "kimi_k25"]


def _method_section(name: str) -> dict:
    return OmegaConf.to_container(compose_config(PROJECT_ROOT / "conf", "train", [f"method={name}"]).method)


@pytest.mark.parametrize(("alias", "target"), sorted(METHOD_ALIASES.items()))
def test_an_alias_is_its_method_and_no_second_registry_entry(alias, target):
    assert alias not in list_methods() and target in list_methods()
    assert get_method(alias) is get_method(target) and get_spec(alias) is get_spec(target)
    assert validate_params(alias, {}) == validate_params(target, {})
    # method=<alias> composes the target's config: same name (so the same run folder), parameters and settings
    composed = _method_section(alias)
    assert composed == _method_section(target) and composed["name"] == target
    assert parse_method_config(composed) == parse_method_config(_method_section(target))
    # the alias file holds no setting of its own that could drift from the target's
    assert OmegaConf.to_container(OmegaConf.load(CONF / f"{alias}.yaml")) == {"defaults": [target, "_self_"]}


def test_the_leaderboard_sweeps_no_alias():
    from pspo_repro.pipelines import grid  # noqa: F401  (registers the ${registered_methods:} resolver)

    cfg = compose_config(PROJECT_ROOT / "conf", "mini", ["pipeline=leaderboard"])
    assert list(cfg.eval.methods) == list_methods()
    assert not set(cfg.eval.methods) & set(METHOD_ALIASES)


def test_unknown_method_error_names_the_aliases():
    # the closest name first (an alias counts), then the full lists
    with pytest.raises(
        ValueError,
        match=r"unknown method 'kimi'; did you mean kimi15\? valid methods: .*; aliases: kimi15 \(dro\)",
    ):
        get_spec("kimi")


@pytest.mark.parametrize("path", YAMLS, ids=lambda p: p.stem)
def test_yaml_matches_function_signature(path):
    cfg = load(path)
    assert cfg["name"] == path.stem
    params = {k: v for k, v in cfg.items() if k not in RESERVED_KEYS}
    spec = get_spec(cfg["name"])
    assert set(params) == set(spec.defaults), "yaml parameters must be the function's keyword parameters"
    assert params == spec.defaults, "yaml defaults and function defaults must agree (one source of truth)"
    assert validate_params(cfg["name"], params) == params
    parsed = parse_method_config(cfg)
    assert parsed.loss_agg == OWN_AGGREGATION.get(path.stem, "dapo") and parsed.loss_agg in AGGREGATION_MODES
    assert parsed.num_iterations == (1 if path.stem == "noclip" else 2)


@pytest.mark.parametrize("path", YAMLS, ids=lambda p: p.stem)
def test_every_parameter_has_a_source_comment(path):
    keys = {k for k in load(path) if k != "name"}
    for line in path.read_text().splitlines():
        key = line.split(":", 1)[0].strip()
        if key in keys:
            assert "#" in line, f"{path.name}: {key} needs a comment quoting its source"


def test_validate_params_applies_defaults():
    assert validate_params("pspo", {}) == {"alpha": 0.1}
    assert validate_params("clip", {"eps_high": 0.28}) == {"eps_low": 0.2, "eps_high": 0.28, "delta": None}
    assert validate_params("noclip", {}) == {}
    assert validate_params("dppo_topk_tv", {"topk": 5})["topk"] == 5


@pytest.mark.parametrize(
    ("name", "params", "fragment"),
    [
        ("pspo", {"alpha": 1.5}, "alpha=1.5 is invalid; allowed: alpha is a number in [0, 1]"),
        ("pspo", {"alpha": -0.1}, "alpha=-0.1"),
        ("pspo", {"alpha": "0.1"}, "alpha='0.1'"),
        ("pspo", {"alpha": float("nan")}, "alpha=nan"),
        ("sapo", {"tau_pos": 0.0}, "tau_pos=0.0 is invalid; allowed: tau_pos is a number > 0"),
        ("sapo", {"tau_neg": -1}, "tau_neg=-1"),
        ("p3o", {"tau": 0}, "tau=0"),
        ("p3o", {"kl_coef": -0.1}, "kl_coef=-0.1"),
        ("clip", {"eps_low": -0.2}, "eps_low=-0.2 is invalid; allowed: eps_low is a number >= 0"),
        ("clip", {"delta": -1.0}, "delta=-1.0 is invalid; allowed: delta is null or a number >= 0"),
        ("cispo", {"eps_high": -5}, "eps_high=-5"),
        ("gspo", {"eps_high": True}, "eps_high=True"),
        ("dppo_binary_tv", {"delta_low": -0.1}, "delta_low=-0.1"),
        (
            "dppo_binary_kl",
            {"ratio_cap": 0.0},
            "ratio_cap=0.0 is invalid; allowed: ratio_cap is a number > 0",
        ),
        ("dppo_topk_kl", {"topk": 0}, "topk=0 is invalid; allowed: topk is an integer >= 1"),
        ("dppo_topk_kl", {"topk": 2.5}, "topk=2.5"),
        (
            "clip_cov",
            {"clip_cov_ratio": 0.0},
            "clip_cov_ratio=0.0 is invalid; allowed: clip_cov_ratio is a number in (0, 1]",
        ),
        ("kl_cov", {"kl_cov_ratio": 1.5}, "kl_cov_ratio=1.5"),
        ("kl_cov", {"kl_coef": -1.0}, "kl_coef=-1.0"),
        ("clip_cov", {"cov_ub": float("inf")}, "cov_ub=inf is invalid; allowed: cov_ub is a finite number"),
        ("dro", {"dro_beta": 0.0}, "dro_beta=0.0 is invalid; allowed: dro_beta is a number > 0"),
        ("vespo", {"lambda_neg": 0}, "lambda_neg=0 is invalid; allowed: lambda_neg is a number > 0"),
        ("vespo", {"k_pos": -1.0}, "k_pos=-1.0"),
        ("geo_mean", {"eps_high": -0.4}, "eps_high=-0.4"),
        ("vespo", {"importance_sampling_ratio": 1.0}, "unknown parameter(s) importance_sampling_ratio"),
        ("gpg", {"eps": 0.2}, "unknown parameter(s) eps; allowed: none"),
        ("pspo", {"eps": 0.2}, "unknown parameter(s) eps; allowed: alpha"),
        ("noclip", {"alpha": 0.1}, "unknown parameter(s) alpha; allowed: none"),
        ("clip", {"epsilon": 0.2}, "allowed: delta, eps_high, eps_low"),
    ],
)
def test_bad_values_raise_one_line_errors(name, params, fragment):
    with pytest.raises(ValueError) as err:
        validate_params(name, params)
    message = str(err.value)
    assert "\n" not in message
    assert fragment in message
    assert name in message


@pytest.mark.parametrize(
    ("name", "params", "message"),
    [
        (
            "bapo",
            {"ratio_lower_start": 0.95},
            "method 'bapo': ratio_lower_start=0.95 is above ratio_lower_max=0.9; "
            "allowed: ratio_lower_start <= ratio_lower_max",
        ),
        (
            "bapo",
            {"ratio_upper_start": 3.5},
            "ratio_upper_start=3.5 is above ratio_upper_max=3.0; allowed: ratio_upper_start <= ratio_upper_max",
        ),
        (
            "bapo",
            {"ratio_upper_max": 1.1},
            "ratio_upper_start=1.2 is above ratio_upper_max=1.1",
        ),
        (
            "erc",
            {"entropy_ratio_low": 1.1},
            "method 'erc': entropy_ratio_low=1.1 is not below entropy_ratio_high=1.05; "
            "allowed: entropy_ratio_low < entropy_ratio_high",
        ),
        ("erc", {"entropy_ratio_low": 1.05}, "entropy_ratio_low=1.05 is not below entropy_ratio_high=1.05"),
        ("clip_cov", {"cov_lb": 5.0}, "cov_lb=5.0 is not below cov_ub=5.0; allowed: cov_lb < cov_ub"),
    ],
)
def test_pairs_out_of_order_are_refused_in_one_line(name, params, message):
    with pytest.raises(ValueError) as err:
        validate_params(name, params)
    assert "\n" not in str(err.value) and message in str(err.value)


def test_pairs_at_their_limit_are_accepted():
    # a start equal to its maximum: that side of BAPO's search does not move
    full = validate_params("bapo", {"ratio_lower_start": 0.9, "ratio_upper_start": 3.0})
    assert (full["ratio_lower_start"], full["ratio_upper_max"]) == (0.9, 3.0)
    band = validate_params("erc", {"entropy_ratio_low": 0.0, "entropy_ratio_high": 1e-6})
    assert (band["entropy_ratio_low"], band["entropy_ratio_high"]) == (0.0, 1e-6)


def test_parse_method_config_errors():
    cfg = load(CONF / "pspo.yaml")
    with pytest.raises(ValueError, match="loss_agg='mean' is invalid"):
        parse_method_config({**cfg, "loss_agg": "mean"})
    with pytest.raises(ValueError, match="num_iterations=0"):
        parse_method_config({**cfg, "num_iterations": 0})
    with pytest.raises(ValueError, match="lacks required key"):
        parse_method_config({"name": "pspo"})
    with pytest.raises(ValueError, match="unknown method 'ppo'"):
        parse_method_config({**cfg, "name": "ppo"})
