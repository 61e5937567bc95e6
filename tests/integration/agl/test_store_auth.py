"""The store behind a shared secret, and runners that cannot outlive their trainer.

Real ``LightningStoreServer`` processes and runner processes on 127.0.0.1; every wait is bounded.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
from collections.abc import AsyncIterator
from pathlib import Path

import agentlightning as agl
import httpx
import pytest

from adapters.agl.auth import TokenStoreClient, protect
from adapters.agl.store import AglRolloutStore, AglTripletSource
from adapters.runner.processes import RunnerProcesses
from app.usecases.rollouts import RolloutOptions, run_rollouts
from ports.rollout_store import RolloutRequest
from tests.support.processes import alive, parent_of, stop
from tests.support.stores import free_port, store_process
from tests.support.waits import HANG_S, wait_until

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[3]
TOKEN = "store-token-for-tests-1f2e3d"


@pytest.fixture
async def server() -> AsyncIterator[agl.LightningStoreServer]:
    served = agl.LightningStoreServer(agl.InMemoryLightningStore(), host="127.0.0.1", port=free_port())
    protect(served, TOKEN)
    await served.start()
    yield served
    await served.stop()


@pytest.mark.fault
async def test_requests_without_the_token_get_401_and_with_it_work(server: agl.LightningStoreServer) -> None:
    """unauthenticated store access (no token, wrong token, a fake LLM resource) -> 401, nothing lands"""
    async with httpx.AsyncClient() as http:
        base = server.endpoint + "/v1/agl"
        assert (await http.get(base + "/health")).status_code == 200  # the liveness probe stays open
        assert (await http.post(base + "/queues/rollouts/enqueue", json={"input": "x"})).status_code == 401
        wrong = {"Authorization": "Bearer not-the-token"}
        assert (await http.post(base + "/rollouts/search", json={}, headers=wrong)).status_code == 401

    plain = agl.LightningStoreClient(server.endpoint, retry_delays=(), health_retry_delays=())
    with pytest.raises(Exception, match="401"):
        await plain.add_resources({"main_llm": agl.LLM(endpoint="http://evil.example/v1", model="x")})
    await plain.close()
    assert not list(await server.store.query_resources())  # the fake resource never landed

    client = TokenStoreClient(server.endpoint, TOKEN)
    rollout = await client.enqueue_rollout(input={"reward": 1.0}, mode="train")
    assert (await client.get_rollout_by_id(rollout.rollout_id)) is not None
    await client.close()


async def test_runner_processes_with_the_token_execute_rollouts_and_export_their_spans(
    server: agl.LightningStoreServer,
) -> None:
    client = TokenStoreClient(server.endpoint, TOKEN)
    update = await client.add_resources({"main_llm": agl.LLM(endpoint="http://127.0.0.1:9/v1", model="none")})
    with RunnerProcesses("tests.integration.agents:reward_only", server.endpoint, 1, token=TOKEN):
        results = await run_rollouts(
            [RolloutRequest(task={"reward": 1.0}, mode="train", resources_id=update.resources_id)],
            store=AglRolloutStore(client),
            triplets=AglTripletSource(agl.TracerTraceToTriplet()),
            options=RolloutOptions(rollout_timeout_s=90),
        )
    assert [r.status for r in results] == ["succeeded"]
    spans = await client.query_spans(results[0].rollout_id, "latest")
    assert any(s.name == "agentlightning.annotation" for s in spans), "spans must pass the token check too"
    await client.close()


@pytest.mark.fault
def test_the_cli_store_beyond_loopback_generates_a_token_and_refuses_requests_without_it() -> None:
    """`agl-tinker store --host 0.0.0.0` without a token -> one is generated; requests without it get 401"""
    port = free_port()
    process = store_process(port, "--host", "0.0.0.0", stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    hang = threading.Timer(HANG_S, process.kill)  # a store that never prints its token: its output ends
    hang.start()
    try:
        assert process.stdout is not None
        line = next((line for line in process.stdout if "store token" in line), "")
        token = line.rsplit(": ", 1)[-1].strip()
        assert len(token) >= 32, line
        base = f"http://127.0.0.1:{port}/v1/agl"
        assert httpx.post(base + "/rollouts/search", json={}).status_code == 401
        ok = httpx.post(base + "/rollouts/search", json={}, headers={"Authorization": f"Bearer {token}"})
        assert ok.status_code == 200
    finally:
        hang.cancel()
        stop(process)


@pytest.mark.fault
def test_runner_processes_exit_when_their_trainer_is_killed(tmp_path: Path) -> None:
    """trainer kill -9 -> its runner processes and their fork server exit within seconds (no orphan can serve a
    later run)"""
    script = tmp_path / "parent.py"
    script.write_text(
        "import sys, time\n"
        f"sys.path.insert(0, {str(ROOT)!r})\n"
        "from adapters.runner.processes import RunnerProcesses\n"
        "runners = RunnerProcesses('tests.integration.agents:reward_only', 'http://127.0.0.1:9', 2).start()\n"
        "print(' '.join(str(p.pid) for p in runners._processes), flush=True)\n"
        "time.sleep(600)\n"
    )
    parent = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True, cwd=ROOT)
    assert parent.stdout is not None
    children = [int(pid) for pid in parent.stdout.readline().split()]
    assert len(children) == 2
    # Forked from the trainer's fork server (adapters.runner.forks), which must end with the trainer too.
    servers = {parent_of(pid) for pid in children}
    assert len(servers) == 1 and parent.pid not in servers
    parent.send_signal(signal.SIGKILL)
    parent.wait(HANG_S)
    everyone = [*children, *servers]
    wait_until(lambda: not any(alive(pid) for pid in everyone), "orphaned runners outlived their trainer")
