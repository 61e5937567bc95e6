"""Agent-lightning 1.x's real ``agl-controller`` in Kubernetes mode, against a fake Kubernetes API, trains.

No cluster can run pods offline: ``tests.support.fake_kubernetes`` serves the Jobs API the controller's
client calls and runs each Job's container command as a local process, with the Job's environment, and
reports its end as the Job's condition. The trainer attaches to a real ``agl-server``
(``agl1.server_url``, the key in ``AGL_KEY``) whose controller renders the run's ``agl1.job_template`` per
rollout, with ``agent_url`` on the run's endpoint (a fixed ``endpoint_port``). Skipped only where no
Python 3.12 can be found.
"""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import signal
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from adapters.agl1.environment import PYTHON_ENV, ensure_agl1_env, find_python312
from adapters.agl1.processes import DIE_WITH_PARENT, KEY_OVERRIDE, Agl1Server, free_port
from tests.support.fake_kubernetes import FakeKubernetes
from tests.support.processes import stop
from tests.support.runs import ROOT, batch_lines

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        find_python312() is None,
        reason=f"Agent-lightning 1.x needs Python 3.12: none found (pyenv's 3.12.1, python3.12, or ${PYTHON_ENV})",
    ),
]

EXAMPLE = ROOT / "examples" / "agl1_multiturn"
NAMESPACE = "agents"


@dataclass(frozen=True)
class Cluster:
    """A real ``agl-server`` and Kubernetes-mode controller, the fake API whose Jobs run the agents, and the port
    the controller's ``agent_url`` names (the run's endpoint must listen there)."""

    server_url: str
    endpoint_port: int
    kubernetes: FakeKubernetes


@pytest.fixture
def cluster(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Cluster]:
    env = ensure_agl1_env(EXAMPLE / "requirements.txt", log=lambda line: print(line, flush=True))
    key = secrets.token_urlsafe(16)
    monkeypatch.setenv("AGL_KEY", key)
    monkeypatch.chdir(ROOT)
    image = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "AGL_KEY")}
    image.update(DIE_WITH_PARENT, PATH=f"{env.path / 'bin'}:{os.environ['PATH']}", PYTHONPATH=str(ROOT))
    kubernetes = FakeKubernetes(tmp_path / "pods", image, ROOT, namespace=NAMESPACE).start()
    kubeconfig = kubernetes.write_kubeconfig(tmp_path / "kubeconfig")
    server = Agl1Server(env, key, tmp_path / "agl1")
    controller: subprocess.Popen[bytes] | None = None
    port = free_port()
    try:
        server.start()
        args = [
            str(env.controller),
            "runner_type=k8s",
            f"agl_server.url={server.url}",
            f"agl_server.agent_url=http://127.0.0.1:{port}",
            f"agl_server.key={KEY_OVERRIDE}",
            f"k8s_runner.namespace={NAMESPACE}",
            "k8s_runner.poll_interval=0.5",
            f"hydra.run.dir={tmp_path / 'agl1' / 'controller'}",
            "hydra.output_subdir=null",
        ]
        controller_env = {**image, "KUBECONFIG": str(kubeconfig), "AGL_KEY": key}
        with (tmp_path / "agl1" / "controller.log").open("ab") as log:
            controller = subprocess.Popen(args, env=controller_env, stdout=log, stderr=log)
        yield Cluster(server.url, port, kubernetes)
    finally:
        if controller is not None and controller.poll() is None:
            controller.send_signal(signal.SIGTERM)
        kubernetes.stop()  # ends its watch: the controller then exits
        stop(controller, signal.SIGTERM)
        server.stop()


def overrides(tmp_path: Path, model_dir: Path, cluster: Cluster, template: Path, *extra: str) -> list[str]:
    return [
        f"agl1.server_url={cluster.server_url}",
        f"agl1.job_template={template}",
        f"endpoint_port={cluster.endpoint_port}",
        f"tasks={EXAMPLE / 'tasks.jsonl'}",
        f"log_path={tmp_path / 'run'}",
        f"policy.model_path={model_dir}",
        "batch_size=2",
        "group_size=2",
        "max_tokens=8",
        "warm_start.steps=0",
        "eval_every=0",
        "save_every=0",
        "rollout_timeout_s=60",
        *extra,
    ]


def container_env(job: dict[str, Any]) -> dict[str, str]:
    (container,) = job["spec"]["template"]["spec"]["containers"]
    return {item["name"]: item["value"] for item in container["env"]}


