"""Time the demo to a target test reward through the real pipeline, and the same learning sampled directly.

Both runs use the same config, tiny model, warm start, batches, cookbook datums and trainer. The
pipeline run goes through everything a user's run does with the default config (embedded store
served over HTTP, concurrent runner processes, the policy endpoint recording each call,
reconstruction; ``key=value`` overrides change it, e.g. ``store_process=true``); the direct run
samples the ``LocalSampler`` in process and grades the reply itself. The ratio is the price of
training from traces instead of a callback environment. Printed per run: wall time, rollouts per
second overall and the median over batches of the rollout phase alone (``rollouts/per_s``), and
this (trainer) process's CPU per rollout, the tiny model's sampling and training included.

    .venv/bin/python bench/bench_demo.py [--target 0.9] [--max-batches 150] [key=value ...]

With ``--seeds``, the demo as ``scripts/demo.sh`` runs it (every batch, no target unless one is given) once per
seed with full fine-tuning and once with LoRA (``--lora-rank``, the rate left to its LoRA default), side by side:
a markdown table of each run's last and best test reward and wall time. ``--loop direct`` runs the direct loop
instead (about twice as fast; the same learning, to try settings before the pipeline confirms them).

    .venv/bin/python bench/bench_demo.py --seeds 0,1,2,3,4 [--lora-rank 32] [--loop direct] [key=value ...]

With ``--warm-only``, only the warm start and one greedy evaluation per seed (no RL): what the policy scores
before RL has taught it anything.

    .venv/bin/python bench/bench_demo.py --warm-only --seeds 0,1,2,3,4 [key=value ...]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("TINKER_TELEMETRY", "0")
os.environ.setdefault("LITELLM_DONT_SHOW_FEEDBACK_BOX", "true")
os.environ.setdefault("AGENTOPS_LOG_LEVEL", "ERROR")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import tinker
from tinker_cookbook.completers import TokensWithLogprobs
from tinker_cookbook.renderers import Renderer, get_renderer
from tinker_cookbook.rl.types import Trajectory, TrajectoryGroup, Transition
from tinker_cookbook.tokenizer_utils import get_tokenizer

from adapters.cookbook.training import CookbookTrainingData, chat_datum
from adapters.local import LocalSampler, LocalTrainer
from app.config import TrainConfig, load_config
from app.demo.task import DigitTask, digit_reward, user_message
from app.launch import build_datasets, local_model_dir, train, training_settings, warm_start_chats
from app.usecases.steps import train_step, warm_start
from ports.policy import SamplingParams


@dataclass
class Outcome:
    seconds: float
    batches: int
    rollouts: int
    reward_before: float
    reward_after: float
    best: float = 0.0
    """The highest test reward of any evaluation."""
    cpu_s: float = 0.0
    """This (trainer) process's CPU over the run: sampling and training of the tiny model included."""
    sampling_rates: list[float] = field(default_factory=list)
    """Rollouts per second of each batch's rollout phase (``rollouts/per_s``)."""

    def line(self, name: str) -> str:
        rates = f", rollout phase median {statistics.median(self.sampling_rates):.0f}/s" if self.sampling_rates else ""
        return (
            f"{name:<9} {self.seconds:7.1f} s  {self.batches:4d} batches  {self.rollouts:6d} rollouts "
            f"({self.rollouts / self.seconds:6.1f}/s{rates})  trainer CPU {1000 * self.cpu_s / self.rollouts:.1f} "
            f"ms/rollout  test reward {self.reward_before:.2f} -> {self.reward_after:.2f}"
        )


async def pipeline(config: TrainConfig) -> Outcome:
    started, cpu = time.perf_counter(), time.process_time()
    summary = await train(config)
    seconds = time.perf_counter() - started
    batches = summary.end_batch - summary.start_batch
    lines = [json.loads(line) for line in (Path(config.log_path) / "metrics.jsonl").read_text().splitlines()]
    return Outcome(
        seconds, batches, batches * config.batch_size * config.group_size, summary.reward_before or 0.0,
        summary.reward_after or 0.0, best=max((reward for _, reward in summary.evals), default=0.0),
        cpu_s=time.process_time() - cpu, sampling_rates=[m["rollouts/per_s"] for m in lines if "rollouts/per_s" in m],
    )  # fmt: skip


