# shellcheck shell=bash
# Source me (do not run me):  source scripts/slurm_env.sh
# Points Slurm's clients (sbatch, squeue, sacct, submitit) at the local cluster of scripts/slurm_local.sh.
# No `set -euo pipefail` here on purpose: it would leak into the shell that sources this file.
_pspo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export SLURM_CONF="${PSPO_SLURM_DIR:-$_pspo_root/.slurm}/etc/slurm.conf"
[ -f "$SLURM_CONF" ] || echo "[slurm_env] $SLURM_CONF is missing: run scripts/slurm_local.sh start" >&2
unset _pspo_root
