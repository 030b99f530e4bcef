"""scripts/setup_env.sh's choice of interpreter (`--print-python`): the user's $PYTHON, else python3, else the
system's optimized build where python3 is a build without optimizations. Fake interpreters stand in for
both: each answers the script's two probes (its build flags, its version and venv) as told."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from pspo_repro.common.paths import PROJECT_ROOT

SCRIPT = PROJECT_ROOT / "scripts" / "setup_env.sh"


def _fake_python(path, config_args: str, usable: bool = True):
    """A python3 that runs each probe (`-c CODE`) with the given build flags and version."""
    version = (3, 12) if usable else (3, 9)
    path.write_text(
        f"#!{os.path.realpath(sys.executable)}\n"
        "import sys, sysconfig\n"
        f"sysconfig.get_config_var = lambda key: {config_args!r}\n"
        f"sys.version_info = {version!r}\n"
        "exec(sys.argv[2])\n"
    )
    path.chmod(0o755)
    return path


def _choice(tmp_path, python3, system, python_env=None):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / "python3").unlink(missing_ok=True)
    (bin_dir / "python3").symlink_to(python3)
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "PSPO_SYSTEM_PYTHON": str(system)}
    if python_env is not None:
        env["PYTHON"] = python_env
    out = subprocess.run(
        ["bash", str(SCRIPT), "--print-python"], env=env, capture_output=True, text=True, check=True
    )
    return out.stdout.strip()


@pytest.mark.parametrize(
    "config_args, system_usable, expected",
    [
        ("'--prefix=/root/.pyenv/versions/3.11.7' '--enable-shared'", True, "system"),  # pyenv's default
        ("'--enable-optimizations' '--with-lto'", True, "python3"),  # conda, Homebrew, python.org
        ("'--with-lto'", True, "python3"),
        ("'--prefix=/opt/py'", False, "python3"),  # the system's is too old or has no venv
    ],
)
def test_an_unoptimized_python3_gives_way_to_the_systems(tmp_path, config_args, system_usable, expected):
    python3 = _fake_python(tmp_path / "user_python3", config_args)
    system = _fake_python(tmp_path / "system_python3", "", usable=system_usable)
    want = {"system": str(system), "python3": "python3"}[expected]
    assert _choice(tmp_path, python3, system) == want


def test_python_set_by_the_user_is_kept(tmp_path):
    python3 = _fake_python(tmp_path / "user_python3", "'--enable-shared'")
    system = _fake_python(tmp_path / "system_python3", "")
    assert _choice(tmp_path, python3, system, python_env="python3") == "python3"
    assert _choice(tmp_path, python3, system, python_env="/opt/my/python") == "/opt/my/python"


def test_no_system_python_keeps_python3(tmp_path):
    python3 = _fake_python(tmp_path / "user_python3", "'--enable-shared'")
    assert _choice(tmp_path, python3, tmp_path / "absent") == "python3"


def _interpreter(path, version=(3, 12), venv=True):
    """A fake $PYTHON answering the interpreter checks: its version, and whether venv imports."""
    path.write_text(
        f"#!{os.path.realpath(sys.executable)}\n"
        "import sys\n"
        + ("" if venv else "sys.modules['venv'] = None\n")
        + f"sys.version_info = {version!r}\n"
        "exec(sys.argv[2])\n"
    )
    path.chmod(0o755)
    return path


@pytest.mark.parametrize(
    "case, message",
    [
        ("missing", "does not exist"),
        ("folder", "is a folder, not an interpreter"),
        ("not_executable", "is not executable"),
        ("not_on_path", "is not found on PATH"),
        ("not_python", "does not run as Python"),
        ("python2", "is Python 2.7"),
        ("python39", "is Python 3.9"),
        (
            "no_venv",
            "(Python 3.12) cannot make a venv: no venv or ensurepip module (Debian: apt install python3-venv)",
        ),
    ],
)
def test_a_python_that_cannot_make_the_venv_is_one_line(tmp_path, case, message):
    """Issue 59, item 6: $PYTHON was used unchecked (bash's own errors, exit 127 or 126, after the line
    "creating ... with  (torch"); a Python 2-like one was not version-checked."""
    paths = {
        "missing": tmp_path / "nowhere" / "python",
        "folder": tmp_path,
        "not_on_path": "no_such_python_here",
        "not_python": "/bin/true",
        "python2": _interpreter(tmp_path / "py2", (2, 7)),
        "python39": _interpreter(tmp_path / "py39", (3, 9)),
        "no_venv": _interpreter(tmp_path / "novenv", venv=False),
    }
    if case == "not_executable":
        paths[case] = tmp_path / "plain"
        paths[case].write_text("print(1)\n")
        paths[case].chmod(0o644)
    env = {"PATH": "/usr/bin:/bin", "PYTHON": str(paths[case]), "VENV": str(tmp_path / "venv")}
    out = subprocess.run(["bash", str(SCRIPT)], env=env, capture_output=True, text=True)
    err = out.stderr.strip()
    assert out.returncode == 2 and out.stdout == ""
    assert (
        err
        == f"[setup] error: PYTHON={paths[case]} {message}; allowed: a Python >= 3.11 with the venv module (PYTHON=python3.11, or unset for python3)"
    )
    assert not (tmp_path / "venv").exists()
