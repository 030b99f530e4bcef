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
# Environment variables that hold credentials, matched by name: the usual words anywhere (HF_TOKEN,
# WANDB_API_KEY, AWS_SECRET_ACCESS_KEY, DB_PASSWORD) and the usual endings (OPENAI_KEY, DB_PASS, MYSQL_PWD).
_SECRET_ENV_RE = re.compile(
    r"TOKEN|API_?KEY|SECRET|PASSWORD|PASSWD|CREDENTIAL|ACCESS_KEY|PRIVATE_KEY|AUTH"
    r"|(?:^|_)(?:KEY|PASS|PWD|PAT)$",
    re.I,
)
# Whole key names only: "token_budget", "num_tokens" and "max_new_tokens" are ordinary settings.
_SECRET_KEY_RE = re.compile(
    r"^(?:.*_)?(?:api_?key|secret|password|passwd|credentials?|access_?key|(?:auth|access|hub|hf)_?token)$"
    r"|^token$",
    re.I,
)
# Short values ("1", "true") would redact ordinary text; a credential is longer than this.
_MIN_SECRET_LEN = 8
# Values of credential shape whatever their variable's name: the prefixes of common issuers (Hugging Face,
# OpenAI/Anthropic, GitHub, GitLab, Slack, AWS access key ids, Stripe, Google API keys, JWTs) ...
_SECRET_PREFIX_RE = re.compile(
    r"^(?:hf_|sk-|sk_|ghp_|gho_|ghs_|ghu_|github_pat_|glpat-|xox[abposr]-|AKIA|ASIA|rk_live_|pk_live_|AIza|eyJ)"
    r"[A-Za-z0-9_\-.=+/]{8,}$"
)
# ... and long high-entropy strings: token characters only, with a run of 16+ mixing case and digits.
_TOKEN_CHARS_RE = re.compile(r"^[A-Za-z0-9_\-+=.~/]{20,}$")
_MIN_ENTROPY_BITS = 3.5  # per character; a random base62 string of 20+ characters has about 4


def _entropy(text: str) -> float:
    """Shannon entropy of ``text``'s characters, in bits per character."""
    import math
    from collections import Counter

    n = len(text)
    return -sum(c / n * math.log2(c / n) for c in Counter(text).values())


def _is_path(value: str) -> bool:
    """A value that names a file or folder (``/a/b``, ``~/x``, ``./x``, or one that exists): never a secret
    by shape, and redacting it would blank every results path that starts with it."""
    return value.startswith(("/", "~", "./", "../")) or os.path.exists(value)


def credential_shaped(value: str) -> bool:
    """Whether ``value`` looks like a credential by itself: an issuer's prefix (``hf_...``, ``sk-...``) or a
    long high-entropy word (20+ token characters with a 16+ run of upper and lower case and digits; a path,
    a model name, or a hex digest such as a git commit, is not one)."""
    if _SECRET_PREFIX_RE.match(value):
        return True
    if not _TOKEN_CHARS_RE.match(value) or _is_path(value) or re.fullmatch(r"[0-9a-fA-F]+", value):
        return False
    # Its longest run between separators: a random key is one long run, a name (Qwen2.5-Math-1.5B) short words.
    word = max(re.split(r"[-_.~/+=]", value), key=len)
    mixed = all(re.search(cls, word) for cls in (r"[a-z]", r"[A-Z]", r"[0-9]"))
    return len(word) >= 16 and mixed and _entropy(word) >= _MIN_ENTROPY_BITS


def _secret_env() -> dict[str, str]:
    """The environment variables that hold a credential: named like one (``_SECRET_ENV_RE``) with a value
    long enough that is not a path, or holding a value of credential shape (``credential_shaped``)."""
    out = {}
    for k, v in os.environ.items():
        if not v or len(v) < _MIN_SECRET_LEN:
            continue
        if (_SECRET_ENV_RE.search(k) and not _is_path(v)) or credential_shaped(v):
            out[k] = v
    return out


def secret_values() -> list[str]:
    """Values of the credential-like environment variables, longest first."""
    return sorted(set(_secret_env().values()), key=len, reverse=True)


def secret_names_in(args: list[str]) -> list[str]:
    """Names of the credential-like environment variables whose value appears in one of ``args``."""
    return sorted(k for k, v in _secret_env().items() if any(v in a for a in args))


def redact_text(text: str, secrets: list[str] | None = None) -> str:
    """``text`` with every credential value of the environment (``secret_values``) replaced by REDACTED."""
    for s in secret_values() if secrets is None else secrets:
        if s in text:
            text = text.replace(s, REDACTED)
    return text


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
        return redact_text(obj, secrets)
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


# The values ``install`` replaces: set by its latest call (the environment a command starts with), read by
# the wrapped streams and the record factory at each write, so a later command in the same process (tests,
# the warm-start server's children) redacts its own environment's values.
_installed: list[str] = []


class _RedactingStream:
    """A text stream (stdout, stderr) that writes each piece of text with the installed credential values
    replaced; everything else (``fileno``, ``isatty``, ``buffer``, ``encoding``) is the wrapped stream's."""

    def __init__(self, stream: Any) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        self._stream.write(redact_text(text, _installed) if isinstance(text, str) else text)
        return len(text)  # what the caller wrote, as TextIOBase.write reports

    def writelines(self, lines: Any) -> None:
        for line in lines:
            self.write(line)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def _redacting_factory(factory: Any) -> Any:
    """A log-record factory that makes ``factory``'s records with the installed credential values replaced."""
    import logging

    def make(*args: Any, **kwargs: Any) -> logging.LogRecord:
        record = factory(*args, **kwargs)
        if _installed:
            text = record.getMessage()
            if any(s in text for s in _installed):
                record.msg, record.args = redact_text(text, _installed), None
        return record

    make._pspo_redacts = True  # type: ignore[attr-defined]
    return make


def install() -> None:
    """From here on, everything this process prints (error lines, progress, Hydra's and the stages' console
    logs, hence a pipeline's work/logs/*.log, which are its children's stderr) and every log record (Hydra's
    log files too) has the environment's credential values replaced. ``cli.run_command`` calls it first, for
    every command; a later call takes the environment of that moment and wraps nothing twice."""
    import logging
    import sys

    _installed[:] = secret_values()
    if not _installed:
        return
    for name in ("stdout", "stderr"):
        stream = getattr(sys, name)
        if stream is not None and not isinstance(stream, _RedactingStream):
            setattr(sys, name, _RedactingStream(stream))
    factory = logging.getLogRecordFactory()
    if not getattr(factory, "_pspo_redacts", False):
        logging.setLogRecordFactory(_redacting_factory(factory))
