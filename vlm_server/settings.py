"""Environment variables the server reads (all of them, in one place).

* ``VLM_SERVER_API_KEY``: the bearer key clients must send (``--api-key`` wins).
* ``VLM_SERVER_LOG_LEVEL``: uvicorn's log level (default ``info``).
* ``VLM_SERVER_CACHE``: where the default random test model is created.
"""

from __future__ import annotations

import os


def api_key() -> str | None:
    return os.environ.get("VLM_SERVER_API_KEY") or None


def log_level() -> str:
    return os.environ.get("VLM_SERVER_LOG_LEVEL", "info")
