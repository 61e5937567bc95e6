"""Agent-lightning 1.x events posted to the endpoint, as the spans the triplet adapter reads.

A 1.x agent posts ``{"event_type": "reward", "data": {"value": 1.0}}`` to its ``AGL_EVENT_URL``
(``/api/rollouts/<rid>/attempt/<aid>/events``). With ``agl_server.agent_url`` on the endpoint, the
event reaches the endpoint that served the rollout's calls, which numbers it from the same counter
as its completion records when it arrives: it then goes to the latest trained call numbered below it
(``domain.reward_order``), as a 0.x ``agl.emit_reward`` does. A reward is Agent-lightning 0.3's reward
span (``get_reward_value`` reads it); any other event is kept as an event span, never a reward.
"""

from __future__ import annotations

import json
import math
import time
from typing import Any

from agentlightning import Span
from agentlightning.semconv import AGL_ANNOTATION, LightningSpanAttributes
from pydantic import BaseModel, ConfigDict, Field, ValidationError

EVENT_SPAN = "agl_tinker.event"
EVENT_TYPE = "agl_tinker.event_type"
EVENT_DATA = "agl_tinker.event_data"
REWARD = "reward"


class EventBody(BaseModel):
    """1.x's ``EventCreate``, as an agent sends it."""

    model_config = ConfigDict(frozen=True)

    event_type: str = Field(min_length=1)
    data: dict[str, Any] = Field(default_factory=dict)


class BadEvent(ValueError):
    """The event cannot be recorded; the message says why (the agent gets it in a 400)."""


def parse_event(raw: object) -> EventBody:
    """The event in ``raw``; a reward's ``data.value`` must be a finite number."""
    try:
        event = EventBody.model_validate(raw)
    except ValidationError as error:
        first = error.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "body"
        raise BadEvent(f"the event's {where}: {first['msg']}") from None
    if event.event_type == REWARD:
        value = event.data.get("value")
        if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
            raise BadEvent(f"a reward event needs data.value, a finite number (got {value!r})")
    return event


def event_span(event: EventBody, rollout_id: str, attempt_id: str, sequence_id: int) -> Span:
    """The span recording ``event``: a reward span for a reward, an event span otherwise."""
    now = time.time()
    if event.event_type == REWARD:
        value = float(event.data["value"])
        attributes: dict[str, Any] = {
            f"{LightningSpanAttributes.REWARD.value}.0.name": "primary",
            f"{LightningSpanAttributes.REWARD.value}.0.value": value,
        }
        name = AGL_ANNOTATION
    else:
        attributes = {EVENT_TYPE: event.event_type, EVENT_DATA: json.dumps(event.data, default=str)}
        name = EVENT_SPAN
    return Span.from_attributes(
        attributes=attributes,
        rollout_id=rollout_id,
        attempt_id=attempt_id,
        sequence_id=sequence_id,
        name=name,
        start_time=now,
        end_time=now,
    )


def event_reply(event: EventBody, rollout_id: str, attempt_id: str) -> dict[str, object]:
    """What 1.x's server answers: the stored ``Event``."""
    return {
        "event_type": event.event_type,
        "rollout_id": rollout_id,
        "attempt_id": attempt_id,
        "timestamp": time.time(),
        "data": event.data,
    }
