"""A small fake Kubernetes API server for batch/v1 Jobs, whose Jobs run as local processes.

No cluster can run pods offline, so Agent-lightning 1.x's controller in Kubernetes mode is tested against
this: plain HTTP, one bearer token, the calls its client (``kr8s``, as agentlightning 1.0.2's
``K8sReconciler`` makes them) needs and nothing more:

- discovery: ``/version``, ``/api``, ``/api/v1``, ``/apis``, ``/apis/batch/v1``;
- Jobs in a namespace: list (``labelSelector`` with ``k=v`` terms), create, get, delete, and watch
  (``watch=true``: the current Jobs as ``ADDED``, or the events after ``resourceVersion``, then each change
  as it happens, one JSON line per event).

Each created Job's first container runs here as a process: its ``command`` and ``args``, in ``cwd``, with
``base_env`` (the "image": e.g. a ``PATH`` whose ``python`` has the agent's packages) and the container's
``env`` values on top (where the controller put ``AGL_OPENAI_BASE_URL``, ``AGL_EVENT_URL`` and ``AGL_KEY``).
The image is not pulled or checked. The Job's status follows the process as the Job controller would report
a pod with ``restartPolicy: Never`` and ``backoffLimit: 0``: ``active`` while it runs, then a ``Complete``
condition (exit 0) or a ``Failed`` one (any other exit, or ``activeDeadlineSeconds`` passed: the process is
killed). Each process's output goes to ``<log_dir>/<job name>.log``, as ``kubectl logs`` would show it.
"""

from __future__ import annotations

import contextlib
import copy
import datetime
import json
import os
import signal
import subprocess
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from functools import partial
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

GIT_VERSION = "v1.31.0"
_JOBS_RESOURCE = {
    "name": "jobs",
    "singularName": "job",
    "namespaced": True,
    "kind": "Job",
    "verbs": ["create", "delete", "get", "list", "watch"],
    "categories": ["all"],
}
_STOP_GRACE_S = 5.0


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _selected(job: Mapping[str, Any], selector: str) -> bool:
    """Whether the Job's labels match an equality selector (``a=b,c=d``; ``a==b`` and ``a!=b`` too)."""
    labels = job.get("metadata", {}).get("labels", {}) or {}
    for term in filter(None, (t.strip() for t in selector.split(","))):
        if "!=" in term:
            key, value = term.split("!=", 1)
            if labels.get(key.strip()) == value.strip():
                return False
            continue
        key, _, value = term.replace("==", "=").partition("=")
        if labels.get(key.strip()) != value.strip():
            return False
    return True


def _status(code: int, reason: str, message: str) -> dict[str, Any]:
    return {"kind": "Status", "apiVersion": "v1", "status": "Failure", "message": message, "reason": reason,
            "code": code}  # fmt: skip


@dataclass
class _Job:
    manifest: dict[str, Any]
    process: subprocess.Popen[bytes] | None = None
    deleted: bool = False


