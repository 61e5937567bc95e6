"""The fake Kubernetes API the Kubernetes-mode tests run 1.x's controller against: what that controller relies on."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.fake_kubernetes import FakeKubernetes
from tests.support.processes import alive
from tests.support.waits import HANG_S, wait_until

JOBS = "/apis/batch/v1/namespaces/agents/jobs"
SELECTOR = {"labelSelector": "app.kubernetes.io/managed-by=agentlightning"}


@pytest.fixture
def fake(tmp_path: Path) -> Iterator[FakeKubernetes]:
    with FakeKubernetes(tmp_path / "pods", {"FROM_IMAGE": "yes"}, tmp_path, namespace="agents") as fake:
        yield fake


@pytest.fixture
def api(fake: FakeKubernetes) -> Iterator[httpx.Client]:
    headers = {"Authorization": f"Bearer {fake.token}"}
    with httpx.Client(base_url=fake.url, headers=headers, timeout=HANG_S) as client:
        yield client


def job(name: str, code: str, managed: bool = True) -> dict[str, Any]:
    labels = {"app.kubernetes.io/managed-by": "agentlightning"} if managed else {}
    command = [sys.executable, "-c", f"import os, sys; print(os.environ['FROM_IMAGE'], os.environ['CODE']); {code}"]
    container = {"name": "agent", "image": "any", "command": command, "env": [{"name": "CODE", "value": code}]}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "labels": labels},
        "spec": {"template": {"spec": {"containers": [container], "restartPolicy": "Never"}}},
    }


def watch_until_ended(api: httpx.Client, n: int) -> dict[str, list[dict[str, Any]]]:
    """The watch's events per Job until ``n`` Jobs carry a condition."""
    seen: dict[str, list[dict[str, Any]]] = {}
    with api.stream("GET", JOBS, params={**SELECTOR, "watch": "true"}) as response:
        for line in response.iter_lines():
            event = json.loads(line)
            seen.setdefault(event["object"]["metadata"]["name"], []).append(event)
            ended = [events for events in seen.values() if events[-1]["object"]["status"].get("conditions")]
            if len(ended) == n:
                return seen
    raise AssertionError("the watch ended first")


def test_discovery_names_jobs_in_batch_v1_and_a_request_without_the_token_is_refused(
    fake: FakeKubernetes, api: httpx.Client
) -> None:
    assert api.get("/version").json()["gitVersion"].startswith("v1.")
    assert api.get("/apis").json()["groups"][0]["versions"][0]["groupVersion"] == "batch/v1"
    assert [r["name"] for r in api.get("/apis/batch/v1").json()["resources"]] == ["jobs"]
    assert httpx.get(f"{fake.url}{JOBS}").status_code == 401


def test_each_jobs_command_runs_with_its_environment_and_its_exit_becomes_its_condition(
    fake: FakeKubernetes, api: httpx.Client, tmp_path: Path
) -> None:
    assert api.post(JOBS, json=job("ok", "sys.exit(0)")).status_code == 201
    assert api.post(JOBS, json=job("bad", "sys.exit(1)")).status_code == 201
    assert api.post(JOBS, json=job("other", "sys.exit(0)", managed=False)).status_code == 201

    events = watch_until_ended(api, 2)

    assert set(events) == {"ok", "bad"}  # the selector holds on the watch
    ok, bad = events["ok"][-1]["object"], events["bad"][-1]["object"]
    assert ok["status"]["succeeded"] == 1 and ok["status"]["conditions"][0]["type"] == "Complete"
    assert bad["status"]["failed"] == 1 and bad["status"]["conditions"][0]["reason"] == "BackoffLimitExceeded"
    assert (tmp_path / "pods" / "ok.log").read_text() == "yes sys.exit(0)\n"  # the image's and the Job's env
    listed = api.get(JOBS, params=SELECTOR).json()["items"]
    assert sorted(item["metadata"]["name"] for item in listed) == ["bad", "ok"]


def test_a_second_job_of_one_name_conflicts_and_one_without_a_command_is_invalid(api: httpx.Client) -> None:
    assert api.post(JOBS, json=job("once", "sys.exit(0)")).status_code == 201
    assert api.post(JOBS, json=job("once", "sys.exit(0)")).status_code == 409
    no_command = job("bare", "")
    del no_command["spec"]["template"]["spec"]["containers"][0]["command"]
    assert api.post(JOBS, json=no_command).status_code == 422


def test_a_deleted_jobs_process_is_ended_and_the_watch_says_so(
    fake: FakeKubernetes, api: httpx.Client, tmp_path: Path
) -> None:
    sleeper = "import time; open('pid', 'w').write(str(os.getpid())); time.sleep(600)"
    assert api.post(JOBS, json=job("long", sleeper)).status_code == 201
    version = api.get(JOBS, params=SELECTOR).json()["metadata"]["resourceVersion"]
    wait_until(lambda: (tmp_path / "pid").is_file() and bool((tmp_path / "pid").read_text()), "the Job never ran")

    assert api.delete(f"{JOBS}/long").status_code == 200

    assert not alive(int((tmp_path / "pid").read_text()))
    assert api.get(f"{JOBS}/long").status_code == 404
    with api.stream("GET", JOBS, params={**SELECTOR, "watch": "true", "resourceVersion": version}) as response:
        kinds = []
        for line in response.iter_lines():
            kinds.append(json.loads(line)["type"])
            if kinds[-1] == "DELETED":
                break
    assert kinds[-1] == "DELETED"
    assert fake.jobs() == []
