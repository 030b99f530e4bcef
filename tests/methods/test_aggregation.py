"""Aggregation modes against hand-computed values (TRL 1.16 normalisers)."""

from __future__ import annotations

import pytest
import torch

from pspo_repro.methods import AGGREGATION_MODES, aggregate

# L = [[1, 2, 3], [4, 5, 6]], mask drops the 6: unmasked sum = 1+2+3+4+5 = 15 over 5 tokens
L = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
M = torch.tensor([[1, 1, 1], [1, 1, 0]])


def test_modes_listed():
    assert AGGREGATION_MODES == (
        ("bnpo", "dapo", "dr_grpo", "grpo", "luspo")
        + ("seq-mean-token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm", "token-sum")
    )


@pytest.mark.parametrize(
    ("mode", "kwargs", "expected"),
    [
        ("dapo", {}, 3.0),  # 15 / 5
        ("dapo", {"num_items": 10.0}, 1.5),  # 15 / 10
        ("dapo", {"num_items": torch.tensor(7.5)}, 2.0),  # 15 / 7.5
        ("dapo", {"accumulation_steps": 4.0}, 3.0),  # GA lives in num_items for dapo: not applied again
        ("grpo", {}, 3.25),  # mean(6/3, 9/2) = mean(2, 4.5)
        ("grpo", {"accumulation_steps": 2.0}, 1.625),
        ("dr_grpo", {"max_completion_length": 4}, 1.875),  # 15 / (2 * 4)
        ("dr_grpo", {"max_completion_length": 4, "accumulation_steps": 2.0}, 0.9375),
        ("bnpo", {}, 3.0),  # 15 / 5
        ("bnpo", {"accumulation_steps": 3.0}, 1.0),
        ("luspo", {}, 7.5),  # mean(6, 9): each sequence's token sum
        ("luspo", {"accumulation_steps": 2.0}, 3.75),
        ("token-sum", {}, 15.0),
        ("token-sum", {"num_processes": 4, "accumulation_steps": 8.0}, 60.0),  # DDP averages ranks: x dp_size
        ("seq-mean-token-sum", {}, 7.5),  # (6 + 9) / 2 non-empty sequences
        ("seq-mean-token-sum", {"accumulation_steps": 3.0}, 2.5),
        ("seq-mean-token-sum-norm", {}, 2.5),  # 7.5 / T = 3 (the padded horizon)
        ("seq-mean-token-mean", {}, 3.25),  # (6/3 + 9/2) / 2, as grpo when no row is empty
    ],
)
def test_golden(mode, kwargs, expected):
    assert aggregate(L, M, mode, **kwargs).item() == pytest.approx(expected)


def test_grpo_weights_sequences_not_tokens():
    # one long and one short sequence: grpo gives each sequence weight 1/2, bnpo each token 1/4
    loss = torch.tensor([[1.0, 1.0, 1.0], [4.0, 0.0, 0.0]])
    mask = torch.tensor([[1, 1, 1], [1, 0, 0]])
    assert aggregate(loss, mask, "grpo").item() == pytest.approx(2.5)  # (1 + 4) / 2
    assert aggregate(loss, mask, "bnpo").item() == pytest.approx(1.75)  # 7 / 4


def test_masked_values_are_ignored_even_if_nonzero():
    garbage = L.clone()
    garbage[1, 2] = 1e6
    for mode in AGGREGATION_MODES:
        kw = {"max_completion_length": 3} if mode == "dr_grpo" else {}
        assert aggregate(garbage, M, mode, **kw).item() == pytest.approx(aggregate(L, M, mode, **kw).item())


def test_empty_mask_gives_zero_not_nan():
    zeros = torch.zeros(2, 3)
    for mode in AGGREGATION_MODES:
        kw = {"max_completion_length": 3} if mode == "dr_grpo" else {}
        assert aggregate(zeros, torch.zeros(2, 3), mode, **kw).item() == 0.0


def test_sequence_modes_skip_empty_rows_as_verl_but_luspo_and_grpo_count_them():
    # a third, fully masked row: verl's seq-mean modes divide by the 2 non-empty rows, TRL's luspo/grpo by B = 3
    loss = torch.cat([L, torch.full((1, 3), 7.0)])
    mask = torch.cat([M, torch.zeros(1, 3, dtype=M.dtype)])
    assert aggregate(loss, mask, "seq-mean-token-sum").item() == pytest.approx(7.5)
    assert aggregate(loss, mask, "luspo").item() == pytest.approx(5.0)  # (6 + 9 + 0) / 3
    assert aggregate(loss, mask, "seq-mean-token-mean").item() == pytest.approx(3.25)
    assert aggregate(loss, mask, "grpo").item() == pytest.approx(6.5 / 3)


def test_gradient_flows_with_normaliser():
    loss = L.clone().requires_grad_(True)
    aggregate(loss, M, "dapo", num_items=10.0).backward()
    torch.testing.assert_close(loss.grad, M.float() / 10.0)


def test_errors():
    with pytest.raises(
        ValueError, match="unknown loss aggregation 'mean'.*bnpo, dapo, dr_grpo, grpo, luspo, seq-mean"
    ):
        aggregate(L, M, "mean")
    with pytest.raises(ValueError, match="max_completion_length"):
        aggregate(L, M, "dr_grpo")
