#!/usr/bin/env bash
# Create the project's virtual environment if it is missing (idempotent).
# torch is installed first and pinned: an unpinned torch (or trl/accelerate into an env without torch)
# pulls a multi-GB CUDA build. PSPO_TORCH_INDEX can point pip at another index (e.g. a CUDA one).
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${VENV:-.venv}
PY=${PYTHON:-python3}
stamp="$VENV/.installed-$(sha256sum pyproject.toml | cut -c1-12)"
if [ -f "$stamp" ]; then exit 0; fi
echo "[setup] creating $VENV (torch 2.13.0 first, then the project with its dev extra)" >&2
[ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
"$VENV/bin/pip" install -q --upgrade pip >/dev/null 2>&1 || true
if [ -n "${PSPO_TORCH_INDEX:-}" ]; then
  "$VENV/bin/pip" install -q torch==2.13.0 --index-url "$PSPO_TORCH_INDEX"
else
  "$VENV/bin/pip" install -q torch==2.13.0
fi
"$VENV/bin/pip" install -q -e ".[dev]"
rm -f "$VENV"/.installed-*
touch "$stamp"
echo "[setup] done: $VENV" >&2
