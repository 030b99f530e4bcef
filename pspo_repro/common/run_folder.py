"""A training run's folder and its ``run.json``: the one module that reads or writes the file.

``run.json`` holds the run's identity (model, method, seed, tag), its resolved config, provenance, status
(``running`` / ``finished`` / ``failed``) and best checkpoint (docs/architecture.md, "Result folders").
Training writes it through :class:`RunFolder` (atomically, redacted, stamped); the evaluator, the pipelines
and the analysis readers read it through it, each turning a file it cannot read into its own one-line error
(``tests/test_architecture.py`` fails on a run.json opened anywhere else). Where a run folder lives and what
names it is ``common.run_dir``'s.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pspo_repro.common.atomic import write_json
from pspo_repro.common.cli import UsageError, first_line
from pspo_repro.common.redact import redact
from pspo_repro.common.run_dir import last_checkpoint, portable_identity, truncate_metrics

RUN_JSON = "run.json"


def run_json(folder: Path | str) -> Path:
    """The path of ``folder``'s run.json (for messages and existence checks; read it with ``RunFolder``)."""
    return Path(folder) / RUN_JSON


class RunFolder:
    """One training run's folder: its run.json read and written here and nowhere else."""

    def __init__(self, path: Path | str):
        self.path = Path(path)

    @property
    def info_path(self) -> Path:
        """``<folder>/run.json``."""
        return run_json(self.path)

    def exists(self) -> bool:
        """Whether the folder holds a run.json."""
        return self.info_path.is_file()

    def load(self) -> Any:
        """run.json parsed as it is (any JSON value), for readers of untrusted folders: OSError when it cannot be
        read, ``json.JSONDecodeError`` / ``UnicodeDecodeError`` (both ValueError) when it is no UTF-8 JSON."""
        return json.loads(self.info_path.read_bytes().decode("utf-8"))

    def read(self) -> dict[str, Any] | None:
        """The run's own record (training reads back what it wrote), or None when there is none."""
        if not self.info_path.exists():
            return None
        return json.loads(self.info_path.read_text(encoding="utf-8"))

    def status(self) -> str | None:
        """The recorded status, or None when there is no readable run.json (or it records none)."""
        try:
            info = self.load()
        except (OSError, ValueError):
            return None
        return info.get("status") if isinstance(info, dict) else None

    def write(self, record: dict[str, Any]) -> None:
        """Write ``record`` as run.json atomically, redacted and stamped with ``updated_at``."""
        record = {**record, "updated_at": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
        # The resolved config can hold a credential (an ${oc.env:...} interpolation): never store it.
        write_json(self.info_path, redact(record))

    # ------------------------------------------------------------ a training run's record over its life

    def finished_already(
        self, identity: dict[str, Any], previous: dict[str, Any] | None, announce: bool
    ) -> bool:
        """Refuse a folder whose run.json (``previous``) holds another configuration (UsageError); True when it
        holds this run, finished (reported on stdout when ``announce``: the main process)."""
        if previous is None:
            return False
        # run.json stores it redacted; the SFT base's path is compared relative to each run's results root
        stored = portable_identity(previous.get("identity"), previous.get("run_dir") or self.path)
        if stored != portable_identity(redact(identity), self.path):
            raise UsageError(
                f"{self.path} holds a run with a different configuration; set run_tag=... or remove the folder"
            )
        if previous.get("status") != "finished":
            return False
        if announce:
            print(
                f"finished already: {self.path} (step {previous.get('final_step')}, best {previous.get('best_checkpoint')})"
            )
        return True

    def resume_point(self, main_process: bool) -> Path | None:
        """Create the folder and find the checkpoint to resume from (None: start afresh); the main process
        keeps only metrics.jsonl's lines up to that checkpoint's step (the resumed run logs the later ones)."""
        self.path.mkdir(parents=True, exist_ok=True)
        resume = last_checkpoint(self.path)
        if main_process:
            truncate_metrics(self.path / "metrics.jsonl", int(resume.name.split("-")[1]) if resume else None)
        return resume

    def failure_hook(self, record: dict[str, Any]) -> Callable[..., None]:
        """An exit handler (``contextlib.ExitStack.push``) that marks the run failed with ``record``'s latest
        state when an exception (not a kill) ends it, so run.json never says "running" after a crash."""

        def mark_failed(exc_type, exc, _tb) -> None:
            if exc_type is not None and issubclass(exc_type, Exception):
                self.write({**record, "status": "failed", "error": first_line(exc) or exc_type.__name__})

        return mark_failed
