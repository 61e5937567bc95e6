"""A CrewAI ``Flow`` with two models: the policy drafts, an untrained helper model reads the draft.

The flow has two steps. ``draft`` (the ``@start()`` step) asks the policy to write a number given in
words as digits, through CrewAI's ``LLM(model="openai/" + llm.model, base_url=llm.endpoint)``; the
``read_number`` step (``@listen(draft)``) asks a helper model, another OpenAI-compatible server, which
number the draft states. The helper's reading is the flow's final answer, rewarded 1.0 when it is
the task's number. Only the policy's call is trained: the helper's goes to another server, and the
policy endpoint records only what it served itself.

CrewAI 1.x sends an ``openai/<model>`` whose name is not an OpenAI model's (``gpt-*``, ``o1``...)
through LiteLLM's OpenAI-compatible client to ``base_url``; an OpenAI model name would take CrewAI's
own OpenAI client to the same URL. Either way the policy is called at ``llm.endpoint``.

The helper is at ``task["helper_url"]`` or ``$HELPER_BASE_URL`` (model ``$HELPER_MODEL``, default
``helper``); ``helper_server.py`` next to this file is a scripted one. CrewAI does not install beside
the trainer's locked versions, so this agent runs in its own environment (``requirements.txt``):

    python examples/crewai_flow/helper_server.py --port 8765 &
    HELPER_BASE_URL=http://127.0.0.1:8765/v1 agl-tinker train agent=examples.crewai_flow.agent:crewai_number_flow \\
        runner_python=$(bash scripts/agent-env.sh examples/crewai_flow/requirements.txt) ...

Offline: CrewAI's telemetry (which would install its own OpenTelemetry tracer provider and upload
spans) and its trace collection are switched off below, before CrewAI is imported. So is its
first-run question "view your execution traces? (20 s timeout)", which would block the event loop
of a runner: ``CREWAI_TESTING`` is the only switch crewai 1.6.1 has for it. ``OTEL_SDK_DISABLED`` is
left alone: it would switch off the OpenTelemetry SDK that Agent-lightning's tracer needs.

A policy that answers nonsense (an empty reply, no number) gets reward 0: CrewAI passes an empty reply on as
"", and the helper's reading that is not a number scores 0. Anything else that goes wrong (the helper or the
endpoint down) fails the rollout, as it should.

Each task: ``{"words": "forty-two", "answer": 42}``.
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

os.environ.setdefault("CREWAI_DISABLE_TELEMETRY", "true")
os.environ.setdefault("CREWAI_DISABLE_TRACKING", "true")
os.environ.setdefault("CREWAI_TRACING_ENABLED", "false")
os.environ.setdefault("CREWAI_TESTING", "true")  # no interactive first-run trace prompt

import agentlightning as agl
from crewai import LLM
from crewai.flow.flow import Flow, listen, start
from pydantic import BaseModel

DRAFT_PROMPT = "Write the number {words} in digits."
READ_PROMPT = "Which number does this answer state? Reply with the number only, or none.\nAnswer: {draft}"


class NumberState(BaseModel):
    words: str = ""
    draft: str = ""
    reading: str = ""


class NumberFlow(Flow[NumberState]):
    """Two steps: the policy drafts, the helper reads the number off the draft."""

    def __init__(self, policy: LLM, helper: LLM) -> None:
        super().__init__(tracing=False)
        self.policy = policy
        self.helper = helper

    @start()
    async def draft(self) -> str:
        # LLM.call blocks (LiteLLM's sync client): a thread keeps the runner's other rollouts going.
        prompt = DRAFT_PROMPT.format(words=self.state.words)
        self.state.draft = str(await asyncio.to_thread(self.policy.call, prompt))
        return self.state.draft

    @listen(draft)
    async def read_number(self) -> str:
        prompt = READ_PROMPT.format(draft=self.state.draft)
        self.state.reading = str(await asyncio.to_thread(self.helper.call, prompt))
        return self.state.reading


def reward(reading: str, expected: int) -> float:
    try:
        return 1.0 if int(reading.strip()) == expected else 0.0
    except ValueError:
        return 0.0


def _quiet_console() -> None:
    """CrewAI prints a panel per flow event to stdout; a runner takes many rollouts, so keep them out."""
    try:
        from crewai.events.event_listener import event_listener

        event_listener.formatter.console.quiet = True
    except (ImportError, AttributeError):
        pass


@agl.rollout
async def crewai_number_flow(task: dict[str, Any], llm: agl.LLM) -> float:
    _quiet_console()
    policy = LLM(model="openai/" + llm.model, base_url=llm.endpoint, api_key="unused")
    helper = LLM(
        model="openai/" + os.environ.get("HELPER_MODEL", "helper"),
        base_url=task.get("helper_url") or os.environ["HELPER_BASE_URL"],
        api_key=os.environ.get("HELPER_API_KEY", "unused"),
        temperature=0.0,
    )
    flow = NumberFlow(policy, helper)
    await flow.kickoff_async(inputs={"words": task["words"]})
    return reward(flow.state.reading, int(task["answer"]))
