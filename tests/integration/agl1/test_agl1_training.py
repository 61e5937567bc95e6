"""Agent-lightning 1.x agents trained through 1.x's real ``agl-server`` and local ``agl-controller``.

The run builds (once, cached) the Python 3.12 environment with agentlightning 1.0.2 and the example's
requirements, starts the server and a controller whose ``agent_url`` is the run's endpoint, and trains on
the tiny local model. Skipped only where no Python 3.12 can be found.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from adapters.agl1.environment import PYTHON_ENV, find_python312
from tests.support.cli import cli_process
from tests.support.processes import alive, children, stop
from tests.support.runs import ROOT, batch_lines
from tests.support.waits import HANG_S

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        find_python312() is None,
        reason=f"Agent-lightning 1.x needs Python 3.12: none found (pyenv's 3.12.1, python3.12, or ${PYTHON_ENV})",
    ),
]

EXAMPLE = ROOT / "examples" / "agl1_multiturn"


def overrides(tmp_path: Path, model_dir: Path, *extra: str) -> list[str]:
    return [
        "agl1.agent=examples.agl1_multiturn.agent:TwoTurnDigits",
        f"agl1.requirements={EXAMPLE / 'requirements.txt'}",
        f"tasks={EXAMPLE / 'tasks.jsonl'}",
        f"log_path={tmp_path / 'run'}",
        f"policy.model_path={model_dir}",
        "batch_size=2",
        "group_size=2",
        "max_tokens=8",
        "warm_start.steps=0",
        "eval_every=0",
        "save_every=0",
        "rollout_timeout_s=60",
        "max_batches=2",
        *extra,
    ]


async def test_a_two_turn_agent_trains_two_batches_each_rollout_one_exact_datum_with_its_reward(
    tmp_path: Path, tiny_model: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from app.config import load_config
    from app.launch import train

    monkeypatch.chdir(ROOT)
    monkeypatch.delenv("AGL_KEY", raising=False)
    cfg = load_config(None, overrides(tmp_path, tiny_model)).unwrap()

    summary = await asyncio.wait_for(train(cfg), 300)

    assert (summary.start_batch, summary.end_batch) == (0, 2)
    lines = batch_lines(tmp_path / "run")
    assert [m["progress/batch"] for m in lines] == [0, 1]
    for m in lines:
        assert m["rollouts/n_enqueued"] == 4
        assert m["env/all/by_group/frac_status_succeeded"] == 1.0
        assert m["rollouts/n_without_reward"] == 0  # every reward event reached its rollout
        assert m["endpoint/capture/recorded"] == 8  # two calls per rollout, each recorded with its rollout id
        assert m["env/all/reconstruct/kept"] == m["env/all/reconstruct/triplets"]  # none rejected
        assert m["reconstruct/merge_ratio"] == 1.0  # each rollout's two turns are one datum
        assert m["endpoint/prefix/extended"] == 4  # turn 2 extended turn 1 token for token
        assert m.get("endpoint/capture/unattributed", 0) == 0
        assert m["env/all/reward/not_null"] == 0.5  # the reward event went to the second call of each rollout
    log = (tmp_path / "run" / "agl1-controller.log").read_text()
    assert log.count("Spawned rollout subprocess") == 8  # one agent process per rollout


async def test_a_streaming_agent_trains_on_what_the_endpoint_served(
    tmp_path: Path, tiny_model: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from app.config import load_config
    from app.launch import train

    monkeypatch.chdir(ROOT)
    agent = "agl1.agent=tests.integration.agl1.agents:Streamer"
    cfg = load_config(None, [*overrides(tmp_path, tiny_model), agent, "max_batches=1"]).unwrap()

    await asyncio.wait_for(train(cfg), 300)

    (line,) = batch_lines(tmp_path / "run")
    assert line["env/all/by_group/frac_status_succeeded"] == 1.0
    assert line["endpoint/capture/recorded"] == 4 and line["rollouts/n_without_reward"] == 0


async def test_a_responses_agent_makes_one_datum_of_its_two_turns(
    tmp_path: Path, tiny_model: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from app.config import load_config
    from app.launch import train

    monkeypatch.chdir(ROOT)
    agent = "agl1.agent=tests.integration.agl1.agents:Responder"
    cfg = load_config(None, [*overrides(tmp_path, tiny_model), agent, "max_batches=1"]).unwrap()

    await asyncio.wait_for(train(cfg), 300)

    (line,) = batch_lines(tmp_path / "run")
    assert line["env/all/by_group/frac_status_succeeded"] == 1.0 and line["rollouts/n_without_reward"] == 0
    assert (line["endpoint/capture/recorded"], line["endpoint/prefix/extended"]) == (8, 4)
    assert line["reconstruct/merge_ratio"] == 1.0


async def test_an_agent_that_exits_1_is_counted_failed(
    tmp_path: Path, tiny_model: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from app.config import load_config
    from app.launch import train
    from app.usecases.steps import NothingToTrain

    monkeypatch.chdir(ROOT)
    agent = "agl1.agent=tests.integration.agl1.agents:Crasher"
    cfg = load_config(None, [*overrides(tmp_path, tiny_model), agent, "max_batches=1"]).unwrap()

    with pytest.raises(NothingToTrain, match="RuntimeError: the agent crashed on purpose"):
        await asyncio.wait_for(train(cfg), 300)

    (line,) = batch_lines(tmp_path / "run")
    assert line["rollouts/n_failed"] == 4 and line["rollouts/n_succeeded"] == 0
    assert "the agent crashed on purpose" in (tmp_path / "run" / "agl1-controller.log").read_text()


async def test_rollouts_a_restarted_server_forgot_are_counted_lost_and_the_run_goes_on(
    tmp_path: Path, tiny_model: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from app.config import load_config
    from app.launch import train

    monkeypatch.chdir(ROOT)
    gate = tmp_path / "gate"
    monkeypatch.setenv("AGL1_TEST_GATE", str(gate))  # the controller's agents inherit it
    agent = "agl1.agent=tests.integration.agl1.agents:Gated"
    cfg = load_config(None, [*overrides(tmp_path, tiny_model), agent]).unwrap()
    run = asyncio.create_task(train(cfg))
    controller_log = tmp_path / "run" / "agl1-controller.log"
    deadline = time.monotonic() + HANG_S
    while not (controller_log.is_file() and controller_log.read_text().count("Spawned rollout subprocess") >= 4):
        assert not run.done() and time.monotonic() < deadline, "no agent started"
        await asyncio.sleep(0.2)

    (server,) = [pid for pid in descendants(os.getpid()) if b"agl-server" in Path(f"/proc/{pid}/cmdline").read_bytes()]
    command = Path(f"/proc/{server}/cmdline").read_bytes().rstrip(b"\0").split(b"\0")
    os.kill(server, signal.SIGKILL)
    while alive(server):
        await asyncio.sleep(0.05)
    env = {**os.environ, "AGL_TINKER_DIE_WITH_PARENT": "1"}
    restarted = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        gate.touch()
        summary = await asyncio.wait_for(run, 300)
    finally:
        stop(restarted, signal.SIGTERM)

    assert summary.end_batch == 2
    first, second = batch_lines(tmp_path / "run")
    assert (first["rollouts/n_other"], first["rollouts/n_succeeded"]) == (4, 0)  # lost with the server's memory
    assert second["rollouts/n_succeeded"] == 4  # the controller went on with the restarted server


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL], ids=["SIGTERM", "SIGKILL"])
def test_the_trainers_end_leaves_no_server_controller_or_agent_behind(
    tmp_path: Path, tiny_model: Path, sig: int
) -> None:
    args = [*overrides(tmp_path, tiny_model), "agl1.agent=tests.integration.agl1.agents:Sleeper", "max_batches=5"]
    trainer = cli_process("train", *args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    controller_log = tmp_path / "run" / "agl1-controller.log"
    try:
        deadline = time.monotonic() + HANG_S
        while not (controller_log.is_file() and controller_log.read_text().count("Spawned rollout subprocess") >= 4):
            assert trainer.poll() is None, "the trainer ended before its agents started"
            assert time.monotonic() < deadline, "no agent started"
            time.sleep(0.2)
        tree = descendants(trainer.pid)
        assert len(tree) >= 6  # agl-server, agl-controller and its four agents

        os.kill(trainer.pid, sig)
        trainer.wait(HANG_S)

        deadline = time.monotonic() + HANG_S
        while any(alive(pid) for pid in tree):
            assert time.monotonic() < deadline, f"left running: {[pid for pid in tree if alive(pid)]}"
            time.sleep(0.1)
    finally:
        stop(trainer, signal.SIGKILL)


def descendants(pid: int) -> list[int]:
    found, frontier = [], [pid]
    while frontier:
        below = [child for parent in frontier for child in children(parent)]
        found += below
        frontier = below
    return found
