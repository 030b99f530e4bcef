"""``python tests/cli_dry_runs.py OUT.json OVERRIDES...``: ``python -m pspo_repro.train <overrides>
dry_run=true`` for each argument, one after another in this one interpreter (``runpy`` runs the entry module as
``python -m`` does; Hydra's global state is cleared between runs), so a test of many documented overrides pays
for the torch/transformers import once, not once per override (and Hydra parses each config file once:
tests/hydra_memo.py). Writes ``{override: {code, stdout, stderr}}``.
"""

from __future__ import annotations

import contextlib
import gc
import io
import json
import runpy
import shlex
import sys
from pathlib import Path


def main() -> None:
    import hydra_memo  # this folder is sys.path[0]: the test processes' memo of Hydra's config loads
    from hydra.core.global_hydra import GlobalHydra

    hydra_memo.install()
    out, overrides = Path(sys.argv[1]), sys.argv[2:]
    results = {}
    for override in overrides:
        GlobalHydra.instance().clear()
        sys.argv = ["pspo_repro/train.py", *shlex.split(override), "dry_run=true"]
        stdout, stderr = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
            try:
                runpy.run_module("pspo_repro.train", run_name="__main__", alter_sys=True)
                code: int | str = 0
            except SystemExit as exc:  # the entry module ends with sys.exit(main())
                code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else str(exc.code))
            except Exception as exc:  # noqa: BLE001 - reported per override, the others still run
                code = f"raised {exc!r}"
        results[override] = {"code": code, "stdout": stdout.getvalue(), "stderr": stderr.getvalue()}
        gc.collect()  # then freeze what is left (the imported stack): the next run's collections skip it
        gc.freeze()
    out.write_text(json.dumps(results))


if __name__ == "__main__":
    main()
