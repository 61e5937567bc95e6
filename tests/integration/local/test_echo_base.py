"""The tiny model's echo pretraining: a base model that reads its prompt, built once per machine."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from tinker_cookbook.renderers import Message, ToolSpec, get_renderer
from tinker_cookbook.tokenizer_utils import get_tokenizer

from adapters.local import LocalSampler, LocalTrainer, cached_tiny_model
from ports.policy import SamplingParams

pytestmark = pytest.mark.slow


def greedy_replies(model_dir: Path, questions: list[str], tools: list[ToolSpec] | None = None) -> list[str]:
    """The model's greedy reply to each question, asked alone or after the tools prompt of ``tools``."""
    renderer = get_renderer("qwen3_instruct", get_tokenizer(str(model_dir)))
    prefix: list[Message] = renderer.create_conversation_prefix_with_tools(tools) if tools else []
    params = SamplingParams(8, 0.0, -1, 1.0, tuple(int(t) for t in renderer.get_stop_sequences()))

    async def ask() -> list[str]:
        trainer = LocalTrainer(model_dir)
        try:
            sampler: LocalSampler = await trainer.sampler("base")
            replies = []
            for question in questions:
                prompt = renderer.build_generation_prompt([*prefix, {"role": "user", "content": question}])
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


def test_an_echo_base_built_with_system_messages_reads_the_user_after_a_tools_prompt(tmp_path: Path) -> None:
    """A ~300-token tools prompt neither base saw before the question: the plain echo base replies nothing after
    it (and the single-turn task under it stayed at chance, bench/README.md); the one built with system messages
    repeats part of the question (on which that task learned). Both built in the machine's own cache, as a run
    builds them (the system one takes ~2 minutes of pretraining, once per machine)."""
    questions = ["seven", "three", "nine", "two", "hello", "maybe 7 thanks", "guess 3 higher", "five", "4", "number"]
    press: ToolSpec = {
        "name": "press",
        "description": "Press a digit on the door's keypad.",
        "parameters": {"type": "object", "properties": {"digit": {"type": "string"}}, "required": ["digit"]},
    }

    def repeats(replies: list[str]) -> int:
        return sum(bool(set(r.split()) & set(q.split())) for q, r in zip(questions, replies, strict=True))

    system = cached_tiny_model(tmp_path / "system", seed=0, echo_steps=300, echo_system=True)
    plain = cached_tiny_model(tmp_path / "plain", seed=0, echo_steps=300)

    assert repeats(greedy_replies(plain, questions, [press])) == 0
    assert repeats(greedy_replies(system, questions, [press])) >= 3
    assert greedy_replies(system, questions[:5]) == questions[:5]  # and still repeats a question asked alone


def test_without_echo_steps_the_model_keeps_its_random_weights(tiny_model: Path, tmp_path: Path) -> None:
    plain = cached_tiny_model(tmp_path / "plain", seed=0)
    assert (plain / "model.safetensors").read_bytes() == (tiny_model / "model.safetensors").read_bytes()
