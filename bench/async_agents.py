"""A latency-bound agent for bench/bench_async.py, written the way a user writes one.

The demo's task and reward (a number word -> its digit), but before its one LLM call the agent
waits a long-tailed random time, as an agent that calls tools, searches or waits on an API does:
lognormal with a median of ``MEDIAN_S`` (1 s) and ``SIGMA`` 1.0, capped at ``CAP_S`` (10 s), so
half the rollouts wait under a second and about one in ten waits 3.6 s or more.

The wait is drawn from an RNG seeded by the task's content alone (a SHA-256 of its canonical JSON),
never by a counter, a clock or a rollout id: every rollout of the same task waits the same time, in
every run and every mode, so the synchronous and asynchronous runs of the benchmark see the same
latencies. Runner processes import it as ``bench.async_agents:latency_agent`` from the repo root.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import json
import math
import os
import random
from collections.abc import Mapping
from typing import Any

import agentlightning as agl
import openai

from app.demo.task import digit_reward, user_message

MEDIAN_S = 1.0
SIGMA = 1.0
CAP_S = 10.0

_client = openai.AsyncOpenAI(
    base_url="http://127.0.0.1/v1", api_key=os.environ.get("AGL_TINKER_MASTER_KEY", "unused"), max_retries=0
)
"""One client per process (a client per rollout costs ~20 ms of CPU); each rollout points it at its endpoint."""


@functools.cache
def latency_s(task_json: str) -> float:
    """The wait for a task, from its canonical JSON only (same task, same wait, in every process and run)."""
    seed = int.from_bytes(hashlib.sha256(task_json.encode()).digest()[:8], "big")
    return min(CAP_S, random.Random(seed).lognormvariate(math.log(MEDIAN_S), SIGMA))


def task_latency_s(task: Mapping[str, Any]) -> float:
    return latency_s(json.dumps(task, sort_keys=True, separators=(",", ":")))


@agl.rollout
async def latency_agent(task: dict[str, Any], llm: agl.LLM) -> float:
    """Waits the task's latency (a tool call, a search...), then asks the policy for the digit; reward 1 if exact."""
    await asyncio.sleep(task_latency_s(task))
    client = _client.with_options(base_url=llm.endpoint, timeout=120.0)
    reply = await client.chat.completions.create(
        model=llm.model,
        messages=[{"role": "user", "content": user_message(task)}],  # type: ignore[arg-type]
    )
    return digit_reward(reply.choices[0].message.content or "", task["digit"])
