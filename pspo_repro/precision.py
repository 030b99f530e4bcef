"""``python -m pspo_repro.precision``: the precision probe: one optimizer step, the share of weights it moved.

The code lives in ``pspo_repro.training.precision``; this module only runs it.
"""

if __name__ == "__main__":
    import sys

    from pspo_repro.training.precision import main

    sys.exit(main())
