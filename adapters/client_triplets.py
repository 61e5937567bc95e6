"""The client-side trajectory source, kept for seed compatibility, restricted to the policy's calls.

``TracerTraceToTriplet`` turns every traced OpenAI call that carries token ids into a triplet,
including an agent's calls to helper or judge models on other servers. ``PolicyCallsOnly`` drops
the LLM-call spans whose requested model is not the policy's before the inner adapter runs; ids
beyond the policy's vocabulary are rejected later, in reconstruction (``vocab_size``).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from agentlightning import Span, TraceToTripletBase, Triplet

REQUEST_MODEL = "gen_ai.request.model"
LLM_CALL = re.compile(r"openai\.chat\.completion")


class PolicyCallsOnly(TraceToTripletBase):
    """Wraps a span adapter so that only calls to ``model_name`` become triplets."""

    def __init__(self, inner: TraceToTripletBase, model_name: str) -> None:
        super().__init__()
        self.inner = inner
        self.model_name = model_name

    def adapt(self, source: Sequence[Span], /) -> list[Triplet]:
        spans = [span for span in source if not self._foreign_call(span)]
        return list(self.inner.adapt(spans)) if spans else []

    def _foreign_call(self, span: Span) -> bool:
        if not LLM_CALL.search(span.name):
            return False
        model = span.attributes.get(REQUEST_MODEL)
        return isinstance(model, str) and model.removeprefix("openai/") != self.model_name
