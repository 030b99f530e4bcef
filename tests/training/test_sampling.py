"""training.sampling: the top-p filter is transformers' bit for bit, the inverse-CDF draw is torch.multinomial's
distribution."""

from __future__ import annotations

import math

import pytest
import torch
from transformers import GenerationConfig
from transformers.generation.logits_process import TopPLogitsWarper

from pspo_repro.training import sampling
from pspo_repro.training.sampling import ExactTopPWarper, cpu_sampling, inverse_cdf_multinomial

IDS = torch.zeros(1, 1, dtype=torch.long)


def _both(scores: torch.Tensor, p: float) -> tuple[torch.Tensor, torch.Tensor]:
    ids = IDS.expand(scores.size(0), 1)
    return TopPLogitsWarper(p)(ids, scores.clone()), ExactTopPWarper(p)(ids, scores.clone())


@pytest.mark.parametrize("p", [0.05, 0.5, 0.9, 0.95, 0.999])
@pytest.mark.parametrize("scale", [0.3, 1.0, 3.0, 8.0, 30.0, 300.0])
def test_same_output_as_transformers_on_random_scores(p, scale):
    g = torch.Generator().manual_seed(int(scale * 1000 + p * 100))
    for vocab in (3, 9, 100, 917):
        scores = torch.randn(64, vocab, generator=g) * scale
        want, got = _both(scores, p)
        assert torch.equal(want, got)


def test_same_output_with_masked_tied_and_flat_rows():
    g = torch.Generator().manual_seed(0)
    scores = torch.randn(40, 200, generator=g) * 4
    scores[0] = 0.0  # flat: every token tied
    scores[1, 5:] = -math.inf  # five finite tokens
    scores[2, :] = -math.inf
    scores[2, 7] = 1.0  # one finite token
    scores[3, :2] = 10.0  # two tied top tokens holding almost all the mass
    scores[4, :4] = torch.tensor([5.0, 3.0, 3.0, 3.0])  # a tie at the boundary
    scores[5] = torch.arange(200.0).flip(0) * 0.01  # nearly flat, nucleus far wider than the shortcut's k
    topk_cut = torch.topk(scores[6:20], 12, dim=-1).values[:, -1:]  # an earlier top-k filter's -inf tail
    scores[6:20] = scores[6:20].masked_fill(scores[6:20] < topk_cut, -math.inf)
    for p in (0.3, 0.8, 0.9, 0.99):
        want, got = _both(scores, p)
        assert torch.equal(want, got)


@pytest.mark.parametrize("offset", [-0.02, -0.005, -3e-4, -1e-4, -5e-5, 0.0, 5e-5, 1e-4, 3e-4, 0.005, 0.02])
def test_same_output_when_the_mass_above_a_token_is_near_the_threshold(offset):
    """Rows built so that a token's mass above it is ``top_p + offset``: on both sides of the threshold, near it
    (left to transformers) and far from it (decided by the shortcut)."""
    rows = []
    for first in (0.3, 0.6, 0.85):
        second = 0.9 + offset - first
        rest = 1.0 - first - second
        rows.append([first, second, rest * 0.7, rest * 0.2, rest * 0.1] + [0.0] * 20)
    probs = torch.tensor(rows, dtype=torch.float64)
    scores = torch.where(probs > 0, probs.log(), torch.tensor(-math.inf, dtype=torch.float64)).float()
    want, got = _both(scores, 0.9)
    assert torch.equal(want, got)


def _sent_to_transformers(monkeypatch) -> list[int]:
    sent: list[int] = []
    original = TopPLogitsWarper.__call__

    def spy(self, ids, s):
        sent.append(s.size(0))
        return original(self, ids, s)

    monkeypatch.setattr(TopPLogitsWarper, "__call__", spy)
    return sent


