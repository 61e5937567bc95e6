"""The training loop through the real pipeline: embedded store served over HTTP, runner processes,
the LLMProxy endpoint over the local backend, the tracer, reconstruction, cookbook datums."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from adapters.files.run_log import CHECKPOINTS_FILE, METRICS_FILE, ROLLOUTS_FILE
from app.config import TrainConfig, load_config
from app.faces.report import write_transcript_index
from app.launch import train
from app.usecases.steps import REWARD_KEY, NothingToTrain, TrainingHooks
from ports.run_log import TRANSCRIPTS_DIR
from tests.support.cli import cli, cli_process
from tests.support.processes import stop
from tests.support.runs import assert_batches_trained, batch_lines, metrics_lines
from tests.support.stores import free_port, store_process, wait_healthy
from tests.support.waits import HANG_S, wait_until

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]


def rollout_lines(run: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (run / ROLLOUTS_FILE).read_text().splitlines()]


def config(tmp_path: Path, **overrides: Any) -> TrainConfig:
    base = [
        f"log_path={tmp_path / 'run'}",
        "agent=tests.integration.training_agents:always_seven_agent",
        "n_runners=2",
        "batch_size=4",
        "group_size=8",
        "max_tokens=4",
        "learning_rate=1e-2",
        "warm_start.steps=40",
        "eval_every=0",
        "save_every=0",
        "rollout_timeout_s=60",
    ]
    return load_config(None, base + [f"{k}={v}" for k, v in overrides.items()]).unwrap()


async def test_the_reward_rises_through_the_real_pipeline(tmp_path: Path) -> None:
    cfg = config(tmp_path, max_batches=12, seed=1, kl_penalty_coef=0, save_rollouts="true")
    summary = await train(cfg)

    rewards = [m[REWARD_KEY] for m in batch_lines(Path(cfg.log_path))]
    assert summary.end_batch == len(rewards) == 12
    first, last = sum(rewards[:3]) / 3, sum(rewards[-3:]) / 3
    assert first < 0.5, rewards
    assert last > first + 0.3, rewards
    assert all(m["optim/n_datums"] > 0 for m in batch_lines(Path(cfg.log_path)))
    # Every rollout trained on is on disk, as rebuilt: per batch, its rewards average to the logged reward.
    saved = rollout_lines(Path(cfg.log_path))
    assert [sum(1 for r in saved if r["batch"] == b) for b in range(12)] == [32] * 12
    for b, reward in enumerate(rewards):
        batch = [r for r in saved if r["batch"] == b]
        assert sum(r["total_reward"] for r in batch) / 32 == pytest.approx(reward)
    for r in saved:
        (turn,) = r["transitions"]
        assert r["status"] == "succeeded" and turn["ob"] and 1 <= len(turn["ac"]) == len(turn["logprobs"]) <= 4


def sampled_by_prompt(run: Path) -> dict[tuple[int, tuple[int, ...]], list[tuple[int, ...]]]:
    """Per (batch, prompt): the tokens its rollouts sampled, sorted (the log holds them in finishing order)."""
    sampled: dict[tuple[int, tuple[int, ...]], list[tuple[int, ...]]] = {}
    for r in rollout_lines(run):
        (turn,) = r["transitions"]
        sampled.setdefault((r["batch"], tuple(turn["ob"])), []).append(tuple(turn["ac"]))
    return {key: sorted(acs) for key, acs in sampled.items()}


async def test_two_runs_with_the_same_seed_sample_the_same_tokens(tmp_path: Path) -> None:
    """Two runner processes run 32 rollouts at once, whose requests reach the endpoint in a different order each
    run: every rollout's seed comes from the run's seed and its place in the batch, so the runs sample alike."""
    runs = [
        config(tmp_path / name, max_batches=2, save_rollouts="true", kl_penalty_coef=0, **{"warm_start.steps": 0})
        for name in ("first", "second")
    ]
    for cfg in runs:
        await train(cfg)

    first, second = (sampled_by_prompt(Path(cfg.log_path)) for cfg in runs)
    assert sum(len(acs) for acs in first.values()) == 2 * 32
    assert first == second
    assert len({ac for acs in first.values() for ac in acs}) > 8, "rollouts sample from seeds of their own"


async def test_an_interrupted_run_resumes_at_its_checkpoint_without_repeating_trained_batches(tmp_path: Path) -> None:
    resumable = {"save_every": 2, "save_rollouts": "true", "eval_every": 2, "lr_schedule": "linear"}
    cfg = config(tmp_path, max_batches=4, **resumable)

    def crash(i_batch: int, _n: int) -> None:
        if i_batch == 3:
            raise RuntimeError("simulated crash")

    with pytest.raises(RuntimeError, match="simulated crash"):
        await train(cfg, TrainingHooks(on_batch_start=crash))
    run = Path(cfg.log_path)
    records = [json.loads(line) for line in (run / CHECKPOINTS_FILE).read_text().splitlines()]
    assert [r["batch"] for r in records] == [2]
    assert records[0]["lr_schedule_ends"] == [4]
    # Batch 2 ran after the checkpoint; batch 3 was killed midway: some of its rollouts, its page and metrics
    # were written (the last rollout line torn), and `agl-tinker report` had indexed the pages.
    pages = run / TRANSCRIPTS_DIR
    assert [r["batch"] for r in rollout_lines(run)].count(2) == 32 and (pages / "train-000002.html").is_file()
    killed = [{**r, "batch": 3} for r in rollout_lines(run)[:10]]
    with open(run / ROLLOUTS_FILE, "a") as file:
        file.write("".join(json.dumps(r) + "\n" for r in killed) + '{"batch": 3, "group": null, "rollout_id": "r')
    (pages / "train-000003.html").write_text("killed")
    with open(run / METRICS_FILE, "a") as file:
        file.write(json.dumps({"step": 3, "progress/batch": 3}) + "\n")
    assert write_transcript_index(run) is not None

    summary = await train(cfg)

    assert (summary.start_batch, summary.end_batch) == (2, 4)
    assert [json.loads(line)["batch"] for line in (run / CHECKPOINTS_FILE).read_text().splitlines()] == [2, 4]
    # Batch 2 ran before the crash, after the checkpoint: it is redone (its update was lost), nothing else is,
    # and what it and batch 3 left in metrics.jsonl, rollouts.jsonl and transcripts/ is dropped on resume.
    assert [m["progress/batch"] for m in batch_lines(run)] == [0, 1, 2, 3]
    assert [r["batch"] for r in rollout_lines(run)] == [b for b in range(4) for _ in range(32)]
    assert sorted(p.name for p in pages.iterdir()) == [f"{kind}-{b:06d}.html" for kind, b in PAGES_OF_4]
    assert (pages / "train-000003.html").read_text() != "killed"
    assert not list(run.glob("*.tmp"))
    final_state = json.loads((Path(records[0]["state_path"]).parent / "final" / "state.json").read_text())
    assert final_state["steps"] == cfg.warm_start.steps + 4
    again = await train(cfg)
    assert (again.start_batch, again.end_batch) == (4, 4)

    # A larger max_batches continues the finished run from its final checkpoint, every step logged once, its
    # linear rate decaying from the last batch's (1/4 of the base) over the 2 new batches instead of jumping up.
    extended = await train(config(tmp_path, max_batches=6, **resumable))
    assert (extended.start_batch, extended.end_batch) == (4, 6)
    lines = batch_lines(run)
    assert [m["progress/batch"] for m in lines] == [0, 1, 2, 3, 4, 5]
    rates = [1, 3 / 4, 1 / 2, 1 / 4, 1 / 4, 1 / 8]
    assert [m["optim/lr"] for m in lines] == pytest.approx([cfg.learning_rate * r for r in rates])
    assert all(m["optim/learning_rate"] == pytest.approx(m["optim/lr"]) for m in lines), "the optimizer's rate"
    assert [r["batch"] for r in rollout_lines(run)] == [b for b in range(6) for _ in range(32)]
    assert sorted(p.name for p in pages.glob("eval-*")) == [f"eval-{b:06d}.html" for b in (0, 2, 4, 6)]
    final_state = json.loads((Path(records[0]["state_path"]).parent / "final" / "state.json").read_text())
    assert final_state["steps"] == cfg.warm_start.steps + 6


PAGES_OF_4 = sorted([("eval", 0), ("eval", 2), ("eval", 4), *(("train", b) for b in range(4))])


@pytest.mark.fault
async def test_a_run_whose_agent_always_fails_stops_loudly_and_logs_every_rollout(tmp_path: Path) -> None:
    """an agent that raises on every rollout -> the run stops with one line naming the failures, exit 1"""
    cfg = config(
        tmp_path, agent="tests.integration.training_agents:failing_agent", max_batches=5, max_empty_batches=2,
        n_runners=1, rollout_timeout_s=30, save_rollouts="true", **{"warm_start.steps": 0},
    )  # fmt: skip
    with pytest.raises(NothingToTrain) as raised:
        await train(cfg)

    message = str(raised.value)
    assert "\n" not in message
    assert message.startswith(
        "2 consecutive batches had no trainable rollout (batch 1: all 32 rollouts failed); "
        "the runners' first logged error: rollout "
    )
    assert ": the agent raised: TypeError: boom on " in message
    run = Path(cfg.log_path)
    lines = batch_lines(run)
    assert [m["progress/batch"] for m in lines] == [0, 1]
    for m in lines:
        assert m["rollouts/n_enqueued"] == m["rollouts/n_failed"] == m["rollouts/n_excluded"] == 32
        assert (m["groups/n_kept"], m["groups/n_dropped_no_trainable"]) == (0, 4)
        assert REWARD_KEY not in m
        assert not any(key.startswith("env/") for key in m)
    checkpoints = run / CHECKPOINTS_FILE
    records = [json.loads(line) for line in checkpoints.read_text().splitlines()] if checkpoints.exists() else []
    assert not any(r["final"] for r in records)
    saved = rollout_lines(run)
    assert len(saved) == 64 and {(r["status"], len(r["transitions"])) for r in saved} == {("failed", 0)}


def test_the_cli_reports_a_run_that_never_trained_as_one_error_line(tmp_path: Path) -> None:
    """``max_empty_batches=0`` never stops early, but a run none of whose batches trained is no success."""
    result = cli(
        "train", "agent=tests.integration.training_agents:failing_agent", f"log_path={tmp_path / 'run'}",
        "max_batches=2", "max_empty_batches=0", "n_runners=1", "warm_start.steps=0", "batch_size=2", "group_size=2",
        "eval_every=0", "rollout_timeout_s=30",
    )  # fmt: skip
    assert result.returncode == 1, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(lines) == 1, lines
    assert lines[0].startswith(
        "error: 2 consecutive batches had no trainable rollout (batch 1: all 4 rollouts failed); "
        "the runners' first logged error: rollout "
    )
    assert ": the agent raised: TypeError: boom on " in lines[0]
    # The runner processes log the agent's own traceback (the user's bug); the trainer prints none of its own.
    assert result.stderr.count("Traceback") == result.stderr.count("TypeError: boom on") - 1  # the error line's
    assert "NothingToTrain" not in result.stderr
    assert "trained batches" not in result.stderr


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (["train", "batch_size=0"], 2, "error: invalid config: batch_size: Input should be greater than or equal to 1"),
        (["train", "--config", "nowhere.toml"], 2, "error: config file nowhere.toml does not exist"),
        (["train", "policy.model_path=/nonexistent/model"], 1, "error: no Hugging Face model at /nonexistent/model"),
        (["train", "agent=no.such.module:agent"], 1, "error: cannot load agent 'no.such.module:agent'"),
        (["train", "store_url=http://127.0.0.1:9"], 1, "error: cannot reach the store at http://127.0.0.1:9"),
        (["report", "/nonexistent/run"], 1, "error: no metrics file at /nonexistent/run/metrics.jsonl"),
        (["train", "endpoint_host=0.0.0.0"], 1, "error: binding 0.0.0.0 exposes the policy beyond this machine"),
    ],
)
def test_the_cli_fails_with_one_line_and_an_exit_code(tmp_path: Path, args: list[str], code: int, message: str) -> None:
    result = cli(*args, f"log_path={tmp_path / 'run'}" if args[0] == "train" else "--out=/dev/null")
    assert result.returncode == code, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(lines) == 1 and lines[0].startswith(message), result.stderr
    assert "Traceback" not in result.stderr


def test_sigterm_stops_a_background_training_run_in_order(tmp_path: Path) -> None:
    """``agl-tinker train &`` then ``kill`` mid-run: one error line, exit 143, no traceback, checkpoints intact.

    Started as a shell starts a background job, with SIGINT ignored (so asyncio's own Ctrl-C handling is
    off). SIGTERM used to raise ``KeyboardInterrupt`` wherever the loop was: inside an endpoint request,
    uvicorn logged it as an application error and the run went on to the end."""
    import signal

    run = tmp_path / "run"
    args = [
        f"log_path={run}", "agent=tests.integration.training_agents:always_seven_agent", "n_runners=1",
        "batch_size=4", "group_size=8", "max_tokens=4", "warm_start.steps=2", "eval_every=0", "save_every=1",
        "max_batches=500",
    ]  # fmt: skip
    log = tmp_path / "stderr.txt"
    with log.open("w") as stderr_file:  # a file, not a pipe nobody reads until the end
        process = cli_process(
            "train",
            *args,
            stdout=subprocess.DEVNULL,
            stderr=stderr_file,
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN),
        )
    try:

        def second_checkpoint() -> bool:
            assert process.poll() is None, "the run ended before it was signalled"
            return (run / CHECKPOINTS_FILE).exists() and len((run / CHECKPOINTS_FILE).read_text().splitlines()) >= 2

        wait_until(second_checkpoint, "no second checkpoint", timeout_s=2 * HANG_S)
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=HANG_S)
    finally:
        if process.poll() is None:
            process.kill()
    stderr = log.read_text()

    assert process.returncode == 143, stderr
    errors = [line for line in stderr.splitlines() if line.startswith("error:")]
    assert errors == ["error: terminated (SIGTERM); the same command resumes from the last checkpoint"], stderr
    assert "Traceback" not in stderr and "Task was destroyed" not in stderr, stderr
    records = [json.loads(line) for line in (run / CHECKPOINTS_FILE).read_text().splitlines()]
    assert len(records) < 500
    assert all(Path(r["state_path"]).exists() for r in records)


def test_show_config_prints_the_resolved_settings(tmp_path: Path) -> None:
    result = cli("train", "--show-config", "group_size=3", f"log_path={tmp_path}")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["group_size"] == 3


async def test_distributed_training_with_the_store_and_runners_in_other_processes(tmp_path: Path) -> None:
    """``agl-tinker store`` and ``agl-tinker runner`` as separate processes, the trainer attached by URL."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    store = store_process(port)
    runners = None
    try:
        await wait_healthy(url, process=store)
        runners = cli_process(
            "runner", "--store", url, "-n", "2", "--agent", "tests.integration.training_agents:always_seven_agent"
        )
        cfg = config(tmp_path, store_url=url, n_runners=0, max_batches=2, eval_every=1)
        summary = await train(cfg)

        assert (summary.start_batch, summary.end_batch) == (0, 2)
        assert_batches_trained(Path(cfg.log_path), 2)
        assert len(summary.evals) == 3
    finally:
        for process in (runners, store):
            stop(process)


