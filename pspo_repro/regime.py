"""``python -m pspo_repro.regime``: trust-region statistics per method from runs and T = 0 cells.

The code lives in ``pspo_repro.analysis.regime``; this module only runs it.
"""

if __name__ == "__main__":
    import sys

    from pspo_repro.analysis.regime import main

    sys.exit(main())
