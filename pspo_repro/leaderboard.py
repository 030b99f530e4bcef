"""``python -m pspo_repro.leaderboard``: every registered policy loss under one budget, with intervals.

The code lives in ``pspo_repro.analysis.leaderboard``; this module only runs it.
"""

if __name__ == "__main__":
    import sys

    from pspo_repro.analysis.leaderboard import main

    sys.exit(main())
