"""``python -m pspo_repro.claims``: the paper's claims, their toy experiments, numbers and verdicts.

The code lives in ``pspo_repro.analysis.claims_report``; this module only runs it.
"""

if __name__ == "__main__":
    import sys

    from pspo_repro.analysis.claims_report import main

    sys.exit(main())
