"""``python -m pspo_repro.evaluate``: temperature sweeps of a run or model into result cells (conf/evaluate.yaml).

The code lives in ``pspo_repro.evaluation.evaluator``; this module only runs it.
"""

if __name__ == "__main__":
    import sys

    from pspo_repro.evaluation.evaluator import main

    sys.exit(main())
