"""Shared set-up for tests that drive real Agent-lightning components."""

from __future__ import annotations

import os

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("TINKER_TELEMETRY", "0")
os.environ.setdefault("AGENTOPS_API_KEY", "")
