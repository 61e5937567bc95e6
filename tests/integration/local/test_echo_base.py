"""The tiny model's echo pretraining: a base model that reads its prompt, built once per machine."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from tinker_cookbook.renderers import get_renderer
from tinker_cookbook.tokenizer_utils import get_tokenizer

from adapters.local import LocalSampler, LocalTrainer, cached_tiny_model
from ports.policy import SamplingParams

pytestmark = pytest.mark.slow


def greedy_replies(model_dir: Path, questions: list[str]) -> list[str]:
    renderer = get_renderer("qwen3_instruct", get_tokenizer(str(model_dir)))
    params = SamplingParams(8, 0.0, -1, 1.0, tuple(int(t) for t in renderer.get_stop_sequences()))

    async def ask() -> list[str]:
        trainer = LocalTrainer(model_dir)
        try:
            sampler: LocalSampler = await trainer.sampler("base")
            replies = []
            for question in questions:
                prompt = renderer.build_generation_prompt([{"role": "user", "content": question}])
                (sequence,) = await sampler.sample(prompt.to_ints(), params, 1)
                message, _ = renderer.parse_response(list(sequence.tokens))
                replies.append(str(message["content"]))
            return replies
        finally:
            trainer.close()

    return asyncio.run(ask())


def test_the_echo_base_repeats_what_it_was_asked_and_is_built_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AGL_TINKER_CACHE", str(tmp_path / "cache"))
    words = ["seven", "three", "nine", "two", "hello"]

    base = cached_tiny_model(tmp_path / "base", seed=0, echo_steps=300)
    assert greedy_replies(base, words) == words

    (built,) = (tmp_path / "cache" / "tiny-models").iterdir()
    stamp = (built / "model.safetensors").stat().st_mtime_ns
    again = cached_tiny_model(tmp_path / "again", seed=0, echo_steps=300)
    assert (again / "model.safetensors").read_bytes() == (base / "model.safetensors").read_bytes()
    assert (built / "model.safetensors").stat().st_mtime_ns == stamp  # copied, not rebuilt


def test_without_echo_steps_the_model_keeps_its_random_weights(tiny_model: Path, tmp_path: Path) -> None:
    plain = cached_tiny_model(tmp_path / "plain", seed=0)
    assert (plain / "model.safetensors").read_bytes() == (tiny_model / "model.safetensors").read_bytes()
