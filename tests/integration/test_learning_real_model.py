"""The real-model learning checks: LoRA rank 32 on SmolLM2-135M-Instruct, the arithmetic example's held-out sums,
one a rollout and two a chat (multi-turn), and the control.

A module of its own so that the suite's second test process runs it beside test_learning.py's checks. It skips,
saying why, only where the model's wheel is not installed (scripts/bootstrap.sh installs it). Timeouts only catch
hangs.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.integration.sum_checks import BASE_ANSWERS, CHAT_PASS, CONTROL_MAX, SUMS_PASS, answers, run_sum_check
from tests.support.pretrained import needs_wheel

pytestmark = pytest.mark.slow


@needs_wheel
@pytest.mark.parametrize(
    ("kind", "name"),
    [("check", "lora"), ("control", "lora-control"), ("chat", "lora-chat")],
    ids=["lora", "lora-control", "lora-chat"],
)
async def test_lora_on_the_real_model_raises_its_held_out_sums_only_for_rewards_of_the_reply(
    kind: str, name: str, tmp_path: Path
) -> None:
    """LoRA rank 32, as the hosted service trains, on SmolLM2-135M-Instruct (``sum_checks``): the sums rise past
    what chance allows, on one question a rollout and two a chat, and do not with a coin for reward. The base
    model's greedy answers, the same at every seed (``BASE_ANSWERS``), are not evaluated again here."""
    outcome = await run_sum_check(tmp_path, 0, kind, eval_on_start=False)
    line = f"{name}, SmolLM2: held-out answers {BASE_ANSWERS[kind]} (base) -> {outcome.after} of {answers(kind)}, "
    line += f"training reward {outcome.train_first:.2f} -> {outcome.train_last:.2f}"
    print(line)
    if kind == "control":
        assert outcome.after <= CONTROL_MAX, line
    else:
        assert outcome.after >= (CHAT_PASS if kind == "chat" else SUMS_PASS), line
