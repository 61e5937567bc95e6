"""A finished rollout reaches the store in one request where the server has the route, the stock way elsewhere.

A concurrent runner (in this process, over HTTP) runs an agent that emits three rewards and returns
a fourth; the stored spans, their order and the rollout's status must be the same on a server with
``adapters.agl.finish``'s route and on a stock Agent-lightning server, and the server's calls tell
which way they came.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Callable
from typing import Any, cast

import agentlightning as agl
import pytest
from agentlightning.execution import ThreadingEvent

from adapters.runner.processes import run_concurrent_runner
from tests.support.rollouts import enqueue, wait_finished
from tests.support.stores import served_store

pytestmark = pytest.mark.slow

rollout = cast(Callable[[Callable[..., Any]], agl.LitAgent[dict[str, Any]]], agl.rollout)


@rollout
async def three_then_one(task: dict[str, Any], llm: agl.LLM) -> float:
    for step in range(3):
        agl.emit_reward(task["n"] + step / 10)
    return float(task["n"] + 1)


def count_calls(server: agl.LightningStoreServer, seen: Counter[str], *names: str) -> None:
    """Count the server's calls of its store methods ``names`` (its routes call them on the instance)."""
    for name in names:
        method = getattr(server, name)

        async def counted(*args: Any, _method: Any = method, _name: str = name, **kwargs: Any) -> Any:
            seen[_name] += 1
            return await _method(*args, **kwargs)

        setattr(server, name, counted)


@pytest.mark.parametrize("finish_route", [True, False], ids=["one-request", "stock-server"])
async def test_a_finished_rollout_stores_the_same_spans_either_way(finish_route: bool) -> None:
    seen: Counter[str] = Counter()
    async with served_store(agl.InMemoryLightningStore(thread_safe=True), project_routes=finish_route) as server:
        count_calls(server, seen, "add_span", "add_many_spans")
        store = cast(agl.LightningStore, server.store)
        await store.add_resources({"main_llm": agl.LLM(endpoint="http://127.0.0.1:9/v1", model="none")})
        client = agl.LightningStoreClient(server.endpoint)
        stop = ThreadingEvent()
        serving = run_concurrent_runner(three_then_one, client, stop, concurrency=4, poll_interval_s=0.01)
        runner = asyncio.create_task(serving)
        try:
            ids = await enqueue(store, [{"n": 1}, {"n": 5}])
            await wait_finished(store, ids, watch=runner)
        finally:
            stop.set()
            await asyncio.wait_for(runner, 30)
            await client.close()

        for rid, n in zip(ids, (1, 5), strict=True):
            finished = await store.get_rollout_by_id(rid)
            assert finished is not None and finished.status == "succeeded"
            spans = sorted(await store.query_spans(rid, "latest"), key=lambda s: s.sequence_id)
            assert [agl.get_reward_value(s) for s in spans] == [n, n + 0.1, n + 0.2, n + 1]
            assert len({s.sequence_id for s in spans}) == 4

    if finish_route:
        assert (seen["add_many_spans"], seen["add_span"]) == (2, 0), "one batch per rollout"
    else:
        assert (seen["add_many_spans"], seen["add_span"]) == (0, 8), "each span on its own"
