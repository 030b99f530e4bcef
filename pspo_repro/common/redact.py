"""Keep credentials out of result files: run.json, evaluation JSON ``config`` fields, metrics, and every
table, caption, title, quote and summary the analysis commands render.

A resolved config can pick up a secret through an interpolation (``${oc.env:WANDB_API_KEY}``) or a
command-line override; results are shared and committed, so every record is passed through ``redact``
before it is written, and every output set of aggregate, regime, claims and the leaderboard through
``redact_files`` (figures, whose text cannot be edited once drawn, are drawn from redacted text). No torch
imports.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

REDACTED = "<redacted>"
# Environment variables that hold credentials (matched by name), and config keys that look like one.
_SECRET_ENV_RE = re.compile(r"(TOKEN|API_KEY|APIKEY|SECRET|PASSWORD|PASSWD|CREDENTIAL|ACCESS_KEY)", re.I)
# Whole key names only: "token_budget", "num_tokens" and "max_new_tokens" are ordinary settings.
_SECRET_KEY_RE = re.compile(
    r"^(?:.*_)?(?:api_?key|secret|password|passwd|credentials?|access_?key|(?:auth|access|hub|hf)_?token)$"
    r"|^token$",
    re.I,
)
# Short values ("1", "true") would redact ordinary text; a credential is longer than this.
_MIN_SECRET_LEN = 8


def _secret_env() -> dict[str, str]:
    """The credential-like environment variables (WANDB_API_KEY, HF_TOKEN, ...) with values long enough."""
    return {
        k: v for k, v in os.environ.items() if _SECRET_ENV_RE.search(k) and v and len(v) >= _MIN_SECRET_LEN
    }


def secret_values() -> list[str]:
    """Values of the credential-like environment variables, longest first."""
    return sorted(set(_secret_env().values()), key=len, reverse=True)


def secret_names_in(args: list[str]) -> list[str]:
    """Names of the credential-like environment variables whose value appears in one of ``args``."""
    return sorted(k for k, v in _secret_env().items() if any(v in a for a in args))


def redact(obj: Any, _secrets: list[str] | None = None) -> Any:
    """A copy of ``obj`` (JSON-like) with credential-named keys' values and any secret env value replaced."""
    secrets = secret_values() if _secrets is None else _secrets
    if isinstance(obj, dict):
        return {
            k: (
                REDACTED
                if isinstance(k, str) and _SECRET_KEY_RE.search(k) and v not in (None, "")
                else redact(v, secrets)
            )
            for k, v in obj.items()
        }
    if isinstance(obj, list | tuple):
        return type(obj)(redact(v, secrets) for v in obj)
    if isinstance(obj, str):
        for s in secrets:
            if s in obj:
                obj = obj.replace(s, REDACTED)
    return obj


def redact_files(files: dict[Path, str | bytes]) -> dict[Path, str | bytes]:
    """An output set (path -> text or bytes) with every credential value in its text replaced
    (``redact``): the analysis commands pass each set through here on its way to ``atomic.write_set``. Bytes
    (rendered figures) are passed as they are: their labels come from text already redacted."""
    secrets = secret_values()
    return {
        path: redact(content, secrets) if isinstance(content, str) else content
        for path, content in files.items()
    }
