"""``python -m pspo_repro.explore``: the CLI on a reduced setting, its checks, its errors and its figures."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import matplotlib.image
import numpy as np
import pytest
import torch

from pspo_repro.common.cli import compose_config
from pspo_repro.common.paths import PROJECT_ROOT

CONF = str(PROJECT_ROOT / "conf")
REDUCED = ["methods=[clip,pspo,sapo,dppo_binary_tv]", "epochs=6", "curves.points=121", "mask_points=41"]


def _cli(*overrides: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONHASHSEED": "0"}
    return subprocess.run(
        [sys.executable, "-m", "pspo_repro.explore", *overrides],
        cwd=PROJECT_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def _compose(*overrides: str):
    return compose_config(CONF, "explore", list(overrides))


def test_cli_reduced_run_passes_and_writes_readable_figures(tmp_path):
    out = tmp_path / "fig"
    proc = _cli(*REDUCED, f"out_dir={out}")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    assert not [x for x in lines if x.startswith("FAIL")]
    passed = [x for x in lines if x.startswith("PASS")]
    for claim in (
        "TV(pi~, pi_old) == (1-alpha)",
        "KL(pi~||pi_old) <= (1-alpha)",
        "pspo zero-grad fraction == 0",
        "clip zero-grad fraction becomes > 0",
        "grad(pspo) == (1-alpha) grad(noclip)",
    ):
        for bed in ("bandit", "sequence"):
            assert any(claim in x and f"[{bed}]" in x for x in passed), (claim, bed, proc.stdout)
    expected = [
        "method_clip",
        "method_pspo",
        "method_sapo",
        "method_dppo_binary_tv",
        "methods_overview",
        "dppo_masks",
        "testbed_bandit",
        "testbed_sequence",
    ]
    for stem in expected:
        for fmt in ("png", "pdf"):
            assert (out / f"{stem}.{fmt}").stat().st_size > 1000, stem
        img = matplotlib.image.imread(out / f"{stem}.png")
        assert img.ndim == 3 and img.shape[0] > 100 and img.shape[1] > 100
        assert np.ptp(img) > 0  # not a blank canvas
        assert (out / f"{stem}.pdf").read_bytes().startswith(b"%PDF")
    summary = (out / "explore_summary.md").read_text()
    assert "PASS [bandit] grad(pspo) == (1-alpha) grad(noclip)" in summary
    assert "(testbed_bandit.png)" in summary
    assert not list(out.glob("method_noclip.*"))  # only the selected methods are drawn


def test_cli_unknown_method_is_one_line_error_and_writes_nothing(tmp_path):
    from pspo_repro.methods import list_methods

    out = tmp_path / "nothing"
    proc = _cli("methods=[clip,bogus]", f"out_dir={out}")
    assert proc.returncode != 0
    err = proc.stderr.strip().splitlines()
    assert len(err) == 1, proc.stderr
    assert "bogus" in err[0] and all(m in err[0] for m in list_methods())
    assert not out.exists()
    assert not (PROJECT_ROOT / "outputs" / "explore").exists()


@pytest.mark.parametrize(
    "override, needle",
    [
        ("+method_params.sapo.tau_neg=-1", "tau_neg"),
        ("+method_params.sapo.bogus=1", "bogus"),
        ("alpha=1.5", "alpha"),
        ("optimizer=rmsprop", "optimizer"),
        ("bandit.reward=maybe", "reward"),
    ],
)
def test_bad_settings_exit_2_and_write_nothing(tmp_path, capsys, override, needle):
    from pspo_repro.explore.runner import run

    out = tmp_path / "nothing"
    assert run(_compose(override, f"out_dir={out}")) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and needle in err[0]
    assert not out.exists()


def test_a_failed_check_gives_exit_code_1(tmp_path, capsys):
    """One epoch never leaves clip's band (r == 1 on the first pass), so "clip ... becomes > 0" must FAIL."""
    from pspo_repro.explore.runner import run

    code = run(
        _compose("methods=[clip]", "epochs=1", "formats=[png]", "curves.points=31", f"out_dir={tmp_path}")
    )
    out = capsys.readouterr().out
    assert code == 1
    assert "FAIL [bandit] clip zero-grad fraction becomes > 0" in out
    assert "PASS [bandit] pspo zero-grad fraction == 0" in out


