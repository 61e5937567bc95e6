"""Two roles on one policy: a LangGraph ``writer`` answers, a ``checker`` reviews and may send it back once.

Both nodes call the policy through LangChain's ``ChatOpenAI``; only the writer is meant to learn, so the run
trains with ``agent_match=writer`` and the checker's calls are counted, not trained::

    agl-tinker train agent=examples.langgraph_roles.agent:WriterChecker agent_match=writer \\
        tasks=examples/langgraph_roles/tasks.jsonl test_tasks=examples/langgraph_roles/test_tasks.jsonl \\
        max_tokens=16 warm_start.steps=0 log_path=runs/langgraph_roles

The writer keeps its own conversation: sent back, it sees its answer and the checker's words and answers
again, so its two turns extend each other and train as one datum. The reward (1.0 for the right digit) is
given at the end and goes to the writer's last call. The agent is a ``LitAgent`` that passes its tracer's
LangChain handler to the graph, the way Agent-lightning's LangGraph agents do, so the nodes show in the
trace under either runner.

Each task: ``{"word": "seven", "digit": "7"}``.
"""

from __future__ import annotations

from typing import Any, TypedDict, cast

import agentlightning as agl
from langchain_core.messages import BaseMessage, HumanMessage
from langchain_openai import ChatOpenAI
from langgraph.graph import END, START, StateGraph
from langgraph.graph.state import CompiledStateGraph

MAX_REVISIONS = 1


class Draft(TypedDict):
    word: str
    messages: list[BaseMessage]
    """The writer's own conversation."""
    answer: str
    review: str
    revisions: int
    send_back: bool


def question(word: str) -> str:
    return f"Which digit is the number word '{word}'? Answer with the digit only."


def review_prompt(word: str, answer: str) -> str:
    return (
        f"A student was asked which digit the number word '{word}' is and answered: {answer!r}. "
        "If that is exactly the right digit, reply OK. Otherwise say briefly what is wrong."
    )


def text_of(message: BaseMessage) -> str:
    return message.content if isinstance(message.content, str) else ""


def approves(review: str) -> bool:
    return review.strip().upper().startswith("OK")


def reward(answer: str, digit: str) -> float:
    return 1.0 if answer.strip() == digit else 0.0


def build_graph(llm: ChatOpenAI) -> CompiledStateGraph[Any, Any, Any, Any]:
    async def writer(state: Draft) -> dict[str, Any]:
        messages = state["messages"] or [HumanMessage(question(state["word"]))]
        reply = await llm.ainvoke(messages)
        return {"messages": [*messages, reply], "answer": text_of(reply)}

    async def checker(state: Draft) -> dict[str, Any]:
        reply = await llm.ainvoke([HumanMessage(review_prompt(state["word"], state["answer"]))])
        review = text_of(reply)
        if approves(review) or state["revisions"] >= MAX_REVISIONS:
            return {"review": review, "send_back": False}
        again = HumanMessage(f"A reviewer says: {review}\nAnswer again with the digit only.")
        return {
            "review": review,
            "send_back": True,
            "revisions": state["revisions"] + 1,
            "messages": [*state["messages"], again],
        }

    def after_review(state: Draft) -> str:
        return "writer" if state["send_back"] else END

    graph = StateGraph(Draft)
    graph.add_node("writer", writer)
    graph.add_node("checker", checker)
    graph.add_edge(START, "writer")
    graph.add_edge("writer", "checker")
    graph.add_conditional_edges("checker", after_review, ["writer", END])
    return graph.compile()


def start(task: dict[str, str]) -> Draft:
    return Draft(word=task["word"], messages=[], answer="", review="", revisions=0, send_back=False)


def chat_model(resources: agl.NamedResources, rollout: agl.Rollout) -> ChatOpenAI:
    """The policy as a LangChain chat model, on this rollout's own endpoint URL."""
    llm = cast(agl.LLM, resources["main_llm"])
    if isinstance(llm, agl.ProxyLLM) and isinstance(rollout, agl.AttemptedRollout):
        llm = llm.with_attempted_rollout(rollout)
    return ChatOpenAI(base_url=llm.endpoint, model=llm.model, api_key="unused")


class WriterChecker(agl.LitAgent[dict[str, str]]):
    """The writer/checker graph as an Agent-lightning agent; returns the writer's final answer's reward."""

    async def rollout_async(self, task: dict[str, str], resources: agl.NamedResources, rollout: agl.Rollout) -> float:
        handler = self.tracer.get_langchain_handler()
        final = await build_graph(chat_model(resources, rollout)).ainvoke(
            start(task), {"callbacks": [handler] if handler is not None else []}
        )
        return reward(final["answer"], task["digit"])
