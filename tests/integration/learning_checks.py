"""The learning checks' tasks and settings, and one run of a check at a seed (the suite and bench/ both run them).

Each check trains through the whole pipeline (embedded store, runner processes, the policy endpoint,
reconstruction, cookbook datums, the local trainer) on training items and evaluates greedily on disjoint test
items (``learning_agents``), before the first batch and after the last. ``control`` is the single-turn check with
rewards that do not depend on the reply. Thresholds come from five seeds each (bench/README.md, the learning
checks per seed).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import cast

from tinker_cookbook.renderers import Renderer, ToolSpec, get_renderer

from app.config import TrainConfig, load_config
from app.launch import train
from tests.integration import learning_agents as la

Chat = la.Chat
Items = list[dict[str, str]]


@dataclass(frozen=True)
class Files:
    """A check's training tasks, test tasks and warm-start chats, as a user would write them for their agent."""

    train: list[dict[str, object]]
    test: Items
    warm: list[Chat]
    tools: tuple[dict[str, object], ...] = ()
    """The tools the warm-start chats are trained beside (the renderer writes them into the system message)."""


def digit_files(_renderer: Renderer, seed: int) -> Files:
    train, test = la.digit_items()
    return Files(list(train), test, la.digit_format_chats(train, 256, seed))


def digit_tools_files(renderer: Renderer, seed: int) -> Files:
    """The single-turn task's files, its warm-start chats trained beside the tool its agent declares."""
    files = digit_files(renderer, seed)
    return Files(files.train, files.test, files.warm, (la.PRESS,))


def coin_files(renderer: Renderer, seed: int) -> Files:
    """The single-turn task's files, its training tasks rewarded by a coin (``coin_agent``)."""
    files = digit_files(renderer, seed)
    return Files([{**task, "coin": True} for task in files.train], files.test, files.warm)


def two_item_files(_renderer: Renderer, seed: int) -> Files:
    """The single-turn items two to a task (held out stays held out), and warm-start chats of that format."""
    train, test = (la.two_item_tasks(items) for items in la.digit_items())
    return Files(list(train), test, la.two_item_format_chats(train, 256, seed))


def keypad_files(renderer: Renderer, seed: int) -> Files:
    """The doors, and warm-start chats of the call format under the renderer's own tools prompt (random digits)."""
    (system,) = renderer.create_conversation_prefix_with_tools([cast(ToolSpec, la.PRESS["function"])])
    train, test = la.door_items()
    return Files(list(train), test, la.keypad_format_chats(str(system["content"]), train, 256, seed))


def code_reader_files(_renderer: Renderer, seed: int) -> Files:
    """The doors' (door, code) items, and warm-start chats of the code reader's two turns (random replies)."""
    train, test = la.door_items()
    return Files(list(train), test, la.code_reader_format_chats(train, 256, seed), (la.READ_CODE,))


def door_tools_files(_renderer: Renderer, seed: int) -> Files:
    """The (verb, door) items, and warm-start chats of the call format (random tools) beside the four tools."""
    train, test = la.verb_items()
    return Files(list(train), test, la.door_tools_format_chats(train, 256, seed), tuple(la.DOOR_TOOLS))


@dataclass(frozen=True)
class Check:
    """A task, the batches it gets, and the greedy test reward it must end at or above (at most, for a control)."""

    agent: str
    batches: int
    files: Callable[[Renderer, int], Files]
    threshold: float
    control: bool = False
    """A control must not learn: its test reward must end at most ``threshold``."""
    overrides: tuple[str, ...] = ()


