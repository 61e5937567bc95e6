"""The writer/checker graph of ``examples/langgraph_roles`` in the other shapes users give it.

``roles_rollout`` is an ``@agl.rollout`` function that passes no LangChain callback at all: what the runner
traces by itself. ``trained_writer`` is the example's ``LitAgent`` made with the deprecated
``trained_agents="writer"``, which stands for ``agent_match`` when the config gives none.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any, cast

import agentlightning as agl
from langchain_openai import ChatOpenAI

from examples.langgraph_roles.agent import WriterChecker, build_graph, reward, start

rollout = cast(Callable[[Callable[..., Any]], agl.LitAgent[dict[str, str]]], agl.rollout)


@rollout
async def roles_rollout(task: dict[str, str], llm: agl.LLM) -> float:
    chat = ChatOpenAI(base_url=llm.endpoint, model=llm.model, api_key="unused")
    final = await build_graph(chat).ainvoke(start(task))
    return reward(final["answer"], task["digit"])


with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    trained_writer = WriterChecker(trained_agents="writer")
