"""Shared set-up for tests that drive real Agent-lightning components: the tiny model and its renderer,
built once per test run, and a fresh store per test (in memory, or served over HTTP)."""

from __future__ import annotations

import os

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("TINKER_TELEMETRY", "0")
os.environ.setdefault("AGENTOPS_API_KEY", "")

from collections.abc import AsyncIterator
from pathlib import Path

import agentlightning as agl
import pytest
from tinker_cookbook import renderers

from tests.support.stores import served_store


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The project's tiny Qwen3 model and tokenizer (seed 0), written once; tests read it, never write it."""
    from adapters.local import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("tiny") / "model", seed=0)


@pytest.fixture(scope="session")
def renderer(tiny_model: Path) -> renderers.Renderer:
    from tinker_cookbook.renderers import get_renderer
    from tinker_cookbook.tokenizer_utils import get_tokenizer

    return get_renderer("qwen3_instruct", get_tokenizer(str(tiny_model)))


@pytest.fixture
def store() -> agl.InMemoryLightningStore:
    return agl.InMemoryLightningStore(thread_safe=True)


@pytest.fixture
async def store_server() -> AsyncIterator[agl.LightningStoreServer]:
    """A fresh in-memory store served over HTTP on a free loopback port, as runner processes reach it."""
    async with served_store() as served:
        yield served
