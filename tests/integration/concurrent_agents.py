"""Agents for the concurrent runner's tests, written as users write them.

``interleaved_*`` hold a three-turn conversation with the policy and reward each turn as it goes,
pausing between calls so that concurrent rollouts interleave their calls and rewards; each turn's
prompt names its task and turn, and its reward is ``task["n"] + turn / 10``, so a span filed under
the wrong rollout shows. ``IN_AGENT`` counts rollouts inside an agent right now, ``PEAK`` the most.
"""

from __future__ import annotations

import asyncio
import random
import ssl
import threading
import time
from collections.abc import Callable
from typing import Any, cast

import agentlightning as agl
import openai

Task = dict[str, Any]
rollout = cast(Callable[[Callable[..., Any]], agl.LitAgent[Task]], agl.rollout)
TURNS = 3

_lock = threading.Lock()
IN_AGENT = 0
PEAK = 0


def _enter() -> None:
    global IN_AGENT, PEAK
    with _lock:
        IN_AGENT += 1
        PEAK = max(PEAK, IN_AGENT)


def _leave() -> None:
    global IN_AGENT
    with _lock:
        IN_AGENT -= 1


def reset_peak() -> None:
    global PEAK
    with _lock:
        PEAK = 0


def _history(task: Task, turn: int, history: list[dict[str, str]]) -> list[dict[str, str]]:
    return [*history, {"role": "user", "content": f"task {task['n']} turn {turn}: go on"}]


@rollout
async def interleaved_async(task: Task, llm: agl.LLM) -> None:
    client = openai.AsyncOpenAI(base_url=llm.endpoint, api_key="unused")
    _enter()
    try:
        history: list[dict[str, str]] = []
        for turn in range(TURNS):
            history = _history(task, turn, history)
            reply = await client.chat.completions.create(model=llm.model, messages=history)  # type: ignore[arg-type]
            history.append({"role": "assistant", "content": reply.choices[0].message.content or ""})
            await asyncio.sleep(random.uniform(0.0, 0.03))
            agl.emit_reward(task["n"] + turn / 10)
    finally:
        _leave()


@rollout
def interleaved_sync(task: Task, llm: agl.LLM) -> None:
    client = openai.OpenAI(base_url=llm.endpoint, api_key="unused")
    _enter()
    try:
        history: list[dict[str, str]] = []
        for turn in range(TURNS):
            history = _history(task, turn, history)
            reply = client.chat.completions.create(model=llm.model, messages=history)  # type: ignore[arg-type]
            history.append({"role": "assistant", "content": reply.choices[0].message.content or ""})
            time.sleep(random.uniform(0.0, 0.03))
            agl.emit_reward(task["n"] + turn / 10)
    finally:
        _leave()


_contexts: list[ssl.SSLContext] = []


@rollout
async def client_per_rollout(task: Task, llm: agl.LLM) -> float:
    """The README's agent (a client built in the rollout; one call), rewarded with what its client's TLS context
    is: the number of distinct contexts this process's clients have had so far, or -1 if it does not verify."""
    client = openai.AsyncOpenAI(base_url=llm.endpoint, api_key="unused")
    reply = await client.chat.completions.create(
        model=llm.model, messages=[{"role": "user", "content": f"task {task['n']}"}], max_tokens=4
    )
    if not reply.choices:
        raise RuntimeError("no choice")
    context = client._client._transport._pool._ssl_context  # type: ignore[attr-defined]
    if context.verify_mode != ssl.CERT_REQUIRED or not context.check_hostname:
        return -1.0
    if all(context is not seen for seen in _contexts):
        _contexts.append(context)
    return float(len(_contexts))


@rollout
async def sleeper(task: Task, llm: agl.LLM) -> float:
    """Waits ``task["sleep_s"]`` as if on a slow LLM, then returns its reward."""
    _enter()
    try:
        await asyncio.sleep(task["sleep_s"])
        return float(task["n"])
    finally:
        _leave()


@rollout
async def gathering(task: Task, llm: agl.LLM) -> float:
    """A slow LLM that answers once ``task["together"]`` rollouts are inside an agent at once, then returns
    its reward; fails if they never are (within ``task["hang_s"]``, 120 s by default: a hang)."""
    _enter()
    try:
        for _ in range(int(task.get("hang_s", 120.0) / 0.01)):
            if task["together"] <= PEAK:
                return float(task["n"])
            await asyncio.sleep(0.01)
        raise RuntimeError(f"never {task['together']} rollouts at once (at most {PEAK})")
    finally:
        _leave()


@rollout
async def half_then_raise(task: Task, llm: agl.LLM) -> None:
    agl.emit_reward(0.5)
    raise RuntimeError(f"task {task['n']} fails after its first reward")


@rollout
def stuck_sync(task: Task, llm: agl.LLM) -> float:
    """A sync agent that ignores cancellation: it returns after ``task["sleep_s"]`` whatever happens."""
    time.sleep(task["sleep_s"])
    return 1.0


@rollout
def wrong_result(task: Task, llm: agl.LLM) -> str:
    return "not a reward"


@rollout
def rewards_from_own_thread(task: Task, llm: agl.LLM) -> None:
    """Emits its reward from a thread it starts itself, where no context variable follows."""
    worker = threading.Thread(target=agl.emit_reward, args=(float(task["n"]),))
    worker.start()
    worker.join()
