"""The endpoint under Agent-lightning 1.x's URL shapes: its controller builds every agent's URLs from ``agent_url``.

The app runs in process (httpx's ASGI transport) over a scripted policy and a ``SpanLog``, as a run over
``agl-server`` records them; the triplet adapter reads the records back as the trainer does.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

import httpx
import pytest
from tinker_cookbook import renderers

from adapters.endpoint.capture import COMPLETION_SPAN, PREFIX
from adapters.endpoint.events import EVENT_SPAN
from adapters.endpoint.provider import PolicyProvider, PolicySnapshot
from adapters.endpoint.server import MasterKeyAuth, RequestFailures, build_app
from adapters.endpoint.span_log import RolloutState, SpanLog
from adapters.endpoint.triplets import EndpointTraceToTriplet
from adapters.local.tiny_model import build_tokenizer
from domain.sampling import SamplingDefaults
from tests.support.samplers import CharSampler

KEY_ENV = "AGL_TINKER_TEST_AGL1_KEY"
KEY = "run-key"
RID = "ro-1"


def base(rid: str = RID, mode: str = "train") -> str:
    return f"/proxy/rollout/{rid}/attempt/0/mode/{mode}/openai/v1"


def events_url(rid: str = RID) -> str:
    return f"/api/rollouts/{rid}/attempt/0/events"


@pytest.fixture(scope="module")
def renderer() -> renderers.Renderer:
    return renderers.get_renderer("qwen3_instruct", build_tokenizer())


@pytest.fixture
def log() -> SpanLog:
    spans = SpanLog()
    spans.open([RID])
    return spans


@pytest.fixture
def sampler(renderer: renderers.Renderer) -> CharSampler:
    return CharSampler(renderer, ["A1", "B2"])


@pytest.fixture
async def client(
    renderer: renderers.Renderer, log: SpanLog, sampler: CharSampler, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[httpx.AsyncClient]:
    monkeypatch.setenv(KEY_ENV, KEY)
    provider = PolicyProvider(
        renderer,
        PolicySnapshot(sampler=sampler, defaults=SamplingDefaults(max_tokens=8, temperature=1.0), version=1),
        recorder=log.add_span,
        sequence_ids=log.get_next_span_sequence_id,
        eval_temperature=0.25,
    )
    app = MasterKeyAuth(build_app(provider, log, "policy", RequestFailures(), gate=log), [KEY_ENV])
    transport = httpx.ASGITransport(app=app)
    headers = {"Authorization": f"Bearer {KEY}"}
    async with httpx.AsyncClient(transport=transport, base_url="http://agent", headers=headers) as http:
        yield http


def chat(content: str, *history: dict[str, str]) -> dict[str, object]:
    return {"model": "policy", "messages": [*history, {"role": "user", "content": content}]}


async def test_two_turns_and_a_reward_event_make_one_merged_rollout_with_the_reward_on_the_last_call(
    client: httpx.AsyncClient, log: SpanLog
) -> None:
    first = await client.post(f"{base()}/chat/completions", json=chat("Guess."))
    assert first.status_code == 200, first.text
    reply = first.json()["choices"][0]["message"]
    second = await client.post(
        f"{base()}/chat/completions",
        json=chat("Again.", {"role": "user", "content": "Guess."}, {"role": "assistant", "content": reply["content"]}),
    )
    assert second.status_code == 200, second.text
    event = await client.post(events_url(), json={"event_type": "reward", "data": {"value": 1.0}})
    assert event.status_code == 200, event.text
    assert event.json()["event_type"] == "reward" and event.json()["rollout_id"] == RID

    spans = log.spans(RID)
    assert [s.sequence_id for s in spans] == [1, 2, 3]
    assert [s.attributes.get(PREFIX) for s in spans[:2]] == ["first_turn", "extended"]
    triplets = EndpointTraceToTriplet().adapt(spans)
    assert [t.reward for t in triplets] == [None, 1.0]
    turn1 = list(triplets[0].prompt["token_ids"]) + list(triplets[0].response["token_ids"])
    assert list(triplets[1].prompt["token_ids"])[: len(turn1)] == turn1


async def test_a_reward_posted_before_the_second_call_goes_to_the_first(
    client: httpx.AsyncClient, log: SpanLog
) -> None:
    await client.post(f"{base()}/chat/completions", json=chat("Guess."))
    await client.post(events_url(), json={"event_type": "reward", "data": {"value": 0.5}})
    await client.post(f"{base()}/chat/completions", json=chat("Other."))

    triplets = EndpointTraceToTriplet().adapt(log.spans(RID))
    assert [t.reward for t in triplets] == [0.5, None]


async def test_val_mode_samples_at_the_evaluation_temperature_and_train_mode_at_the_training_one(
    client: httpx.AsyncClient, sampler: CharSampler
) -> None:
    for mode in ("train", "val"):
        response = await client.post(f"{base(mode=mode)}/chat/completions", json=chat("Guess."))
        assert response.status_code == 200, response.text
    assert [p.temperature for p in sampler.params] == [1.0, 0.25]


async def test_a_stream_is_served_as_chunks_and_recorded(client: httpx.AsyncClient, log: SpanLog) -> None:
    response = await client.post(f"{base()}/chat/completions", json={**chat("Guess."), "stream": True})
    assert response.status_code == 200
    lines = [line.removeprefix("data: ") for line in response.text.splitlines() if line.startswith("data: ")]
    assert lines[-1] == "[DONE]"
    content = "".join(
        choice["delta"].get("content") or "" for line in lines[:-1] for choice in json.loads(line)["choices"]
    )
    assert content == "A1"
    assert [s.name for s in log.spans(RID)] == [COMPLETION_SPAN]


async def test_responses_and_models_are_served_under_the_rollout(client: httpx.AsyncClient, log: SpanLog) -> None:
    response = await client.post(f"{base()}/responses", json={"model": "policy", "input": "Guess."})
    assert response.status_code == 200, response.text
    assert response.json()["output"][0]["content"][0]["text"] == "A1"
    models = await client.get(f"{base()}/models")
    assert models.status_code == 200 and models.json()["data"][0]["id"] == "policy"
    assert [s.name for s in log.spans(RID)] == [COMPLETION_SPAN]


async def test_other_events_are_kept_and_never_rewards(client: httpx.AsyncClient, log: SpanLog) -> None:
    response = await client.post(events_url(), json={"event_type": "tool_call", "data": {"name": "add"}})
    assert response.status_code == 200
    (span,) = log.spans(RID)
    assert span.name == EVENT_SPAN
    assert EndpointTraceToTriplet().adapt([span]) == []


@pytest.mark.parametrize(
    "body",
    [
        {"event_type": "reward", "data": {}},
        {"event_type": "reward", "data": {"value": "1"}},
        {"event_type": "reward", "data": {"value": True}},
        {"data": {"value": 1.0}},
        [1],
    ],
)
async def test_a_malformed_event_is_refused_with_400_and_not_recorded(
    client: httpx.AsyncClient, log: SpanLog, body: object
) -> None:
    response = await client.post(events_url(), json=body)
    assert response.status_code == 400
    assert response.json()["error"]["message"]
    assert log.spans(RID) == []


async def test_calls_and_events_for_an_ended_rollout_are_refused_with_410(
    client: httpx.AsyncClient, log: SpanLog, sampler: CharSampler
) -> None:
    log.end([RID])
    assert log.state(RID) is RolloutState.ENDED
    answers = [
        await client.post(f"{base()}/chat/completions", json=chat("Guess.")),
        await client.post(events_url(), json={"event_type": "reward", "data": {"value": 1.0}}),
        await client.post(f"/rollout/{RID}/attempt/0/v1/chat/completions", json=chat("Guess.")),
    ]
    assert [a.status_code for a in answers] == [410] * 3
    assert "has ended" in answers[0].json()["error"]["message"]
    assert sampler.params == [] and log.spans(RID) == []


async def test_a_rollout_the_run_does_not_hold_is_refused_with_404(client: httpx.AsyncClient, log: SpanLog) -> None:
    chat_answer = await client.post(f"{base('ro-other')}/chat/completions", json=chat("Guess."))
    event_answer = await client.post(events_url("ro-other"), json={"event_type": "reward", "data": {"value": 1.0}})
    assert (chat_answer.status_code, event_answer.status_code) == (404, 404)
    log.forget([RID])
    assert (await client.post(f"{base()}/chat/completions", json=chat("Guess."))).status_code == 404


async def test_a_mode_other_than_train_or_val_is_not_served(client: httpx.AsyncClient) -> None:
    response = await client.post(f"{base(mode='test')}/chat/completions", json=chat("Guess."))
    assert response.status_code == 404
    assert "mode 'test'" in response.json()["error"]["message"]


@pytest.mark.parametrize("path", [f"{base()}/chat/completions", events_url()])
@pytest.mark.parametrize("key", [None, "wrong"])
async def test_both_routes_need_the_run_key(
    client: httpx.AsyncClient, log: SpanLog, path: str, key: str | None
) -> None:
    headers = {"Authorization": f"Bearer {key}"} if key else {"Authorization": ""}
    body = chat("Guess.") if "chat" in path else {"event_type": "reward", "data": {"value": 1.0}}
    response = await client.post(path, json=body, headers=headers)
    assert response.status_code == 401
    assert log.spans(RID) == []
