"""Agent environments for the tests, built (or taken from the cache) by ``adapters.runner.agent_env``.

A build that fails skips the test only when the package index cannot be reached at all, which a direct
request to the index decides (not uv's wording); any other failure fails the test. A cached environment
needs no index, so a machine offline still runs the tests whose environments it has.
"""

from __future__ import annotations

import os
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from adapters.runner.agent_env import AgentEnv, AgentEnvError, ensure_agent_env

INDEX_TIMEOUT_S = 10.0
"""How long the index has to answer the reachability check."""


def package_index() -> str:
    """The index uv installs from: ``$UV_DEFAULT_INDEX`` (or the older ``$UV_INDEX_URL``), else PyPI."""
    configured = os.environ.get("UV_DEFAULT_INDEX") or os.environ.get("UV_INDEX_URL") or ""
    return configured.strip() or "https://pypi.org/simple/"


def index_unreachable(url: str, timeout_s: float = INDEX_TIMEOUT_S) -> str | None:
    """Why ``url`` cannot be reached at all, or None when it answers (any HTTP status is an answer)."""
    try:
        with urllib.request.urlopen(urllib.request.Request(url, method="HEAD"), timeout=timeout_s):
            return None
    except urllib.error.HTTPError:
        return None
    except (OSError, ValueError) as error:  # URLError, timeouts, refused connections, a malformed URL
        return f"the package index {url} cannot be reached ({error})"


def agent_env_or_skip(requirements: Path) -> AgentEnv:
    """The environment for ``requirements``; a skip only where its build failed with the index unreachable."""
    try:
        return ensure_agent_env(requirements, log=lambda line: print(line, flush=True))
    except AgentEnvError as error:
        unreachable = index_unreachable(package_index())
        if unreachable is None:
            raise
        pytest.skip(f"cannot build the environment for {requirements.name}: {unreachable} (the build: {error})")
