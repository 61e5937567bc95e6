"""Rewards reach their calls whatever the runners' clocks say (runners on other machines).

The store, the trainer (with its policy endpoint) and three ``agl-tinker runner`` commands run as separate
processes, as README's distributed set-up; each runner's wall clock is shifted with libfaketime (Debian's ``faketime``,
which ``scripts/test.sh`` installs where it can). Each rollout makes two calls and gives a reward after each
(one emitted, one returned), from sets that tell them apart, so every kept turn shows which reward it got.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import agentlightning as agl
import pytest

from adapters.files.run_log import ROLLOUTS_FILE
from app.config import load_config
from app.launch import train
from tests.integration.training_agents import FIRST_TURN_REWARDS, SECOND_TURN_REWARDS
from tests.support.cli import ROOT, cli_env
from tests.support.processes import stop, stop_group
from tests.support.runs import batch_lines
from tests.support.stores import free_port, store_process, wait_healthy
from tests.support.waits import until

FAKETIME = shutil.which("faketime")
pytestmark = pytest.mark.skipif(
    FAKETIME is None, reason="needs Debian's faketime to shift a runner's clock (apt-get install faketime)"
)
AGENT = "tests.integration.training_agents:rewarded_each_turn_agent"


SHIFTS = ("-0.05s", "-3s", "+3s")
"""Each runner's clock against the trainer's (faketime -f): 50 ms behind, 3 s behind, 3 s ahead."""


async def test_every_reward_reaches_its_call_whatever_each_runners_clock(tmp_path: Path) -> None:
    """One run served by three runners whose clocks are 50 ms behind, 3 s behind and 3 s ahead of the trainer's;
    each takes one rollout at a time, so all three serve it, and every rollout's rewards land on their calls."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    store = store_process(port)
    client = agl.LightningStoreClient(url)
    runners: list[subprocess.Popen[str]] = []
    try:
        await wait_healthy(url, process=store)
        for shift in SHIFTS:
            command = [str(FAKETIME), "-f", shift, sys.executable, "-m", "app.faces.cli", "runner", "--store", url]
            runners.append(
                subprocess.Popen(
                    [*command, "-n", "1", "--concurrency", "1", "--agent", AGENT],
                    cwd=ROOT,
                    env=cli_env(),
                    text=True,
                    start_new_session=True,  # faketime passes no signal on: stopped as a group
                )
            )

        async def all_runners_polling() -> bool:
            return len(await client.query_workers()) == len(SHIFTS)

        await until(all_runners_polling, "the three runners did not all reach the store")
        run = tmp_path / "run"
        settings = [
            f"log_path={run}", f"agent={AGENT}", f"store_url={url}", "n_runners=0", "batch_size=3", "group_size=4",
            "max_tokens=4", "warm_start.steps=0", "eval_every=0", "save_every=0", "max_batches=2",
            "rollout_timeout_s=60", "save_rollouts=true", "remove_constant_reward_groups=false", "keep_rollouts=true",
        ]  # fmt: skip
        summary = await train(load_config(None, settings).unwrap())

        assert summary.end_batch == 2
        rollouts = [json.loads(line) for line in (run / ROLLOUTS_FILE).read_text().splitlines()]
        assert len(rollouts) == 24 and all(r["status"] == "succeeded" for r in rollouts)
        for rollout in rollouts:
            rewards = [t["reward"] for t in rollout["transitions"]]
            assert len(rewards) == 2, rollout["rollout_id"]
            assert rewards[0] in FIRST_TURN_REWARDS and rewards[1] in SECOND_TURN_REWARDS, rewards
        for line in batch_lines(run):
            assert line["rollouts/n_without_reward"] == 0
            assert line["rewards/n_before_first_call"] == 0 and line["rewards/n_order_unknown"] == 0
        served_by = [await client.get_latest_attempt(r["rollout_id"]) for r in rollouts]
        workers = {attempt.worker_id for attempt in served_by if attempt is not None}
        assert len(workers) == len(SHIFTS), f"not every clock served the run: {workers}"
    finally:
        await client.close()
        for runner in runners:
            stop_group(runner)
        stop(store)
