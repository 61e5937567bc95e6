"""The rollout-store port over Agent-lightning 1.x's ``agl-server`` REST API (pinned to 1.0.2), in plain HTTP.

1.x keeps rollouts (``queuing`` -> ``running`` -> ``succeeded`` | ``failed``) and events, not spans:
its controller starts one agent process (or Kubernetes Job) per rollout, the agent calls the URLs the
controller built from ``agl_server.agent_url``, and with that URL on this project's endpoint every
call and reward event is recorded there, in a ``SpanLog`` numbered per rollout. So this adapter
enqueues and watches rollouts on the server and reads spans from the log:

- ``enqueue_many`` posts the project's own rollout ids (creation is idempotent on the server, so a
  retried post never doubles a rollout) with the launch settings (``Agl1Launch``: a local agent class
  and its environment variables, or a Kubernetes Job template) and opens each id in the log;
- ``terminal_statuses`` reads only what ended since the last call (``GET /api/rollouts/terminal?after=``,
  a cursor into the server's append-only completion log) and the live rollouts in one more request:
  a held rollout that is neither live nor terminal is one a restarted server forgot (``LOST``);
- ``cancel`` and ``forget`` delete the rollout (1.x has no cancelled state; deleting in local mode does
  not stop its process, so the log ends it and the endpoint refuses its next call).

One attempt per rollout: 1.x runs a rollout once and never retries it, so a ``RetryPolicy`` asking for
more attempts is refused (``MoreAttemptsRefused``); a failed rollout is counted failed, as with 0.x
without retries. Connection failures are ridden out like the 0.x store's (``OutagePolicy``).
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

import httpx
from agentlightning import Span

from adapters.agl.store import OutagePolicy
from adapters.endpoint.span_log import SpanLog
from ports.rollout_store import LOST, RetryPolicy, RolloutRequest, StoreUnavailable, TakenRollout

logger = logging.getLogger(__name__)
T = TypeVar("T")

CONTRACT_VERSION = "1.0.2"
"""The ``agentlightning`` release whose REST contract this adapter speaks."""
CONTRACT_PATHS = (
    "/api/rollouts",
    "/api/rollouts/terminal",
    "/api/rollouts/{rollout_id}",
    "/api/rollouts/{rollout_id}/attempt/{attempt_id}/events",
    "/api/models",
)
"""Routes of 1.0.2's ``agl-server`` this adapter and the controller's agents use (checked in its OpenAPI)."""
_OUTAGE_STATUSES = frozenset({408, 502, 503, 504})
_TERMINAL_PAGE = 1000
_LIVE_LIMIT = 1_000_000


class MoreAttemptsRefused(ValueError):
    """A retry policy asked Agent-lightning 1.x for more than one attempt per rollout."""


class ContractMismatch(RuntimeError):
    """The server does not speak the REST contract of agentlightning 1.0.2; the message says what is missing."""


@dataclass(frozen=True, slots=True)
class Agl1Launch:
    """How the controller launches each rollout's agent (1.x's ``RolloutConfig``)."""

    agent_class: str | None = None
    """``package.module:Class`` with ``run()``: local mode (the controller imports it in its own environment)."""
    env_map: Mapping[str, str] = field(default_factory=dict)
    """Environment variables of the agent: a value ``input.<path>`` takes that field of the task, others as written."""
    job_template: str | None = None
    """Kubernetes mode: the Job template (a Jinja YAML the controller renders per rollout)."""
    timeout_s: int = 3600
    """The controller fails a rollout still running after this long (the loop's own deadline usually comes first)."""

    def config(self) -> dict[str, Any]:
        config: dict[str, Any] = {"timeout_seconds": self.timeout_s}
        if self.agent_class is not None:
            config["local"] = {"agent_class": self.agent_class, "env_map": dict(self.env_map)}
        if self.job_template is not None:
            config["k8s"] = {"job_template": self.job_template}
        return config


def is_connection_failure(error: BaseException) -> bool:
    """Whether ``error`` says the server was unreachable (worth retrying), not that it refused the call."""
    if isinstance(error, httpx.HTTPStatusError):
        return error.response.status_code in _OUTAGE_STATUSES
    return isinstance(error, httpx.TransportError)


async def check_contract(client: httpx.AsyncClient) -> None:
    """``ContractMismatch`` unless the server's OpenAPI has every route of 1.0.2 this project uses."""
    try:
        response = await client.get("/openapi.json")
        response.raise_for_status()
        paths = set(response.json().get("paths", {}))
    except (httpx.HTTPError, ValueError, AttributeError) as error:
        raise ContractMismatch(f"cannot read its API description (/openapi.json): {error}") from error
    missing = [p for p in CONTRACT_PATHS if p not in paths]
    if missing:
        raise ContractMismatch(
            f"it is not agentlightning {CONTRACT_VERSION}'s agl-server: it lacks {', '.join(missing)}"
        )


class Agl1RolloutStore:
    """``ports.rollout_store.RolloutStore`` over ``agl-server`` (``client``: its base URL and bearer key)."""

    def __init__(
        self,
        client: httpx.AsyncClient,
        spans: SpanLog,
        launch: Agl1Launch,
        outage: OutagePolicy | None = None,
        policy_version: Callable[[], int] | None = None,
    ) -> None:
        self.client = client
        self.policy_version: Callable[[], int] = policy_version or (lambda: 0)
        """The serving policy's version (the endpoint's; the run binds it once the endpoint exists)."""
        self.spans = spans
        self.launch = launch
        self.outage = outage or OutagePolicy()
        self.url = str(client.base_url)
        self._cursor = 0
        """How far the server's completion log has been read."""
        self._held: set[str] = set()
        """Rollouts enqueued and not yet forgotten."""
        self._ended: dict[str, str] = {}
        """Terminal statuses read for held rollouts (cancelled ones too)."""
        self._resources = 0
        self._outage_since: float | None = None

    async def _call(self, operation: Callable[[], Awaitable[T]]) -> T:
        delay = self.outage.first_delay_s
        while True:
            try:
                result = await operation()
            except Exception as error:
                if not is_connection_failure(error):
                    raise
                delay = await self._wait_out(error, delay)
                continue
            if self._outage_since is not None:
                elapsed = time.monotonic() - self._outage_since
                logger.warning("agl-server at %s reachable again after %.1fs", self.url, elapsed)
                self._outage_since = None
            return result

    async def _wait_out(self, error: Exception, delay: float) -> float:
        now = time.monotonic()
        if self._outage_since is None:
            self._outage_since = now
            message = "agl-server at %s unreachable (%s); retrying for up to %.0fs"
            logger.warning(message, self.url, _describe(error), self.outage.tolerance_s)
        elapsed = now - self._outage_since
        if elapsed >= self.outage.tolerance_s:
            raise StoreUnavailable(
                f"agl-server at {self.url} has been unreachable for {elapsed:.0f}s ({_describe(error)})"
            ) from error
        await asyncio.sleep(min(delay, self.outage.tolerance_s - elapsed))
        return min(delay * 2, self.outage.max_delay_s)

    async def _request(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        async def send() -> httpx.Response:
            response = await self.client.request(method, path, **kwargs)
            response.raise_for_status()
            return response

        return await self._call(send)

    async def add_resources(self, resources: Mapping[str, object]) -> str:
        """Register the policy (each resource with an endpoint and a model) with the version the endpoint serves,
        as 1.x's gateway reports it (``model_version``); each registration gets an id of its own."""
        number, self._resources = self._resources, self._resources + 1
        version = self.policy_version()
        models = [
            {"model": str(model), "endpoint": str(endpoint), "version": version}
            for resource in resources.values()
            if (model := getattr(resource, "model", None)) and (endpoint := getattr(resource, "endpoint", None))
        ]
        if models:
            await self._request("POST", "/api/models", json=models)
        return f"agl1-resources-{number}"

    async def enqueue_many(self, requests: Sequence[RolloutRequest], retry: RetryPolicy) -> Sequence[str]:
        if retry.max_attempts > 1:
            raise MoreAttemptsRefused(
                f"Agent-lightning 1.x runs each rollout once: max_attempts={retry.max_attempts} cannot be honoured"
            )
        ids = [f"ro-{uuid.uuid4().hex}" for _ in requests]
        config = self.launch.config()
        body = [
            {
                "rollout_id": rollout_id,
                "input": request.task,
                "is_train": request.mode == "train",
                "config": config,
                "metadata": {"mode": request.mode, "resources_id": request.resources_id},
            }
            for rollout_id, request in zip(ids, requests, strict=True)
        ]
        self.spans.open(ids)  # before the post: an agent may call as soon as the controller sees its rollout
        self._held.update(ids)
        await self._request("POST", "/api/rollouts", json=body)
        return ids

    async def _live(self) -> dict[str, str]:
        """Queued and running rollouts on the server, with their states."""
        params = [("state_in", "queuing"), ("state_in", "running"), ("limit", str(_LIVE_LIMIT))]
        response = await self._request("GET", "/api/rollouts", params=params)
        return {str(r["rollout_id"]): str(r["status"]["state"]) for r in response.json()}

    async def _read_terminal(self) -> None:
        """Statuses of the held rollouts that ended since the cursor; a shorter log than read means a restart."""
        while True:
            params = {"after": self._cursor, "limit": _TERMINAL_PAGE}
            page = (await self._request("GET", "/api/rollouts/terminal", params=params)).json()
            if int(page["total_terminal"]) < self._cursor:  # the server restarted: its log starts again
                logger.warning("agl-server at %s restarted (its completion log is shorter): reading it again", self.url)
                self._cursor = 0
                continue
            for item in page["items"]:
                rollout_id = str(item["rollout_id"])
                if rollout_id in self._held:
                    self._ended.setdefault(rollout_id, str(item["state"]))
            self._cursor = int(page["next_after"])
            if not page["items"] or self._cursor >= int(page["total_terminal"]):
                return

    async def terminal_statuses(self, rollout_ids: Sequence[str]) -> Mapping[str, str]:
        if not rollout_ids:
            return {}
        wanted = [rid for rid in rollout_ids if rid in self._held]
        live = await self._live() if any(rid not in self._ended for rid in wanted) else {}
        await self._read_terminal()  # after the live list: one ending in between shows here
        statuses = {rid: self._ended[rid] for rid in wanted if rid in self._ended}
        lost = [rid for rid in wanted if rid not in statuses and rid not in live]
        if lost:
            logger.warning("agl-server at %s no longer knows %d rollout(s): counted as lost", self.url, len(lost))
            for rid in lost:
                self._ended[rid] = statuses[rid] = LOST
        unknown = [rid for rid in rollout_ids if rid not in self._held]
        statuses.update(dict.fromkeys(unknown, LOST))
        self.spans.end(statuses)
        return statuses

    async def taken(self, rollout_ids: Sequence[str]) -> Mapping[str, TakenRollout]:
        """Rollouts the controller has started (1.x names no worker: ``worker_id`` is None)."""
        if not rollout_ids:
            return {}
        live = await self._live()
        return {rid: TakenRollout(worker_id=None) for rid in rollout_ids if live.get(rid) == "running"}

    async def latest_spans(self, rollout_id: str) -> Sequence[Span]:
        return self.spans.spans(rollout_id)

    async def _delete(self, rollout_ids: Sequence[str]) -> None:
        await asyncio.gather(*(self._request("DELETE", f"/api/rollouts/{rid}") for rid in rollout_ids))

    async def cancel(self, rollout_ids: Sequence[str]) -> None:
        """Delete them on the server (1.x has no cancelled state) and drop them here: their agents' next calls are
        refused, and nothing reads them again."""
        held = [rid for rid in rollout_ids if rid in self._held]
        self.spans.forget(held)
        self._held.difference_update(held)
        for rid in held:
            self._ended.pop(rid, None)
        await self._delete(held)

    async def forget(self, rollout_ids: Sequence[str]) -> None:
        held = [rid for rid in rollout_ids if rid in self._held]
        self.spans.forget(held)
        for rid in held:
            self._held.discard(rid)
            self._ended.pop(rid, None)
        try:
            await self._delete(held)
        except StoreUnavailable:
            raise
        except httpx.HTTPError as error:  # memory on the server, not correctness: the run goes on
            logger.warning("could not delete %d trained rollout(s) on agl-server at %s: %s", len(held), self.url, error)


def _describe(error: BaseException) -> str:
    return f"{type(error).__name__}: {error}" if str(error) else type(error).__name__
