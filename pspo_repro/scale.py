"""``python -m pspo_repro.scale``: the model-size ladder end to end (conf/scale.yaml, docs/scale.md).

The code lives in ``pspo_repro.pipelines.ladder``; this module only runs it.
"""

if __name__ == "__main__":
    import sys

    from pspo_repro.pipelines.ladder import main

    sys.exit(main())