def condition(job: dict[str, Any]) -> tuple[str, str]:
    (last,) = job["status"]["conditions"]
    return last["type"], last.get("reason", "")


async def test_kubernetes_jobs_of_the_two_turn_agent_train_two_batches_each_rollout_one_exact_datum(
    tmp_path: Path, tiny_model: Path, cluster: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    from adapters.agl1.store import Agl1RolloutStore
    from app.config import load_config
    from app.launch import train

    registered: list[int] = []
    request = Agl1RolloutStore._request

    async def recording(self: Agl1RolloutStore, method: str, path: str, **kwargs: Any) -> httpx.Response:
        if path == "/api/models":
            registered.extend(model["version"] for model in kwargs["json"])
        return await request(self, method, path, **kwargs)

    monkeypatch.setattr(Agl1RolloutStore, "_request", recording)
    args = overrides(tmp_path, tiny_model, cluster, EXAMPLE / "job.yaml", "max_batches=2")
    summary = await asyncio.wait_for(train(load_config(None, args).unwrap()), 300)

    assert (summary.start_batch, summary.end_batch) == (0, 2)
    lines = batch_lines(tmp_path / "run")
    assert [m["progress/batch"] for m in lines] == [0, 1]
    for m in lines:
        assert m["rollouts/n_enqueued"] == 4
        assert m["env/all/by_group/frac_status_succeeded"] == 1.0
        assert m["rollouts/n_without_reward"] == 0  # every reward event reached its rollout
        assert m["endpoint/capture/recorded"] == 8  # two calls per rollout, each with its rollout id
        assert m.get("endpoint/capture/unattributed", 0) == 0
        assert m["reconstruct/merge_ratio"] == 1.0  # each rollout's two turns are one datum
        assert m["endpoint/prefix/extended"] == 4  # turn 2 extended turn 1 token for token
        assert m["env/all/reward/not_null"] == 0.5  # the reward event went to the second call of each rollout
    jobs = cluster.kubernetes.created
    assert len(jobs) == 8  # one Job per rollout, in the controller's namespace
    agent_url = f"http://127.0.0.1:{cluster.endpoint_port}"
    for job in jobs:
        rid = job["metadata"]["labels"]["agentlightning/rollout-id"]
        assert job["metadata"]["namespace"] == NAMESPACE and job["metadata"]["name"] == f"agl-rollout-{rid}"
        env = container_env(job)
        assert env["AGL_OPENAI_BASE_URL"] == f"{agent_url}/proxy/rollout/{rid}/attempt/0/mode/train/openai/v1"
        assert env["AGL_EVENT_URL"] == f"{agent_url}/api/rollouts/{rid}/attempt/0/events"
        assert env["AGL_KEY"] == os.environ["AGL_KEY"] and set(json.loads(env["AGL_TASK"])) == {"word", "digit"}
    assert {condition(job) for job in cluster.kubernetes.jobs()} == {("Complete", "")}
    assert registered == [1, 2]  # the endpoint's version (its first sampler is 1), one step per batch


async def test_a_job_whose_agent_exits_1_is_counted_failed(tmp_path: Path, tiny_model: Path, cluster: Cluster) -> None:
    from app.config import load_config
    from app.launch import train
    from app.usecases.steps import NothingToTrain

    template = tmp_path / "crasher.yaml"
    agent = "from tests.integration.agl1.agents import Crasher; Crasher().run()"
    template.write_text((EXAMPLE / "job.yaml").read_text().replace(
        "from examples.agl1_multiturn.agent import TwoTurnDigits; TwoTurnDigits().run()", agent
    ))  # fmt: skip
    args = overrides(tmp_path, tiny_model, cluster, template, "max_batches=1")

    with pytest.raises(NothingToTrain, match="no trainable rollout"):
        await asyncio.wait_for(train(load_config(None, args).unwrap()), 300)

    (line,) = batch_lines(tmp_path / "run")
    assert line["rollouts/n_failed"] == 4 and line["rollouts/n_succeeded"] == 0
    jobs = cluster.kubernetes.jobs()
    assert len(jobs) == 4 and {condition(job) for job in jobs} == {("Failed", "BackoffLimitExceeded")}
    logs = [path.read_text() for path in (tmp_path / "pods").glob("*.log")]
    assert len(logs) == 4 and all("RuntimeError: the agent crashed on purpose" in log for log in logs)
