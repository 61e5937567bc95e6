"""The real-model LoRA check and its control: the arithmetic example on SmolLM2-135M-Instruct, LoRA rank 32.

The examples/README.md command cut to 6 batches: the base model answers 21 of the 75 held-out sums greedily at
every seed; RL on the training pairs teaches it to answer and stop. The control trains the same questions with a
coin for reward (``sum_agents.coin_sum_agent``) and is graded on the same held-out sums. The suite and
bench/bench_sum_checks.py both run them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from app.config import load_config
from app.launch import train
from tests.support.runs import ROOT, batch_lines, metrics_lines

ARITHMETIC = ROOT / "examples" / "arithmetic"
BATCHES = 6
TEST_ITEMS = 75
SUMS_PASS = 32
"""Held-out sums the check must get right: 32 or more of 75 by chance, for a policy still at the base model's
0.28, has probability 0.45% (binomial); seeds 0-4 reached 37-57 (bench/README.md, the real-model checks)."""
CONTROL_MAX = SUMS_PASS - 1
"""The control must not pass the check: a coin for reward leaves the held-out sums near the base model's 21
(bench/README.md, the real-model checks per seed)."""


@dataclass(frozen=True)
class SumOutcome:
    before: int
    """Held-out sums answered right greedily, of ``TEST_ITEMS``, before the first batch and after the last."""
    after: int
    train_first: float
    train_last: float
    along: tuple[tuple[int, int], ...] = ()
    """(batches trained, held-out sums right) at every evaluation, the first and last included."""


def sum_overrides(
    directory: Path, seed: int, control: bool, eval_every: int = BATCHES, batches: int = BATCHES
) -> list[str]:
    tasks = ARITHMETIC / "tasks.jsonl"
    agent = "examples.arithmetic.agent:sum_agent"
    if control:
        records = [json.loads(line) for line in tasks.read_text().splitlines() if line.strip()]
        tasks = directory / "coin_tasks.jsonl"
        tasks.write_text("".join(json.dumps({**r, "coin": True}) + "\n" for r in records))
        agent = "tests.integration.sum_agents:coin_sum_agent"
    return [
        f"agent={agent}",
        f"tasks={tasks}",
        f"test_tasks={ARITHMETIC / 'test_tasks.jsonl'}",
        "policy.model_path=smollm2-135m-instruct",
        "policy.lora_rank=32",
        "learning_rate=5e-4",
        "kl_penalty_coef=0",
        "train_temperature=0.7",
        "max_tokens=16",
        "warm_start.steps=0",
        "batch_size=4",
        f"max_batches={batches}",
        f"eval_every={eval_every}",
        "save_every=0",
        "transcripts=false",
        f"seed={seed}",
        "rollout_timeout_s=1800",
        f"log_path={directory / 'run'}",
    ]


async def run_sum_check(
    directory: Path, seed: int, control: bool, eval_every: int = BATCHES, batches: int = BATCHES
) -> SumOutcome:
    """Train the check (or its control) at ``seed`` in ``directory`` for ``batches`` batches, evaluating every
    ``eval_every``."""
    config = load_config(None, sum_overrides(directory, seed, control, eval_every, batches)).unwrap()
    summary = await train(config)
    lines = batch_lines(Path(config.log_path))
    if len(lines) != batches:
        raise AssertionError(f"{len(lines)} batches logged, not {batches}")
    if summary.reward_before is None or summary.reward_after is None:
        raise AssertionError("no test reward before or after")
    rewards = [float(line["env/all/reward/total"]) for line in lines]
    before, after = round(summary.reward_before * TEST_ITEMS), round(summary.reward_after * TEST_ITEMS)
    along = tuple(
        (int(line["step"]), round(float(line["test/env/all/reward/total"]) * TEST_ITEMS))
        for line in metrics_lines(Path(config.log_path))
        if "test/env/all/reward/total" in line
    )
    return SumOutcome(before, after, rewards[0], rewards[-1], along)
