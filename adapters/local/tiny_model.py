"""Build a tiny Qwen3 causal LM and tokenizer fully offline.

Tests, benchmarks and local runs need a real Hugging Face model directory (config, weights,
tokenizer) that ``AutoModelForCausalLM`` and ``tinker_cookbook``'s ``get_tokenizer`` load like any
checkpoint, without the network. Everything here is deterministic given the seed.
"""

from __future__ import annotations

import argparse
import random
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, cast

if TYPE_CHECKING:
    import torch
    from transformers import PreTrainedTokenizerFast, Qwen3Config, Qwen3ForCausalLM

IM_START = "<|im_start|>"
IM_END = "<|im_end|>"
END_OF_TEXT = "<|endoftext|>"
SPECIAL_TOKENS: tuple[str, ...] = (END_OF_TEXT, IM_START, IM_END)

_NUMBER_WORDS: tuple[str, ...] = (
    "zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten",
    "eleven", "twelve", "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen",
    "nineteen", "twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety",
    "hundred", "thousand",
)  # fmt: skip

_SENTENCES: tuple[str, ...] = (
    "Hello! How are you today?",
    "I'm fine, thank you. What can I help you with?",
    "You are a helpful assistant.",
    "Please answer with a single number.",
    "What is the answer? The answer is",
    "Let me think step by step about the question.",
    "The user asked a question and the assistant answered it.",
    "Guess the number I am thinking of. Is it higher or lower?",
    "Your guess is too high. Your guess is too low. Correct!",
    "Count from one to ten: one two three four five six seven eight nine ten.",
    "Add the two numbers and reply with the sum.",
    "Call the tool with the arguments, then read the tool response.",
    "<think>\nI should reason first.\n</think>\n\n",
    '<tool_call>\n{"name": "calculator", "arguments": {"expression": "1 + 2"}}\n</tool_call>',
    "<tool_response>\n3\n</tool_response>",
    "system user assistant tool",
    "Yes. No. Maybe. Done. Thanks, goodbye.",
)


def _corpus() -> Iterator[str]:
    """A small corpus covering chat framing, number words, digits and ``I'm N`` replies."""
    yield from _SENTENCES
    for i, word in enumerate(_NUMBER_WORDS):
        yield f"{word} {word.capitalize()} {word.upper()}"
        yield f"I'm {word}. I'm {i}. The number is {i}."
    for i in range(101):
        yield f"{i} = {i}; I'm {i}"
    for role in ("system", "user", "assistant"):
        yield f"{IM_START}{role}\n{_SENTENCES[0]}{IM_END}\n"
    yield "0123456789 +-*/=()[]{}<>.,:;!?\"'` \n\t"