async def _reply(
    sampler: LocalSampler, renderer: Renderer, task: DigitTask, params: SamplingParams, n: int
) -> list[Any]:
    prompt = renderer.build_generation_prompt([{"role": "user", "content": user_message(task)}])
    sequences = await sampler.sample(prompt.to_ints(), params, n)
    out = []
    for seq in sequences:
        message, _ = renderer.parse_response(list(seq.tokens))
        content = message["content"] if isinstance(message["content"], str) else ""
        out.append((prompt, seq, digit_reward(content, task["digit"])))
    return out


async def direct(config: TrainConfig, *, warm_only: bool = False) -> Outcome:
    """The same learning with the sampler called in process: no store, runner, proxy or tracer.

    ``warm_only``: stop after the warm start's evaluation (no batch trained)."""
    dataset, test = await build_datasets(config)
    model_dir = local_model_dir(config)
    trainer = LocalTrainer(
        model_dir,
        lora_rank=config.policy.lora_rank,
        train_unembed=config.policy.train_unembed,
        seed=config.seed,
        num_threads=config.policy.num_threads,
    )
    renderer = get_renderer(config.policy.renderer_name, get_tokenizer(str(model_dir)))
    stops = tuple(int(t) for t in renderer.get_stop_sequences())
    train_params = SamplingParams(config.max_tokens, config.train_temperature, config.top_k, config.top_p, stops)
    eval_params = SamplingParams(config.max_tokens, config.eval_temperature, config.top_k, config.top_p, stops)
    test_tasks: list[DigitTask] = list(test.dataset) if test is not None else []

    async def evaluate(sampler: LocalSampler) -> float:
        rewards = await asyncio.gather(*(_reply(sampler, renderer, t, eval_params, 1) for t in test_tasks))
        return sum(r[0][2] for r in rewards) / len(rewards)

    started, cpu = time.perf_counter(), time.process_time()
    settings = training_settings(config)
    warm_data = [chat_datum(chat, renderer) for chat in warm_start_chats(config)]
    await warm_start(trainer, warm_data, settings.warm_start, lambda _m: None)
    sampler = await trainer.sampler("direct-0")
    reference = sampler if config.kl_penalty_coef > 0 else None
    before = after = best = await evaluate(sampler)
    n_batches = 0 if warm_only else min(len(dataset), config.max_batches or len(dataset))
    done = 0
    for i_batch in range(n_batches):
        if config.eval_every and i_batch % config.eval_every == 0 and i_batch > 0:
            after = await evaluate(sampler)
            best = max(best, after)
            if config.target_test_reward is not None and after >= config.target_test_reward:
                break
        builders = dataset.get_batch(i_batch)
        samples = await asyncio.gather(*(_reply(sampler, renderer, b.task, train_params, b.num_envs) for b in builders))
        groups = [
            TrajectoryGroup(
                [
                    Trajectory(
                        [Transition(prompt, TokensWithLogprobs(list(s.tokens), list(s.logprobs)), r, True)],
                        tinker.ModelInput.empty(),
                    )
                    for prompt, s, r in group
                ],
                [0.0] * len(group),
                [{} for _ in group],
            )
            for group in samples
        ]
        step_settings = replace(settings, learning_rate=settings.rate_at(i_batch, n_batches))
        await train_step(trainer, CookbookTrainingData(), step_settings, groups, reference)
        sampler = await trainer.sampler(f"direct-{i_batch + 1}")
        done = i_batch + 1
    else:
        if n_batches:
            after = await evaluate(sampler)
            best = max(best, after)
    seconds = time.perf_counter() - started
    trainer.close()
    cpu_s = time.process_time() - cpu
    return Outcome(seconds, done, done * config.batch_size * config.group_size, before, after, best, cpu_s)