def test_a_tie_straddling_the_boundary_is_left_to_transformers(monkeypatch):
    """Tied tokens on both sides of the threshold: which one transformers' unstable sort keeps is its own."""
    scores = torch.tensor([[5.0, 3.0, 3.0, 3.0] + [-math.inf] * 8])  # mass above: 0, 0.71, 0.81, 0.90
    want = TopPLogitsWarper(0.85)(IDS, scores.clone())
    sent = _sent_to_transformers(monkeypatch)
    assert torch.equal(ExactTopPWarper(0.85)(IDS, scores.clone()), want) and sent == [1]


def test_boundary_rows_are_left_to_transformers(monkeypatch):
    """A row whose cumulative mass sits within the margin of the threshold is decided by transformers' sort."""
    probs = torch.tensor([[0.5, 0.4 - 1e-6, 0.05, 0.05 + 1e-6] + [0.0] * 6])
    scores = torch.where(probs > 0, probs.log(), torch.tensor(-math.inf))
    want = TopPLogitsWarper(0.9)(IDS, scores.clone())
    sent = _sent_to_transformers(monkeypatch)
    got = ExactTopPWarper(0.9)(IDS, scores.clone())
    assert torch.equal(want, got) and sent == [1]


def test_a_generation_samples_the_same_tokens(tiny_model_dir):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir).eval()
    ids = torch.randint(5, 200, (24, 12), generator=torch.Generator().manual_seed(1))
    cfg = GenerationConfig(
        do_sample=True, temperature=0.8, top_p=0.9, top_k=0, max_new_tokens=16, pad_token_id=0
    )

    def run():
        torch.manual_seed(3)
        with torch.no_grad():
            return model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), generation_config=cfg)

    want = run()
    with cpu_sampling("multinomial"):
        got = run()
    assert sampling.generation_utils.TopPLogitsWarper is TopPLogitsWarper  # restored
    assert torch.equal(want, got)
    with cpu_sampling("inverse_cdf"):
        other = run()
    assert torch.multinomial is sampling._MULTINOMIAL  # restored
    assert other.shape[0] == want.shape[0] and not torch.equal(want, other)  # another random stream


def test_inverse_cdf_draws_multinomials_distribution():
    """Chi-square goodness of fit of 40,000 draws per row against the rows' normalised weights (unnormalised,
    with zeros and masked tails, as transformers' softmax after top-p leaves them)."""
    from scipy import stats

    weights = torch.tensor(
        [
            [0.5, 0.3, 0.2, 0.0, 0.0],
            [0.0, 2.0, 0.0, 1.0, 1.0],
            [1e-3, 0.0, 0.0, 0.0, 4.0],
            [0.0, 0.0, 0.0, 0.0, 1.0],
        ]
    )
    g = torch.Generator().manual_seed(0)
    draws = torch.cat([inverse_cdf_multinomial(weights, 1, generator=g) for _ in range(40_000)], dim=1)
    for row, w in zip(draws, weights, strict=True):
        counts = torch.bincount(row, minlength=w.numel()).double()
        assert counts[w == 0].sum() == 0  # a token without mass is never drawn
        expected = (w.double() / w.double().sum()) * row.numel()
        keep = expected > 0
        if int(keep.sum()) > 1:
            assert stats.chisquare(counts[keep], expected[keep]).pvalue > 1e-3


def test_inverse_cdf_leaves_everything_else_to_torch():
    g = torch.Generator().manual_seed(1)
    w = torch.rand(3, 6, generator=g)
    assert inverse_cdf_multinomial(w, 2, generator=g).shape == (3, 2)  # several samples: torch's own
    assert inverse_cdf_multinomial(w[0], 1, generator=g).shape == (1,)  # 1-D: torch's own
    for bad in (torch.zeros(2, 4), -w, w.clone().fill_(float("nan"))):
        with pytest.raises(RuntimeError):
            inverse_cdf_multinomial(bad, 1)
    with pytest.raises(ValueError, match="token_draw must be one of inverse_cdf, multinomial, got 'x'"):
        with cpu_sampling("x"):
            pass
