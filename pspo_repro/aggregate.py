"""``python -m pspo_repro.aggregate``: tables, figures and the reproduction report from results (conf/aggregate.yaml).

The code lives in ``pspo_repro.analysis.aggregate``; this module only runs it.
"""

if __name__ == "__main__":
    import sys

    from pspo_repro.analysis.aggregate import main

    sys.exit(main())
