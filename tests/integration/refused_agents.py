"""Agents that call what the policy endpoint does not serve, for the tests of how a run reports it."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast

import agentlightning as agl
import openai

rollout = cast(Callable[[Callable[..., Any]], agl.LitAgent[Any]], agl.rollout)


@rollout
async def legacy_completions_agent(task: Any, llm: agl.LLM) -> float:
    """Calls the legacy ``POST /completions``, which the endpoint answers with a 404."""
    client = openai.AsyncOpenAI(base_url=llm.endpoint, api_key="unused", max_retries=0)
    await client.completions.create(model=llm.model, prompt="Guess a number.")
    return 1.0
