"""The 1.x REST store adapter against agentlightning 1.0.2's ``agl-server`` contract, served by a fake of its
routes (the same requests, answers and state rules as ``agentlightning/server/routes/rollouts.py``)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from agentlightning import ProxyLLM

from adapters.agl.store import OutagePolicy
from adapters.agl1.store import (
    CONTRACT_PATHS,
    Agl1Launch,
    Agl1RolloutStore,
    ContractMismatch,
    MoreAttemptsRefused,
    check_contract,
)
from adapters.endpoint.span_log import RolloutState, SpanLog
from ports.rollout_store import LOST, RetryPolicy, RolloutRequest, StoreUnavailable

KEY = "server-key"


class FakeServer:
    """agl-server 1.0.2's store routes in memory; ``down`` answers every request with a refused connection."""

    def __init__(self) -> None:
        self.rollouts: dict[str, dict[str, Any]] = {}
        self.terminal: list[str] = []
        self.models: list[dict[str, Any]] = []
        self.requests: list[tuple[str, str]] = []
        self.down = False

    def restart(self) -> None:
        self.rollouts.clear()
        self.terminal.clear()

    def move(self, rollout_id: str, state: str) -> None:
        """What the controller does: queuing -> running -> succeeded | failed, terminal ones logged once."""
        self.rollouts[rollout_id]["status"]["state"] = state
        if state in ("succeeded", "failed"):
            self.terminal.append(rollout_id)

    def handle(self, request: httpx.Request) -> httpx.Response:
        if self.down:
            raise httpx.ConnectError("connection refused", request=request)
        if request.headers.get("authorization") != f"Bearer {KEY}":
            return httpx.Response(401, json={"detail": "Invalid or missing API key"})
        path, method = request.url.path, request.method
        self.requests.append((method, path))
        if path == "/openapi.json":
            return httpx.Response(200, json={"paths": {key: {} for key in CONTRACT_PATHS}})
        if path == "/api/rollouts" and method == "POST":
            created = []
            for item in json.loads(request.content):
                rid = item["rollout_id"]
                if rid not in self.rollouts:
                    self.rollouts[rid] = {**item, "status": {"state": "queuing"}}
                created.append(self.rollouts[rid])
            return httpx.Response(201, json=created)
        if path == "/api/rollouts" and method == "GET":
            states = set(request.url.params.get_list("state_in"))
            limit = int(request.url.params.get("limit", 500))
            matches = [r for r in self.rollouts.values() if r["status"]["state"] in states]
            return httpx.Response(200, json=matches[:limit])
        if path == "/api/rollouts/terminal":
            after, limit = int(request.url.params["after"]), int(request.url.params["limit"])
            ids = self.terminal[after : after + limit]
            items = [
                {"rollout_id": rid, "state": self.rollouts[rid]["status"]["state"], "data_id": "", "is_train": True}
                for rid in ids
                if rid in self.rollouts
            ]
            page = {"items": items, "next_after": after + len(ids), "total_terminal": len(self.terminal)}
            return httpx.Response(200, json=page)
        if path.startswith("/api/rollouts/") and method == "DELETE":
            self.rollouts.pop(path.rsplit("/", 1)[1], None)
            return httpx.Response(204)
        if path == "/api/models" and method == "POST":
            self.models += json.loads(request.content)
            return httpx.Response(201, json=json.loads(request.content))
        return httpx.Response(404, json={"detail": "Not Found"})


@pytest.fixture
def server() -> FakeServer:
    return FakeServer()


@pytest.fixture
async def client(server: FakeServer) -> AsyncIterator[httpx.AsyncClient]:
    transport = httpx.MockTransport(server.handle)
    headers = {"Authorization": f"Bearer {KEY}"}
    async with httpx.AsyncClient(transport=transport, base_url="http://agl-server", headers=headers) as http:
        yield http


@pytest.fixture
def spans() -> SpanLog:
    return SpanLog()


@pytest.fixture
def store(client: httpx.AsyncClient, spans: SpanLog) -> Agl1RolloutStore:
    launch = Agl1Launch(agent_class="pkg.agents:Agent", env_map={"QUESTION": "input.question"}, timeout_s=60)
    return Agl1RolloutStore(client, spans, launch, OutagePolicy(tolerance_s=0.2, first_delay_s=0.01))


def requests(*modes: str) -> list[RolloutRequest]:
    return [RolloutRequest(task={"question": f"q{i}"}, mode=mode, resources_id="r0") for i, mode in enumerate(modes)]


async def test_enqueue_posts_our_ids_with_the_launch_settings_and_opens_them_for_the_endpoint(
    store: Agl1RolloutStore, server: FakeServer, spans: SpanLog
) -> None:
    ids = await store.enqueue_many(requests("train", "val"), RetryPolicy())

    assert list(server.rollouts) == list(ids) and len(set(ids)) == 2
    first, second = (server.rollouts[rid] for rid in ids)
    assert first["input"] == {"question": "q0"} and (first["is_train"], second["is_train"]) == (True, False)
    assert first["config"] == {
        "timeout_seconds": 60,
        "local": {"agent_class": "pkg.agents:Agent", "env_map": {"QUESTION": "input.question"}},
    }
    assert [spans.state(rid) for rid in ids] == [RolloutState.OPEN] * 2


