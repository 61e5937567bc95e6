"""One RL step of 32 rollouts on SmolLM2-135M-Instruct with LoRA rank 32, on the local backend, beside plain
Hugging Face ``generate`` on the same prompts.

The rollouts are the arithmetic example's: 4 questions, 8 replies each (a GRPO group sends its question 8
times), ``--tokens`` sampled tokens a reply. Printed: sampling time and tokens/s through ``LocalSampler`` (32
concurrent requests, continuous batching, each distinct prompt prefilled once) and through
``model.generate`` on a left-padded batch of the 32 prompts (the baseline: what plain transformers does), then
the training step (``forward_backward`` with importance sampling + ``optim_step``) over the 32 sequences and the
publication of the next sampler (a merged copy of the weights), and the whole step's seconds. Usage:
``python bench/bench_pretrained_step.py [--tokens 16] [--rank 32] [--repeats 2] [--threads N]
[--logits-per-chunk N] [--dtype bfloat16] [--no-shared-prefix]`` (``--logits-per-chunk``: the training forward's
chunk budget, ``1099511627776`` for the whole batch in one chunk; ``--dtype``: the weights' dtype, float32 by
default; ``--no-shared-prefix``: run each group's prompt once per reply in the training forward, as before the
trainer ran a shared prefix once).
"""

from __future__ import annotations

import argparse
import asyncio
import math
import os
import resource
import sys
import time
from pathlib import Path

os.environ.setdefault("TINKER_TELEMETRY", "0")
ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import torch  # noqa: E402
from tinker_cookbook.renderers import get_renderer  # noqa: E402
from tinker_cookbook.tokenizer_utils import get_tokenizer  # noqa: E402

from adapters.cookbook.smollm2 import SMOLLM2_RENDERER, register_smollm2_renderer  # noqa: E402
from adapters.local import LocalTrainer  # noqa: E402
from adapters.local.pretrained import pretrained_model_dir  # noqa: E402
from ports.policy import AdamParams, LossName, SamplingParams, TrainingDatum  # noqa: E402

QUESTIONS = ("What is 3 + 8?", "What is 12 + 5?", "What is 7 + 9?", "What is 14 + 6?")
GROUP = 8


def datum(prompt: list[int], tokens: tuple[int, ...], logprobs: tuple[float, ...], advantage: float) -> TrainingDatum:
    full = [*prompt, *tokens]
    n_obs = len(prompt) - 1
    return TrainingDatum(
        model_input=tuple(full[:-1]),
        target_tokens=tuple(full[1:]),
        logprobs=(0.0,) * n_obs + logprobs,
        advantages=(0.0,) * n_obs + (advantage,) * len(tokens),
        mask=(0.0,) * n_obs + (1.0,) * len(tokens),
    )


async def step(trainer: LocalTrainer, prompts: list[list[int]], tokens: int, version: int) -> dict[str, float]:
    sampler = await trainer.sampler(f"v{version}")
    params = [SamplingParams(max_tokens=tokens, seed=1000 * version + i, stop_token_ids=(-1,)) for i in range(32)]
    started = time.perf_counter()
    replies = await asyncio.gather(*(sampler.sample(prompts[i // GROUP], params[i]) for i in range(32)))
    sampled = time.perf_counter() - started
    data = [
        datum(prompts[i // GROUP], s.tokens, s.logprobs, 1.0 if i % 2 else -1.0)
        for i, ((s,),) in enumerate(zip(replies, strict=True))
    ]
    started = time.perf_counter()
    await trainer.forward_backward(data, LossName.IMPORTANCE_SAMPLING)
    await trainer.optim_step(AdamParams(learning_rate=1e-4))
    trained = time.perf_counter() - started
    started = time.perf_counter()
    await trainer.sampler(f"v{version + 1}")
    published = time.perf_counter() - started
    n_sampled = sum(len(s.tokens) for (s,) in replies)
    n_trained = sum(len(d.model_input) for d in data)
    return {
        "sample_s": sampled,
        "sampled_tok": n_sampled,
        "train_s": trained,
        "trained_tok": n_trained,
        "publish_s": published,
    }


def generate_baseline(trainer: LocalTrainer, prompts: list[list[int]], tokens: int) -> float:
    """Plain ``generate`` on the 32 prompts, left-padded, sampling ``tokens`` new tokens each."""
    model = trainer.model
    rows = [prompts[i // GROUP] for i in range(32)]
    width = max(map(len, rows))
    pad = trainer.tokenizer.pad_token_id or 0
    ids = torch.tensor([[pad] * (width - len(r)) + r for r in rows])
    mask = torch.tensor([[0] * (width - len(r)) + [1] * len(r) for r in rows])
    started = time.perf_counter()
    with torch.inference_mode():
        model.generate(
            input_ids=ids,
            attention_mask=mask,
            max_new_tokens=tokens,
            min_new_tokens=tokens,
            do_sample=True,
            pad_token_id=pad,
        )
    return time.perf_counter() - started


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tokens", type=int, default=16)
    parser.add_argument("--rank", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: the backend's own)")
    parser.add_argument("--logits-per-chunk", type=int, default=None, help="the backend's chunk budget (default)")
    parser.add_argument("--dtype", default="float32", help="the weights' dtype (float32, bfloat16)")
    parser.add_argument("--no-shared-prefix", action="store_true", help="train without running prompts once")
    args = parser.parse_args()
    register_smollm2_renderer()
    path = pretrained_model_dir("smollm2-135m-instruct")
    renderer = get_renderer(SMOLLM2_RENDERER, get_tokenizer(str(path)))
    prompts = [renderer.build_generation_prompt([{"role": "user", "content": q}]).to_ints() for q in QUESTIONS]
    chunking: dict[str, float] = {} if args.logits_per_chunk is None else {"logits_per_chunk": args.logits_per_chunk}
    if args.no_shared_prefix:
        chunking["shared_prefix_min_work"] = math.inf
    trainer = LocalTrainer(
        path, lora_rank=args.rank, num_threads=args.threads, dtype=getattr(torch, args.dtype), **chunking
    )
    print(
        f"SmolLM2-135M-Instruct, LoRA rank {args.rank}, 32 rollouts (4 prompts of {len(prompts[0])} tokens x 8), "
        f"{args.tokens} tokens each, torch threads {torch.get_num_threads()}, load {os.getloadavg()[0]:.1f}, "
        f"training chunks of at most {trainer.tokens_per_chunk} tokens, "
        f"shared prefixes {'off' if args.no_shared_prefix else 'on'}"
    )
    for repeat in range(args.repeats):
        baseline = generate_baseline(trainer, prompts, args.tokens)
        s = await step(trainer, prompts, args.tokens, repeat)
        total = s["sample_s"] + s["train_s"] + s["publish_s"]
        print(
            f"step {repeat}: sample {s['sample_s']:.1f} s ({s['sampled_tok'] / s['sample_s']:.0f} tok/s; "
            "plain generate "
            f"{baseline:.1f} s, {32 * args.tokens / baseline:.0f} tok/s), train {s['train_s']:.1f} s "
            f"({s['trained_tok'] / s['train_s']:.0f} tok/s), publish {s['publish_s']:.1f} s; step {total:.1f} s; "
            f"peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024} MiB",
            flush=True,
        )
    trainer.close()


if __name__ == "__main__":
    asyncio.run(main())
