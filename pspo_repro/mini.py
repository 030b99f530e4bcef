"""``python -m pspo_repro.mini``: the CPU mini-reproduction or the study, end to end (conf/mini.yaml, conf/study.yaml).

The code lives in ``pspo_repro.pipelines.mini``; this module only runs it.
"""

if __name__ == "__main__":
    import sys

    from pspo_repro.pipelines.mini import main

    sys.exit(main())