async def test_the_endpoint_holds_nothing_of_the_rollouts_a_run_trained_and_evaluated(tmp_path: Path) -> None:
    from app.launch import open_run
    from app.usecases.training import run_training

    cfg = config(tmp_path, max_batches=1, eval_every=1, **{"warm_start.steps": 0})
    async with open_run(cfg) as run:
        summary = await run_training(run.parts)
        served = run.endpoint.take_metrics()

        (trained,) = batch_lines(Path(cfg.log_path))
        assert summary.end_batch == 1 and trained["endpoint/capture/recorded"] >= 32
        assert served["endpoint/capture/recorded"] > 0  # the final evaluation's
        assert run.endpoint.rollouts_held == 0


async def test_a_run_without_the_evaluation_on_start_evaluates_only_after_batches(tmp_path: Path) -> None:
    cfg = config(tmp_path, max_batches=2, eval_every=1, eval_on_start="false", **{"warm_start.steps": 0})
    summary = await train(cfg)

    assert [batch for batch, _ in summary.evals] == [1, 2]
    assert summary.reward_before is None and summary.reward_after is not None
    logged = [m["step"] for m in metrics_lines(Path(cfg.log_path)) if "test/env/all/reward/total" in m]
    assert logged == [1, 2]


async def test_one_train_step_moves_the_next_samplers_logprobs_with_the_advantages(tmp_path: Path) -> None:
    """Sample through the endpoint in real agent rollouts, train on the reconstructed datums, and check
    that the weights the endpoint serves next prefer the above-average replies."""
    from app.launch import open_run
    from app.usecases.group_rollouts import GroupRolloutOptions, rollout_groups
    from app.usecases.rollouts import RolloutOptions
    from app.usecases.steps import train_step, warm_start

    # A small step (lr 1e-3) stays in the first-order regime, where the direction is certain; 4 x 16
    # rollouts make a group without any "7" (no mixed group) very unlikely.
    cfg = config(tmp_path, kl_penalty_coef=0, batch_size=4, group_size=16, learning_rate=1e-3)
    async with open_run(cfg) as run:
        parts = run.parts
        await warm_start(parts.trainer, parts.warm_start_data, parts.settings.warm_start)
        old = await parts.trainer.sampler("before")
        parts.server.set_sampler(old)
        resources_id = await parts.store.add_resources({"main_llm": parts.server.as_resource()})
        batch = await rollout_groups(
            parts.dataset.get_batch(0), resources_id, 0, store=parts.store, triplets=parts.triplets,
            assembler=parts.assembler, mode="train",
            options=GroupRolloutOptions(rollouts=RolloutOptions(rollout_timeout_s=60)),
        )  # fmt: skip
        assert batch.account.n_enqueued == batch.account.n_succeeded == 4 * 16
        data, _metrics = await train_step(parts.trainer, parts.data, parts.settings, batch.groups)
        new = await parts.trainer.sampler("after")
        version = parts.server.set_sampler(new)

        moved: list[tuple[float, float]] = []
        for datum in data:
            tokens = [*datum.model_input, datum.target_tokens[-1]]
            before = await old.compute_logprobs(tokens)
            after = await new.compute_logprobs(tokens)
            actions = [i for i, m in enumerate(datum.mask) if m > 0]
            # The sampler's own logprobs of the sampled reply are the ones the datum carries.
            assert [before[i + 1] for i in actions] == pytest.approx([datum.logprobs[i] for i in actions], abs=1e-4)
            delta = sum(after[i + 1] - before[i + 1] for i in actions)  # type: ignore[operator]
            moved.append((datum.advantages[actions[0]], delta))

    assert version == 2
    assert any(a > 0 for a, _ in moved) and any(a < 0 for a, _ in moved), "need a mixed group"
    up = [d for a, d in moved if a > 0]
    down = [d for a, d in moved if a < 0]
    assert sum(up) / len(up) > 0 > sum(down) / len(down)
    assert sum(a * d for a, d in moved) > 0


