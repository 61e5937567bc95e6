"""LangChain and LangGraph runs as OpenTelemetry spans that say which agent made each LLM call.

Agent-lightning learns the agent of an LLM call from the spans around it (``TraceTree.agent_name``); for
LangChain and LangGraph it reads ``langchain.chain.type``, which AgentOps's LangChain callback handler writes
when an agent passes ``tracer.get_langchain_handler()`` under the stock ``AgentOpsTracer``. An ``OtelTracer``
(the concurrent runner's) offers no handler, and LangChain itself emits no OpenTelemetry spans, so under it
a LangGraph graph leaves no trace of its nodes. ``AgentSpans`` is such a handler for any tracer provider:

* a LangGraph node's run is a ``langchain.chain`` span with ``langchain.chain.type`` = the node's name (the
  graph's own run too, named as compiled, ``LangGraph`` by default); the runnables a node runs inside itself
  (a ``prompt | model`` chain, a parser, a routing function) are not agents of their own, so a node's calls
  belong to the node whatever it composes. Outside LangGraph, every chain run is an agent named after the
  run, as AgentOps's handler has it;
* a chat-model or LLM run is a ``langchain.chat_model`` span with ``gen_ai.response.id``, the id the server
  answered with: the endpoint records the same id, which relates each record to its node exactly
  (``domain.agent_match``);
* tool and retriever runs make no span; what runs inside them hangs under the run that called them.

Spans are parented by LangChain's run ids (not by the ambient context, which LangChain's executors do not
keep), and ended in the context that ends the run, so a concurrent runner files them under their rollout.
``register`` installs one handler for every LangChain run of the process (LangChain's configure hook, as
LangSmith's tracer is installed); passing it as a callback as well does not double it.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any
from uuid import UUID

import opentelemetry.trace as trace_api
from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.outputs import LLMResult
from langchain_core.tracers.context import register_configure_hook

CHAIN_SPAN = "langchain.chain"
CHAT_MODEL_SPAN = "langchain.chat_model"
AGENT_NAME = "langchain.chain.type"
"""The attribute ``agentlightning.adapter.triplet.TraceTree.agent_name`` reads for LangChain/LangGraph agents."""
LANGGRAPH_NODE = "langgraph.node"
RESPONSE_ID = "gen_ai.response.id"
REQUEST_MODEL = "gen_ai.request.model"


@dataclass(frozen=True, slots=True)
class _Run:
    span: trace_api.Span | None
    """The nearest span of this run: its own, or (runs without one) the one its children hang under."""
    owned: bool


class AgentSpans(BaseCallbackHandler):
    """A LangChain callback handler writing agent (chain) and chat-model spans to ``tracer_provider``."""

    run_inline = True  # cheap and non-blocking: in the caller's context, so the span ends in its rollout
    raise_error = False

    def __init__(self, tracer_provider: trace_api.TracerProvider) -> None:
        super().__init__()
        self._tracer = tracer_provider.get_tracer("agl_tinker.langchain")
        self._runs: dict[UUID, _Run] = {}
        self._lock = threading.Lock()

    # Runs that may be agents.
    def on_chain_start(
        self,
        serialized: dict[str, Any] | None,
        inputs: Any,
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        metadata: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        name = run_name(serialized, kwargs.get("name"))
        node = (metadata or {}).get("langgraph_node")
        if node is not None and node != name:  # a runnable inside a node: the node is the agent
            self._alias(run_id, parent_run_id)
            return
        attributes: dict[str, str] = {AGENT_NAME: name}
        if node is not None:
            attributes[LANGGRAPH_NODE] = str(node)
        self._start(CHAIN_SPAN, run_id, parent_run_id, attributes)

    def on_chain_end(self, outputs: Any, *, run_id: UUID, **kwargs: Any) -> None:
        self._end(run_id)

    def on_chain_error(self, error: BaseException, *, run_id: UUID, **kwargs: Any) -> None:
        self._end(run_id, error)

    # Model calls.
    def on_chat_model_start(
        self,
        serialized: dict[str, Any] | None,
        messages: Any,
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        metadata: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        self._start_model(run_id, parent_run_id, metadata, kwargs)

    def on_llm_start(
        self,
        serialized: dict[str, Any] | None,
        prompts: Any,
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        metadata: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        self._start_model(run_id, parent_run_id, metadata, kwargs)

    def on_llm_end(self, response: LLMResult, *, run_id: UUID, **kwargs: Any) -> None:
        response_id = llm_response_id(response)
        with self._lock:
            run = self._runs.get(run_id)
        if run is not None and run.owned and run.span is not None and response_id:
            run.span.set_attribute(RESPONSE_ID, response_id)
        self._end(run_id)

    def on_llm_error(self, error: BaseException, *, run_id: UUID, **kwargs: Any) -> None:
        self._end(run_id, error)

    # Runs without a span of their own: their children hang under their caller.
    def on_tool_start(
        self, serialized: dict[str, Any] | None, input_str: str, *, run_id: UUID, parent_run_id: UUID | None = None,
        **kwargs: Any,
    ) -> None:  # fmt: skip
        self._alias(run_id, parent_run_id)

    def on_tool_end(self, output: Any, *, run_id: UUID, **kwargs: Any) -> None:
        self._end(run_id)

    def on_tool_error(self, error: BaseException, *, run_id: UUID, **kwargs: Any) -> None:
        self._end(run_id)

    def on_retriever_start(
        self, serialized: dict[str, Any] | None, query: str, *, run_id: UUID, parent_run_id: UUID | None = None,
        **kwargs: Any,
    ) -> None:  # fmt: skip
        self._alias(run_id, parent_run_id)

    def on_retriever_end(self, documents: Sequence[Any], *, run_id: UUID, **kwargs: Any) -> None:
        self._end(run_id)

    def on_retriever_error(self, error: BaseException, *, run_id: UUID, **kwargs: Any) -> None:
        self._end(run_id)

    @property
    def open_runs(self) -> int:
        """Runs started and not ended yet (each holds its span until it ends)."""
        with self._lock:
            return len(self._runs)

    def _start_model(
        self, run_id: UUID, parent_run_id: UUID | None, metadata: Mapping[str, Any] | None, kwargs: Mapping[str, Any]
    ) -> None:
        params = kwargs.get("invocation_params")
        model = (params or {}).get("model") or (params or {}).get("model_name") or (metadata or {}).get("ls_model_name")
        self._start(CHAT_MODEL_SPAN, run_id, parent_run_id, {REQUEST_MODEL: str(model)} if model else {})

    def _parent(self, parent_run_id: UUID | None) -> trace_api.Span | None:
        if parent_run_id is None:
            return None
        with self._lock:
            parent = self._runs.get(parent_run_id)
        return parent.span if parent is not None else None

    def _start(self, name: str, run_id: UUID, parent_run_id: UUID | None, attributes: Mapping[str, str]) -> None:
        parent = self._parent(parent_run_id)
        context = trace_api.set_span_in_context(parent) if parent is not None else None
        span = self._tracer.start_span(name, context=context, attributes=dict(attributes))
        with self._lock:
            self._runs[run_id] = _Run(span, owned=True)

    def _alias(self, run_id: UUID, parent_run_id: UUID | None) -> None:
        parent = self._parent(parent_run_id)
        with self._lock:
            self._runs[run_id] = _Run(parent, owned=False)

    def _end(self, run_id: UUID, error: BaseException | None = None) -> None:
        with self._lock:
            run = self._runs.pop(run_id, None)
        if run is None or not run.owned or run.span is None:
            return
        if error is not None:
            run.span.set_status(trace_api.Status(trace_api.StatusCode.ERROR, f"{type(error).__name__}: {error}"))
        run.span.end()


def run_name(serialized: Mapping[str, Any] | None, name: object) -> str:
    """A run's name as LangChain gives it (``name=``), else its serialized name or class path's last part."""
    if isinstance(name, str) and name:
        return name
    if serialized:
        given = serialized.get("name")
        if isinstance(given, str) and given:
            return given
        path = serialized.get("id")
        if isinstance(path, list) and path:
            return str(path[-1])
    return "unknown_chain"


def llm_response_id(response: LLMResult) -> str | None:
    """The server's response id of a model run (``llm_output["id"]``, else the first generation's message)."""
    output = response.llm_output or {}
    if isinstance(output.get("id"), str):
        return str(output["id"])
    for generations in response.generations:
        for generation in generations:
            message = getattr(generation, "message", None)
            metadata = getattr(message, "response_metadata", None) or {}
            if isinstance(metadata.get("id"), str):
                return str(metadata["id"])
    return None


_lock = threading.Lock()
_registered: AgentSpans | None = None


def register(tracer_provider: trace_api.TracerProvider) -> AgentSpans:
    """Add one ``AgentSpans`` on ``tracer_provider`` to every LangChain run of this process (once; the same
    handler afterwards, whatever provider is given)."""
    global _registered
    with _lock:
        if _registered is None:
            handler = AgentSpans(tracer_provider)
            # A default, not a value set in this context: threads started later see it too.
            register_configure_hook(ContextVar("agl_tinker_langchain_spans", default=handler), inheritable=True)
            _registered = handler
        return _registered
