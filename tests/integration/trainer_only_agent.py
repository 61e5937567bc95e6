"""An agent whose module imports a package its runners' environment lacks (a trainer-only one, say)."""

from __future__ import annotations

import agentlightning as agl
import trainer_only_package_xyz  # type: ignore[import-not-found]  # missing on purpose


@agl.rollout
async def solve(task: str, llm: agl.LLM) -> float:
    return float(trainer_only_package_xyz.score(task))
