"""``python -m pspo_repro.mini``: a CPU pipeline end to end (the mini-reproduction, the study, the leaderboard).

The code lives in ``pspo_repro.pipelines.cpu_pipeline``; this module only runs it.
"""

if __name__ == "__main__":
    import sys

    from pspo_repro.pipelines.cpu_pipeline import main

    sys.exit(main())
