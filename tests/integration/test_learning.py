"""Learning checks: small tasks the tiny model must learn within a bounded number of batches, and a control.

Each check (``learning_checks.CHECKS``) trains through the whole pipeline from a fixed seed on training items and
is evaluated greedily on disjoint test items, so a change that keeps the wiring but breaks learning fails here,
and so does one whose learning does not come from the rewards: the control trains the single-turn task with a
coin for reward and must stay near chance. The thresholds and the chance that a policy that does not learn
passes them are in bench/README.md (the learning checks per seed). Tool-call does not yet learn its held-out
items (bench/README.md), so it still trains and tests on the demo's words (``WORD_CHECKS``). Multi-turn and LoRA
are checked on a real pretrained model, on held-out items (test_learning_real_model.py). Timeouts only catch
hangs.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import cast

import pytest
from tinker_cookbook.renderers import Renderer, ToolSpec

from app.config import load_config
from app.launch import train
from tests.integration import word_agents
from tests.integration.learning_checks import CHECKS, run_check
from tests.support.runs import batch_lines

pytestmark = pytest.mark.slow


Chats = list[list[dict[str, str]]]

MEASURED = ("single-turn", "control", "async")
"""The held-out checks whose batches and thresholds are measured over five seeds; multi-turn and tool-call still
run on the demo's words below."""


@pytest.mark.parametrize("name", MEASURED)
async def test_the_held_out_greedy_reward_rises_only_for_rewards_that_depend_on_the_reply(
    name: str, tmp_path: Path, renderer: Renderer
) -> None:
    check = CHECKS[name]
    outcome = await run_check(name, 0, tmp_path, renderer)
    line = f"{name}: held-out greedy reward {outcome.before:.2f} -> {outcome.after:.2f}, training reward "
    line += f"{outcome.train_first:.2f} -> {outcome.train_last:.2f}"
    print(line)
    if check.control:
        assert outcome.after <= check.threshold, line
    else:
        assert outcome.after >= check.threshold, line
        # The rise is learned on the training items too, not only a test-set accident.
        assert outcome.train_last > outcome.train_first, line


def keypad_files(renderer: Renderer) -> tuple[list[object], Chats]:
    """The doors, and warm-start chats of the call format under the renderer's own tools prompt (random digits)."""
    (system,) = renderer.create_conversation_prefix_with_tools([cast(ToolSpec, word_agents.PRESS["function"])])
    doors: list[object] = [{"door": door} for door in word_agents.DOORS]
    return doors, word_agents.keypad_format_chats(str(system["content"]), 256, seed=0)


@dataclass(frozen=True)
class WordCheck:
    """A task, the batches it gets, and the rise in greedy test reward it must show."""

    agent: str
    batches: int
    rise: float
    overrides: tuple[str, ...] = ()
    files: Callable[[Renderer], tuple[list[object], Chats]] | None = None
    """Its tasks and warm-start chats, as a user would write them for their agent; none: the demo's own."""


WORD_CHECKS = {
    # A 32-token call after the ~330-token tools prompt: a rate of 1e-2 broke the call format within two batches.
    # 12 batches: seeds 0-4 all at 1.0 there (from 0.0-0.4); at batch 8 one seed had lost the call format. The
    # tools prompt, shared by every sequence, runs once a step: a third of the time, the same at every seed.
    "tool-call": WordCheck(
        "tests.integration.word_agents:keypad_agent",
        12,
        0.5,
        ("max_tokens=40", "learning_rate=3e-3", "warm_start.steps=100", "policy.shared_prefix=always"),
        files=keypad_files,
    ),
}


def write_jsonl(path: Path, records: list[object]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def task_overrides(check: WordCheck, tmp_path: Path, renderer: Renderer) -> list[str]:
    """The demo's own tasks, or the check's task file with a warm start of its agent's format."""
    if check.files is None:
        return []
    records, chats = check.files(renderer)
    tasks = write_jsonl(tmp_path / "tasks.jsonl", records)
    warm = write_jsonl(tmp_path / "warm.jsonl", [{"messages": chat} for chat in chats])
    return [f"tasks={tasks}", f"test_tasks={tasks}", f"warm_start.file={warm}"]


@pytest.mark.parametrize("name", list(WORD_CHECKS))
async def test_the_greedy_test_reward_rises_on_the_training_words(
    name: str, tmp_path: Path, renderer: Renderer
) -> None:
    check = WORD_CHECKS[name]
    base = [
        f"log_path={tmp_path / 'run'}",
        f"agent={check.agent}",
        f"max_batches={check.batches}",
        f"eval_every={check.batches}",
        "save_every=0",
        "transcripts=false",
        "seed=0",
        "rollout_timeout_s=120",
        *check.overrides,
    ]
    config = load_config(None, [*base, *task_overrides(check, tmp_path, renderer)]).unwrap()

    summary = await train(config)

    assert len(batch_lines(Path(config.log_path))) == check.batches
    before, after = summary.reward_before, summary.reward_after
    assert before is not None and after is not None
    print(f"{name}: greedy test reward {before:.2f} -> {after:.2f}")
    # Rewards are tenths (ten test words): compare the rise rounded, not 0.1 + 0.2 in floating point.
    assert round(after - before, 6) >= check.rise, f"{name}: greedy test reward {before:.2f} -> {after:.2f}"
