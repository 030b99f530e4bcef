"""The explorer's job: validate the request, probe the registry, run the testbeds, check, then write."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any, NamedTuple

import torch
from omegaconf import DictConfig, OmegaConf

from pspo_repro.common.names import did_you_mean_each
from pspo_repro.common.paths import PROJECT_ROOT
from pspo_repro.explore import checks as C
from pspo_repro.explore import plots
from pspo_repro.explore.probe import mask_grid, ratio_curves
from pspo_repro.explore.summary import write_summary
from pspo_repro.explore.testbed import Tabular, TestbedSpec, make_optimizer, train
from pspo_repro.methods import list_methods, validate_params

# Figure order: the paper's comparison first, then the other methods (any newly registered one: sorted, last).
ORDER = (
    "noclip",
    "clip",
    "pspo",
    "sapo",
    "p3o",
    "topr",
    "gspo",
    "cispo",
    "dppo_binary_tv",
    "dppo_binary_kl",
    "dppo_topk_tv",
    "dppo_topk_kl",
    # verl's and TRL's remaining policy losses
    "gpg",
    "dro",
    "clip_cov",
    "kl_cov",
    "geo_mean",
    "vespo",
    "luspo",
)
# Parameters that only the ratio-curve figures override, because a probe cannot show the default otherwise:
# KL-Cov penalises the top kl_cov_ratio fraction of tokens by covariance with A, and on a probe grid (one
# advantage, so covariance 0 everywhere) that pick is an arbitrary tie-break. kl_cov_ratio = 1 draws a penalised
# token (the title says so); an unpenalised one follows noclip's curve. Clip-Cov needs no override: with zero
# covariance no token is a candidate, so its curve is PPO's for an undetached token (a detached one is flat 0).
# AReaL's decoupled PPO rejects tokens with pi / pi_behav above behav_imp_weight_cap (5), beyond the plotted r <= 3:
# its figure draws the cap at 2 (the title shows it).
FIGURE_PARAMS: dict[str, dict[str, Any]] = {
    "kl_cov": {"kl_cov_ratio": 1.0},
    "decoupled_ppo": {"behav_imp_weight_cap": 2.0},
}
# The methods the checks need; run on the testbeds even when not selected for the figures.
CHECK_METHODS = ("clip", "noclip", "pspo")


class UsageError(ValueError):
    """A bad request: reported in one line, exit code 2, nothing written."""


def resolve(cfg: DictConfig) -> tuple[list[str], dict[str, dict[str, Any]]]:
    """Selected method names and validated parameters of every registered method (defaults + overrides)."""
    registered = list_methods()
    if cfg.methods is not None:
        selected = list(cfg.methods)
    else:
        selected = [m for m in ORDER if m in registered] + [m for m in registered if m not in ORDER]
    unknown = [m for m in selected if m not in registered]
    overrides = OmegaConf.to_container(cfg.method_params, resolve=True) or {}
    unknown += [m for m in overrides if m not in registered and m not in unknown]
    if unknown:
        raise UsageError(
            f"unknown method(s) {', '.join(map(str, unknown))}; {did_you_mean_each(unknown, registered)}"
            f"registered: {', '.join(registered)}"
        )
    if not selected:
        raise UsageError(f"methods is empty; registered: {', '.join(registered)}")
    if len(set(selected)) != len(selected):
        raise UsageError(f"methods lists a name twice: {selected}")
    params = {}
    for name in registered:
        given = dict(overrides.get(name) or {})
        if name == "pspo" and cfg.alpha is not None:
            given["alpha"] = cfg.alpha
        try:
            params[name] = validate_params(name, given)
        except ValueError as err:
            raise UsageError(str(err)) from None
    return selected, params


def _spec(name: str, node: DictConfig, seed: int) -> TestbedSpec:
    return TestbedSpec(name=name, seed=seed, **OmegaConf.to_container(node, resolve=True))


class _Probes(NamedTuple):
    """The probe step's output: figure parameters, ratio curves, noclip's reference curve, DPPO grids."""

    fig_params: dict[str, dict[str, Any]]
    curves: dict[str, Any]
    ref: Any
    grids: dict[str, Any]


def run(cfg: DictConfig, overrides: list[str] | None = None) -> int:
    """Return the exit code: 0 all checks pass, 1 a check failed, 2 a bad request (nothing written)."""
    start = time.perf_counter()
    try:
        selected, params, specs, testbeds = _validate_request(cfg)
    except (UsageError, ValueError, TypeError) as err:
        print(f"explore: {err}", file=sys.stderr)
        return 2

    torch.manual_seed(cfg.seed)
    alpha = params["pspo"]["alpha"]
    probes = _probe(cfg, selected, params)
    results, all_checks = _run_testbeds(cfg, specs, testbeds, selected, params)

    out_dir = Path(cfg.out_dir) if cfg.out_dir is not None else PROJECT_ROOT / "docs" / "figures"
    out_dir.mkdir(parents=True, exist_ok=True)
    figures = _save_figures(cfg, out_dir, selected, params, probes, results)

    for c in all_checks:
        print(c.line())
    runtime = time.perf_counter() - start
    settings = {
        "methods": ",".join(selected),
        "alpha": alpha,
        "optimizer": cfg.optimizer,
        "lr": cfg.lr,
        "epochs": cfg.epochs,
        "seed": cfg.seed,
    }
    write_summary(
        out_dir / "explore_summary.md",
        overrides=overrides or [],
        settings=settings,
        checks=all_checks,
        tables=results,
        figures=figures,
        runtime_s=runtime,
    )
    failed = [c for c in all_checks if not c.passed]
    print(
        f"explore: {len(all_checks) - len(failed)}/{len(all_checks)} checks passed; wrote {len(figures)} figures "
        f"and explore_summary.md to {out_dir} in {runtime:.1f} s"
    )
    return 1 if failed else 0


def _validate_request(
    cfg: DictConfig,
) -> tuple[list[str], dict[str, dict[str, Any]], list[TestbedSpec], list]:
    """Step 1: check the methods, epochs and optimizer and build the testbeds (raises on a bad request)."""
    selected, params = resolve(cfg)
    if cfg.epochs < 1:
        raise UsageError(f"epochs={cfg.epochs} is invalid; allowed: an integer >= 1")
    make_optimizer(cfg.optimizer, [torch.zeros(1, requires_grad=True)], 0.1)  # validates the name
    specs = [_spec("bandit", cfg.bandit, cfg.seed), _spec("sequence", cfg.sequence, cfg.seed + 1)]
    testbeds = [Tabular(s) for s in specs]
    return selected, params, specs, testbeds


def _probe(cfg: DictConfig, selected: list[str], params: dict[str, dict[str, Any]]) -> _Probes:
    """Step 2: each selected method's ratio curves (noclip's as reference) and the DPPO mask grids."""
    fig_params = {m: {**params[m], **FIGURE_PARAMS.get(m, {})} for m in params}
    curves = {m: ratio_curves(m, fig_params[m], cfg.curves.points, cfg.curves.r_max) for m in selected}
    ref = curves.get("noclip") or ratio_curves(
        "noclip", params["noclip"], cfg.curves.points, cfg.curves.r_max
    )
    dppo = [m for m in selected if m.startswith("dppo_binary")]
    dppo += [m for m in selected if m.startswith("dppo_topk") and m.replace("topk", "binary") not in dppo]
    grids = {m: mask_grid(m, params[m], cfg.mask_points) for m in dppo}
    return _Probes(fig_params, curves, ref, grids)


def _run_testbeds(
    cfg: DictConfig, specs: list[TestbedSpec], testbeds: list[Tabular], selected: list[str], params
) -> tuple[list, list]:
    """Step 3: train the methods on each testbed and run the checks; returns (results, checks)."""
    results, all_checks = [], []
    train_methods = selected + [m for m in CHECK_METHODS if m not in selected]
    for spec, tb in zip(specs, testbeds, strict=True):
        batch = tb.sample_batch()
        runs = {
            m: train(tb, batch, m, params[m], epochs=cfg.epochs, optimizer=cfg.optimizer, lr=cfg.lr)
            for m in train_methods
        }
        all_checks += C.check_smoothing_contraction(tb, runs["pspo"], params, spec.name)
        all_checks += C.check_zero_grads(runs, spec.name)
        all_checks.append(C.check_gradient_scaling(tb, batch, runs["pspo"], params, spec.name))
        all_checks.append(C.check_library_zero_grad_metric(runs, spec.name))
        if spec.name == "bandit":
            all_checks += C.check_optimizer_equivalence(tb, batch, params, cfg.epochs, cfg.lr, spec.name)
        results.append((spec, {m: runs[m] for m in selected}))
    all_checks += C.check_dppo_topk_reduces_to_binary({m: params[m] for m in selected})
    return results, all_checks


def _save_figures(
    cfg: DictConfig, out_dir: Path, selected: list[str], params, probes: _Probes, results: list
) -> list:
    """Step 4: write the per-method, overview, DPPO-mask and testbed figures; returns their paths."""
    fig_params, curves, ref, grids = probes
    fmt, dpi = list(cfg.formats), cfg.dpi
    figures = []
    for m in selected:
        figures += plots.save(
            plots.method_figure(m, fig_params[m], curves[m], ref), out_dir, f"method_{m}", fmt, dpi
        )
    figures += plots.save(
        plots.overview_figure(curves, fig_params, ref), out_dir, "methods_overview", fmt, dpi
    )
    if grids:
        figures += plots.save(plots.dppo_mask_figure(grids, params), out_dir, "dppo_masks", fmt, dpi)
    for spec, runs in results:
        title = (
            f"{spec.name} testbed: {cfg.optimizer} lr={cfg.lr:g}, {cfg.epochs} epochs on one batch of "
            f"{spec.num_groups * spec.group_size} (seq_len {spec.seq_len}, vocab {spec.vocab}, reward {spec.reward})"
        )
        figures += plots.save(plots.testbed_figure(runs, title), out_dir, f"testbed_{spec.name}", fmt, dpi)
    return figures
