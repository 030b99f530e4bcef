"""BAPO's per-batch bound search: where it stops, and the same bounds when a batch is split over two processes.

The loss and gradient against the authors' code are in ``tests/methods/test_authors_parity.py``.
"""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from pspo_repro.methods import get_method, get_spec
from pspo_repro.methods.bapo import bapo_candidates, bapo_search
from tests.methods.test_authors_parity import authors_bapo_bounds, batch

DEFAULT_PAIRS = bapo_candidates(0.6, 0.9, 0.05, 1.2, 3.0, 0.05)
TARGET = 1.0  # the default adv_ratio_target


def test_search_stops_at_the_first_pair_reaching_the_target():
    # one A = +1 token at r = 2.5, one A = -1 token at r = 1: N = 1 whatever c_low (<= 1), P = min(2.5, c_high).
    # Target 1.87: the start (0.6, 1.2) misses; c_low runs to 0.9 (no help: N stays 1), then c_high climbs by 0.05
    # to the first value past the target, 1.9 (off the grid: 1.2 + 14 x 0.05 is 1.8999999999999995 in floats).
    old = torch.zeros(2, 1, dtype=torch.float64)
    logp = torch.tensor([[2.5], [1.0]], dtype=torch.float64).log().requires_grad_(True)
    adv, mask = torch.tensor([1.0, -1.0], dtype=torch.float64), torch.ones(2, 1, dtype=torch.float64)
    out = get_method("bapo")(logp, old, adv, mask, adv_ratio_target=1.87)
    assert out.metrics["bound_low_raise"].item() == pytest.approx(0.3)
    assert out.metrics["bound_high_raise"].item() == pytest.approx(0.7)
    assert out.metrics["target_missed"].item() == 0.0
    assert out.metrics["pos_share"].item() == pytest.approx(1.9 / 2.9)
    out.per_token_loss.sum().backward()
    torch.testing.assert_close(
        out.per_token_loss.detach(), torch.tensor([[-1.9], [1.0]], dtype=torch.float64)
    )
    torch.testing.assert_close(logp.grad, torch.tensor([[0.0], [1.0]], dtype=torch.float64))  # clipped at 1.9
    # the same bounds as the authors' loops
    lo, hi = authors_bapo_bounds(old, logp.detach(), adv[:, None], mask, target=1.87)
    assert (lo, hi) == pytest.approx((0.9, 1.9))
    # a target no pair reaches: the last pair, flagged
    out = get_method("bapo")(logp.detach(), old, adv, mask, adv_ratio_target=5.0)
    assert out.metrics["bound_high_raise"].item() == pytest.approx(1.8)
    assert out.metrics["target_missed"].item() == 1.0


def test_default_target_is_the_papers_half_share_of_the_loss():
    # The paper's rho_0 = 0.5 is a share P / (P + N); the code's adv_ratio_target is P / N, so the default is 1.0.
    # One A = +2 token at r = 1.5 and three A = -0.95 tokens at r = 1: N = 3 x 0.95 = 2.85 whatever c_low (<= 1),
    # P = 2 min(1.5, c_high). At the start (0.6, 1.2): P = 2.4, P / N = 0.842, a share of 0.457 < 0.5. c_low runs
    # to 0.9 (N unchanged), then c_high climbs: 1.40 gives P = 2.8 < N, 1.45 gives P = 2.9 >= N (share 0.504).
    old = torch.zeros(4, 1, dtype=torch.float64)
    logp = torch.tensor([[1.5], [1.0], [1.0], [1.0]], dtype=torch.float64).log()
    adv = torch.tensor([2.0, -0.95, -0.95, -0.95], dtype=torch.float64)
    mask = torch.ones(4, 1, dtype=torch.float64)
    assert get_spec("bapo").defaults["adv_ratio_target"] == 1.0
    out = get_method("bapo")(logp, old, adv, mask)
    assert out.metrics["bound_low_raise"].item() == pytest.approx(0.3)
    assert out.metrics["bound_high_raise"].item() == pytest.approx(0.25)
    assert out.metrics["pos_share"].item() == pytest.approx(2.9 / 5.75)
    assert out.metrics["target_missed"].item() == 0.0
    torch.testing.assert_close(
        out.per_token_loss, torch.tensor([[-2.9], [0.95], [0.95], [0.95]], dtype=torch.float64)
    )
    # the old default, 0.5 read as P / N (a share of 1/3), is met at the start: c_high stays at 1.2
    out = get_method("bapo")(logp, old, adv, mask, adv_ratio_target=0.5)
    assert out.metrics["bound_high_raise"].item() == 0.0 and out.metrics["bound_low_raise"].item() == 0.0
    assert out.metrics["pos_share"].item() == pytest.approx(2.4 / 5.25)


