"""The concurrent runner: many rollouts at once in one process, each with its own trace.

Agents talk to the real policy endpoint (a scripted sampler behind it) through the ``openai``
client, with the real in-memory store and Agent-lightning's reward spans; the trajectories are
rebuilt the way training rebuilds them, so a span attributed to the wrong rollout shows as a wrong
prompt or reward.
"""

from __future__ import annotations

import asyncio
import signal
from collections.abc import AsyncIterator, Sequence
from typing import Any, cast

import agentlightning as agl
import pytest
from agentlightning.execution import ThreadingEvent
from tinker_cookbook import renderers

from adapters.agl.store import AglTripletSource
from adapters.endpoint.policy_endpoint import PolicyEndpoint
from adapters.endpoint.triplets import EndpointTraceToTriplet
from adapters.runner.concurrent_runner import ConcurrentRunner
from adapters.runner.processes import RunnerProcesses, run_concurrent_runner
from domain.trajectory import reconstruct_trajectory
from ports.policy import SampledSequence, SamplingParams, StopReason
from tests.integration import concurrent_agents
from tests.support.endpoints import policy_endpoint
from tests.support.rollouts import enqueue, wait_finished
from tests.support.stores import served_store
from tests.support.waits import until

pytestmark = pytest.mark.slow


class ConstantSampler:
    """Replies "ok" to every prompt, after ``delay_s`` (a policy that takes its time)."""

    def __init__(self, renderer: renderers.Renderer, delay_s: float = 0.0) -> None:
        tokenizer = renderer.tokenizer
        self.reply = (
            *tokenizer.encode("ok", add_special_tokens=False),
            cast(int, tokenizer.convert_tokens_to_ids("<|im_end|>")),
        )
        self.delay_s = delay_s

    async def sample(
        self, prompt_tokens: Sequence[int], params: SamplingParams, num_samples: int = 1
    ) -> Sequence[SampledSequence]:
        await asyncio.sleep(self.delay_s)
        return [SampledSequence(self.reply, tuple(-0.1 for _ in self.reply), StopReason.STOP)] * num_samples


@pytest.fixture
async def endpoint(store: agl.InMemoryLightningStore, renderer: renderers.Renderer) -> AsyncIterator[PolicyEndpoint]:
    async with policy_endpoint(store, renderer, max_tokens=8, sampler=ConstantSampler(renderer, delay_s=0.01)) as ep:
        yield ep


async def run_all(
    store: agl.InMemoryLightningStore,
    agent: agl.LitAgent[Any],
    tasks: Sequence[dict[str, Any]],
    concurrency: int,
) -> list[agl.Rollout]:
    """Enqueue ``tasks``, serve them with one concurrent runner in this loop, return the finished rollouts."""
    stop = ThreadingEvent()
    runner = asyncio.create_task(
        run_concurrent_runner(agent, store, stop, concurrency=concurrency, poll_interval_s=0.01)
    )
    try:
        ids = await enqueue(store, tasks)
        await wait_finished(store, ids, watch=runner)
        return [cast(agl.Rollout, await store.get_rollout_by_id(rid)) for rid in ids]
    finally:
        stop.set()
        await asyncio.wait_for(runner, 30)


