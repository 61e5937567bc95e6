"""Faults a multi-hour run meets, through the real pipeline (store, runner processes, endpoint, trainer).

Each test states in its docstring what must happen; ``bench/reliability_table.py`` turns this file
and the other fault tests into the table in ``docs/reliability.md``.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import tempfile
from pathlib import Path

import pytest

from adapters.files.run_log import CHECKPOINTS_FILE
from app.config import TrainConfig, load_config
from app.launch import train
from app.usecases.rollouts import NoRunners
from app.usecases.steps import TrainingHooks
from tests.support.runs import batch_lines
from tests.support.waits import HANG_S

pytestmark = [pytest.mark.slow, pytest.mark.fault]


def config(tmp_path: Path, agent: str, *extra: str) -> TrainConfig:
    return load_config(
        None,
        [
            f"log_path={tmp_path / 'run'}",
            f"agent=tests.integration.fault_agents:{agent}",
            "n_runners=1",
            "batch_size=2",
            "group_size=8",
            "max_tokens=4",
            "warm_start.steps=20",
            "kl_penalty_coef=0",
            "eval_every=0",
            "save_every=0",
            "rollout_timeout_s=60",
            "max_batches=2",
            *extra,
        ],
    ).unwrap()


async def test_a_reward_of_1e30_skips_the_step_instead_of_crashing(tmp_path: Path) -> None:
    """reward 1e30 -> the non-finite step is skipped and counted (optim/skipped_nonfinite), the run finishes."""
    cfg = config(tmp_path, "huge_reward_agent")
    summary = await train(cfg)
    run = Path(cfg.log_path)
    lines = batch_lines(run)
    assert summary.end_batch == 2 and [m["progress/batch"] for m in lines] == [0, 1]
    assert any(m.get("optim/skipped_nonfinite", 0.0) > 0 for m in lines), lines
    assert all(math.isfinite(v) for m in lines for v in m.values() if isinstance(v, float) and v == v)
    assert json.loads((run / CHECKPOINTS_FILE).read_text().splitlines()[-1])["final"] is True


async def test_nan_rewards_are_rejected_and_counted_and_the_rest_trains(tmp_path: Path) -> None:
    """NaN reward -> that turn is rejected as non_finite_reward and counted; the other rollouts train."""
    cfg = config(tmp_path, "nan_reward_agent", "seed=3")
    summary = await train(cfg)
    lines = batch_lines(Path(cfg.log_path))
    assert summary.end_batch == 2
    assert sum(m.get("env/all/reconstruct/rejected/non_finite_reward", 0.0) for m in lines) > 0
    assert all(m["optim/n_datums"] > 0 for m in lines)


async def test_no_secret_reaches_any_file_the_run_writes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """endpoint beyond loopback with a master key, a store token -> neither appears in any file written."""
    key, token = "sk-canary-key-5d1e9a77", "canary-store-token-83b2c4"
    monkeypatch.setenv("AGL_TINKER_MASTER_KEY", key)
    monkeypatch.setenv("AGL_TINKER_STORE_TOKEN", token)
    before = set(Path(tempfile.gettempdir()).glob("*"))
    cfg = config(tmp_path, "keyed_agent", "endpoint_host=0.0.0.0", "max_batches=1")

    summary = await train(cfg)

    assert summary.end_batch == 1
    assert batch_lines(Path(cfg.log_path))[0]["rollouts/n_succeeded"] == 16  # the key worked for the agents
    written = [p for p in Path(cfg.log_path).rglob("*") if p.is_file()]
    written += [p for p in set(Path(tempfile.gettempdir()).glob("*")) - before if p.is_file()]
    assert written
    for path in written:
        data = path.read_bytes()
        assert key.encode() not in data and token.encode() not in data, path
    assert os.environ["AGL_TINKER_MASTER_KEY"] == key


async def test_a_run_whose_runners_all_keep_dying_ends_within_seconds_with_one_line(tmp_path: Path) -> None:
    """every runner killed on every rollout (OOM) -> the run ends soon after its first batch: one NoRunners line

    No final checkpoint is written.
    """
    started: list[int] = []
    cfg = config(tmp_path, "oom_agent", "n_runners=2", "max_batches=5")
    with pytest.raises(NoRunners) as raised:
        hooks = TrainingHooks(on_batch_start=lambda i_batch, _n: started.append(i_batch))
        await asyncio.wait_for(train(cfg, hooks), 2 * HANG_S)  # rollout deadlines of 60 s would take far longer

    message = str(raised.value)
    assert started and len(started) < 5, f"batches {started} started: the run went on without runners"
    assert "\n" not in message and "0 of 2 runner processes alive" in message, message
    checkpoints = Path(cfg.log_path) / CHECKPOINTS_FILE
    assert not checkpoints.exists() or "final" not in checkpoints.read_text()
