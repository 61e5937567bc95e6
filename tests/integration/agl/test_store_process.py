"""The run's store served from a process of its own (``store_process=true``): it trains, it ends with the run,
it requires the run's token, and it comes back when it dies."""

from __future__ import annotations

import os
import signal
import urllib.error
import urllib.request
from pathlib import Path

import psutil
import pytest

from adapters.agl.store_process import StoreProcess
from adapters.runner.protocol import FORK_SERVER_MODULE
from app.config import load_config
from app.launch import free_port, train
from tests.support.runs import assert_batches_trained
from tests.support.waits import HANG_S, until

pytestmark = pytest.mark.slow


def lives_with_this_process(p: psutil.Process) -> bool:
    """Multiprocessing's resource tracker, and the runners' fork server (not the runners forked from it, which
    show its command line too): each lives as long as this process."""
    command = " ".join(p.cmdline())
    return "resource_tracker" in command or (FORK_SERVER_MODULE in command and p.ppid() == os.getpid())


def live_children() -> set[int]:
    """This process's live children, but those that live as long as it does."""
    return {
        p.pid
        for p in psutil.Process().children(recursive=True)
        if p.is_running() and p.status() != psutil.STATUS_ZOMBIE and not lives_with_this_process(p)
    }


async def test_a_run_with_its_store_in_a_process_of_its_own_trains_and_leaves_no_process(tmp_path: Path) -> None:
    cfg = load_config(
        None,
        [
            f"log_path={tmp_path / 'run'}",
            "agent=tests.integration.training_agents:always_seven_agent",
            "store_process=true",
            "n_runners=1",
            "batch_size=2",
            "group_size=4",
            "max_tokens=4",
            "warm_start.steps=5",
            "eval_every=0",
            "save_every=0",
            "max_batches=2",
        ],
    ).unwrap()
    before = live_children()
    summary = await train(cfg)

    assert (summary.start_batch, summary.end_batch) == (0, 2)
    assert_batches_trained(Path(cfg.log_path), 2)
    assert live_children() <= before, "the store or a runner process outlived the run"


def status(url: str, token: str | None) -> int:
    request = urllib.request.Request(url + "/v1/agl/statistics")
    if token is not None:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return int(response.status)
    except urllib.error.HTTPError as error:
        return error.code
    except urllib.error.URLError:
        return 0  # nothing listening (yet)


async def test_the_store_process_requires_the_token_and_is_started_again_when_it_dies() -> None:
    store = StoreProcess(free_port(), "a-secret-token", check_interval_s=0.1).start()
    try:
        assert (status(store.url, None), status(store.url, "a-secret-token")) == (401, 200)
        first = store.pid
        assert first is not None
        os.kill(first, signal.SIGKILL)

        async def back() -> bool:
            return store.pid != first and status(store.url, "a-secret-token") == 200

        await until(back, "the store process was not started again", timeout_s=HANG_S, interval_s=0.2)
        assert store.restarts == 1
    finally:
        store.stop()
    assert store.pid not in live_children(), "the store process outlived stop()"
