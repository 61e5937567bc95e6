"""Agents the throughput and latency benchmarks run, written the way a user writes them.

Runner processes import them by reference (``bench.bench_agents:chat_once``) from the repo root:
``bench`` is a namespace package there, and ``adapters.runner.processes.load_agent`` puts the working
directory on ``sys.path``, so start the benchmarks from the repo root.

``chat_once``: one ``openai.AsyncOpenAI`` client per process, ``with_options(base_url=llm.endpoint)`` per
rollout. ``quickstart``: the README's quick-start agent, a client built in every rollout (which cost 30-50
ms of CPU each before runner processes shared the TLS context, ``adapters/runner/tls.py``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, cast

import agentlightning as agl
import openai

Task = dict[str, Any]
rollout = cast(Callable[[Callable[..., Any]], agl.LitAgent[Task]], agl.rollout)

_client = openai.AsyncOpenAI(api_key="unused-on-loopback", base_url="http://127.0.0.1:9/v1", max_retries=0)


@rollout
async def chat_once(task: Task, llm: agl.LLM) -> float:
    """One chat call to the policy, then the task's reward (``sleep_s`` first, if any: warm-up only)."""
    if task.get("sleep_s"):
        await asyncio.sleep(task["sleep_s"])
    client = _client.with_options(base_url=llm.endpoint, timeout=120.0)
    reply = await client.chat.completions.create(
        model=llm.model, messages=[{"role": "user", "content": f"question {task['n']}"}]
    )
    if not reply.choices:
        raise RuntimeError("the policy returned no choice")
    return float(task["reward"])


@rollout
async def quickstart(task: Task, llm: agl.LLM) -> float:
    """The README's quick-start agent (its client built in the rollout), after ``sleep_s`` (a tool, a service)."""
    if task.get("sleep_s"):
        await asyncio.sleep(task["sleep_s"])
    client = openai.AsyncOpenAI(base_url=llm.endpoint, api_key="unused")
    reply = await client.chat.completions.create(
        model=llm.model, messages=[{"role": "user", "content": f"question {task['n']}"}], max_tokens=32
    )
    if not reply.choices:
        raise RuntimeError("the policy returned no choice")
    return float(task["reward"])
