"""The store served over HTTP on 127.0.0.1, a runner in another process, the loop over the client."""

from __future__ import annotations

import agentlightning as agl
import pytest

from adapters.agl.store import AglRolloutStore, AglTripletSource
from adapters.runner.processes import RunnerProcesses
from app.usecases.rollouts import RolloutOptions, run_rollouts
from ports.rollout_store import RolloutRequest


@pytest.mark.slow
async def test_runner_process_completes_rollouts_enqueued_over_http(store_server: agl.LightningStoreServer) -> None:
    client = agl.LightningStoreClient(store_server.endpoint)
    update = await client.add_resources({"main_llm": agl.LLM(endpoint="http://127.0.0.1:9/v1", model="none")})
    with RunnerProcesses("tests.integration.agents:reward_only", store_server.endpoint, 1) as runners:
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
