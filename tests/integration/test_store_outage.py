"""A store server that goes away mid-run: the adapter rides it out, or fails in one line.

The restart case runs ``agl-tinker store`` as a real process, kills it, and serves a fresh (empty)
store on the same port; every wait is bounded.
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import agentlightning as agl
import aiohttp
import pytest

from adapters.agl_store import AglRolloutStore, OutagePolicy, is_connection_failure
from app.launch import free_port
from ports.rollout_store import LOST, RetryPolicy, RolloutRequest, StoreUnavailable

ROOT = Path(__file__).resolve().parents[2]


def _serve_store(port: int) -> subprocess.Popen[bytes]:
    env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True", "TINKER_TELEMETRY": "0"}
    env.pop("AGL_TINKER_STORE_TOKEN", None)
    return subprocess.Popen([sys.executable, "-m", "app.faces.cli", "store", "--port", str(port)], cwd=ROOT, env=env)


async def _wait_healthy(url: str, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    async with aiohttp.ClientSession() as http:
        while time.monotonic() < deadline:
            try:
                async with http.get(url + "/v1/agl/health", timeout=aiohttp.ClientTimeout(total=1)) as response:
                    if response.status == 200:
                        return
            except (aiohttp.ClientError, TimeoutError):
                pass
            await asyncio.sleep(0.2)
    raise AssertionError(f"the store at {url} did not come up within {timeout_s}s")


def _stop(process: subprocess.Popen[bytes] | None) -> None:
    if process is None or process.poll() is not None:
        return
    process.send_signal(signal.SIGINT)
    try:
        process.wait(20)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(10)


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
    started = time.monotonic()
    with pytest.raises(aiohttp.ClientResponseError):
        await adapter.add_resources({})
    assert store.calls == 1 and time.monotonic() - started < 1.0


async def test_a_store_that_stays_away_ends_the_run_with_one_line_naming_it(caplog: pytest.LogCaptureFixture) -> None:
    url = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    client = agl.LightningStoreClient(url, retry_delays=(), health_retry_delays=())
    adapter = AglRolloutStore(client, OutagePolicy(tolerance_s=2.0, first_delay_s=0.2, max_delay_s=0.5))
    caplog.set_level(logging.WARNING, logger="adapters.agl_store")
    try:
        with pytest.raises(StoreUnavailable) as raised:
            await asyncio.wait_for(adapter.terminal_statuses(["ro-1"]), 30)
    finally:
        await client.close()
    message = str(raised.value)
    assert "\n" not in message
    assert re.fullmatch(
        rf"the store at {re.escape(url)} has been unreachable for [23]s \(ClientConnectorError: .*\)", message
    )
    assert [r.getMessage().split(" (")[0] for r in caplog.records] == [f"store at {url} unreachable"]


@pytest.mark.slow
@pytest.mark.fault
async def test_a_store_restarted_empty_resumes_the_calls_and_reports_forgotten_rollouts_lost(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """store server killed mid-batch and restarted empty -> calls resume, old rollouts ``lost``, resources back"""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    caplog.set_level(logging.WARNING, logger="adapters.agl_store")
    store = _serve_store(port)
    client = agl.LightningStoreClient(url, health_retry_delays=())
    adapter = AglRolloutStore(client, OutagePolicy(tolerance_s=90, first_delay_s=0.2, max_delay_s=1.0))
    try:
        await _wait_healthy(url)
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

        outage_started = time.monotonic()
        store = _serve_store(port)  # a fresh, empty in-memory store on the same address
        result = await asyncio.wait_for(statuses, 75)
        after = list(await asyncio.wait_for(enqueued, 30))
        print(f"outage ridden out; store restart took {time.monotonic() - outage_started:.1f}s")

        assert result == dict.fromkeys(before, LOST)
        assert await adapter.terminal_statuses(after) == {}  # enqueued in the new store: known, still queued
        restored = await client.get_resources_by_id(resources_id)
        assert restored is not None and set(restored.resources) == {"main_llm"}
        messages = [r.getMessage() for r in caplog.records]
        assert sum("unreachable" in m for m in messages) == 1
        assert sum("reachable again" in m for m in messages) == 1
    finally:
        await client.close()
        _stop(store)
