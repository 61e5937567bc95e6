"""The original example's entry points: ``agl.Trainer(algorithm=Tinker(config)).fit``, ``.dev``, the
compat ``Config``/``main``, and runners started the Agent-lightning way serving ``agl-tinker`` training."""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import subprocess
import sys
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import agentlightning as agl
import pytest

from adapters.files.run_log import CHECKPOINTS_FILE
from app.config import TrainConfig, load_config
from app.faces.agl_algorithm import Tinker, TinkerAlgorithm, TinkerDryRun
from app.faces.compat import AGLDatasetBuilder, Config, main
from app.launch import LaunchError, free_port, open_run_on_store
from examples.hello.hello import hello
from tests.support.cli import cli_env
from tests.support.processes import alive, children, stop
from tests.support.runs import metrics_lines
from tests.support.stores import store_process, wait_healthy
from tests.support.waits import until

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
TRAIN = ["0", "007", "1", "2", "3", "4", "5", "6"]
"""Two batches of four; "0" and "007" must reach the agent as these strings."""
VAL = ["100", "0101"]


def config(tmp_path: Path, *overrides: str) -> TrainConfig:
    base = [
        f"log_path={tmp_path / 'run'}",
        "batch_size=4",
        "group_size=4",
        "n_epochs=1",
        "max_tokens=8",
        "learning_rate=1e-3",
        "warm_start.steps=0",
        "eval_every=1",
        "save_every=0",
        "rollout_timeout_s=60",
    ]
    return load_config(None, [*base, *overrides]).unwrap()


def fast_runner() -> agl.LitAgentRunner[Any]:
    """Agent-lightning's runner, polling every 50 ms when idle instead of 5 s."""
    return agl.LitAgentRunner(tracer=agl.AgentOpsTracer(), poll_interval=0.05)


def inputs_by_mode(store: agl.LightningStore) -> dict[str, Counter[Any]]:
    rollouts = asyncio.run(store.query_rollouts())
    by_mode: dict[str, Counter[Any]] = {}
    for rollout in rollouts:
        by_mode.setdefault(str(rollout.mode), Counter())[rollout.input] += 1
    return by_mode


def test_agl_trainer_fit_trains_with_the_loop_on_the_tasks_exactly_as_given(tmp_path: Path) -> None:
    cfg = config(tmp_path)
    store = agl.InMemoryLightningStore(thread_safe=True)
    algorithm = TinkerAlgorithm(cfg)
    trainer = agl.Trainer(algorithm=algorithm, n_runners=2, store=store, port=free_port(), runner=fast_runner())

    trainer.fit(hello, train_dataset=TRAIN, val_dataset=VAL)

    run = Path(cfg.log_path)
    batches = [m for m in metrics_lines(run) if "progress/batch" in m]
    assert [m["progress/batch"] for m in batches] == [0, 1]
    assert all(m["env/all/by_group/frac_status_succeeded"] == 1.0 for m in batches)
    assert all(m["optim/n_datums"] > 0 and m["env/all/reconstruct/kept"] > 0 for m in batches)
    assert algorithm.summary is not None and [b for b, _ in algorithm.summary.evals] == [0, 1, 2]
    records = [json.loads(line) for line in (run / CHECKPOINTS_FILE).read_text().splitlines()]
    assert records[-1]["final"] and records[-1]["batch"] == 2
    assert Path(records[-1]["state_path"]).exists()
    # Every training task once per batch it is in (x group size), every test task once per evaluation.
    assert inputs_by_mode(store) == {"train": Counter({t: 4 for t in TRAIN}), "val": Counter({t: 3 for t in VAL})}


def test_trainer_dev_needs_the_dry_run_which_rolls_each_task_out_once_without_training(tmp_path: Path) -> None:
    cfg = config(tmp_path, "trajectory_source=client")  # the trainer's own adapter reads the agent's spans
    with pytest.raises(TypeError, match="FastAlgorithm"):
        agl.Trainer(algorithm=Tinker(cfg), n_runners=1).dev(hello, TRAIN)
    store = agl.InMemoryLightningStore(thread_safe=True)
    dry_run = TinkerDryRun(cfg)
    trainer = agl.Trainer(algorithm=dry_run, n_runners=2, store=store, port=free_port(), runner=fast_runner())

    trainer.dev(hello, TRAIN[:3], val_dataset=VAL[:1])

    assert dry_run.metrics["dev/train/env/all/by_group/frac_status_succeeded"] == 1.0
    assert dry_run.metrics["dev/train/env/all/reconstruct/kept"] > 0
    assert "test/env/all/reward/total" in dry_run.metrics
    assert inputs_by_mode(store) == {"train": Counter(TRAIN[:3]), "val": Counter(VAL[:1])}
    assert not (Path(cfg.log_path) / CHECKPOINTS_FILE).exists(), "a dry run trains and saves nothing"


async def test_a_store_that_another_thread_would_call_must_be_thread_safe(tmp_path: Path) -> None:
    """The LiteLLM endpoint calls the store from its own thread, and so does a store server; the lean
    endpoint calls it from the loop that owns it."""
    litellm = config(tmp_path, "endpoint_server=litellm")
    server = agl.LightningStoreServer(agl.InMemoryLightningStore(), host="127.0.0.1", port=free_port())
    for cfg, store in ((litellm, agl.InMemoryLightningStore()), (config(tmp_path), server)):
        with pytest.raises(LaunchError, match=r"not thread-safe.*thread_safe=True"):
            async with open_run_on_store(cfg, store, TRAIN, []):
                pass
    async with open_run_on_store(config(tmp_path), agl.InMemoryLightningStore(), TRAIN, []) as run:
        assert run.endpoint.is_running


