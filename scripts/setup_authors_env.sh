#!/usr/bin/env bash
# Create .venv-authors: the stack the paper ran, TRL 0.25.1 with the PSPO authors' two patches applied
# (idempotent; a stamp file keyed on the pins, this script and the patches).
#
# The authors' code (github MCDwyer/GR-PSPO, MIT) is read from the peer-code folder at setup time and
# patched into the installed TRL; none of it is committed here. The folder is PSPO_PEER_CODE, else
# ../shared/reference/peer-code/gr-pspo beside the repo, else /work/shared/reference/peer-code/gr-pspo.
#
# Pins: TRL 0.25.1 (the version the patches target; the authors' requirements.txt says 0.21.0, which the
# patches do not apply to) requires transformers>=4.56.1 and accelerate>=1.4.0; transformers 4.57.1 and
# accelerate 1.11.0 are the releases current when TRL 0.25.1 came out (TRL 0.25 predates transformers 5).
# torch 2.13.0 (+cpu, from /opt/wheels or PSPO_TORCH_INDEX) goes in first: an unpinned torch, or trl into
# an environment without torch, pulls a multi-GB CUDA build. The project itself is NOT installed here:
# tests/training/test_authors_stack_parity.py runs in .venv and calls scripts/authors_loss.py in this one.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${AUTHORS_VENV:-.venv-authors}
PY=${PYTHON:-python3}
PINS=("trl==0.25.1" "transformers==4.57.1" "accelerate==1.11.0" "datasets==4.4.1")

peer=${PSPO_PEER_CODE:-}
if [ -z "$peer" ]; then
  for d in ../shared/reference/peer-code/gr-pspo /work/shared/reference/peer-code/gr-pspo; do
    if [ -f "$d/grpotrainer.patch" ]; then peer=$d; break; fi
  done
fi
if [ -z "$peer" ] || [ ! -f "$peer/grpotrainer.patch" ] || [ ! -f "$peer/grpoconfig.patch" ]; then
  echo "[setup-authors] the authors' patches were not found (PSPO_PEER_CODE='${PSPO_PEER_CODE:-}'," \
    "../shared/reference/peer-code/gr-pspo, /work/shared/reference/peer-code/gr-pspo): need" \
    "grpotrainer.patch and grpoconfig.patch" >&2
  exit 2
fi

key=$( (printf '%s\n' "${PINS[@]}"; cat "$0" "$peer/grpotrainer.patch" "$peer/grpoconfig.patch") \
  | sha256sum | cut -c1-12)
stamp="$VENV/.installed-$key"
if [ -f "$stamp" ]; then exit 0; fi

t0=$(date +%s)
echo "[setup-authors] creating $VENV: torch 2.13.0, ${PINS[*]}, the authors' patches from $peer" >&2
[ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
PIP=("$VENV/bin/pip" install -q)
"$VENV/bin/pip" install -q --upgrade pip >/dev/null 2>&1 || true
if [ -n "${PSPO_TORCH_INDEX:-}" ]; then
  "${PIP[@]}" "torch==2.13.0" --index-url "$PSPO_TORCH_INDEX"
else
  "${PIP[@]}" "torch==2.13.0"
fi
"${PIP[@]}" "${PINS[@]}"

# Patch the installed files. A rerun after a failed stamp reinstalls TRL first, so the patches always
# meet the pristine 0.25.1 files (patch refuses a second application; a half-patched TRL is never kept).
trl_dir=$("$VENV/bin/python" -c 'import os, trl; print(os.path.dirname(trl.__file__))')
if grep -q trust_region_method "$trl_dir/trainer/grpo_trainer.py" "$trl_dir/trainer/grpo_config.py"; then
  "${PIP[@]}" --force-reinstall --no-deps "trl==0.25.1"
fi
patch --forward --batch -s "$trl_dir/trainer/grpo_config.py" "$peer/grpoconfig.patch"
patch --forward --batch -s "$trl_dir/trainer/grpo_trainer.py" "$peer/grpotrainer.patch"
find "$trl_dir/trainer" -name '*.orig' -delete

# Sanity: the pins, and the patched fields where the authors put them.
"$VENV/bin/python" - <<'EOF'
import importlib.metadata as md
want = {"trl": "0.25.1", "transformers": "4.57.1", "accelerate": "1.11.0", "torch": "2.13.0"}
got = {k: md.version(k).split("+")[0] for k in want}
assert got == want, f"pins drifted in .venv-authors: {got} != {want}"
from trl import GRPOConfig
args = GRPOConfig(output_dir="/tmp/authors-env-check", trust_region_method="pspo", smoothing_alpha=0.1,
                  bf16=False, report_to=[])
assert (args.trust_region_method, args.smoothing_alpha) == ("pspo", 0.1)
print(f"[setup-authors] trl {md.version('trl')} (patched: trust_region_method, smoothing_alpha), "
      f"transformers {md.version('transformers')}, torch {md.version('torch')}")
EOF
rm -f "$VENV"/.installed-*
touch "$stamp"
echo "[setup-authors] done: $VENV in $(( $(date +%s) - t0 )) s, $(du -sh "$VENV" | cut -f1)" >&2
