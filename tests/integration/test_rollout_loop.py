"""The batch rollout loop against Agent-lightning's real in-memory store and a real runner."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping, Sequence

import agentlightning as agl
import pytest
from agentlightning.execution import ThreadingEvent

from adapters.agl.store import AglRolloutStore, AglTripletSource
from adapters.runner.processes import run_runner
from app.usecases.rollouts import QUEUE_TIMEOUT, RolloutOptions, RolloutStats, run_rollouts
from domain.groups import TIMED_OUT
from ports.rollout_store import RolloutRequest
from tests.integration.agents import reward_only
from tests.support.rollouts import run
from tests.support.stores import served_store
from tests.support.waits import HANG_S


class CountingStore(AglRolloutStore):
    """The real adapter, recording how many rollouts each completion check asks about."""

    def __init__(self, store: agl.LightningStore) -> None:
        super().__init__(store)
        self.pending_sizes: list[int] = []

    async def terminal_statuses(self, rollout_ids: Sequence[str]) -> Mapping[str, str]:
        self.pending_sizes.append(len(rollout_ids))
        return await super().terminal_statuses(rollout_ids)


@pytest.fixture
async def store() -> agl.InMemoryLightningStore:
    return agl.InMemoryLightningStore()


@pytest.fixture
async def resources_id(store: agl.InMemoryLightningStore) -> str:
    update = await store.add_resources({"main_llm": agl.LLM(endpoint="http://127.0.0.1:9/v1", model="none")})
    return update.resources_id


@pytest.fixture
async def runner(store: agl.InMemoryLightningStore) -> AsyncIterator[None]:
    stop = ThreadingEvent()
    task = asyncio.create_task(run_runner(reward_only, store, stop, poll_interval_s=0.02))
    yield
    stop.set()
    await asyncio.wait_for(task, 10)


def requests(resources_id: str, *tasks: dict[str, float]) -> list[RolloutRequest]:
    return [RolloutRequest(task=t, mode="train", resources_id=resources_id) for t in tasks]


@pytest.mark.parametrize("forgets", [False, True], ids=["lookups", "query"])
async def test_a_rollout_no_runner_picks_up_ends_at_its_queue_deadline(
    store: agl.InMemoryLightningStore, resources_id: str, forgets: bool
) -> None:
    results = await asyncio.wait_for(  # a queue deadline that did not fire would hang here for 60 s or more
        run_rollouts(
            requests(resources_id, {"reward": 1.0}, {"reward": 0.0}),
            store=AglRolloutStore(store, forgets_finished=forgets),
            triplets=AglTripletSource(agl.TracerTraceToTriplet()),
            options=RolloutOptions(rollout_timeout_s=60, queue_timeout_s=0.3),
        ),
        HANG_S,
    )
    assert [r.status for r in results] == [TIMED_OUT, TIMED_OUT]
    assert [r.reason for r in results] == [QUEUE_TIMEOUT, QUEUE_TIMEOUT]
    for result in results:
        rollout = await store.get_rollout_by_id(result.rollout_id)
        assert rollout is not None and rollout.status == "cancelled"
        assert result.trajectory.is_empty


@pytest.mark.usefixtures("runner")
@pytest.mark.parametrize("forgets", [False, True], ids=["lookups", "query"])
async def test_runner_results_come_back_in_input_order_with_their_status(
    store: agl.InMemoryLightningStore, resources_id: str, forgets: bool
) -> None:
    """Terminal statuses come from per-rollout lookups, or from one query when the run forgets finished rollouts."""
    stats = RolloutStats()
    seen: list[int] = []
    results = await run_rollouts(
        requests(resources_id, {"reward": 1.0}, {"reward": 0.5, "fail": 1.0}, {"reward": 0.0}),
        store=AglRolloutStore(store, forgets_finished=forgets),
        triplets=AglTripletSource(agl.TracerTraceToTriplet()),
        options=RolloutOptions(rollout_timeout_s=30),
        on_result=lambda index, _: seen.append(index),
        stats=stats,
    )
    assert [r.status for r in results] == ["succeeded", "failed", "succeeded"]
    assert sorted(seen) == [0, 1, 2]
    ids = [r.rollout_id for r in results]
    stored = await store.query_rollouts(rollout_id_in=ids)
    assert {r.rollout_id: r.input for r in stored}[ids[1]] == {"reward": 0.5, "fail": 1.0}


@pytest.mark.usefixtures("runner")
async def test_concurrency_caps_rollouts_in_the_store_and_one_call_checks_all(
    store: agl.InMemoryLightningStore, resources_id: str
) -> None:
    counting = CountingStore(store)
    results = await run_rollouts(
        requests(resources_id, *({"reward": float(i)} for i in range(6))),
        store=counting,
        triplets=AglTripletSource(agl.TracerTraceToTriplet()),
        options=RolloutOptions(rollout_timeout_s=30, concurrency=2),
    )
    assert [r.status for r in results] == ["succeeded"] * 6
    assert max(counting.pending_sizes) == 2
    assert len(await store.query_rollouts()) == 6


@pytest.mark.usefixtures("runner")
async def test_the_running_deadline_counts_from_when_the_runner_takes_the_rollout(
    store: agl.InMemoryLightningStore, resources_id: str
) -> None:
    """Three 0.4 s rollouts on one runner finish under a 0.7 s deadline: the later ones wait, unbilled, in the queue."""
    results = await run_rollouts(
        requests(resources_id, *({"reward": 1.0, "sleep_s": 0.4} for _ in range(3))),
        store=AglRolloutStore(store),
        triplets=AglTripletSource(agl.TracerTraceToTriplet()),
        options=RolloutOptions(rollout_timeout_s=0.7, queue_timeout_s=30),
    )
    assert [r.status for r in results] == ["succeeded"] * 3


@pytest.mark.usefixtures("runner")
@pytest.mark.parametrize("forget", [True, False], ids=["forget", "keep"])
async def test_finished_rollouts_leave_the_store_once_rebuilt_when_asked(
    store: agl.InMemoryLightningStore, resources_id: str, forget: bool
) -> None:
    results = await run_rollouts(
        requests(resources_id, {"reward": 1.0}, {"reward": 0.5, "fail": 1.0}, {"reward": 0.25}),
        store=AglRolloutStore(store),
        triplets=AglTripletSource(agl.TracerTraceToTriplet()),
        options=RolloutOptions(rollout_timeout_s=30, forget_finished=forget),
    )
    assert [r.status for r in results] == ["succeeded", "failed", "succeeded"]
    stats = await store.statistics()
    counts = (stats["total_rollouts"], stats["total_attempts"], stats["total_spans"] > 0)
    left = list(await store.query_rollouts())
    if forget:
        assert (left, counts) == ([], (0, 0, False))
        assert store._completion_events == {} and store._start_time_by_rollout == {}
    else:
        assert (len(left), counts) == (3, (3, 3, True))


@pytest.mark.parametrize("project_routes", [True, False], ids=["project-server", "stock-server"])
async def test_a_trainer_over_http_forgets_where_the_server_can(
    store: agl.InMemoryLightningStore, resources_id: str, project_routes: bool
) -> None:
    ids = await run(store, reward_only, [{"reward": 1.0}, {"reward": 0.0}])
    async with served_store(store, project_routes=project_routes) as server:
        client = agl.LightningStoreClient(server.endpoint)
        try:
            await AglRolloutStore(client).forget(ids)
            await AglRolloutStore(client).forget(ids)  # twice: already gone is no error
        finally:
            await client.close()
    left = {r.rollout_id for r in await store.query_rollouts()}
    assert left == (set() if project_routes else set(ids))