def test_compat_config_maps_the_original_arguments(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TINKER_API_KEY", raising=False)
    builder = AGLDatasetBuilder(batch_size=3, group_size=5, seed=7, n_epochs=2, train_dataset=TRAIN, val_dataset=VAL)
    cfg = Config(
        learning_rate=2e-4,
        dataset_builder=builder,
        renderer_name="role_colon",
        model_name="Qwen/Qwen3-30B-A3B-Instruct-2507",
        log_path=str(tmp_path / "run"),
        max_tokens=32,
        store_address="http://127.0.0.1:4999",
        overrides=["rollout_timeout_s=30"],
    )
    assert (cfg.batch_size, cfg.group_size, cfg.seed, cfg.n_epochs) == (3, 5, 7, 2)
    assert (cfg.learning_rate, cfg.max_tokens, cfg.rollout_timeout_s) == (2e-4, 32, 30)
    assert (cfg.store_url, cfg.n_runners, cfg.trajectory_source) == ("http://127.0.0.1:4999", 0, "endpoint")
    assert (cfg.policy.backend, cfg.policy.renderer_name, cfg.policy.lora_rank) == ("local", "role_colon", 0)
    assert (cfg.eval_every, cfg.save_every, cfg.concurrency, cfg.kl_penalty_coef) == (20, 20, 16, 0.0)
    written = [json.loads(line) for line in Path(cfg.tasks).read_text().splitlines()]
    assert written == TRAIN and all(isinstance(t, str) for t in written)
    assert [json.loads(line) for line in Path(str(cfg.test_tasks)).read_text().splitlines()] == VAL

    monkeypatch.setenv("TINKER_API_KEY", "tml-unused")
    hosted = Config(
        learning_rate=1e-5, dataset_builder=AGLDatasetBuilder(batch_size=2), renderer_name="qwen3_instruct",
        model_name="Qwen/Qwen3-4B-Instruct-2507", log_path=str(tmp_path / "hosted"),
    )  # fmt: skip
    assert (hosted.policy.backend, hosted.policy.base_model, hosted.policy.lora_rank) == (
        "tinker",
        "Qwen/Qwen3-4B-Instruct-2507",
        32,
    )
    assert hosted.test_split == pytest.approx(0.3), "no validation set: the builder's train_val_split holds out 30%"
    with pytest.raises(ValueError, match="load_checkpoint_path is not supported"):
        Config(
            learning_rate=1e-5, dataset_builder=builder, renderer_name="qwen3_instruct", model_name="m",
            log_path=str(tmp_path / "x"), load_checkpoint_path="tinker://somewhere",
        )  # fmt: skip


@contextlib.asynccontextmanager
async def store_with_agl_runners() -> AsyncIterator[tuple[str, subprocess.Popen[bytes]]]:
    """``agl-tinker store`` and two runners started as an ``agl.Trainer`` in role runner: the URL, the runners."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    env = cli_env(AGENTOPS_LOG_LEVEL="ERROR")
    store = store_process(port, env=env, start_new_session=True)
    runners = subprocess.Popen(
        [sys.executable, "-m", "examples.hello.run_runners", "--store", url, "-n", "2"],
        cwd=ROOT, env=env, start_new_session=True,
    )  # fmt: skip
    try:
        await wait_healthy(url, process=store)
        yield url, runners
    finally:
        for process in (runners, store):
            stop(process, group=True)  # the group this test started: the runners' children too


async def test_compat_main_trains_on_a_store_whose_runners_agent_lightning_started(tmp_path: Path) -> None:
    """``agl-tinker store``, runners as an ``agl.Trainer`` in role runner, the original's ``main`` training."""
    async with store_with_agl_runners() as (url, _runners):
        builder = AGLDatasetBuilder(batch_size=4, group_size=2, seed=1, train_dataset=TRAIN, val_dataset=VAL)
        cfg = Config(
            learning_rate=1e-3, dataset_builder=builder, renderer_name="qwen3_instruct", model_name="Qwen/Qwen3-4B",
            log_path=str(tmp_path / "run"), max_tokens=8, store_address=url, eval_every=0, backend="local",
            overrides=["rollout_timeout_s=60"],
        )  # fmt: skip

        summary = await asyncio.wait_for(main(cfg), 150)

        assert (summary.start_batch, summary.end_batch) == (0, 2)
        batches = [m for m in metrics_lines(Path(cfg.log_path)) if "progress/batch" in m]
        assert [m["progress/batch"] for m in batches] == [0, 1]
        assert all(m["env/all/by_group/frac_status_succeeded"] == 1.0 for m in batches)
        assert all(m["env/all/reconstruct/kept"] > 0 for m in batches), "the runners' spans reached the trainer"
        assert summary.final_checkpoint is not None


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL], ids=["SIGTERM", "SIGKILL"])
async def test_runners_started_the_agent_lightning_way_end_with_their_parent(sig: int) -> None:
    """``agl.Trainer`` in role runner forks its runner processes; a SIGTERM or SIGKILL of it ends them too."""
    async with store_with_agl_runners() as (_url, runners):

        async def started() -> bool:
            return len(children(runners.pid)) == 2

        await until(started, "the two runner processes did not start")
        forked = children(runners.pid)

        runners.send_signal(sig)

        async def ended() -> bool:
            return not any(alive(pid) for pid in forked)

        await until(ended, f"runner processes outlived their parent's signal {sig}")
