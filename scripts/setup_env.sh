#!/usr/bin/env bash
# Create the project's virtual environment if it is missing (idempotent).
# torch is installed first and pinned: an unpinned torch (or trl/accelerate into an env without torch)
# pulls a multi-GB CUDA build. PSPO_TORCH_INDEX can point pip at another index (e.g. a CUDA one).
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${VENV:-.venv}
# The interpreter: $PYTHON where set. Otherwise python3, unless it is a build without optimizations (pyenv and
# source builds are, unless configured with --enable-optimizations or --with-lto) and the system's python3
# (/usr/bin/python3; PSPO_SYSTEM_PYTHON for the tests) is 3.11 or newer and can make a venv: distributions
# build theirs optimized (Debian's: PGO, LTO, libpython linked in), and the test suite took ~0.8x the CPU on
# it (docs/benchmarks.md).
# PYTHON=python3 keeps the first. `scripts/setup_env.sh --print-python` prints the choice and does nothing else.
SYSTEM_PY=${PSPO_SYSTEM_PYTHON:-/usr/bin/python3}
unoptimized='import sys, sysconfig; a = sysconfig.get_config_var("CONFIG_ARGS") or ""; sys.exit("--enable-optimizations" in a or "--with-lto" in a)'
usable='import sys, ensurepip, venv; sys.exit(sys.version_info < (3, 11))'
PY=${PYTHON:-python3}
if [ -z "${PYTHON:-}" ] && [ -x "$SYSTEM_PY" ] && [ "$(command -v python3)" != "$SYSTEM_PY" ] \
  && python3 -c "$unoptimized" 2>/dev/null && "$SYSTEM_PY" -c "$usable" 2>/dev/null; then
  PY=$SYSTEM_PY
fi
if [ "${1:-}" = --print-python ]; then echo "$PY"; exit 0; fi
stamp="$VENV/.installed-$(sha256sum pyproject.toml | cut -c1-12)"
if [ -f "$stamp" ]; then exit 0; fi
# The interpreter the venv is made with: it exists, runs, is Python >= 3.11 and can make a venv; one line
# otherwise (bash's own "No such file" / "Is a directory", exit 127 / 126, came after a half-printed line).
allowed="allowed: a Python >= 3.11 with the venv module (PYTHON=python3.11, or unset for python3)"
bad_python() { echo "[setup] error: PYTHON=$PY $1; $allowed" >&2; exit 2; }
case $PY in
  */*) py_path=$PY ;;  # a path: checked as it is
  *) py_path=$(command -v -- "$PY" 2>/dev/null) || bad_python "is not found on PATH" ;;
esac
[ -d "$py_path" ] && bad_python "is a folder, not an interpreter"
[ -e "$py_path" ] || bad_python "does not exist"
[ -x "$py_path" ] || bad_python "is not executable"
# Answers are read from its output, not its exit status alone (a program that is no Python may exit 0).
py_version=$("$PY" -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null) || py_version=
[[ $py_version =~ ^([0-9]+)\.([0-9]+)$ ]] || bad_python "does not run as Python"
(( BASH_REMATCH[1] > 3 || (BASH_REMATCH[1] == 3 && BASH_REMATCH[2] >= 11) )) || bad_python "is Python $py_version"
[ "$("$PY" -c 'import ensurepip, venv; print("venv")' 2>/dev/null)" = venv ] \
  || bad_python "(Python $py_version) cannot make a venv: no venv or ensurepip module (Debian: apt install python3-venv)"
echo "[setup] creating $VENV with $("$PY" -c 'import sys; print(sys.executable, sys.version.split()[0])') (torch 2.13.0 first, then the project with its dev extra)" >&2
if [ "$PY" = "$SYSTEM_PY" ] && [ -z "${PYTHON:-}" ]; then
  echo "[setup] python3 ($(command -v python3)) was built without optimizations: using $SYSTEM_PY (PYTHON=python3 keeps it)" >&2
fi
[ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
"$VENV/bin/pip" install -q --upgrade pip >/dev/null 2>&1 || true
# --no-compile, then compileall over every core: pip byte-compiles the installed files one after another
# (~35 CPU s, half the set-up on 2 cores). Left out: the packages' own test suites, transformers' model
# families other than those imported here (a file left out compiles when imported, as without compileall:
# 10,360 of 16,210 files, 25 s instead of 34 on 2 cores) and a torch test helper in Python 3.12 syntax.
if [ -n "${PSPO_TORCH_INDEX:-}" ]; then
  "$VENV/bin/pip" install -q --no-compile torch==2.13.0 --index-url "$PSPO_TORCH_INDEX"
else
  "$VENV/bin/pip" install -q --no-compile torch==2.13.0
fi
# The project and its dependencies through uv, pinned (it resolves and installs in parallel: ~12 s less than pip
# here, the same versions; docs/benchmarks.md). uv reads no pip.conf (an index or certificate set there): where
# it cannot be installed or cannot install the project, pip does, and the set-up says so.
if ! { "$VENV/bin/pip" install -q uv==0.13.9 && "$VENV/bin/uv" pip install -q --python "$VENV/bin/python" -e ".[dev]"; }; then
  echo "[setup] uv could not install the project (above): pip installs it instead (slower)" >&2
  "$VENV/bin/pip" install -q --no-compile -e ".[dev]"
fi
site=$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
"$VENV/bin/python" -m compileall -q -j 0 \
  -x 'py312_intrinsics|/tests/|/transformers/models/(?!__init__\.py|auto/|qwen2/|bert/|encoder_decoder/)' "$site" >/dev/null \
  || echo "[setup] warning: some installed files did not byte-compile (they compile when imported: slower starts)" >&2
rm -f "$VENV"/.installed-*
touch "$stamp"
echo "[setup] done: $VENV" >&2
