"""Agent-lightning 1.x agents the tests start through the controller: standard library, openai and httpx only."""

from __future__ import annotations

import json
import os
import time

import httpx
from openai import OpenAI


def _ask(content: str) -> str:
    client = OpenAI(base_url=os.environ["AGL_OPENAI_BASE_URL"], api_key=os.environ.get("AGL_KEY") or "none")
    reply = client.chat.completions.create(model="policy", messages=[{"role": "user", "content": content}])
    return reply.choices[0].message.content or ""


class Sleeper:
    """One call, then sleeps past any test: what a trainer's death must not leave running."""

    def run(self) -> None:
        _ask(json.loads(os.environ["AGL_TASK"])["word"])
        time.sleep(3600)


class Crasher:
    """One call, then raises: the controller's worker exits 1 and the rollout fails."""

    def run(self) -> None:
        _ask(json.loads(os.environ["AGL_TASK"])["word"])
        raise RuntimeError("the agent crashed on purpose")


class Streamer:
    """A streamed call assembled from its deltas, then a reward event: 1.0 for a non-empty reply."""

    def run(self) -> None:
        key = os.environ.get("AGL_KEY") or "none"
        client = OpenAI(base_url=os.environ["AGL_OPENAI_BASE_URL"], api_key=key)
        task = json.loads(os.environ["AGL_TASK"])
        stream = client.chat.completions.create(
            model="policy", messages=[{"role": "user", "content": task["word"]}], stream=True
        )
        reply = "".join(chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices)
        event = {"event_type": "reward", "data": {"value": 1.0 if reply else 0.0}}
        headers = {"Authorization": f"Bearer {key}"}
        httpx.post(os.environ["AGL_EVENT_URL"], json=event, headers=headers, timeout=30).raise_for_status()


class Gated:
    """One call, then waits for the file ``$AGL1_TEST_GATE`` (at most a minute), then a reward event of 1.0."""

    def run(self) -> None:
        _ask(json.loads(os.environ["AGL_TASK"])["word"])
        gate, deadline = os.environ["AGL1_TEST_GATE"], time.monotonic() + 60
        while not os.path.exists(gate) and time.monotonic() < deadline:
            time.sleep(0.05)
        key = os.environ.get("AGL_KEY") or "none"
        event = {"event_type": "reward", "data": {"value": 1.0}}
        headers = {"Authorization": f"Bearer {key}"}
        httpx.post(os.environ["AGL_EVENT_URL"], json=event, headers=headers, timeout=30).raise_for_status()


class Responder:
    """Two turns of OpenAI's Responses API (the second continues the first by ``previous_response_id``), then a
    reward event of 1.0."""

    def run(self) -> None:
        key = os.environ.get("AGL_KEY") or "none"
        client = OpenAI(base_url=os.environ["AGL_OPENAI_BASE_URL"], api_key=key)
        first = client.responses.create(model="policy", input=json.loads(os.environ["AGL_TASK"])["word"])
        client.responses.create(model="policy", input="Once more:", previous_response_id=first.id)
        event = {"event_type": "reward", "data": {"value": 1.0}}
        headers = {"Authorization": f"Bearer {key}"}
        httpx.post(os.environ["AGL_EVENT_URL"], json=event, headers=headers, timeout=30).raise_for_status()