@dataclass
class FakeKubernetes:
    """The fake API on ``127.0.0.1`` (a free port), accepting ``token``; ``kubeconfig`` points ``kr8s`` at it."""

    log_dir: Path
    base_env: Mapping[str, str]
    cwd: Path
    token: str = "fake-kubernetes-token"
    namespace: str = "default"
    _jobs: dict[str, _Job] = field(default_factory=dict)
    _events: list[tuple[int, str, dict[str, Any]]] = field(default_factory=list)
    _version: int = 0
    _changed: threading.Condition = field(default_factory=threading.Condition)
    _closed: bool = False
    _server: ThreadingHTTPServer | None = None
    created: list[dict[str, Any]] = field(default_factory=list)
    """Every Job manifest as it was created (what the controller sent), in order."""

    @property
    def url(self) -> str:
        assert self._server is not None
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def write_kubeconfig(self, path: Path) -> Path:
        """A kubeconfig (JSON is YAML) whose current context is this server, ``namespace`` and ``token``."""
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "fake", "cluster": {"server": self.url}}],
            "users": [{"name": "fake", "user": {"token": self.token}}],
            "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "fake", "namespace": self.namespace}}],
            "current-context": "fake",
        }
        path.write_text(json.dumps(config, indent=2) + "\n")
        return path

    def start(self) -> FakeKubernetes:
        self.log_dir.mkdir(parents=True, exist_ok=True)
        fake = self

        class Handler(_Handler):
            api = fake

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, name="fake-kubernetes", daemon=True).start()
        return self

    def stop(self) -> None:
        """End every watch, kill every Job's process that still runs, stop serving."""
        with self._changed:
            self._closed = True
            self._changed.notify_all()
            processes = [job.process for job in self._jobs.values() if job.process is not None]
        for process in processes:
            _end(process)
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()

    def __enter__(self) -> FakeKubernetes:
        return self.start()

    def __exit__(self, *_: object) -> None:
        self.stop()

    def jobs(self) -> list[dict[str, Any]]:
        """The Jobs now stored, with their status."""
        with self._changed:
            return [copy.deepcopy(job.manifest) for job in self._jobs.values()]

    # --- the API's state, under ``_changed`` ---

    def _record(self, kind: str, manifest: dict[str, Any]) -> None:
        self._version += 1
        manifest["metadata"]["resourceVersion"] = str(self._version)
        self._events.append((self._version, kind, copy.deepcopy(manifest)))
        self._changed.notify_all()

    def list_jobs(self, namespace: str, selector: str) -> dict[str, Any]:
        with self._changed:
            items = [
                copy.deepcopy(job.manifest)
                for job in self._jobs.values()
                if job.manifest["metadata"]["namespace"] == namespace and _selected(job.manifest, selector)
            ]
            version = str(self._version)
        return {"kind": "JobList", "apiVersion": "batch/v1", "metadata": {"resourceVersion": version}, "items": items}

    def get_job(self, namespace: str, name: str) -> dict[str, Any] | None:
        with self._changed:
            job = self._jobs.get(f"{namespace}/{name}")
            return copy.deepcopy(job.manifest) if job is not None else None

    def create_job(self, namespace: str, manifest: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        metadata = manifest.setdefault("metadata", {})
        name = metadata.get("name")
        if manifest.get("kind") != "Job" or not name:
            return 422, _status(422, "Invalid", "Job.batch is invalid: kind Job and metadata.name are required")
        containers = manifest.get("spec", {}).get("template", {}).get("spec", {}).get("containers") or []
        if not containers or not containers[0].get("command"):
            return 422, _status(422, "Invalid", f'Job.batch "{name}" is invalid: the fake runs a container command')
        metadata.update(namespace=namespace, uid=f"uid-{name}", creationTimestamp=_now())
        manifest.setdefault("apiVersion", "batch/v1")
        manifest["status"] = {}
        with self._changed:
            if self._closed:
                return 503, _status(503, "ServiceUnavailable", "shutting down")
            if f"{namespace}/{name}" in self._jobs:
                return 409, _status(409, "AlreadyExists", f'jobs.batch "{name}" already exists')
            job = _Job(manifest)
            self._jobs[f"{namespace}/{name}"] = job
            self.created.append(copy.deepcopy(manifest))
            self._record("ADDED", manifest)
            created = copy.deepcopy(manifest)
        threading.Thread(target=self._run, args=(job,), name=f"job-{name}", daemon=True).start()
        return 201, created

    def delete_job(self, namespace: str, name: str) -> dict[str, Any] | None:
        with self._changed:
            job = self._jobs.pop(f"{namespace}/{name}", None)
            if job is None:
                return None
            job.deleted = True
            self._record("DELETED", job.manifest)
            process = job.process
            gone = copy.deepcopy(job.manifest)
        if process is not None:
            _end(process)
        return gone

    def watch(self, namespace: str, selector: str, since: str | None) -> Iterator[dict[str, Any]]:
        """Events for the namespace's selected Jobs: the current ones as ADDED (or those after ``since``), then
        each new one; ends when the server stops."""

        def wanted(obj: Mapping[str, Any]) -> bool:
            return bool(obj["metadata"]["namespace"] == namespace and _selected(obj, selector))

        with self._changed:
            if since is None:
                backlog = [("ADDED", copy.deepcopy(j.manifest)) for j in self._jobs.values() if wanted(j.manifest)]
            else:
                backlog = [(kind, obj) for version, kind, obj in self._events if version > int(since)]
            seen = self._version
        yield from ({"type": kind, "object": obj} for kind, obj in backlog if wanted(obj))
        while True:
            with self._changed:
                self._changed.wait_for(partial(self._moved_past, seen), timeout=1.0)
                if self._closed:
                    return
                fresh = [(kind, obj) for version, kind, obj in self._events if version > seen]
                seen = self._version
            yield from ({"type": kind, "object": obj} for kind, obj in fresh if wanted(obj))

    def _moved_past(self, version: int) -> bool:
        return self._closed or self._version > version

    # --- running a Job ---

    def _run(self, job: _Job) -> None:
        metadata, spec = job.manifest["metadata"], job.manifest["spec"]
        container = spec["template"]["spec"]["containers"][0]
        env = dict(self.base_env)
        env.update({item["name"]: str(item.get("value", "")) for item in container.get("env", [])})
        command = [*container["command"], *container.get("args", [])]
        deadline = spec.get("activeDeadlineSeconds")
        with self._changed:
            if job.deleted or self._closed:
                return
            with (self.log_dir / f"{metadata['name']}.log").open("ab") as out:
                try:
                    job.process = subprocess.Popen(
                        command, env=env, cwd=self.cwd, stdin=subprocess.DEVNULL, stdout=out, stderr=out,
                        start_new_session=True,
                    )  # fmt: skip
                except OSError as error:
                    out.write(f"cannot start {command[0]}: {error}\n".encode())
            process = job.process
            job.manifest["status"] = {"startTime": _now(), "active": 1} if process is not None else {}
            self._record("MODIFIED", job.manifest)
        if process is None:
            self._finish(job, None, "StartError", f"cannot start {command[0]}")
            return
        try:
            code: int | None = process.wait(timeout=float(deadline) if deadline else None)
        except subprocess.TimeoutExpired:
            _end(process)
            code = None
        if code == 0:
            self._finish(job, 0, "", "")
        elif code is None:
            self._finish(job, None, "DeadlineExceeded", "Job was active longer than specified deadline")
        else:
            self._finish(job, code, "BackoffLimitExceeded", "Job has reached the specified backoff limit")

    def _finish(self, job: _Job, code: int | None, reason: str, message: str) -> None:
        with self._changed:
            if job.deleted:
                return
            status = job.manifest["status"]
            status.pop("active", None)
            status["completionTime" if code == 0 else "failedTime"] = _now()
            if code == 0:
                status["succeeded"] = 1
                condition = {"type": "Complete", "status": "True", "lastTransitionTime": _now()}
            else:
                status["failed"] = 1
                condition = {"type": "Failed", "status": "True", "reason": reason, "message": message,
                             "lastTransitionTime": _now()}  # fmt: skip
            status["conditions"] = [condition]
            self._record("MODIFIED", job.manifest)


def _end(process: subprocess.Popen[bytes]) -> None:
    """SIGTERM to the container's process group, then SIGKILL after a grace period (as the kubelet does)."""
    if process.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(_STOP_GRACE_S)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()


class _Handler(BaseHTTPRequestHandler):
    """One request to the fake API."""

    api: FakeKubernetes
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: the tests read the Jobs, not an access log."""

    def _send(self, code: int, body: Mapping[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _authorized(self) -> bool:
        if self.headers.get("Authorization") == f"Bearer {self.api.token}":
            return True
        self._send(401, _status(401, "Unauthorized", "Unauthorized"))
        return False

    def _route(self) -> tuple[list[str], dict[str, str]]:
        parts = urlsplit(self.path)
        query = {key: values[-1] for key, values in parse_qs(parts.query).items()}
        return [p for p in parts.path.split("/") if p], query

    def do_GET(self) -> None:
        if not self._authorized():
            return
        path, query = self._route()
        discovery = _discovery(path)
        if discovery is not None:
            self._send(200, discovery)
            return
        match path:
            case ["apis", "batch", "v1", "namespaces", namespace, "jobs"]:
                selector = query.get("labelSelector", "")
                if query.get("watch") in ("true", "1"):
                    self._stream(self.api.watch(namespace, selector, query.get("resourceVersion") or None))
                else:
                    self._send(200, self.api.list_jobs(namespace, selector))
            case ["apis", "batch", "v1", "namespaces", namespace, "jobs", name]:
                job = self.api.get_job(namespace, name)
                if job is None:
                    self._send(404, _status(404, "NotFound", f'jobs.batch "{name}" not found'))
                else:
                    self._send(200, job)
            case _:
                self._send(404, _status(404, "NotFound", f"the fake serves no {self.path}"))

    def do_POST(self) -> None:
        if not self._authorized():
            return
        path, _ = self._route()
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        match path:
            case ["apis", "batch", "v1", "namespaces", namespace, "jobs"]:
                try:
                    manifest = json.loads(body)
                except ValueError:
                    self._send(400, _status(400, "BadRequest", "the body is not JSON"))
                    return
                self._send(*self.api.create_job(namespace, manifest))
            case _:
                self._send(405, _status(405, "MethodNotAllowed", f"the fake creates nothing at {self.path}"))

    def do_DELETE(self) -> None:
        if not self._authorized():
            return
        path, _ = self._route()
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        match path:
            case ["apis", "batch", "v1", "namespaces", namespace, "jobs", name]:
                gone = self.api.delete_job(namespace, name)
                if gone is None:
                    self._send(404, _status(404, "NotFound", f'jobs.batch "{name}" not found'))
                else:
                    self._send(200, gone)
            case _:
                self._send(405, _status(405, "MethodNotAllowed", f"the fake deletes nothing at {self.path}"))

    def _stream(self, events: Iterator[dict[str, Any]]) -> None:
        """A watch: chunked transfer, one JSON event per line, until the server stops or the client leaves."""
        self.send_response(HTTPStatus.OK)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        try:
            for event in events:
                line = json.dumps(event).encode() + b"\n"
                self.wfile.write(f"{len(line):x}\r\n".encode() + line + b"\r\n")
                self.wfile.flush()
            self.wfile.write(b"0\r\n\r\n")
        except OSError:  # the client went away
            pass
        self.close_connection = True


def _discovery(path: list[str]) -> dict[str, Any] | None:
    """The discovery documents: the core group (no resources served) and batch/v1 with Jobs."""
    match path:
        case ["version"]:
            return {"major": "1", "minor": "31", "gitVersion": GIT_VERSION, "platform": "linux/amd64"}
        case ["api"]:
            return {"kind": "APIVersions", "versions": ["v1"]}
        case ["api", "v1"]:
            return {"kind": "APIResourceList", "groupVersion": "v1", "resources": []}
        case ["apis"]:
            version = {"groupVersion": "batch/v1", "version": "v1"}
            group = {"name": "batch", "versions": [version], "preferredVersion": version}
            return {"kind": "APIGroupList", "apiVersion": "v1", "groups": [group]}
        case ["apis", "batch", "v1"]:
            return {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": "batch/v1",
                    "resources": [_JOBS_RESOURCE]}  # fmt: skip
    return None
