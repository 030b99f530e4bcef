"""The trainer's loss statistics (``MethodGRPOTrainer._log_loss_metrics``): entropy and KL as TRL logs them, the
method-independent trust-region statistics, the method's own metrics, and the first pass's deviation from r = 1
with its run maximum, logged as a maximum over the logging window (TRL's ``log`` averages the rest).
"""

from __future__ import annotations

import math

import torch

# max |r - 1| on the first pass over a freshly generated batch (``_log_loss_metrics``)
FIRST_PASS_DEV = "first_pass_max_abs_ratio_dev"
# Logged as their maximum over the logging window (TRL's ``log`` averages everything else in ``_metrics``).
MAX_METRICS = (FIRST_PASS_DEV,)


class LossMetricsMixin:
    """The statistics half of ``MethodGRPOTrainer`` (mixed in before TRL's ``GRPOTrainer``, whose ``log`` and
    ``_metrics`` it uses)."""

    def _is_first_pass(self) -> bool:
        """Whether this training micro-step is the first use of its slice of a freshly generated batch, with
        no optimizer step since the batch was generated (so reproducible log-probs would give r == 1 exactly).

        TRL's ``_prepare_inputs`` generates when ``_step % (steps_per_generation * num_iterations) == 0`` and
        serves slice ``_step % steps_per_generation``; ``_step`` counts finished micro-steps, so during one it
        is that micro-step's index. The optimizer steps after every ``gradient_accumulation_steps`` of them
        (with steps_per_generation > gradient_accumulation_steps a first pass can come after an update).
        """
        spg, ga = self.args.steps_per_generation, self.args.gradient_accumulation_steps
        generated_at = self._step - self._step % (spg * self.num_iterations)
        return self._step - generated_at < spg and self._step // ga == generated_at // ga

    def _record_first_pass_dev(self, value: float) -> None:
        """Fold one micro-batch's first-pass deviation into the run's maximum (a NaN stays: it is the news)."""
        prev = self.first_pass_max_abs_ratio_dev
        if prev is None or (not math.isnan(prev) and (math.isnan(value) or value > prev)):
            self.first_pass_max_abs_ratio_dev = value

    @staticmethod
    def ratio_dev_for_json(value: float | None) -> float | str | None:
        """The run's maximum as run.json stores it: a number, ``"nan"``/``"inf"`` (JSON has no non-finite
        numbers), or None when never measured."""
        return value if value is None or math.isfinite(value) else str(value)

    def log(self, logs: dict[str, float], start_time: float | None = None) -> None:
        """TRL's ``log`` (which averages each metric over the logging window), except ``MAX_METRICS``: their
        maximum over the window (absent when the window has none)."""
        mode = "train" if self.model.training else "eval"
        for key in MAX_METRICS:
            values = self._metrics[mode].pop(key, None)
            if values:  # Python's max() is order-dependent with NaN: report NaN outright
                logs[key] = math.nan if any(math.isnan(v) for v in values) else max(values)
        super().log(logs, start_time)

    @torch.no_grad()
    def _log_loss_metrics(
        self, mode, mask, entropies, per_token_kl, method_metrics, log_ratio, first_pass: bool = False
    ) -> None:
        """Entropy (and KL) as TRL logs them, the trust-region statistics of every method, and the method's
        metrics under ``method/``: one gather, one sync.

        Method-independent, so runs of different methods compare on the same scale: ``behaviour_kl`` is
        KL(pi_old || pi_theta) per token (k3 estimator ``r - 1 - log r`` on the behaviour policy's
        samples; 0 on the first pass over a batch) and ``ratio_std`` the spread of r = pi_theta / pi_old.
        On a ``first_pass``, ``first_pass_max_abs_ratio_dev``: max |r - 1| over the tokens (and processes),
        which is 0 unless recomputed log-probs differ from the stored ones (exactly 0 on CPU; on a GPU a
        different batch layout can move them, and under clip eps = 0 any |r - 1| > 0 zeroes a gradient).
        """
        m = mask.float()
        r = log_ratio.detach().float().exp()
        k3 = r - 1.0 - log_ratio.detach().float()
        sums = [(entropies * m).sum(), m.sum(), (k3 * m).sum(), (r * m).sum(), (r * r * m).sum()]
        if per_token_kl is not None:
            sums.append((per_token_kl * m).sum())
        totals = self.accelerator.reduce(torch.stack(sums).float(), reduction="sum")
        names = list(method_metrics)
        cols = [method_metrics[k].float() for k in names]
        if first_pass:  # |r - 1| = |expm1(log r)|: exact for tiny log-ratios, where exp(x) - 1 cancels
            cols.append(torch.where(mask.bool(), torch.expm1(log_ratio.detach().float()).abs(), 0.0).amax())
        values = []
        if cols:  # [processes, n]: the method's metrics averaged over processes, the deviation's maximum
            gathered = self.accelerator.gather(torch.stack(cols).unsqueeze(0))
            values = torch.cat(
                [gathered[:, : len(names)].mean(0), gathered[:, len(names) :].amax(0)]
            ).tolist()
        totals = totals.tolist()
        denom = max(totals[1], 1.0)
        self._metrics[mode]["entropy"].append(totals[0] / denom)
        self._metrics[mode]["behaviour_kl"].append(totals[2] / denom)
        mean_r = totals[3] / denom
        self._metrics[mode]["ratio_std"].append(max(totals[4] / denom - mean_r * mean_r, 0.0) ** 0.5)
        if per_token_kl is not None:
            self._metrics[mode]["kl"].append(totals[5] / denom)
        for k, v in zip(names, values[: len(names)], strict=True):
            self._metrics[mode][f"method/{k}"].append(v)
        if first_pass:
            self._metrics[mode][FIRST_PASS_DEV].append(values[-1])
            self._record_first_pass_dev(values[-1])
