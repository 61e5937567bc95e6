"""The project's store server answers an application error as Agent-lightning's own server does, with the
two ``BaseHTTPMiddleware`` functions replaced by one plain ASGI middleware."""

from __future__ import annotations

from typing import Any

import agentlightning as agl
import aiohttp
import pytest
from starlette.middleware.base import BaseHTTPMiddleware

from adapters.agl.middleware import StoreErrorsAsJson
from tests.support.stores import served_store

pytestmark = pytest.mark.slow


async def answer(url: str, path: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    async with aiohttp.ClientSession() as http, http.post(url + path, json=body) as response:
        return response.status, await response.json()


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/v1/agl/rollouts/ro-unknown/attempts/latest", {"status": "failed"}),  # the store raises: a 500
        ("/v1/agl/rollouts/ro-unknown/attempts/latest", {"status": "not-a-status"}),  # refused by validation
    ],
)
async def test_an_application_error_gets_the_same_answer_from_both_servers(path: str, body: dict[str, Any]) -> None:
    answers = []
    for project in (True, False):
        async with served_store(agl.InMemoryLightningStore(thread_safe=True), project_routes=project) as server:
            assert server.app is not None
            kinds = [m.cls for m in server.app.user_middleware]
            assert (StoreErrorsAsJson in kinds, BaseHTTPMiddleware in kinds) == (project, not project)
            status, payload = await answer(server.endpoint, path, body)
            answers.append((status, str(payload.get("detail"))[:40], payload.get("error_type"), "traceback" in payload))
    assert answers[0] == answers[1], answers
    assert answers[0][0] in (422, 500)
