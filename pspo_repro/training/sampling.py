"""Two of transformers' sampling steps, made cheap on CPU for the tiny models, inside its own ``generate``.

On a CPU the per-step sampling work around a tiny model's forward pass costs as much as the pass: at the mini's
rollout (128 sequences x 917 tokens) transformers' top-p filter sorts the vocabulary (4.9 ms) and
``torch.multinomial`` draws an exponential variate per vocabulary entry (1.8 ms), against ~4.6 ms for the model
(docs/benchmarks.md, "One toy run").

**The top-p filter, bit for bit** (``ExactTopPWarper``, always on). The kept set comes from the ``k`` largest
scores, and a row goes to transformers' own sort whenever the shortcut could disagree with it, so the output is
the same tensor:

- transformers keeps token i of the ascending sort unless ``cumsum(softmax(sorted))[i] <= 1 - top_p``; in exact
  arithmetic that cumulative sum is ``1 - D``, with ``D`` the probability mass of the tokens above i, so the kept
  set is the top tokens whose mass above them is ``< top_p``;
- here ``D`` is summed in float64 over the top ``k`` scores' probabilities (float32 ``exp``, the normaliser
  summed in float64). transformers' float32 cumulative sum is within ~1e-5 of it (a float32 sum of at most a
  few thousand terms); a row is decided here only when the two tokens at the boundary sit more than ``MARGIN``
  (1e-4) from the threshold, the boundary lies inside the top ``k`` and no tie of scores straddles it
  (transformers' unstable sort would order tied tokens its own way). Every other row (a flat distribution, a
  boundary within the margin, non-finite scores) goes through ``TopPLogitsWarper.__call__`` itself.

**The token draw, the same distribution** (``inverse_cdf_multinomial``, ``trainer.token_draw=inverse_cdf``).
``torch.multinomial(probs, 1)`` draws from ``probs / probs.sum()`` by an exponential race over the whole row; the
inverse CDF draws from the same distribution with one uniform per row (0.15 ms). It is not the same random
stream, so the tokens differ from ``multinomial``'s, in distribution only; ``multinomial`` restores
transformers' draw.

``cpu_sampling()`` swaps both in for one ``generate`` call (training.trainer: TRL's rollouts and validation;
the top-p filter also in evaluation's hf backend); tests/training/test_sampling.py holds the filter to
transformers' output and the draw to its distribution.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch
import transformers.generation.utils as generation_utils
from transformers.generation.logits_process import TopPLogitsWarper

from pspo_repro.common.names import did_you_mean_after

# Distance from the threshold within which a row is left to transformers' own sort: ~10x the largest gap between
# transformers' float32 cumulative sum and the float64 one here (a float32 sum of the vocabulary's probabilities).
MARGIN = 1e-4
# False: ``cpu_sampling`` leaves transformers' own top-p filter in place (scripts/bench_toy_run.py's "before")
TOP_P_SHORTCUT = True
TOKEN_DRAWS = ("inverse_cdf", "multinomial")
TOP_K = 8  # scores looked at per row (topk of 8 costs ~0.1 ms at 128 x 917, of 16 ~0.8): a wider nucleus goes to the full sort


class ExactTopPWarper(TopPLogitsWarper):
    """``TopPLogitsWarper`` with the same output, from a top-``TOP_K`` shortcut where it provably agrees."""

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        k = min(TOP_K, scores.size(-1) - 1)
        if scores.dim() != 2 or scores.dtype != torch.float32 or self.min_tokens_to_keep != 1 or k < 2:
            return super().__call__(input_ids, scores)
        vals, idx = scores.topk(k, dim=-1)  # descending
        top = vals[:, :1]
        z = (scores - top).exp().sum(-1, keepdim=True, dtype=torch.float64)
        p = (vals - top).exp().double() / z
        above = p.cumsum(-1) - p  # the mass of the tokens above each one
        # transformers compares in the scores' dtype: the threshold as float32 rounds it
        limit = 1.0 - torch.tensor(1.0 - self.top_p, dtype=scores.dtype).double()
        keep = above < limit
        n = keep.sum(-1, keepdim=True)  # a prefix: ``above`` never decreases
        inside, out_at = (n - 1).clamp(min=0), n.clamp(max=k - 1)
        last_kept, first_out = above.gather(-1, inside), above.gather(-1, out_at)
        tie = vals.gather(-1, inside) == vals.gather(-1, out_at)
        safe = (
            (n >= 1)
            & (n < k)
            & (last_kept < limit - MARGIN)
            & (first_out > limit + MARGIN)
            & ~tie
            & torch.isfinite(top)
            & torch.isfinite(z)
        ).squeeze(-1)
        remove = torch.ones_like(scores, dtype=torch.bool).scatter_(1, idx, ~keep)
        out = scores.masked_fill(remove, self.filter_value)
        if not bool(safe.all()):
            rows = ~safe
            out[rows] = super().__call__(input_ids[rows], scores[rows])
        return out


def inverse_cdf_multinomial(input, num_samples, replacement=False, *, generator=None, out=None):
    """``torch.multinomial`` for one sample per row of a 2-D float tensor of non-negative weights with a positive
    sum, by the inverse CDF; anything else (and every invalid input, which it refuses) goes to torch's own."""
    if num_samples != 1 or out is not None or input.dim() != 2 or not input.is_floating_point():
        return _MULTINOMIAL(input, num_samples, replacement, generator=generator, out=out)
    cdf = input.double().cumsum(-1)
    total = cdf[:, -1:]
    if not bool(((total > 0) & torch.isfinite(total)).all()) or bool((input < 0).any()):
        return _MULTINOMIAL(input, num_samples, replacement, generator=generator)  # its error message
    u = torch.rand(total.shape, dtype=torch.float64, generator=generator, device=input.device) * total
    idx = torch.searchsorted(cdf, u, right=True)  # the first token whose cumulative mass passes u: mass > 0
    # u can round up to the total: then the last token with mass
    last = input.size(-1) - 1 - (input.flip(-1) > 0).to(torch.int8).argmax(-1, keepdim=True)
    return torch.minimum(idx, last)


_MULTINOMIAL = torch.multinomial


@contextlib.contextmanager
def cpu_sampling(token_draw: str = "inverse_cdf") -> Iterator[None]:
    """Inside this block transformers' ``generate`` filters top-p with ``ExactTopPWarper`` and, with
    ``token_draw="inverse_cdf"``, draws its tokens with ``inverse_cdf_multinomial``."""
    if token_draw not in TOKEN_DRAWS:
        raise ValueError(
            f"token_draw must be one of {', '.join(TOKEN_DRAWS)}, got {token_draw!r}"
            f"{did_you_mean_after(token_draw, TOKEN_DRAWS)}"
        )
    original = generation_utils.TopPLogitsWarper
    if TOP_P_SHORTCUT:
        generation_utils.TopPLogitsWarper = ExactTopPWarper
    if token_draw == "inverse_cdf":
        torch.multinomial = inverse_cdf_multinomial
    try:
        yield
    finally:
        generation_utils.TopPLogitsWarper = original
        torch.multinomial = _MULTINOMIAL