def build_tokenizer(vocab_size: int = 768) -> PreTrainedTokenizerFast:
    """Train a byte-level BPE with Qwen's special tokens; returns a ``PreTrainedTokenizerFast``.

    Digits are split one by one before byte-level encoding, as in Qwen, so numbers tokenize the
    same way a real Qwen tokenizer would treat them.
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Digits(individual_digits=True),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(list(_corpus()), trainer=trainer)
    make_fast = cast("Callable[..., PreTrainedTokenizerFast]", PreTrainedTokenizerFast)
    return make_fast(
        tokenizer_object=tok,
        eos_token=IM_END,
        pad_token=END_OF_TEXT,
        bos_token=None,
        unk_token=None,
        clean_up_tokenization_spaces=False,
        model_max_length=4096,
    )


_ECHO_WORDS: tuple[str, ...] = (
    *_NUMBER_WORDS,
    *[
        "hello",
        "answer",
        "number",
        "guess",
        "higher",
        "lower",
        "tool",
        "call",
        "result",
        "think",
        "yes",
        "no",
        "maybe",
        "done",
        "thanks",
        "the",
        "is",
    ],
    *map(str, range(10)),
)  # fmt: skip


def _echo_pretrain(
    model: Qwen3ForCausalLM, tokenizer: PreTrainedTokenizerFast, seed: int, steps: int, system: bool = False
) -> None:
    """Teach the random model to repeat the user's words in the assistant turn (Adam, full parameters).

    A pretrained LLM reads its prompt: the hidden state where it starts to answer carries what was
    asked. A randomly initialised one barely does (at the demo's answer position the words differ by
    ~7% of the state's norm), so the answer cannot depend on the question until training builds that,
    which LoRA, whose adapters never touch the embeddings, did not do in 100 batches. Echoing random
    words and digits builds it (~90%) without pairing any number word with its digit.

    ``system``: half the chats also open with a system message of random words (up to ~400 tokens), so that the
    model reads the user's message after one, as after a tools prompt; without it the model learns to read only
    right after the chat's start (a declared tool kept the single-turn check at chance: bench/README.md).
    """
    import torch

    rng = random.Random(seed)
    batch_size = 32
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # the same result on any machine, and no slower on a busy one
    cast("torch.nn.Module", model).train()
    try:
        for _ in range(steps):
            texts = [_echo_text(rng) for _ in range(batch_size)]
            systems = [_system_text(rng) for _ in range(batch_size)] if system else [""] * batch_size
            _echo_step(model, tokenizer, optimizer, texts, systems)
    finally:
        torch.set_num_threads(threads)
        cast("torch.nn.Module", model).eval()


def _echo_text(rng: random.Random) -> str:
    return " ".join(rng.choice(_ECHO_WORDS) for _ in range(rng.randint(1, 3)))


def _system_text(rng: random.Random) -> str:
    """A system message of random words half the time, else none."""
    if rng.random() < 0.5:
        return ""
    words = " ".join(rng.choice(_ECHO_WORDS) for _ in range(rng.randint(1, 200)))
    return f"{IM_START}system\n{words}{IM_END}\n"


def _echo_step(
    model: Qwen3ForCausalLM,
    tokenizer: PreTrainedTokenizerFast,
    optimizer: torch.optim.Optimizer,
    texts: list[str],
    systems: list[str],
) -> None:
    """One cross-entropy step on the assistant's reply (its words, then end of turn) of each chat."""
    import torch

    rows: list[list[int]] = []
    masks: list[list[float]] = []
    for text, system in zip(texts, systems, strict=True):
        prompt = tokenizer.encode(f"{system}{IM_START}user\n{text}{IM_END}\n{IM_START}assistant\n")
        reply = tokenizer.encode(f"{text}{IM_END}")
        rows.append(prompt + reply)
        masks.append([0.0] * len(prompt) + [1.0] * len(reply))
    width = max(len(r) for r in rows)
    ids = torch.tensor([r + [0] * (width - len(r)) for r in rows])
    weights = torch.tensor([m + [0.0] * (width - len(m)) for m in masks])[:, 1:]
    logprobs = torch.log_softmax(model(ids).logits[:, :-1], dim=-1).gather(-1, ids[:, 1:, None])[..., 0]
    loss = -(logprobs * weights).sum() / weights.sum()
    optimizer.zero_grad()
    torch.autograd.backward(loss)
    optimizer.step()


def _new_model(config: Qwen3Config) -> Qwen3ForCausalLM:
    """Instantiate the model (transformers' constructor is untyped, hence the cast)."""
    from transformers import Qwen3ForCausalLM

    return cast("Callable[[Qwen3Config], Qwen3ForCausalLM]", Qwen3ForCausalLM)(config)


def build_tiny_model(
    out_dir: Path,
    *,
    seed: int = 0,
    hidden_size: int = 64,
    num_layers: int = 2,
    num_heads: int = 4,
    num_kv_heads: int = 2,
    intermediate_size: int = 128,
    vocab_size: int = 768,
    max_position_embeddings: int = 4096,
    embedding_std: float = 0.08,
    echo_steps: int = 0,
    echo_system: bool = False,
) -> Path:
    """Write a tiny, randomly initialised Qwen3 model plus tokenizer to ``out_dir``; returns it.

    The (tied) embeddings start at ``embedding_std``, four times the other weights' 0.02: with 0.02 a token's
    logit can never stand far above the others' without training the embeddings themselves, which LoRA never
    does, so LoRA could not learn; the larger scale is closer to a pretrained model's, and full fine-tuning
    learns the demo more reliably on it too (bench/README.md, the demo per seed). With ``echo_steps`` it is then
    trained to repeat chat messages (``_echo_pretrain``), after a system message too with ``echo_system``.
    """
    import torch
    from transformers import Qwen3Config

    tokenizer = build_tokenizer(vocab_size)
    actual_vocab = len(tokenizer)
    config = Qwen3Config.from_dict(
        dict(
            vocab_size=actual_vocab,
            hidden_size=hidden_size,
            intermediate_size=intermediate_size,
            num_hidden_layers=num_layers,
            num_attention_heads=num_heads,
            num_key_value_heads=num_kv_heads,
            head_dim=hidden_size // num_heads,
            max_position_embeddings=max_position_embeddings,
            tie_word_embeddings=True,
            bos_token_id=None,
            eos_token_id=tokenizer.convert_tokens_to_ids(IM_END),
            pad_token_id=tokenizer.convert_tokens_to_ids(END_OF_TEXT),
        )
    )
    generator_state = torch.random.get_rng_state()
    torch.manual_seed(seed)
    try:
        model = _new_model(config)
        with torch.no_grad():
            cast(torch.nn.Embedding, model.get_input_embeddings()).weight.mul_(embedding_std / config.initializer_range)
        _echo_pretrain(model, tokenizer, seed, echo_steps, echo_system)
    finally:
        torch.random.set_rng_state(generator_state)
    out_dir.mkdir(parents=True, exist_ok=True)
    from adapters.local.model_io import quiet_transformers

    quiet_transformers()
    model.save_pretrained(out_dir)
    tokenizer.save_pretrained(out_dir)
    return out_dir


def cached_tiny_model(out_dir: Path, *, seed: int = 0, echo_steps: int = 0, echo_system: bool = False) -> Path:
    """``build_tiny_model(out_dir, seed=seed, echo_steps=echo_steps, echo_system=echo_system)``; an
    echo-pretrained one is copied from this machine's cache, built there once per seed, steps, system flag and
    version of this module (the pretraining takes ~10-20 s on two cores, 1-2 minutes with system messages,
    which every run would pay)."""
    if echo_steps == 0:
        return build_tiny_model(out_dir, seed=seed)
    import hashlib
    import shutil
    import tempfile

    from adapters.files.cache import cache_root

    version = hashlib.sha256(Path(__file__).read_bytes()).hexdigest()[:16]
    cached = cache_root() / "tiny-models" / f"{version}-seed{seed}-echo{echo_steps}{'-system' if echo_system else ''}"
    if not (cached / "config.json").is_file():
        cached.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f".{cached.name}-", dir=cached.parent))
        try:
            build_tiny_model(staging / "model", seed=seed, echo_steps=echo_steps, echo_system=echo_system)
            try:
                (staging / "model").rename(cached)  # atomic; another process may have won the race
            except OSError:
                if not (cached / "config.json").is_file():
                    raise
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    shutil.copytree(cached, out_dir, dirs_exist_ok=True)
    return out_dir


def main(argv: list[str] | None = None) -> None:
    """``python -m adapters.local.tiny_model OUT_DIR``: build the tiny model there."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("out_dir", type=Path)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    path = build_tiny_model(args.out_dir, seed=args.seed)
    print(path)


if __name__ == "__main__":
    main()