def test_no_negative_contribution_keeps_the_start_bounds():
    # N == 0 is rho = inf (the authors' branch): the start pair, whatever the target
    old = torch.zeros(1, 3, dtype=torch.float64)
    logp = torch.tensor([[3.0, 0.5, 1.0]], dtype=torch.float64).log()
    bounds, sums = bapo_search(
        torch.exp(logp - old), torch.ones(1, 1), torch.ones(1, 3), DEFAULT_PAIRS, 100.0
    )
    assert bounds.tolist() == [0.6, 1.2] and sums[1].item() == 0.0


def _rank(rank: int, world: int, init: str, cases: list, results: dict) -> None:
    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=world)
    try:
        for i, halves in enumerate(cases):
            logp, old, adv, mask = halves[rank]
            x = logp.clone().requires_grad_(True)
            out = get_method("bapo")(x, old, adv, mask)
            out.per_token_loss.sum().backward()
            bounds, _ = bapo_search(torch.exp(logp - old), adv, mask, DEFAULT_PAIRS, TARGET)
            results[(i, rank)] = (bounds, out.per_token_loss.detach(), x.grad)
    finally:
        dist.destroy_process_group()


def test_two_processes_choose_the_single_process_bounds(tmp_path):
    """A batch split in two over two gloo processes: each half gets the bounds of the whole batch (the sums
    are all-reduced), and each half's loss and gradient are the whole batch's rows."""
    rows = (slice(0, 4), slice(4, 8))
    cases, wanted = [], []
    for seed in (1, 7):
        logp, old, adv, mask = batch(seed)
        full_bounds, _ = bapo_search(torch.exp(logp - old), adv, mask, DEFAULT_PAIRS, TARGET)
        x = logp.clone().requires_grad_(True)
        full = get_method("bapo")(x, old, adv, mask)
        full.per_token_loss.sum().backward()
        # the halves alone would choose other bounds, so a missing reduction cannot pass
        alone = [
            bapo_search(torch.exp(logp[s] - old[s]), adv[s], mask[s], DEFAULT_PAIRS, TARGET)[0] for s in rows
        ]
        assert any(not torch.equal(b, full_bounds) for b in alone)
        cases.append([tuple(t[s] for t in (logp, old, adv, mask)) for s in rows])
        wanted.append((full_bounds, full.per_token_loss.detach(), x.grad))

    results = mp.Manager().dict()
    # fork: the children need not import torch again (spawn costs ~10 s on two cores)
    mp.start_processes(
        _rank, args=(2, f"file://{tmp_path}/pg", cases, results), nprocs=2, start_method="fork"
    )
    for i, (full_bounds, full_loss, full_grad) in enumerate(wanted):
        for rank, r in enumerate(rows):
            bounds, loss, grad = results[(i, rank)]
            torch.testing.assert_close(bounds, full_bounds, atol=0, rtol=0)
            torch.testing.assert_close(loss, full_loss[r])
            torch.testing.assert_close(grad, full_grad[r])