def test_gradient_scaling_check_detects_a_non_scaled_pair():
    """The check is not vacuous: clip's gradient is not (1 - alpha) x noclip's once ratios leave the band."""
    from pspo_repro.explore import checks
    from pspo_repro.explore.testbed import Tabular, TestbedSpec, train
    from pspo_repro.methods import list_methods, validate_params

    params = {m: validate_params(m, {}) for m in list_methods()}
    tb = Tabular(TestbedSpec("bandit", seq_len=1, vocab=8))
    batch = tb.sample_batch()
    hist = train(tb, batch, "noclip", params["noclip"], epochs=5, optimizer="adam", lr=0.1)
    assert checks.check_gradient_scaling(tb, batch, hist, params, "t").passed
    assert not checks.check_gradient_scaling(tb, batch, hist, params, "t", method="clip").passed
    # and the zero-gradient check flags a "pspo" run that zeroes gradients (here: clip's trace)
    clipped = train(tb, batch, "clip", params["clip"], epochs=5, optimizer="adam", lr=0.1)
    assert max(clipped.zero_grad_frac) > 0
    assert not checks.check_zero_grads({"pspo": clipped}, "t")[0].passed


def test_smoothing_contraction_check_reads_pi_tilde_from_the_library():
    """The TV/KL check takes pi~ from the registered method: pspo passes, noclip (pi~ = pi) must fail."""
    from pspo_repro.explore import checks
    from pspo_repro.explore.testbed import Tabular, TestbedSpec, train
    from pspo_repro.methods import list_methods, validate_params

    params = {m: validate_params(m, {}) for m in list_methods()}
    params["pspo"]["alpha"] = 0.3
    tb = Tabular(TestbedSpec("seq", seq_len=2, vocab=5))
    hist = train(tb, tb.sample_batch(), "pspo", params["pspo"], epochs=4, optimizer="adam", lr=0.2)
    p = torch.softmax(hist.logits[-1], -1)
    q = torch.softmax(tb.behaviour_logits, -1)
    smooth = checks.library_smoothed_policy(p, q, params["pspo"])
    assert torch.allclose(smooth, 0.7 * p + 0.3 * q, atol=1e-12)
    assert all(c.passed for c in checks.check_smoothing_contraction(tb, hist, params, "t"))
    tv, _ = checks.check_smoothing_contraction(tb, hist, params, "t", method="noclip")
    assert not tv.passed and "pi~ from noclip" in tv.name


def test_probe_matches_the_unclipped_gradient_and_clip_band():
    """Probes read the registry: noclip's gradient weight is r A; clip's is zero exactly outside its band."""
    from pspo_repro.explore.probe import ratio_curves
    from pspo_repro.methods import validate_params

    c = ratio_curves("noclip", {}, points=301)
    np.testing.assert_allclose(c.grad[1], c.ratio, rtol=1e-12)
    np.testing.assert_allclose(c.grad[-1], -c.ratio, rtol=1e-12)
    p = validate_params("clip", {})
    k = ratio_curves("clip", p, points=301)
    np.testing.assert_array_equal(k.grad[1] == 0, k.ratio > 1 + p["eps_high"])
    np.testing.assert_array_equal(k.grad[-1] == 0, k.ratio < 1 - p["eps_low"])


def test_default_config_composes():
    cfg = _compose()
    assert cfg.methods is None and cfg.optimizer in ("adam", "sgd") and list(cfg.formats) == ["png", "pdf"]
    assert Path(CONF, "explore.yaml").is_file()