def test_a_run_whose_rollouts_succeed_without_a_reward_warns_each_batch_and_stops_with_one_error_line(
    tmp_path: Path,
) -> None:
    """An agent that never returns or emits its reward: each batch warns with the share and the causes, and
    ``max_empty_batches`` such batches end the run, exit 1, instead of a run that "trains" on nothing."""
    result = cli(
        "train", "agent=tests.integration.training_agents:forgetful_agent", f"log_path={tmp_path / 'run'}",
        "max_batches=5", "max_empty_batches=2", "n_runners=1", "warm_start.steps=0", "batch_size=2", "group_size=2",
        "eval_every=0", "rollout_timeout_s=30",
    )  # fmt: skip
    assert result.returncode == 1, result.stderr
    output = result.stdout + result.stderr
    warnings = [line for line in output.splitlines() if line.startswith("warning: batch")]
    assert len(warnings) == 2, output
    assert warnings[0].startswith("warning: batch 0: 4 of 4 trainable rollouts carried no reward (the agent neither")
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and errors[0].startswith(
        "error: 2 consecutive batches had no reward (batch 1: 4 rollouts: 4 succeeded, 4 trainable, 4 without reward)"
    ), errors
    assert "agl.emit_reward" in errors[0]
    assert [m["rollouts/n_without_reward"] for m in batch_lines(tmp_path / "run")] == [4.0, 4.0]