def seed_table(seeds: list[int], lora_rank: int, loop: str, overrides: list[str], workdir: Path, only: str) -> None:
    """One row a seed: the demo with full fine-tuning and with LoRA, each run to its end."""
    run = pipeline if loop == "pipeline" else direct
    modes = {"full": [], f"LoRA {lora_rank}": [f"policy.lora_rank={lora_rank}"]}
    modes = {m: extra for m, extra in modes.items() if only in ("both", m.split()[0].lower())}
    print(f"the demo per seed ({loop} loop; overrides: {' '.join(overrides) or 'none'})")
    print("| seed | " + " | ".join(f"{m}: last (best) | {m}: time" for m in modes) + " |")
    print("|---|" + "---|---|" * len(modes))
    lasts: dict[str, list[float]] = {m: [] for m in modes}
    for seed in seeds:
        cells = []
        for mode, extra in modes.items():
            log_path = workdir / f"{mode.split()[0]}-{seed}"
            config = load_config(None, [f"log_path={log_path}", f"seed={seed}", *extra, *overrides]).unwrap()
            outcome = asyncio.run(run(config))
            lasts[mode].append(outcome.reward_after)
            cells.append(f"{outcome.reward_after:.2f} ({outcome.best:.2f}) | {outcome.seconds:.0f} s")
        print(f"| {seed} | " + " | ".join(cells) + " |", flush=True)
    for mode, values in lasts.items():
        print(
            f"{mode}: last test reward >= 0.9 in {sum(v >= 0.9 for v in values)} of {len(values)} seeds, "
            f">= 0.8 in {sum(v >= 0.8 for v in values)}; mean {statistics.mean(values):.2f}"
        )


def warm_only_table(seeds: list[int], overrides: list[str], workdir: Path) -> None:
    """One row a seed: the greedy test reward right after the warm start, before any RL."""
    print(f"the demo's greedy test reward after the warm start, before RL (overrides: {' '.join(overrides) or 'none'})")
    rewards = []
    for seed in seeds:
        config = load_config(None, [f"log_path={workdir / f'warm-{seed}'}", f"seed={seed}", *overrides]).unwrap()
        outcome = asyncio.run(direct(config, warm_only=True))
        rewards.append(outcome.reward_before)
        print(f"seed {seed}: {outcome.reward_before:.2f} ({outcome.seconds:.0f} s)", flush=True)
    print(f"mean {statistics.mean(rewards):.2f}, max {max(rewards):.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--target", type=float, default=None, help="stop here (default 0.9; none with --seeds)")
    parser.add_argument("--max-batches", type=int, default=None, help="default 150, the demo's own with --seeds")
    parser.add_argument("--seeds", help="comma-separated seeds: a table of full fine-tuning and LoRA side by side")
    parser.add_argument("--lora-rank", type=int, default=32)
    parser.add_argument("--loop", choices=("pipeline", "direct"), default="pipeline", help="with --seeds")
    parser.add_argument("--only", choices=("both", "full", "lora"), default="both", help="with --seeds")
    parser.add_argument("--warm-only", action="store_true", help="with --seeds: warm start + one evaluation")
    parser.add_argument("overrides", nargs="*", help="config overrides, e.g. n_runners=4")
    args = parser.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="bench-demo-"))
    try:
        if args.seeds:
            limits = [f"target_test_reward={args.target}"] if args.target is not None else []
            limits += [f"max_batches={args.max_batches}"] if args.max_batches is not None else []
            seeds = [int(s) for s in args.seeds.split(",")]
            if args.warm_only:
                warm_only_table(seeds, args.overrides, workdir)
                return
            seed_table(seeds, args.lora_rank, args.loop, [*limits, *args.overrides], workdir, args.only)
            return
        args.target = 0.9 if args.target is None else args.target
        args.max_batches = 150 if args.max_batches is None else args.max_batches
        overrides = [f"target_test_reward={args.target}", f"max_batches={args.max_batches}", *args.overrides]
        cfg_pipeline = load_config(None, [f"log_path={workdir / 'pipeline'}", *overrides]).unwrap()
        cfg_direct = load_config(None, [f"log_path={workdir / 'direct'}", *overrides]).unwrap()
        shape = f"{cfg_pipeline.batch_size}x{cfg_pipeline.group_size}"
        print(
            f"demo to test reward >= {args.target} (at most {args.max_batches} batches of {shape}), "
            f"{cfg_pipeline.n_runners} runner processes"
        )
        direct_outcome = asyncio.run(direct(cfg_direct))
        print(direct_outcome.line("direct"), flush=True)
        pipeline_outcome = asyncio.run(pipeline(cfg_pipeline))
        print(pipeline_outcome.line("pipeline"))
        direct_rate = direct_outcome.rollouts / direct_outcome.seconds
        pipeline_rate = pipeline_outcome.rollouts / pipeline_outcome.seconds
        print(
            f"ratio pipeline/direct: {pipeline_outcome.seconds / direct_outcome.seconds:.1f}x wall, "
            f"{direct_rate / pipeline_rate:.1f}x time per rollout"
        )
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
