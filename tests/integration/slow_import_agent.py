"""An agent whose module takes 5 s to import (a heavy framework, a model loaded at import)."""

from __future__ import annotations

import time

import agentlightning as agl

time.sleep(5.0)


@agl.rollout
def slow_to_import(task: dict[str, float], llm: agl.LLM) -> float:
    return task["reward"]
