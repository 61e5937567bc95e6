"""The per-machine cache every checkout shares: ``$AGL_TINKER_CACHE``, default ``~/.cache/agl-tinker``."""

from __future__ import annotations

import os
from pathlib import Path

CACHE_ENV = "AGL_TINKER_CACHE"


def cache_root() -> Path:
    configured = os.environ.get(CACHE_ENV, "").strip()
    return Path(configured).expanduser() if configured else Path.home() / ".cache" / "agl-tinker"
