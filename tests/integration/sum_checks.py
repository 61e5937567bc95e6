"""The real-model LoRA checks and their control: the arithmetic example on SmolLM2-135M-Instruct, LoRA rank 32.

The examples/README.md command cut to 6 batches: the base model answers 21 of the 75 held-out sums greedily at
every seed; RL on the training pairs teaches it to answer and stop. The control trains the same questions with a
coin for reward (``sum_agents.coin_sum_agent``) and is graded on the same held-out sums. The chat check asks the
questions two to a chat (``sum_chat_agent``: the second after the model's own answer to the first, each answer
half the reward) and counts the 150 held-out answers. The suite and bench/bench_sum_checks.py run them.
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
CHAT_BATCHES = 3
"""The chat check's batches: each costs about twice a one-sum batch, and seeds 0-4 had passed by batch 3
(bench/README.md, the chat check per seed)."""
CHAT_PASS = 60
"""Held-out answers of 150 (75 chats, two sums each) the chat check must get right: the base model gets 44 (0.29)
at every seed; 60 or more by chance at that rate has probability 0.33% (binomial); seeds 0-4 reached 71-94 at
batch 3 (bench/README.md, the chat check per seed)."""
BASE_ANSWERS = {"check": 21, "control": 21, "chat": 44}
"""The base model's held-out answers right greedily, the same at every seed (its greedy replies do not depend on
the run's seed; bench/README.md, the real-model checks and the chat check per seed): the suite does not spend an
evaluation on them again."""
KINDS = ("check", "control", "chat")
"""``check``: one sum a rollout; ``control``: the same with a coin for reward; ``chat``: two sums a chat."""


@dataclass(frozen=True)
class SumOutcome:
    before: int | None
    """Held-out answers right greedily, of ``answers(kind)``, before the first batch (None: not evaluated there)
    and after the last."""
    after: int
    train_first: float
    train_last: float
    along: tuple[tuple[int, int], ...] = ()
    """(batches trained, held-out sums right) at every evaluation, the first and last included."""


def batches(kind: str) -> int:
    """The batches a kind trains in the suite."""
    return CHAT_BATCHES if kind == "chat" else BATCHES


def answers(kind: str) -> int:
    """Held-out answers a kind's test reward counts: one per question, two per chat."""
    return 2 * TEST_ITEMS if kind == "chat" else TEST_ITEMS


def sum_overrides(
    directory: Path, seed: int, kind: str, eval_every: int = BATCHES, batches: int = BATCHES, eval_on_start: bool = True
) -> list[str]:
    tasks, test_tasks = ARITHMETIC / "tasks.jsonl", ARITHMETIC / "test_tasks.jsonl"
    agent = "examples.arithmetic.agent:sum_agent"
    if kind == "control":
        records = [json.loads(line) for line in tasks.read_text().splitlines() if line.strip()]
        tasks = directory / "coin_tasks.jsonl"
        tasks.write_text("".join(json.dumps({**r, "coin": True}) + "\n" for r in records))
        agent = "tests.integration.sum_agents:coin_sum_agent"
    elif kind == "chat":
        tasks, test_tasks = ARITHMETIC / "chat_tasks.jsonl", ARITHMETIC / "chat_test_tasks.jsonl"
        agent = "examples.arithmetic.agent:sum_chat_agent"
    elif kind != "check":
        raise ValueError(f"unknown kind {kind!r}: one of {', '.join(KINDS)}")
    return [
        f"agent={agent}",
        f"tasks={tasks}",
        f"test_tasks={test_tasks}",
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
        f"eval_on_start={str(eval_on_start).lower()}",
        "save_every=0",
        "transcripts=false",
        f"seed={seed}",
        "rollout_timeout_s=1800",
        f"log_path={directory / 'run'}",
    ]


async def run_sum_check(
    directory: Path,
    seed: int,
    kind: str,
    eval_every: int | None = None,
    n_batches: int | None = None,
    eval_on_start: bool = True,
) -> SumOutcome:
    """Train ``kind`` (``KINDS``) at ``seed`` in ``directory`` for ``n_batches`` batches (unset: the suite's),
    evaluating every ``eval_every`` (unset: at the end), and before the first batch with ``eval_on_start``; the
    counts are of ``answers(kind)``."""
    n_batches = n_batches or batches(kind)
    overrides = sum_overrides(directory, seed, kind, eval_every or n_batches, n_batches, eval_on_start)
    config = load_config(None, overrides).unwrap()
    summary = await train(config)
    lines = batch_lines(Path(config.log_path))
    if len(lines) != n_batches:
        raise AssertionError(f"{len(lines)} batches logged, not {n_batches}")
    if summary.reward_after is None or (eval_on_start and summary.reward_before is None):
        raise AssertionError("no test reward before or after")
    rewards = [float(line["env/all/reward/total"]) for line in lines]
    count = answers(kind)
    before = None if summary.reward_before is None else round(summary.reward_before * count)
    after = round(summary.reward_after * count)
    along = tuple(
        (int(line["step"]), round(float(line["test/env/all/reward/total"]) * count))
        for line in metrics_lines(Path(config.log_path))
        if "test/env/all/reward/total" in line
    )
    return SumOutcome(before, after, rewards[0], rewards[-1], along)
