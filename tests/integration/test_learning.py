"""Learning checks: small tasks the tiny model must learn within a bounded number of batches, and a control.

Each check (``learning_checks.CHECKS``) trains through the whole pipeline from a fixed seed on training items and
is evaluated greedily on disjoint test items, so a change that keeps the wiring but breaks learning fails here,
and so does one whose learning does not come from the rewards: the control trains the single-turn task with a
coin for reward and must stay near chance. The thresholds and the chance that a policy that does not learn
passes them are in bench/README.md (the learning checks per seed). Timeouts only catch hangs.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from tinker_cookbook.renderers import Renderer

from tests.integration.learning_checks import CHECKS, run_check

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("name", list(CHECKS))
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
