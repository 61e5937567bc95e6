"""The policy endpoint over a store, as the tests start it."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import agentlightning as agl
from tinker_cookbook import renderers

from adapters.endpoint.policy_endpoint import EndpointConfig, PolicyEndpoint
from domain.sampling import SamplingDefaults
from ports.policy import Sampler


@asynccontextmanager
async def policy_endpoint(
    store: agl.LightningStore,
    renderer: renderers.Renderer,
    max_tokens: int,
    *,
    published: bool = True,
    sampler: Sampler | None = None,
) -> AsyncIterator[PolicyEndpoint]:
    """A started endpoint sampling at most ``max_tokens``; ``published``: added to the store as ``main_llm``."""
    config = EndpointConfig(defaults=SamplingDefaults(max_tokens=max_tokens))
    async with PolicyEndpoint(store, renderer, config, sampler=sampler) as endpoint:
        if published:
            await store.add_resources({"main_llm": endpoint.as_resource()})
        yield endpoint
