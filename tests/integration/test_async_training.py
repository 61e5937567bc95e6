"""The asynchronous mode through the real pipeline: rollouts for later steps run while the trainer steps.

Same set-up as test_training.py (embedded store over HTTP, concurrent runner processes, the policy
endpoint over the local backend, reconstruction, cookbook datums, local trainer).
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from adapters.files.run_log import CHECKPOINTS_FILE
from app.launch import train
from app.usecases.steps import REWARD_KEY, TrainingHooks
from tests.integration.test_training import batch_lines, cli, config, rollout_lines

pytestmark = pytest.mark.slow

ASYNC = {"async.enabled": "true", "async.sampling_steps_ahead": 1, "async.max_steps_off_policy": 1}
# Twice the sync tests' groups a step: on shared cores most async steps train groups one version behind, at
# half the rate, and with 4 groups the reward sometimes fell to 0 and stayed (no group with a success, so no
# signal); doubling the rate instead made the policy collapse once every group scored 1 (it drifted to "77",
# then "7777"). With 8 groups at 1e-2, four loaded runs of each test rose by 0.83-0.93 in 12 steps.
LEARNING = {"seed": 1, "kl_penalty_coef": 0, "learning_rate": 1e-2, "batch_size": 8}


async def test_async_mode_learns_with_bounded_staleness(tmp_path: Path) -> None:
    cfg = config(tmp_path, max_batches=12, save_rollouts="true", **LEARNING, **ASYNC)
    summary = await train(cfg)

    lines = batch_lines(Path(cfg.log_path))
    rewards = [m[REWARD_KEY] for m in lines]
    assert summary.end_batch == len(rewards) == 12
    first, last = sum(rewards[:3]) / 3, sum(rewards[-3:]) / 3
    assert first < 0.5, rewards
    assert last > first + 0.3, rewards
    assert all(m["optim/n_datums"] > 0 and m["groups/n_kept"] + m["groups/n_dropped_constant"] == 8 for m in lines)
    assert all(m["async/staleness_max"] <= 1 for m in lines)
    assert any(m["async/staleness_max"] == 1 for m in lines), "no group was ever sampled ahead of its step"
    assert all({"optim/ratio_clip_frac", "time/trainer_idle", "time/rollouts_idle"} <= m.keys() for m in lines)
    for m in lines:  # the staleness-aware rate: full on fresh data, halved one version behind
        assert m["optim/lr"] == pytest.approx(cfg.learning_rate / (1 + m["async/staleness_mean"]))
        assert m["optim/learning_rate"] == pytest.approx(m["optim/lr"]), "the optimizer ran at the logged rate"
    saved = rollout_lines(Path(cfg.log_path))
    assert {r["batch"] for r in saved} == set(range(12)) and {r["status"] for r in saved} == {"succeeded"}
    assert all(sum(1 for r in saved if r["batch"] == b) >= 64 for b in range(12))


async def test_stale_groups_are_dropped_and_rolled_out_again(tmp_path: Path) -> None:
    """Sampling two steps ahead but training nothing older than the current policy: the early groups are stale."""
    cfg = config(tmp_path, max_batches=4, **{**ASYNC, "async.sampling_steps_ahead": 2, "async.max_steps_off_policy": 0})
    await train(cfg)

    lines = batch_lines(Path(cfg.log_path))
    assert len(lines) == 4
    assert sum(m["async/groups_stale_dropped"] for m in lines) > 0
    assert all(m["async/staleness_max"] == 0 for m in lines if "async/staleness_max" in m)
    assert all(m["rollouts/n_enqueued"] == 32 for m in lines), "each step trains exactly 4 whole groups of 8"


async def test_an_async_run_resumes_with_its_in_flight_groups_and_no_step_twice(tmp_path: Path) -> None:
    cfg = config(tmp_path, max_batches=4, save_every=2, save_rollouts="true", **ASYNC)

    def crash(step: int, _n: int) -> None:
        if step == 3:
            raise RuntimeError("simulated crash")

    with pytest.raises(RuntimeError, match="simulated crash"):
        await train(cfg, TrainingHooks(on_batch_start=crash))
    run = Path(cfg.log_path)
    (record,) = [json.loads(line) for line in (run / CHECKPOINTS_FILE).read_text().splitlines()]
    assert record["batch"] == 2
    assert 2 <= record["async_frontier"] <= 4
    assert all(b < record["async_frontier"] for b, _ in record["async_pending"])

    summary = await train(cfg)

    assert (summary.start_batch, summary.end_batch) == (2, 4)
    lines = batch_lines(run)
    assert [m["progress/batch"] for m in lines] == [0, 1, 2, 3]
    # The rollouts of the groups in flight at the checkpoint and of those started after it were dropped before
    # they were rolled out again: with no stale group requeued, each group's 8 rollouts are on disk once.
    saved = Counter((r["batch"], r["group"]) for r in rollout_lines(run))
    assert set(saved) == {(b, i) for b in range(4) for i in range(4)}
    if not any(m["async/groups_stale_dropped"] for m in lines):
        assert set(saved.values()) == {8}, saved
    final_state = json.loads((Path(record["state_path"]).parent / "final" / "state.json").read_text())
    assert final_state["steps"] == cfg.warm_start.steps + 4


async def test_stream_minibatches_train_each_part_as_it_arrives_and_learn(tmp_path: Path) -> None:
    """The cookbook's stream minibatch: 8 groups a step in 2 forward-backward passes, one optimizer step."""
    cfg = config(tmp_path, max_batches=12, **LEARNING, **ASYNC, **{"async.num_minibatches": 2})
    summary = await train(cfg)

    lines = batch_lines(Path(cfg.log_path))
    rewards = [m[REWARD_KEY] for m in lines]
    assert summary.end_batch == len(rewards) == 12
    first, last = sum(rewards[:3]) / 3, sum(rewards[-3:]) / 3
    assert last > first + 0.3, rewards
    assert all(m["optim/n_minibatches"] == 2 and m["rollouts/n_enqueued"] == 64 for m in lines)
    assert all(m["optim/lr"] == pytest.approx(m["optim/learning_rate"]) for m in lines)
    assert all(m["optim/lr"] <= cfg.learning_rate for m in lines)
    assert any(m["optim/lr"] < cfg.learning_rate for m in lines), "no step was scaled for stale groups"
    assert all(m["async/staleness_max"] <= 1 for m in lines)
    (final,) = [json.loads(line) for line in (Path(cfg.log_path) / CHECKPOINTS_FILE).read_text().splitlines()]
    state = json.loads((Path(final["state_path"]) / "state.json").read_text())
    assert state["steps"] == cfg.warm_start.steps + 12, "one optimizer step per training step, not per minibatch"


def test_the_cli_trains_in_async_mode_and_prints_each_step(tmp_path: Path) -> None:
    """The console's per-step line reads the async loop's metrics (it once crashed on a missing one)."""
    result = cli(
        "train", "agent=tests.integration.training_agents:always_seven_agent", f"log_path={tmp_path / 'run'}",
        "async.enabled=true", "max_batches=3", "n_runners=1", "warm_start.steps=5", "batch_size=2", "group_size=4",
        "max_tokens=4", "eval_every=0", "rollout_timeout_s=60", timeout=300,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-2000:]
    steps = [line for line in (result.stdout + result.stderr).splitlines() if line.lstrip().startswith("batch ")]
    assert len([s for s in steps if "rollouts/s" in s and "nan rollouts/s" not in s]) == 3, steps
    lines = batch_lines(tmp_path / "run")
    assert [m["progress/batch"] for m in lines] == [0, 1, 2]
    assert all(m["rollouts/per_s"] > 0 for m in lines)
