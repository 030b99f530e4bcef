"""The Makefile's help: every target has its one ``##`` line, and ``make help`` lists them all."""

from __future__ import annotations

import re
import shutil
import subprocess

import pytest

from pspo_repro.common.paths import PROJECT_ROOT

MAKEFILE = (PROJECT_ROOT / "Makefile").read_text()


def _phony() -> list[str]:
    return re.search(r"^\.PHONY:(.*)$", MAKEFILE, re.M).group(1).split()


def test_every_target_is_phony_and_has_one_help_line():
    targets = re.findall(r"^([a-z][a-z-]*):", MAKEFILE, re.M)
    assert sorted(targets) == sorted(_phony())
    for target in targets:
        lines = re.findall(rf"^{target}:.*## (.+)$", MAKEFILE, re.M)
        assert len(lines) == 1 and lines[0].strip(), f"{target}: no '## ...' help line"


@pytest.mark.skipif(shutil.which("make") is None, reason="no make here")
def test_make_help_lists_every_target():
    out = subprocess.run(["make", "-s", "help"], cwd=PROJECT_ROOT, capture_output=True, text=True, check=True)
    listed = [line.split()[0] for line in out.stdout.splitlines() if line.strip()]
    assert listed == [t for t in re.findall(r"^([a-z][a-z-]*):", MAKEFILE, re.M)]