@pytest.mark.parametrize(
    "agent", [concurrent_agents.interleaved_async, concurrent_agents.interleaved_sync], ids=["async", "sync"]
)
async def test_concurrent_rollouts_keep_their_own_calls_and_rewards(
    store: agl.InMemoryLightningStore,
    endpoint: PolicyEndpoint,
    renderer: renderers.Renderer,
    agent: agl.LitAgent[Any],
) -> None:
    concurrent_agents.reset_peak()
    tasks = [{"n": n} for n in range(16)]

    rollouts = await run_all(store, agent, tasks, concurrency=16)

    assert [r.status for r in rollouts] == ["succeeded"] * 16
    assert concurrent_agents.PEAK >= 8, "the rollouts did not overlap"
    adapter = AglTripletSource(EndpointTraceToTriplet())
    for task, rollout in zip(tasks, rollouts, strict=True):
        spans = list(await store.query_spans(rollout.rollout_id, "latest"))
        trajectory = reconstruct_trajectory(adapter.adapt(spans))
        turns = trajectory.transitions
        assert len(turns) == concurrent_agents.TURNS, (task, spans)
        for turn, transition in enumerate(turns):
            prompt = renderer.tokenizer.decode(list(transition.ob))
            assert f"task {task['n']} turn {turn}:" in prompt
            assert f"task {task['n']} turn {turn + 1}:" not in prompt
            assert all(f"task {other['n']} " not in prompt for other in tasks if other is not task)
            assert transition.reward == pytest.approx(task["n"] + turn / 10)


async def test_a_returned_reward_and_a_raising_agent_are_stored_like_the_stock_runner_does(
    store: agl.InMemoryLightningStore, endpoint: PolicyEndpoint
) -> None:
    returned = await run_all(store, concurrent_agents.sleeper, [{"n": 3, "sleep_s": 0.0}], concurrency=4)
    raised = await run_all(store, concurrent_agents.half_then_raise, [{"n": 1}], concurrency=4)
    wrong = await run_all(store, concurrent_agents.wrong_result, [{"n": 2}], concurrency=4)

    assert returned[0].status == "succeeded"
    spans = await store.query_spans(returned[0].rollout_id, "latest")
    assert [agl.get_reward_value(s) for s in spans] == [3.0]
    assert raised[0].status == "failed"
    spans = await store.query_spans(raised[0].rollout_id, "latest")
    assert [agl.get_reward_value(s) for s in spans] == [0.5], "what it emitted before raising is kept"
    assert wrong[0].status == "failed"


async def test_a_rollout_cancelled_in_the_store_stops_its_agent_and_frees_its_slot(
    store: agl.InMemoryLightningStore, endpoint: PolicyEndpoint
) -> None:
    concurrent_agents.reset_peak()
    stop = ThreadingEvent()
    runner = ConcurrentRunner(
        concurrent_agents.sleeper, store, worker_id="Worker-7", concurrency=1, poll_interval_s=0.01, status_check_s=0.05
    )
    serving = asyncio.create_task(runner.run(stop))
    try:
        hung = await store.enqueue_rollout(input={"n": 0, "sleep_s": 3600.0}, mode="train")
        while runner.in_flight == 0:
            await asyncio.sleep(0.01)
        await store.update_rollout(hung.rollout_id, status="cancelled")
        quick = await store.enqueue_rollout(input={"n": 1, "sleep_s": 0.0}, mode="train")
        await wait_finished(store, [quick.rollout_id], hung="the only slot stayed held by the cancelled rollout")
        finished = await store.get_rollout_by_id(quick.rollout_id)
        assert finished is not None and finished.status == "succeeded"
        assert concurrent_agents.IN_AGENT == 0, "the cancelled agent is still running"
        attempts = await store.query_attempts(quick.rollout_id)
        assert [a.worker_id for a in attempts] == ["Worker-7"]
    finally:
        stop.set()
        await asyncio.wait_for(serving, 10)


async def test_one_runner_process_runs_its_rollouts_at_once(
    store: agl.InMemoryLightningStore,
) -> None:
    """A slow LLM that answers only once all 12 are waiting for it: 12 rollouts in one process end together,
    not one after another (one after another, none would end)."""
    async with served_store(store) as server:
        await store.add_resources({"main_llm": agl.LLM(endpoint="http://127.0.0.1:9/v1", model="none")})
        with RunnerProcesses("tests.integration.concurrent_agents:gathering", server.endpoint, 1, concurrency=16):
            ids = await enqueue(store, [{"n": n, "together": 12} for n in range(12)])
            await wait_finished(store, ids)
        rollouts = [cast(agl.Rollout, await store.get_rollout_by_id(rid)) for rid in ids]
        assert [r.status for r in rollouts] == ["succeeded"] * 12
        starts = sorted(cast(float, r.start_time) for r in rollouts)
        ends = sorted(cast(float, r.end_time) for r in rollouts)
        assert ends[0] > starts[-1], "some rollout ended before the last one started: they ran one after another"
        workers = {a.worker_id for rid in ids for a in await store.query_attempts(rid)}
        assert len(workers) == 1