async def test_a_kubernetes_launch_sends_the_job_template(client: httpx.AsyncClient, server: FakeServer) -> None:
    store = Agl1RolloutStore(client, SpanLog(), Agl1Launch(job_template="kind: Job"))
    (rid,) = await store.enqueue_many(requests("train"), RetryPolicy())
    assert server.rollouts[rid]["config"] == {"timeout_seconds": 3600, "k8s": {"job_template": "kind: Job"}}


async def test_more_than_one_attempt_is_refused(store: Agl1RolloutStore, server: FakeServer) -> None:
    with pytest.raises(MoreAttemptsRefused, match="max_attempts=3"):
        await store.enqueue_many(requests("train"), RetryPolicy(max_attempts=3))
    assert server.rollouts == {}


async def test_terminal_statuses_come_through_the_cursor_and_end_the_rollouts_at_the_endpoint(
    store: Agl1RolloutStore, server: FakeServer, spans: SpanLog
) -> None:
    a, b, c = await store.enqueue_many(requests("train", "train", "train"), RetryPolicy())
    assert await store.terminal_statuses([a, b, c]) == {}
    server.move(a, "running")
    server.move(b, "running")
    assert set(await store.taken([a, b, c])) == {a, b}
    server.move(a, "succeeded")
    server.move(b, "failed")

    assert await store.terminal_statuses([a, b, c]) == {a: "succeeded", b: "failed"}
    assert [spans.state(r) for r in (a, b, c)] == [RolloutState.ENDED, RolloutState.ENDED, RolloutState.OPEN]
    server.requests.clear()
    assert await store.terminal_statuses([c]) == {}
    assert ("GET", "/api/rollouts/terminal") in server.requests
    server.move(c, "running")
    server.move(c, "succeeded")
    assert await store.terminal_statuses([c]) == {c: "succeeded"}


async def test_a_rollout_a_restarted_server_forgot_is_lost(store: Agl1RolloutStore, server: FakeServer) -> None:
    a, b = await store.enqueue_many(requests("train", "train"), RetryPolicy())
    server.move(a, "running")
    server.move(a, "succeeded")
    assert await store.terminal_statuses([a, b]) == {a: "succeeded"}

    server.restart()
    (c,) = await store.enqueue_many(requests("train"), RetryPolicy())
    assert await store.terminal_statuses([b, c]) == {b: LOST}
    server.move(c, "running")
    server.move(c, "failed")
    assert await store.terminal_statuses([c]) == {c: "failed"}


async def test_cancel_and_forget_delete_on_the_server_and_the_endpoint_refuses_them(
    store: Agl1RolloutStore, server: FakeServer, spans: SpanLog
) -> None:
    a, b = await store.enqueue_many(requests("train", "train"), RetryPolicy())
    server.move(b, "running")
    server.move(b, "succeeded")
    await store.terminal_statuses([a, b])

    await store.cancel([a])
    await store.forget([b])

    assert server.rollouts == {}
    assert [spans.state(r) for r in (a, b)] == [RolloutState.UNKNOWN] * 2
    await store.cancel(["ro-never"])  # unknown ids are ignored


async def test_latest_spans_are_the_endpoint_records(store: Agl1RolloutStore, spans: SpanLog) -> None:
    from adapters.endpoint.events import EventBody, event_span

    (rid,) = await store.enqueue_many(requests("train"), RetryPolicy())
    number = await spans.get_next_span_sequence_id(rid, "0")
    await spans.add_span(event_span(EventBody(event_type="reward", data={"value": 1.0}), rid, "0", number))
    assert [s.sequence_id for s in await store.latest_spans(rid)] == [1]


async def test_resources_register_the_policy_with_the_version_the_endpoint_serves(
    store: Agl1RolloutStore, server: FakeServer
) -> None:
    llm = ProxyLLM(endpoint="http://127.0.0.1:9/", model="policy")
    served = iter([3, 3, 4])
    store.policy_version = lambda: next(served)  # an evaluation and a batch at version 3, then one step
    ids = [await store.add_resources({"main_llm": llm}) for _ in range(3)]
    assert len(set(ids)) == 3
    assert [(m["model"], m["version"]) for m in server.models] == [("policy", 3), ("policy", 3), ("policy", 4)]


async def test_an_unreachable_server_is_ridden_out_then_named(store: Agl1RolloutStore, server: FakeServer) -> None:
    (rid,) = await store.enqueue_many(requests("train"), RetryPolicy())
    server.down = True
    with pytest.raises(StoreUnavailable, match="agl-server at http://agl-server"):
        await store.terminal_statuses([rid])


async def test_a_server_without_the_contract_routes_is_named(client: httpx.AsyncClient) -> None:
    await check_contract(client)

    def other(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json={"paths": {"/api/rollouts": {}}})

    async with httpx.AsyncClient(transport=httpx.MockTransport(other), base_url="http://x") as http:
        with pytest.raises(ContractMismatch, match=r"1\.0\.2.*lacks /api/rollouts/terminal"):
            await check_contract(http)
