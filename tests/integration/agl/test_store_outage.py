"""A store server that goes away mid-run: the adapter rides it out, or fails in one line.

The restart case runs ``agl-tinker store`` as a real process, kills it, and serves a fresh (empty)
store on the same port; every wait is bounded.
"""

from __future__ import annotations

import asyncio
import logging
import re

import agentlightning as agl
import aiohttp
import pytest

from adapters.agl.store import AglRolloutStore, OutagePolicy, is_connection_failure
from ports.rollout_store import LOST, RetryPolicy, RolloutRequest, StoreUnavailable
from tests.support.processes import stop
from tests.support.stores import free_port, store_process, wait_healthy
from tests.support.waits import HANG_S


def test_only_connection_failures_count_as_an_outage() -> None:
    def response(status: int) -> aiohttp.ClientResponseError:
        return aiohttp.ClientResponseError(request_info=None, history=(), status=status)  # type: ignore[arg-type]

    assert is_connection_failure(aiohttp.ClientOSError(104, "Connection reset by peer"))
    assert is_connection_failure(aiohttp.ServerDisconnectedError())
    assert is_connection_failure(TimeoutError())
    assert is_connection_failure(ConnectionRefusedError())
    assert is_connection_failure(response(503))
    assert not is_connection_failure(response(500))  # the store server's answer to an application error
    assert not is_connection_failure(response(401))
    assert not is_connection_failure(response(400))
    assert not is_connection_failure(ValueError("unknown rollout"))


async def test_a_refusal_is_not_retried() -> None:
    class Refusing:
        calls = 0

        async def add_resources(self, resources: object) -> object:
            self.calls += 1
            raise aiohttp.ClientResponseError(request_info=None, history=(), status=401)  # type: ignore[arg-type]

    store = Refusing()
    adapter = AglRolloutStore(store, OutagePolicy(tolerance_s=30))  # type: ignore[arg-type]
    with pytest.raises(aiohttp.ClientResponseError):
        await asyncio.wait_for(adapter.add_resources({}), HANG_S)  # not 30 s of retries: one call, then raised
    assert store.calls == 1


async def test_a_store_that_stays_away_ends_the_run_with_one_line_naming_it(caplog: pytest.LogCaptureFixture) -> None:
    url = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    client = agl.LightningStoreClient(url, retry_delays=(), health_retry_delays=())
    adapter = AglRolloutStore(client, OutagePolicy(tolerance_s=2.0, first_delay_s=0.2, max_delay_s=0.5))
    caplog.set_level(logging.WARNING, logger="adapters.agl.store")
    try:
        with pytest.raises(StoreUnavailable) as raised:
            await asyncio.wait_for(adapter.terminal_statuses(["ro-1"]), 30)
    finally:
        await client.close()
    message = str(raised.value)
    assert "\n" not in message
    assert re.fullmatch(
        rf"the store at {re.escape(url)} has been unreachable for (?:[2-9]|[1-9]\d+)s \(ClientConnectorError: .*\)",
        message,
    )
    assert [r.getMessage().split(" (")[0] for r in adapter_records(caplog)] == [f"store at {url} unreachable"]


@pytest.mark.slow
@pytest.mark.fault
async def test_a_store_restarted_empty_resumes_the_calls_and_reports_forgotten_rollouts_lost(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """store server killed mid-batch and restarted empty -> calls resume, old rollouts ``lost``, resources back"""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    caplog.set_level(logging.WARNING, logger="adapters.agl.store")
    store = store_process(port)
    client = agl.LightningStoreClient(url, health_retry_delays=())
    adapter = AglRolloutStore(client, OutagePolicy(tolerance_s=90, first_delay_s=0.2, max_delay_s=1.0))
    try:
        await wait_healthy(url, process=store)
        resources_id = await adapter.add_resources({"main_llm": agl.LLM(endpoint="http://127.0.0.1:1/v1", model="m")})
        requests = [RolloutRequest(task={"n": i}, mode="train", resources_id=resources_id) for i in range(2)]
        before = list(await adapter.enqueue_many(requests, RetryPolicy()))
        assert await adapter.terminal_statuses(before) == {}

        store.kill()
        store.wait(10)
        statuses = asyncio.create_task(adapter.terminal_statuses(before))
        enqueued = asyncio.create_task(adapter.enqueue_many(requests[:1], RetryPolicy()))
        await asyncio.sleep(3.0)
        assert not statuses.done() and not enqueued.done()  # riding out the outage, not failing

        store = store_process(port)  # a fresh, empty in-memory store on the same address
        result = await asyncio.wait_for(statuses, 75)  # within the 90 s it rides out
        after = list(await asyncio.wait_for(enqueued, HANG_S))

        assert result == dict.fromkeys(before, LOST)
        assert await adapter.terminal_statuses(after) == {}  # enqueued in the new store: known, still queued
        restored = await client.get_resources_by_id(resources_id)
        assert restored is not None and set(restored.resources) == {"main_llm"}
        messages = [r.getMessage() for r in adapter_records(caplog)]
        assert sum("unreachable" in m for m in messages) == 1
        assert sum("reachable again" in m for m in messages) == 1
    finally:
        await client.close()
        stop(store, timeout_s=20)


def adapter_records(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    """The store adapter's log lines: not what other libraries log meanwhile (asyncio, on a client that an
    earlier test left for the garbage collector, after its loop had closed)."""
    return [r for r in caplog.records if r.name == "adapters.agl.store"]
