"""LLM-as-a-judge: the policy answers, a separate, untrained judge model scores the answer.

The judge is any OpenAI-compatible server (vLLM, Ollama, a hosted API) at ``task["judge_url"]``
or, when the task has none, ``$JUDGE_BASE_URL`` (model ``$JUDGE_MODEL``, key ``$JUDGE_API_KEY``).
It is asked for a score from 0 to 10; the reward is that score / 10. Only the policy's reply is
trained: the judge's calls go to another server, and the policy endpoint records only what it
served itself.

Each task: ``{"question": "Name a primary colour.", "reference": "red, yellow or blue"}``.
"""

from __future__ import annotations

import os
import re
from typing import Any

import agentlightning as agl
from openai import AsyncOpenAI

JUDGE_PROMPT = """Score the answer to the question from 0 (wrong) to 10 (perfect).
Question: {question}
Reference answer: {reference}
Answer to score: {answer}
Reply with the score only."""


def parse_score(text: str) -> float:
    """The first number in the judge's reply, as a reward in [0, 1] (0 when there is none)."""
    match = re.search(r"\d+(?:\.\d+)?", text)
    return min(max(float(match.group()) / 10.0, 0.0), 1.0) if match else 0.0


@agl.rollout
async def judged_agent(task: dict[str, Any], llm: agl.LLM) -> float:
    policy = AsyncOpenAI(base_url=llm.endpoint, api_key="dummy")
    response = await policy.chat.completions.create(
        model=llm.model, messages=[{"role": "user", "content": task["question"]}]
    )
    answer = response.choices[0].message.content or ""

    judge = AsyncOpenAI(
        base_url=task.get("judge_url") or os.environ["JUDGE_BASE_URL"],
        api_key=os.environ.get("JUDGE_API_KEY", "dummy"),
    )
    verdict = await judge.chat.completions.create(
        model=os.environ.get("JUDGE_MODEL", "judge"),
        messages=[
            {
                "role": "user",
                "content": JUDGE_PROMPT.format(question=task["question"], reference=task["reference"], answer=answer),
            }
        ],
        temperature=0.0,
    )
    return parse_score(verdict.choices[0].message.content or "")
