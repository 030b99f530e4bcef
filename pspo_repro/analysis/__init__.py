"""Stage 5, analysis: reading result cells and runs back (``results_io``), statistics (``stats``),
tables, paired comparisons, plots, the reproduction report, the trust-region regime tables, and the
``aggregate`` entry that writes them as one set. Imports ``evaluation.metrics`` and ``common``.
"""
