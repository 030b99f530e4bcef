"""``python -m pspo_repro.train``: GRPO training with any registered trust-region method (conf/train.yaml).

The code lives in ``pspo_repro.training.grpo``; this module only runs it.
"""

if __name__ == "__main__":
    import sys

    from pspo_repro.training.grpo import main

    sys.exit(main())
