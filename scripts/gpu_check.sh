#!/usr/bin/env bash
# The prepared GPU check: training precision (fp32 parameters under bf16 autocast, and the share of weights
# that a few GRPO steps at lr 1e-6 change, printed as a "[gpu_check] precision:" line), then real-size speed
# and memory of both evaluation backends and of GRPO with TRL's colocated vLLM, on a random-init
# Qwen2.5-0.5B-architecture model, as one JSON (scripts/gpu_check.py).
#
#   bash scripts/gpu_check.sh --prepare      # HERE (PyPI reachable): wheels + GSM8K into .cache/gpu_check/
#   bash scripts/gpu_check.sh [ARGS]         # ON THE GPU MACHINE (no network): install offline, run,
#                                            # write $OUT/gpu_check.json (else results/gpu_check.json)
#   bash scripts/gpu_check.sh --dry-run      # anywhere: the same legs on CPU with the tiny architecture
#
# The device machine (one H200, no registry, 64 MiB carried with the working tree) runs its image's
# python3 (torch 2.11 CUDA, transformers 5.17.0, accelerate 1.15.0, ...). --prepare downloads the
# project's missing pure-Python dependencies (trl, hydra, datasets, math-verify, ...; ~6 MB) at the
# versions of .venv and copies GSM8K; carry `.cache/gpu_check` with the run. The project itself is used
# from the source tree (PYTHONPATH), not pip-installed: its torch==2.13.0 pin would make pip reach out.
#
# vLLM: the CUDA wheel vllm==0.31.0 needs torch==2.13.0 (+ torchvision 0.28.0, flashinfer ...), several GB
# that cannot be carried. Where `import vllm` fails and no $GPU_CHECK_DIR/vllm-wheels folder exists, the
# vLLM legs are recorded as skipped and GRPO falls back to transformers generate (said in the JSON).
# With GPU_CHECK_VLLM=1, --prepare also downloads vllm-wheels (for a machine that can take them).
#
# Budget: the whole check must finish in one 10-minute device call: install ~10-30 s, legs under
# --budget-s (default 510 s), and a hard `timeout` around everything. The JSON's "answers" block says, from
# the legs' figures: fp32 masters on CUDA, whether weights move at lr 1e-6, the first-pass ratio deviation,
# HF against vLLM evaluation throughput, and one real-size GRPO step's time and memory.
set -euo pipefail
cd "$(dirname "$0")/.."
PREP=${GPU_CHECK_DIR:-.cache/gpu_check}
WHEELS=$PREP/wheels
DATA=$PREP/data
PY=${PYTHON:-python3}
HARD_TIMEOUT=${GPU_CHECK_TIMEOUT:-570}
# The project's dependencies that the device image lacks (KINDS.md's package list), at .venv's versions.
MISSING='trl|datasets|dill|multiprocess|hydra-core|omegaconf|hydra-submitit-launcher|submitit|math-verify|latex2sympy2[-_]extended|tzdata'

prepare() {
  local src=${PSPO_DATA_DIR:-../shared/data}
  mkdir -p "$WHEELS" "$DATA/gsm8k"
  cp "$src/gsm8k/test.jsonl" "$src/gsm8k/train.jsonl" "$DATA/gsm8k/"
  [ -f "$src/gsm8k/LICENSE" ] && cp "$src/gsm8k/LICENSE" "$DATA/gsm8k/"
  local pins
  pins=$(.venv/bin/pip freeze | grep -i -E "^($MISSING)==" | grep -v -i '^antlr4')
  # Python 3.12 on the device: binary wheels only, no dependency resolution (the image has the rest).
  # shellcheck disable=SC2086
  .venv/bin/pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux2014_x86_64 --platform any \
    -d "$WHEELS" $pins
  # antlr4-python3-runtime 4.9.3 (hydra's pin) is published as an sdist only: build its pure-Python wheel.
  .venv/bin/pip wheel -q --no-deps "antlr4-python3-runtime==$(.venv/bin/pip freeze | sed -n 's/^antlr4-python3-runtime==//p')" -w "$WHEELS"
  if [ "${GPU_CHECK_VLLM:-0}" = 1 ]; then
    mkdir -p "$PREP/vllm-wheels"
    .venv/bin/pip download -q --only-binary=:all: --python-version 3.12 --implementation cp \
      --platform manylinux_2_28_x86_64 --platform manylinux2014_x86_64 --platform any \
      -d "$PREP/vllm-wheels" vllm==0.31.0 torch==2.13.0
  fi
  echo "[gpu_check] prepared $PREP: $(ls "$WHEELS" | wc -l) wheels, $(du -sh "$PREP" | cut -f1) (carry it: .cache/gpu_check)"
}

install() {
  local t0 ok=1
  t0=$(date +%s)
  if ! "$PY" -c "import trl, hydra, omegaconf, math_verify, datasets, submitit" >/dev/null 2>&1; then
    if ! ls "$WHEELS"/*.whl >/dev/null 2>&1; then
      echo "[gpu_check] the project's dependencies are missing and $WHEELS holds no wheels: run" \
           "'bash scripts/gpu_check.sh --prepare' on a machine with PyPI and carry .cache/gpu_check" >&2
      exit 2
    fi
    "$PY" -m pip install -q --no-index --no-deps "$WHEELS"/*.whl || ok=0
  fi
  if ! "$PY" -c "import vllm" >/dev/null 2>&1 && [ -d "$PREP/vllm-wheels" ]; then
    "$PY" -m pip install -q --no-index --find-links "$PREP/vllm-wheels" vllm==0.31.0 || ok=0
  fi
  export GPU_CHECK_INSTALL_S=$(( $(date +%s) - t0 ))
  GPU_CHECK_PIP_CHECK=$("$PY" -m pip check 2>&1 | head -20 || true)
  export GPU_CHECK_PIP_CHECK
  [ "$ok" = 1 ] || echo "[gpu_check] some wheels failed to install (see above); running anyway" >&2
  echo "[gpu_check] install: ${GPU_CHECK_INSTALL_S} s" >&2
}

case "${1:-}" in
  --prepare) prepare; exit 0 ;;
  --dry-run) PY=${PYTHON:-.venv/bin/python} ;;
esac
install  # a no-op where the dependencies import already

if [ -z "${PSPO_DATA_DIR:-}" ]; then
  if [ -d ../shared/data/gsm8k ]; then PSPO_DATA_DIR=$(cd ../shared/data && pwd); else PSPO_DATA_DIR=$PWD/$DATA; fi
fi
export PSPO_DATA_DIR PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_DATASETS_OFFLINE=1 WANDB_MODE=disabled
out=${OUT:-results}/gpu_check.json
work=${GPU_CHECK_WORK:-$(mktemp -d /tmp/gpu_check.XXXXXX)}
echo "[gpu_check] data $PSPO_DATA_DIR, work $work, result $out" >&2
rc=0
timeout -k 10 "$HARD_TIMEOUT" "$PY" scripts/gpu_check.py --out "$out" --work-dir "$work" "$@" || rc=$?
# The logs of each leg beside the JSON (the device returns at most 8 files from $OUT).
if [ -n "${OUT:-}" ]; then
  tar -czf "$OUT/gpu_check_logs.tar.gz" -C "$work" $(cd "$work" && ls ./*.log ./*.figures.json 2>/dev/null) 2>/dev/null || true
fi
exit "$rc"
