"""Rewards reach their calls whatever the runner's clock says (a runner on another machine).

The store, the trainer (with its policy endpoint) and one ``agl-tinker runner`` run as separate processes,
as README's distributed set-up; the runner's wall clock is shifted with libfaketime (Debian's ``faketime``,
which ``scripts/test.sh`` installs where it can). Each rollout makes two calls and gives a reward after each
(one emitted, one returned), from sets that tell them apart, so every kept turn shows which reward it got.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from adapters.files.run_log import ROLLOUTS_FILE
from app.config import load_config
from app.launch import train
from tests.integration.training_agents import FIRST_TURN_REWARDS, SECOND_TURN_REWARDS
from tests.support.cli import ROOT, cli_env
from tests.support.processes import stop
from tests.support.runs import batch_lines
from tests.support.stores import free_port, store_process, wait_healthy

FAKETIME = shutil.which("faketime")
pytestmark = pytest.mark.skipif(
    FAKETIME is None, reason="needs Debian's faketime to shift a runner's clock (apt-get install faketime)"
)
AGENT = "tests.integration.training_agents:rewarded_each_turn_agent"


@pytest.mark.parametrize("shift", ["-0.05s", "-3s", "+3s"], ids=["50ms-behind", "3s-behind", "3s-ahead"])
async def test_every_reward_reaches_its_call_whatever_the_runner_clock(tmp_path: Path, shift: str) -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    store = store_process(port)
    runner = None
    try:
        await wait_healthy(url, process=store)
        command = [str(FAKETIME), "-f", shift, sys.executable, "-m", "app.faces.cli", "runner"]
        runner = subprocess.Popen(
            [*command, "--store", url, "-n", "1", "--agent", AGENT], cwd=ROOT, env=cli_env(), text=True
        )
        run = tmp_path / "run"
        settings = [
            f"log_path={run}", f"agent={AGENT}", f"store_url={url}", "n_runners=0", "batch_size=2", "group_size=4",
            "max_tokens=4", "warm_start.steps=0", "eval_every=0", "save_every=0", "max_batches=2",
            "rollout_timeout_s=60", "save_rollouts=true", "remove_constant_reward_groups=false",
        ]  # fmt: skip
        summary = await train(load_config(None, settings).unwrap())

        assert summary.end_batch == 2
        rollouts = [json.loads(line) for line in (run / ROLLOUTS_FILE).read_text().splitlines()]
        assert len(rollouts) == 16 and all(r["status"] == "succeeded" for r in rollouts)
        for rollout in rollouts:
            rewards = [t["reward"] for t in rollout["transitions"]]
            assert len(rewards) == 2, rollout["rollout_id"]
            assert rewards[0] in FIRST_TURN_REWARDS and rewards[1] in SECOND_TURN_REWARDS, rewards
        for line in batch_lines(run):
            assert line["rollouts/n_without_reward"] == 0
            assert line["rewards/n_before_first_call"] == 0 and line["rewards/n_order_unknown"] == 0
    finally:
        for process in (runner, store):
            stop(process)
