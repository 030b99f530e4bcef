"""Whether the Hugging Face hub can be reached, asked once per process before the first hub read.

Offline without ``HF_HUB_OFFLINE``, ``huggingface_hub`` retries every request for about 50 s before it gives
up (measured: 51 s for a hub model's tokenizer, 26 s for a hub dataset, on a machine with no network).
``offline_unless_reachable`` tries one TCP connection to the hub's host first (a few seconds at most); when
none opens it switches this process to offline mode, so files already in the local cache still load and
anything else fails at once with the library's own "not in the cache" error. No package imports.
"""

from __future__ import annotations

import functools
import os
import socket
import sys
from urllib.parse import urlparse

TRUE = ("1", "ON", "YES", "TRUE")


def offline_requested() -> bool:
    """True when the environment already asks for offline mode (``HF_HUB_OFFLINE`` or ``TRANSFORMERS_OFFLINE``)."""
    value = os.environ.get("HF_HUB_OFFLINE") or os.environ.get("TRANSFORMERS_OFFLINE") or ""
    return value.upper() in TRUE


def hub_host() -> tuple[str, int]:
    """The host and port of the hub endpoint (``HF_ENDPOINT``, default huggingface.co:443)."""
    url = urlparse(os.environ.get("HF_ENDPOINT") or "https://huggingface.co")
    return url.hostname or "huggingface.co", url.port or (80 if url.scheme == "http" else 443)


@functools.cache
def _reachable(host: str, port: int, timeout: float) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:  # no DNS, no route, refused, timed out
        return False


def set_offline() -> None:
    """Offline mode for this process and its children: the environment, and the flags of ``huggingface_hub``
    and ``datasets`` where they are imported already (both read the environment once, at import)."""
    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ["HF_DATASETS_OFFLINE"] = "1"
    if (constants := sys.modules.get("huggingface_hub.constants")) is not None:
        constants.HF_HUB_OFFLINE = True
    if (config := sys.modules.get("datasets.config")) is not None:
        config.HF_HUB_OFFLINE = config.HF_DATASETS_OFFLINE = True


def offline_unless_reachable(timeout: float = 3.0) -> bool:
    """True when hub reads are local-only: offline mode was asked for, or the hub's host took no TCP
    connection within ``timeout`` seconds (then this process is switched to offline mode: ``set_offline``)."""
    if offline_requested():
        return True
    if _reachable(*hub_host(), timeout):
        return False
    set_offline()
    return True
