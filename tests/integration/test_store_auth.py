"""The store behind a shared secret, and runners that cannot outlive their trainer.

Real ``LightningStoreServer`` processes and runner processes on 127.0.0.1; every wait is bounded.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path

import agentlightning as agl
import httpx
import pytest

from adapters.agl_runners import RunnerProcesses
from adapters.agl_store import AglRolloutStore, AglTripletSource
from adapters.store_auth import TokenStoreClient, protect
from app.launch import free_port
from app.usecases.rollouts import RolloutOptions, run_rollouts
from ports.rollout_store import RolloutRequest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
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
    env = {k: v for k, v in os.environ.items() if k != "AGL_TINKER_STORE_TOKEN"}
    env |= {"LITELLM_LOCAL_MODEL_COST_MAP": "True", "TINKER_TELEMETRY": "0"}
    process = subprocess.Popen(
        [sys.executable, "-m", "app.faces.cli", "store", "--host", "0.0.0.0", "--port", str(port)],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
    )  # fmt: skip
    try:
        assert process.stdout is not None
        line = ""
        deadline = time.monotonic() + 60
        while "store token" not in line and time.monotonic() < deadline:
            line = process.stdout.readline()
        token = line.rsplit(": ", 1)[-1].strip()
        assert len(token) >= 32, line
        base = f"http://127.0.0.1:{port}/v1/agl"
        assert httpx.post(base + "/rollouts/search", json={}).status_code == 401
        ok = httpx.post(base + "/rollouts/search", json={}, headers={"Authorization": f"Bearer {token}"})
        assert ok.status_code == 200
    finally:
        process.send_signal(signal.SIGINT)
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            process.kill()


@pytest.mark.fault
def test_runner_processes_exit_when_their_trainer_is_killed(tmp_path: Path) -> None:
    """trainer kill -9 -> its runner processes exit within seconds (no orphan can serve a later run)"""
    script = tmp_path / "parent.py"
    script.write_text(
        "import sys, time\n"
        f"sys.path.insert(0, {str(ROOT)!r})\n"
        "from adapters.agl_runners import RunnerProcesses\n"
        "runners = RunnerProcesses('tests.integration.agents:reward_only', 'http://127.0.0.1:9', 2).start()\n"
        "print(' '.join(str(p.pid) for p in runners._processes), flush=True)\n"
        "time.sleep(600)\n"
    )
    parent = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True, cwd=ROOT)
    assert parent.stdout is not None
    children = [int(pid) for pid in parent.stdout.readline().split()]
    assert len(children) == 2
    parent.send_signal(signal.SIGKILL)
    parent.wait(10)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and any(_alive(pid) for pid in children):
        time.sleep(0.2)
    assert not any(_alive(pid) for pid in children), "orphaned runners outlived their trainer"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split()[2] != "Z"
    except OSError:
        return False
