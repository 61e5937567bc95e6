"""Throughput of the embedded PyTorch backend on the tiny offline Qwen3 model.

For batch sizes 1, 2, 4, ..., 64 it measures, side by side in one run: sampler tokens/s when the
requests arrive concurrently (micro-batched: one forward pass per step for all of them), tokens/s
when the same requests are made one at a time, the speed-up of the former, and the time of one
training step (``forward_backward`` with importance sampling plus ``optim_step``) on that many
sequences. Usage: ``python bench/bench_local_backend.py [--max-batch 64] [--tokens 32] [--model DIR]``.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from adapters.local import LocalSampler, LocalTrainer, build_tiny_model  # noqa: E402
from ports.policy import AdamParams, LossName, SampledSequence, SamplingParams, TrainingDatum  # noqa: E402


def _prompts(trainer: LocalTrainer, n: int) -> list[list[int]]:
    texts = [f"<|im_start|>user\nI'm {i}. Count to {i % 20}.<|im_end|>\n<|im_start|>assistant\n" for i in range(n)]
    return [list(trainer.tokenizer.encode(t, add_special_tokens=False)) for t in texts]


def _datum(prompt: list[int], seq: SampledSequence) -> TrainingDatum:
    full = [*prompt, *seq.tokens]
    n_obs, n_act = len(prompt) - 1, len(seq.tokens)
    return TrainingDatum(
        model_input=tuple(full[:-1]),
        target_tokens=tuple(full[1:]),
        logprobs=(0.0,) * n_obs + seq.logprobs,
        advantages=(0.0,) * n_obs + (1.0,) * n_act,
        mask=(0.0,) * n_obs + (1.0,) * n_act,
    )


async def _concurrent(sampler: LocalSampler, prompts: list[list[int]], params: SamplingParams) -> float:
    start = time.perf_counter()
    results = await asyncio.gather(*(sampler.sample(p, params) for p in prompts))
    elapsed = time.perf_counter() - start
    return sum(len(r[0].tokens) for r in results) / elapsed


async def _sequential(sampler: LocalSampler, prompts: list[list[int]], params: SamplingParams) -> float:
    start = time.perf_counter()
    total = 0
    for p in prompts:
        total += len((await sampler.sample(p, params))[0].tokens)
    return total / (time.perf_counter() - start)


async def run(model_dir: Path, max_batch: int, tokens: int) -> None:
    trainer = LocalTrainer(model_dir)
    sampler = await trainer.sampler("bench")
    params = SamplingParams(max_tokens=tokens, seed=0, stop_token_ids=(-1,))
    warm = _prompts(trainer, 2)
    await _concurrent(sampler, warm, params)
    await _sequential(sampler, warm, params)

    print(f"tiny Qwen3, {tokens} sampled tokens per request, torch threads = {torch.get_num_threads()}")
    columns = ("batch", "concurrent tok/s", "one-at-a-time tok/s", "speed-up", "train step ms")
    header = " | ".join(columns)
    print(header)
    print("-" * len(header))
    batch = 1
    while batch <= max_batch:
        prompts = _prompts(trainer, batch)
        batched = await _concurrent(sampler, prompts, params)
        single = await _sequential(sampler, prompts, params)
        seqs = [r[0] for r in await asyncio.gather(*(sampler.sample(p, params) for p in prompts))]
        data = [_datum(p, s) for p, s in zip(prompts, seqs, strict=True)]
        start = time.perf_counter()
        await trainer.forward_backward(data, LossName.IMPORTANCE_SAMPLING)
        await trainer.optim_step(AdamParams(learning_rate=0.0))
        train_ms = 1000 * (time.perf_counter() - start)
        cells = (f"{batch}", f"{batched:.0f}", f"{single:.0f}", f"{batched / single:.1f}x", f"{train_ms:.1f}")
        print(" | ".join(c.rjust(len(col)) for c, col in zip(cells, columns, strict=True)))
        batch *= 2
    trainer.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--max-batch", type=int, default=64)
    parser.add_argument("--tokens", type=int, default=32)
    parser.add_argument("--model", type=Path, default=None, help="model directory (default: build the tiny one)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = args.model or build_tiny_model(Path(tmp) / "tiny")
        asyncio.run(run(model_dir, args.max_batch, args.tokens))


if __name__ == "__main__":
    main()
