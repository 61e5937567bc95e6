"""A two-turn Agent-lightning 1.x agent: a class with ``run()``, as 1.x's controller starts one per rollout.

The controller gives it ``AGL_OPENAI_BASE_URL`` (the policy, through the trainer's endpoint when
``agl_server.agent_url`` points there), ``AGL_EVENT_URL`` (where rewards go) and ``AGL_KEY``; the task
arrives in ``AGL_TASK`` (the rollout's input as JSON, the run's ``agl1.env_map``). It asks for the digit of
a number word, then asks again with its own first answer in the chat, and posts the second answer's grade
as a reward event. Only ``openai`` and ``httpx`` are needed (``requirements.txt``): no agentlightning import.
"""

from __future__ import annotations

import json
import os

import httpx
from openai import OpenAI


class TwoTurnDigits:
    """Two turns on one chat; the reward is 1.0 when the last answer is the task's digit."""

    def run(self) -> None:
        task = json.loads(os.environ["AGL_TASK"])
        key = os.environ.get("AGL_KEY") or "none"
        client = OpenAI(base_url=os.environ["AGL_OPENAI_BASE_URL"], api_key=key, max_retries=0)
        messages: list[dict[str, str]] = [{"role": "user", "content": task["word"]}]
        for follow_up in ("Once more:", None):
            reply = client.chat.completions.create(model="policy", messages=messages)  # type: ignore[arg-type]
            answer = reply.choices[0].message.content or ""
            messages.append({"role": "assistant", "content": answer})
            if follow_up is not None:
                messages.append({"role": "user", "content": f"{follow_up} {task['word']}"})
        reward = 1.0 if answer.strip() == task["digit"] else 0.0
        response = httpx.post(
            os.environ["AGL_EVENT_URL"],
            json={"event_type": "reward", "data": {"value": reward}},
            headers={"Authorization": f"Bearer {key}"},
            timeout=30,
        )
        response.raise_for_status()
