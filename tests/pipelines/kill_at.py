"""A command that SIGKILLs itself at the n-th call of a chosen function (tests/pipelines/test_faults.py):

python tests/pipelines/kill_at.py marker N <train overrides>     # training, inside the N-th checkpoint's
    save: the Trainer has written the folder's files, the completion marker is not yet there
python tests/pipelines/kill_at.py replace N <aggregate overrides>  # aggregation, at the N-th atomic replace:
    the temp file is whole, not yet moved
"""

from __future__ import annotations

import os
import signal
import sys


def _kill_at(n: int, real):
    left = [n]

    def wrapper(*args, **kwargs):
        left[0] -= 1
        if left[0] == 0:
            os.kill(os.getpid(), signal.SIGKILL)
        return real(*args, **kwargs)

    return wrapper


def main(argv: list[str]) -> None:
    where, n, overrides = argv[0], int(argv[1]), argv[2:]
    if where == "marker":
        import pspo_repro.common.run_dir as run_dir
        from pspo_repro.training import grpo

        run_dir.write_checkpoint_marker = _kill_at(n, run_dir.write_checkpoint_marker)
        sys.argv = ["pspo_repro.train", *overrides]
        grpo.main()
    elif where == "replace":
        import pspo_repro.common.atomic as atomic
        from pspo_repro.analysis import aggregate

        shim = type(sys)("os_shim")  # atomic's own view of os, with replace wrapped
        shim.__dict__.update(os.__dict__)
        shim.replace = _kill_at(n, os.replace)
        atomic.os = shim
        sys.argv = ["pspo_repro.aggregate", *overrides]
        aggregate.main()
    else:
        raise SystemExit(f"unknown kill point {where!r}: marker or replace")


if __name__ == "__main__":
    main(sys.argv[1:])
