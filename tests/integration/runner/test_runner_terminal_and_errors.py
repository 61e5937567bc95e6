"""Runner processes as an agent's framework sees them: no terminal to prompt on, and their logged errors reach
the trainer (what a run that cannot train names as the likely cause)."""

from __future__ import annotations

import asyncio

import agentlightning as agl
import pytest

from adapters.agl.store import AglRolloutStore, AglTripletSource
from adapters.runner.processes import RunnerProcesses
from app.usecases.rollouts import RolloutOptions, run_rollouts
from domain.groups import RolloutResult
from ports.rollout_store import RolloutRequest
from tests.support.waits import HANG_S, until

pytestmark = pytest.mark.slow


async def run(store_server: agl.LightningStoreServer, runners: RunnerProcesses, n: int) -> list[RolloutResult]:
    client = agl.LightningStoreClient(store_server.endpoint)
    try:
        update = await client.add_resources({"main_llm": agl.LLM(endpoint="http://127.0.0.1:9/v1", model="none")})
        requests = [RolloutRequest(task={"i": i}, mode="train", resources_id=update.resources_id) for i in range(n)]
        options = RolloutOptions(rollout_timeout_s=HANG_S, queue_timeout_s=HANG_S, concurrency=n, runners=runners)
        return await asyncio.wait_for(
            run_rollouts(
                requests,
                store=AglRolloutStore(client),
                triplets=AglTripletSource(agl.TracerTraceToTriplet()),
                options=options,
            ),
            timeout=2 * HANG_S,
        )
    finally:
        await client.close()


@pytest.mark.parametrize("concurrency", [None, 2], ids=["stock", "concurrent"])
async def test_a_prompt_ends_at_once_the_runner_has_no_terminal(
    store_server: agl.LightningStoreServer, concurrency: int | None
) -> None:
    runners = RunnerProcesses(
        "tests.integration.runner_env_agents:prompting_agent", store_server.endpoint, 1, concurrency=concurrency
    )
    with runners:
        runners.supervise()
        results = await run(store_server, runners, 2)
    assert [r.status for r in results] == ["succeeded", "succeeded"], runners.first_error()


@pytest.mark.parametrize("concurrency", [None, 2], ids=["stock", "concurrent"])
async def test_an_error_the_agent_logs_and_swallows_reaches_the_trainer(
    store_server: agl.LightningStoreServer, concurrency: int | None
) -> None:
    runners = RunnerProcesses(
        "tests.integration.runner_env_agents:quietly_failing_agent", store_server.endpoint, 1, concurrency=concurrency
    )
    with runners:
        runners.supervise()
        results = await run(store_server, runners, 2)

        async def reported() -> bool:
            return runners.first_error() is not None

        await until(reported, "the runner's logged error never reached its parent")
    assert [r.status for r in results] == ["succeeded", "succeeded"]
    assert all(r.trajectory.n_triplets == 0 for r in results)  # no policy call: nothing to train
    assert runners.first_error() == "tool 'calculator' failed: ConnectionError: the calculator MCP server is down"


async def test_a_span_the_agents_framework_ended_with_an_error_reaches_the_trainer(
    store_server: agl.LightningStoreServer,
) -> None:
    runners = RunnerProcesses(
        "tests.integration.runner_env_agents:error_span_agent", store_server.endpoint, 1, concurrency=2
    )
    with runners:
        runners.supervise()
        results = await run(store_server, runners, 2)

        async def reported() -> bool:
            return runners.first_error() is not None

        await until(reported, "the span's error never reached the runner's parent")
    assert [r.status for r in results] == ["succeeded", "succeeded"]
    first = runners.first_error()
    assert first is not None and first.startswith("rollout ro-")
    assert first.endswith(": span 'tool.calculator': ConnectionError: the calculator MCP server is down")