BASE = ("policy.tiny_echo_steps=300", "warm_start.steps=50")
"""Every check's base: the echo-pretrained tiny model, which reads its prompt (on the random one the single-turn
task stayed at 0.15 in 20 batches), and a warm start that teaches the answer format but too briefly to memorise
its random replies (which teaches a policy to ignore the prompt)."""
AGENTS = "tests.integration.learning_agents"
SINGLE = Check(f"{AGENTS}:find_digit_agent", 40, digit_files, 0.5)
CHECKS = {
    "single-turn": SINGLE,
    "control": Check(f"{AGENTS}:coin_agent", SINGLE.batches, coin_files, 0.3, control=True),
    # Two items a task, both turns graded: learned in 1 of 3 seeds (bench/README.md), so not in the suite yet.
    "multi-turn": Check(f"{AGENTS}:two_items_agent", 60, two_item_files, 0.5),
    # A 32-token call after the ~330-token tools prompt: a rate of 1e-2 broke the call format within two batches.
    "tool-call": Check(
        f"{AGENTS}:keypad_agent",
        30,
        keypad_files,
        0.5,
        overrides=("max_tokens=40", "learning_rate=3e-3"),
    ),
    # The tool designs after the keypad (bench/README.md, the learning checks per seed). Choosing among four tools
    # by the request's verb (a constant tool scores 0.25): not learned.
    "tool-choice": Check(
        f"{AGENTS}:door_tools_agent",
        40,
        door_tools_files,
        0.6,
        overrides=("max_tokens=40", "learning_rate=3e-3", "warm_start.steps=200", "policy.shared_prefix=always"),
    ),
    # A call, then a reply that must be the code the tool returned: learned on the echo base built with system
    # messages; not calibrated over seeds yet.
    "tool-result": Check(
        f"{AGENTS}:code_reader_agent",
        40,
        code_reader_files,
        0.5,
        overrides=(
            "max_tokens=40",
            "warm_start.steps=200",
            "learning_rate=5e-3",
            "kl_penalty_coef=0",
            "remove_constant_reward_groups=true",
            "policy.tiny_echo_system=true",
        ),
    ),
    # Single-turn after a tools prompt: at chance on the plain echo base, learned on one echoed after system messages.
    "single-turn-tools": Check(f"{AGENTS}:find_digit_tools_agent", 40, digit_tools_files, 0.5),
    # Rollouts for the next batch run while the trainer steps, with PPO's clipping as bench_async.py trains it.
    # A step on one-version-old groups trains at lr / (1 + staleness): at twice the sync rate its steps are about
    # single-turn's size. 40 batches learned in 3 of 5 seeds, 60 in 4 of 5 (bench/README.md, the checks per seed).
    "async": Check(
        f"{AGENTS}:find_digit_agent",
        60,
        digit_files,
        0.5,
        overrides=("async.enabled=true", "loss_fn=ppo", "learning_rate=2e-2"),
    ),
}


def write_jsonl(path: Path, records: list[object]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def check_config(name: str, seed: int, directory: Path, renderer: Renderer, extra: tuple[str, ...] = ()) -> TrainConfig:
    check = CHECKS[name]
    files = check.files(renderer, seed)
    tasks = write_jsonl(directory / "tasks.jsonl", list(files.train))
    test_tasks = write_jsonl(directory / "test_tasks.jsonl", list(files.test))
    tools = {"tools": list(files.tools)} if files.tools else {}
    warm = write_jsonl(directory / "warm.jsonl", [{"messages": chat, **tools} for chat in files.warm])
    overrides = [
        f"log_path={directory / 'run'}",
        f"agent={check.agent}",
        f"tasks={tasks}",
        f"test_tasks={test_tasks}",
        f"warm_start.file={warm}",
        f"max_batches={check.batches}",
        f"eval_every={check.batches}",
        "save_every=0",
        "transcripts=false",
        f"seed={seed}",
        "rollout_timeout_s=120",
        *BASE,
        *check.overrides,
        *extra,
    ]
    return load_config(None, overrides).unwrap()


def tiny_renderer() -> Renderer:
    """The qwen3_instruct renderer over the tiny model's tokenizer (the same at every seed)."""
    from adapters.local.tiny_model import build_tokenizer

    return get_renderer("qwen3_instruct", build_tokenizer())


@dataclass(frozen=True)
class Outcome:
    before: float
    after: float
    train_first: float
    """Mean training reward of the first batch and of the last: what the policy did on the items it trained on."""
    train_last: float


async def run_check(name: str, seed: int, directory: Path, renderer: Renderer, extra: tuple[str, ...] = ()) -> Outcome:
    """Train the check at ``seed`` in ``directory`` (``extra``: settings tried over the check's own); its greedy
    test reward before and after, and its training reward in the first and last batch."""
    from tests.support.runs import batch_lines

    config = check_config(name, seed, directory, renderer, extra)
    summary = await train(config)
    lines = batch_lines(Path(config.log_path))
    if len(lines) != config.max_batches:
        raise AssertionError(f"{name}: {len(lines)} batches logged, not {config.max_batches}")
    if summary.reward_before is None or summary.reward_after is None:
        raise AssertionError(f"{name}: no test reward before or after")
    # A batch whose groups were all dropped as constant (``remove_constant_reward_groups``) logs no reward.
    rewards = [float(line["env/all/reward/total"]) for line in lines if "env/all/reward/total" in line]
    return Outcome(summary.reward_before, summary.reward_after, rewards[0], rewards[-1])
