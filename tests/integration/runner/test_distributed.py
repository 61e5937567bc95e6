"""The store served over HTTP on 127.0.0.1, a runner in another process, the loop over the client."""

from __future__ import annotations

import subprocess
import sys

import agentlightning as agl
import pytest

from adapters.agl.store import AglRolloutStore, AglTripletSource
from adapters.runner.processes import REMOTE_ID_BLOCK, RunnerProcesses, store_worker_id
from app.usecases.rollouts import RolloutOptions, run_rollouts
from ports.rollout_store import RolloutRequest
from tests.support.cli import ROOT, cli_env
from tests.support.processes import stop
from tests.support.waits import until

AGENT = "tests.integration.agents:reward_only"


@pytest.mark.slow
async def test_runner_process_completes_rollouts_enqueued_over_http(store_server: agl.LightningStoreServer) -> None:
    client = agl.LightningStoreClient(store_server.endpoint)
    update = await client.add_resources({"main_llm": agl.LLM(endpoint="http://127.0.0.1:9/v1", model="none")})
    with RunnerProcesses(AGENT, store_server.endpoint, 1) as runners:
        results = await run_rollouts(
            [RolloutRequest(task={"reward": r}, mode="train", resources_id=update.resources_id) for r in (1.0, 0.0)],
            store=AglRolloutStore(client),
            triplets=AglTripletSource(agl.TracerTraceToTriplet()),
            options=RolloutOptions(rollout_timeout_s=90),
        )
        assert runners.alive == 1
    assert [r.status for r in results] == ["succeeded", "succeeded"]
    spans = await client.query_spans(results[0].rollout_id, "latest")
    assert any(s.name == "agentlightning.annotation" for s in spans), "the runner's spans crossed the process boundary"
    await client.close()


def test_bad_agent_reference_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match=r"package\.module:attribute"):
        RunnerProcesses("no_colon_here", "http://127.0.0.1:1", 1)


@pytest.mark.slow
async def test_runner_commands_and_the_trainers_pool_on_one_store_are_distinct_workers(
    store_server: agl.LightningStoreServer,
) -> None:
    """Two ``agl-tinker runner`` commands (two machines) beside the trainer's own runner: three workers in the
    store, so the loop can tell whose process died, and one's heartbeats never hide another's silence."""
    client = agl.LightningStoreClient(store_server.endpoint)
    command = [sys.executable, "-m", "app.faces.cli", "runner", "--store", store_server.endpoint, "-n", "1"]
    remote = [
        subprocess.Popen([*command, "--agent", AGENT], cwd=ROOT, env=cli_env(), stdout=subprocess.DEVNULL)
        for _ in range(2)
    ]
    try:
        with RunnerProcesses(AGENT, store_server.endpoint, 1):

            async def three_workers() -> bool:
                return len(await client.query_workers()) >= 3

            await until(three_workers, "fewer than three runner workers registered in the store")
            ids = {worker.worker_id for worker in await client.query_workers()}
    finally:
        for process in remote:
            stop(process)
        await client.close()
    assert len(ids) == 3 and store_worker_id(0) in ids, ids
    remote_ids = ids - {store_worker_id(0)}
    assert all(int(i.removeprefix("Worker-")) >= REMOTE_ID_BLOCK for i in remote_ids), ids
