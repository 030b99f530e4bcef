"""pspo-repro: GRPO with interchangeable trust-region methods (PSPO, arXiv 2509.21282)."""

__version__ = "0.1.0"
