"""Agents that look at the process they run in, or fail quietly: how runner processes treat them."""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Callable
from typing import Any, cast

import agentlightning as agl

rollout = cast(Callable[[Callable[..., Any]], agl.LitAgent[Any]], agl.rollout)


@rollout
def prompting_agent(task: dict[str, Any], llm: agl.LLM) -> float:
    """Asks the terminal, as CrewAI's first run does ("view your execution traces? [y/N]"); fails if it could."""
    if sys.stdin.read() != "":
        raise RuntimeError("stdin gave an answer: the runner has a terminal's stdin")
    try:
        with open("/dev/tty"):
            raise RuntimeError("/dev/tty opened: the runner has a controlling terminal to prompt on")
    except OSError:
        pass
    if os.getsid(0) != os.getpid():
        raise RuntimeError("the runner shares its session with the trainer")
    return 1.0


@rollout
def quietly_failing_agent(task: dict[str, Any], llm: agl.LLM) -> float:
    """Catches its tool's error, logs it as frameworks do, and scores 0 without ever calling the policy."""
    try:
        raise ConnectionError("the calculator MCP server is down")
    except ConnectionError:
        logging.getLogger("some_framework.tools").exception("tool 'calculator' failed")
    return 0.0


@rollout
def error_span_agent(task: dict[str, Any], llm: agl.LLM) -> float:
    """Its framework records a failed tool call on an OpenTelemetry span, logs nothing, and the agent scores 0."""
    from opentelemetry import trace
    from opentelemetry.trace import Status, StatusCode

    with trace.get_tracer("some_framework").start_as_current_span("tool.calculator") as span:
        span.record_exception(ConnectionError("the calculator MCP server is down"))
        span.set_status(Status(StatusCode.ERROR))
    return 0.0
