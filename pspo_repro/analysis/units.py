"""What each table number is: the unit, scale, digits and range of every metric a cell can hold.

A cell stores fractions, token counts, answer counts and a correlation side by side (``evaluation.metrics``);
a table must not print a mean length under "(%)" or an answer count times 100. ``unit_of`` is the one
registry the table titles, the number formatting, the figures' axes and the interval clipping read.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from pspo_repro.analysis.results_io import is_proportion


@dataclass(frozen=True)
class Unit:
    """How one metric is shown: ``value * scale`` with ``digits`` decimals, titled ``(unit)``; its values
    lie in [``low``, ``high``] (in the metric's own, unscaled terms)."""

    unit: str
    scale: float
    digits: int
    low: float
    high: float

    def shown(self, value: float) -> float:
        """``value`` in the table's terms (a fraction 0.25 is 25.0 for a percentage)."""
        return value * self.scale

    @property
    def range_text(self) -> str:
        """The metric's range as shown, e.g. ``[0, 100]``, ``[0, ∞)``."""
        low = f"{self.low * self.scale:g}" if math.isfinite(self.low) else "(-∞"
        high = f"{self.high * self.scale:g}]" if math.isfinite(self.high) else "∞)"
        return f"{'[' if math.isfinite(self.low) else ''}{low}, {high}"


PERCENT = Unit("%", 100.0, 1, 0.0, 1.0)
# Metrics that are not success rates (``results_io.is_proportion``): their own unit each.
OTHER_UNITS = {
    "agreement": PERCENT,  # the winning answer's share of a prompt's samples: a share, not a success rate
    "mean_length": Unit("tokens", 1.0, 1, 0.0, math.inf),
    "unique_answers": Unit("distinct answers per prompt", 1.0, 2, 0.0, math.inf),
    "reward_corr": Unit("Pearson r", 1.0, 3, -1.0, 1.0),
    "grading_timeouts": Unit("samples", 1.0, 0, 0.0, math.inf),
    "grading_errors": Unit("prompts", 1.0, 0, 0.0, math.inf),
}


def unit_of(metric: str) -> Unit:
    """The unit of ``metric``: a percentage for every proportion (accuracies, pass@k, majority votes, maj@k,
    top-1, best-of-n) and agreement, else its entry in ``OTHER_UNITS``; ValueError for an unknown metric
    (a table of numbers nobody can name is refused, not printed as a percentage)."""
    if is_proportion(metric):
        return PERCENT
    if metric in OTHER_UNITS:
        return OTHER_UNITS[metric]
    raise ValueError(f"no unit known for metric {metric!r}: add it to analysis.units.OTHER_UNITS")


def with_unit(label: str, unit: Unit) -> str:
    """``label (unit)``, or ``label`` unchanged when it already ends with that unit: ``metric_labels``'
    "Mean completion length (tokens)" is titled once, not "(tokens) (tokens)"."""
    suffix = f"({unit.unit})"
    return label if label.rstrip().endswith(suffix) else f"{label} {suffix}"
