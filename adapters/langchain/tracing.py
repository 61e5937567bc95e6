"""Where LangChain is installed, its runs traced as agent spans (``adapters.langchain.spans``); elsewhere nothing.

What a runner whose tracer has no LangChain handler of its own calls once, with its tracer provider: the
handler it returns serves ``tracer.get_langchain_handler()`` (the way Agent-lightning's LangGraph agents
pass it), and it is added to every LangChain run of the process anyway, so an ``@agl.rollout`` agent that
passes nothing is traced too. Importing this module imports nothing of LangChain (an optional extra,
``.[langgraph]``).
"""

from __future__ import annotations

import importlib.util
from typing import Any

import opentelemetry.trace as trace_api


def instrument_langchain(tracer_provider: trace_api.TracerProvider) -> Any | None:
    """The process's LangChain handler on ``tracer_provider`` (a ``BaseCallbackHandler``); ``None`` without it."""
    if importlib.util.find_spec("langchain_core") is None:
        return None
    # Imported by name, so that type checks without the optional LangChain follow nothing into it.
    return importlib.import_module("adapters.langchain.spans").register(tracer_provider)