async def test_clients_built_in_each_rollout_of_a_runner_process_work_and_share_one_verifying_tls_context(
    store: agl.InMemoryLightningStore, endpoint: PolicyEndpoint
) -> None:
    """``adapters/runner/tls.py`` in a runner process: every rollout's new client reached the policy, and all
    of them had the same context, which verifies certificates (a context per client costs 30-50 ms of CPU)."""
    async with served_store(store) as server:
        with RunnerProcesses(
            "tests.integration.concurrent_agents:client_per_rollout", server.endpoint, 1, concurrency=8
        ):
            ids = await enqueue(store, [{"n": n} for n in range(8)])
            await wait_finished(store, ids)
        for rid in ids:
            rollout = cast(agl.Rollout, await store.get_rollout_by_id(rid))
            assert rollout.status == "succeeded"
            spans = await store.query_spans(rid, "latest")
            assert [agl.get_reward_value(s) for s in spans if agl.get_reward_value(s) is not None] == [1.0]


async def test_a_reward_from_a_thread_the_agent_started_goes_to_the_only_open_rollout(
    store: agl.InMemoryLightningStore, endpoint: PolicyEndpoint
) -> None:
    rollouts = await run_all(store, concurrent_agents.rewards_from_own_thread, [{"n": 4}, {"n": 5}], concurrency=1)

    for rollout, expected in zip(rollouts, (4.0, 5.0), strict=True):
        spans = await store.query_spans(rollout.rollout_id, "latest")
        assert [agl.get_reward_value(s) for s in spans] == [expected]


async def test_stopping_runner_processes_waits_one_deadline_for_all_of_them(
    store: agl.InMemoryLightningStore,
) -> None:
    """Three processes, each inside a 60 s rollout: stop(2 s) kills them all after one 2 s wait, not 3 x 2 s.

    The waits are recorded, not timed: each process is waited for what is left of the one deadline."""
    async with served_store(store) as server:
        await store.add_resources({"main_llm": agl.LLM(endpoint="http://127.0.0.1:9/v1", model="none")})
        runners = RunnerProcesses("tests.integration.concurrent_agents:sleeper", server.endpoint, 3, concurrency=1)
        with runners:
            for n in range(3):
                await store.enqueue_rollout(input={"n": n, "sleep_s": 60.0}, mode="train")
            await until(lambda: taken(store, 3), "the three processes did not each take a rollout", interval_s=0.05)
            waits = [record_waits(process) for process in runners._processes]
            await asyncio.to_thread(runners.stop, 2.0)
        assert runners.alive == 0
        assert [p.exitcode for p in runners._processes] == [-signal.SIGKILL] * 3, "each was still in its rollout"
        budgets = [before_kill[0] for before_kill in waits]
        assert budgets[0] <= 2.0 and sum(budgets) <= 2.0 + 1e-3, (
            f"waits of {budgets} s: the processes were waited for one after another"
        )


async def taken(store: agl.LightningStore, n: int) -> bool:
    return len(await store.query_rollouts(status_in=["preparing", "running"])) >= n


def record_waits(process: Any) -> list[float]:
    """The timeouts ``process.join`` is called with, in order, as the process is waited for."""
    timeouts: list[float] = []
    join = process.join

    def recorded(timeout: float | None = None) -> None:
        timeouts.append(float("inf") if timeout is None else timeout)
        join(timeout)

    process.join = recorded
    return timeouts
