"""The real-model learning check: LoRA rank 32 on SmolLM2-135M-Instruct, the arithmetic example's held-out sums.

A module of its own so that the suite's second test process runs it beside test_learning.py's checks. It skips,
saying why, only where the model's wheel is not installed (scripts/bootstrap.sh installs it). Timeouts only catch
hangs.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.integration.sum_checks import CONTROL_MAX, SUMS_PASS, TEST_ITEMS, run_sum_check
from tests.support.pretrained import needs_wheel

pytestmark = pytest.mark.slow


@needs_wheel
@pytest.mark.parametrize("control", [False, True], ids=["lora", "lora-control"])
async def test_lora_on_the_real_model_raises_its_held_out_sums_only_for_rewards_of_the_reply(
    control: bool, tmp_path: Path
) -> None:
    """LoRA rank 32, as the hosted service trains, on SmolLM2-135M-Instruct (``sum_checks``): the sums rise past
    what chance allows, and do not with a coin for reward."""
    outcome = await run_sum_check(tmp_path, 0, control)
    line = f"{'lora-control' if control else 'lora'}, SmolLM2: held-out sums {outcome.before} -> {outcome.after}"
    line += f" of {TEST_ITEMS}, training reward {outcome.train_first:.2f} -> {outcome.train_last:.2f}"
    print(line)
    if control:
        assert outcome.after <= CONTROL_MAX, line
    else:
        assert outcome.after >= SUMS_PASS, line
