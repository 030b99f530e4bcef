"""Stage 5, analysis: reading result cells and runs back (``results_io``, ``run_records``), statistics
(``stats``), tables, paired comparisons, plots, the reproduction report and the ``aggregate`` entry that writes
them as one set; the reports on top of shared floors: the trust-region regime tables (``regime``), the claims
(``measures`` -> ``claims`` -> ``claims_report``), the leaderboard and the model-size ladder (``scale``), each
importing only the shared modules, never another report. Imports ``evaluation.metrics`` and ``common``.
"""
