"""pspo-repro: GRPO with interchangeable trust-region methods (PSPO, arXiv 2509.21282)."""

__version__ = "0.1.0"

# A relative PSPO_DATA_DIR / PSPO_RESULTS_DIR / PSPO_LOG_DIR means the folder as seen from where the user
# started the command: fixed here, once, so child processes started from another folder agree.
from pspo_repro.common.paths import absolutize_env as _absolutize_env  # noqa: E402

_absolutize_env()
