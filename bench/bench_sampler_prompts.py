"""An evaluation's sampling on SmolLM2-135M-Instruct: many distinct prompts that share a system prompt, sampled
at once through ``LocalSampler``, with the shared prefix prefilled once and with every prompt prefilled in full,
side by side in one run, beside plain Hugging Face ``generate`` on the same prompts.

The prompts are the arithmetic example's 75 held-out questions (``examples/arithmetic/test_tasks.jsonl``), first
under the model's default system prompt (what ``sum_agent`` sends), then under the renderer's tools prompt for
one function (what an agent that passes ``tools=`` sends): greedy, ``--tokens`` tokens each, all requests at
once as an evaluation sends them. Printed per case: seconds, sampled tokens/s, prompt tokens run (prefilled), and
whether the two samplers' replies are the same tokens. Usage:
``python bench/bench_sampler_prompts.py [--tokens 16] [--threads 1] [--items 75]``
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import sys
import time
from pathlib import Path
from typing import Any, cast

os.environ.setdefault("TINKER_TELEMETRY", "0")
ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import torch  # noqa: E402
from tinker_cookbook.renderers import Message, Renderer, ToolSpec, get_renderer  # noqa: E402
from tinker_cookbook.tokenizer_utils import get_tokenizer  # noqa: E402

from adapters.cookbook.smollm2 import SMOLLM2_RENDERER, register_smollm2_renderer  # noqa: E402
from adapters.local import LocalTrainer  # noqa: E402
from adapters.local.pretrained import pretrained_model_dir  # noqa: E402
from adapters.local.sampler import LocalSampler  # noqa: E402
from ports.policy import SamplingParams  # noqa: E402

ANSWER: dict[str, Any] = {
    "name": "answer",
    "description": "Give your answer to the question: the number.",
    "parameters": {"type": "object", "properties": {"number": {"type": "integer"}}, "required": ["number"]},
}


def prompt_sets(renderer: Renderer, questions: list[str]) -> dict[str, list[list[int]]]:
    (tools,) = renderer.create_conversation_prefix_with_tools([cast(ToolSpec, ANSWER)])
    sets: dict[str, list[list[int]]] = {}
    for name, prefix in (("default system prompt", []), ("tools prompt", [tools])):
        chats = [[*prefix, Message(role="user", content=q)] for q in questions]
        sets[name] = [renderer.build_generation_prompt(chat).to_ints() for chat in chats]
    return sets


async def sample_all(
    sampler: LocalSampler, prompts: list[list[int]], tokens: int
) -> tuple[float, list[tuple[int, ...]]]:
    params = SamplingParams(max_tokens=tokens, temperature=0.0, seed=0)
    started = time.perf_counter()
    replies = await asyncio.gather(*(sampler.sample(p, params) for p in prompts))
    return time.perf_counter() - started, [s.tokens for (s,) in replies]


def generate_baseline(trainer: LocalTrainer, prompts: list[list[int]], tokens: int) -> float:
    """Plain greedy ``generate`` on the prompts, left-padded, in one batch."""
    width = max(map(len, prompts))
    pad = trainer.tokenizer.pad_token_id or 0
    ids = torch.tensor([[pad] * (width - len(p)) + p for p in prompts])
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts])
    started = time.perf_counter()
    with torch.inference_mode():
        cast(Any, trainer.model).generate(
            input_ids=ids, attention_mask=mask, max_new_tokens=tokens, do_sample=False, pad_token_id=pad
        )
    return time.perf_counter() - started


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tokens", type=int, default=16)
    parser.add_argument("--threads", type=int, default=1, help="torch threads (the suite's runs use one)")
    parser.add_argument("--items", type=int, default=75, help="held-out questions sampled")
    args = parser.parse_args()
    register_smollm2_renderer()
    path = pretrained_model_dir("smollm2-135m-instruct")
    questions = [json.loads(line)["question"] for line in (ROOT / "examples/arithmetic/test_tasks.jsonl").open()]
    shared = LocalTrainer(path, lora_rank=32, num_threads=args.threads)
    full = LocalTrainer(path, lora_rank=32, num_threads=args.threads, shared_prefix_min_work=math.inf)
    renderer = get_renderer(SMOLLM2_RENDERER, get_tokenizer(str(path)))
    print(
        f"SmolLM2-135M-Instruct, LoRA rank 32, {args.items} held-out questions at once, greedy, {args.tokens} tokens,"
        f" torch threads {args.threads}, load {os.getloadavg()[0]:.1f}"
    )
    print("| prompts | sampler, shared prefix once | sampler, every prompt in full | plain generate | same replies |")
    print("|---|---|---|---|---|")
    for name, prompts in prompt_sets(renderer, questions[: args.items]).items():
        cells = []
        replies = []
        for trainer in (shared, full):
            sampler = await trainer.sampler(name)
            seconds, tokens = await sample_all(sampler, prompts, args.tokens)
            n = sum(map(len, tokens))
            cells.append(f"{seconds:.1f} s, {n / seconds:.0f} tok/s, {sampler.prefilled_tokens} prompt tokens run")
            replies.append(tokens)
        baseline = generate_baseline(shared, prompts, args.tokens)
        cells.append(f"{baseline:.1f} s, {len(prompts) * args.tokens / baseline:.0f} tok/s")
        same = sum(a == b for a, b in zip(*replies, strict=True))
        print(f"| {name}, {len(prompts[0])} tokens | {' | '.join(cells)} | {same} of {len(prompts)} |", flush=True)
    shared.close()
    full.close()


if __name__ == "__main__":
    asyncio.run(main())
