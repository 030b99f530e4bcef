"""``python -m pspo_repro.sft``: the mini-reproduction's SFT base model (conf/sft.yaml).

The code lives in ``pspo_repro.training.sft``; this module only runs it.
"""

if __name__ == "__main__":
    import sys

    from pspo_repro.training.sft import main

    sys.exit(main())
