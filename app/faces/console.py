"""The terminal side of the CLI: progress bars, one-line errors, and the long-running servers."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections import Counter
from collections.abc import Coroutine
from pathlib import Path
from typing import Any, TypeVar

import agentlightning as agl
from returns.result import Failure
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from adapters.agl.auth import STORE_TOKEN_ENV, store_token
from adapters.agl.server import project_store_server
from adapters.endpoint.policy_endpoint import EndpointError, is_loopback
from adapters.files.run_log import CHECKPOINTS_FILE, last_checkpoint
from adapters.runner.env_check import check_runner_python
from adapters.runner.processes import RunnerProcesses, remote_first_worker_id
from adapters.tinker.backend import TinkerError
from app.config import TrainConfig
from app.faces.report import write_report, write_transcript_index
from app.launch import LaunchError, open_run, store_launcher_args, train
from app.usecases.rollouts import NoRunners
from app.usecases.steps import REWARD_KEY, NothingToTrain, TrainingHooks, evaluate
from domain.groups import RolloutResult
from ports.rollout_store import StoreUnavailable

EXIT_RUNTIME = 1
EXIT_TERMINATED = 128 + signal.SIGTERM
console = Console(stderr=True)
T = TypeVar("T")

_EXPECTED = (
    LaunchError,
    EndpointError,
    TinkerError,
    NothingToTrain,
    NoRunners,
    StoreUnavailable,
    FileNotFoundError,
    ValueError,
    OSError,
)


def _fail(error: BaseException | str, code: int = EXIT_RUNTIME) -> int:
    console.print(f"[red]error:[/red] {error}", highlight=False, soft_wrap=True)
    return code


class Terminated(Exception):
    """SIGTERM stopped the command; what it had started was torn down first."""

    def __str__(self) -> str:
        return "terminated (SIGTERM)"


def run_until_terminated(main: Coroutine[Any, Any, T]) -> T:
    """``asyncio.run(main)``, where SIGTERM cancels ``main`` and raises ``Terminated`` once it has unwound.

    The cancellation reaches ``main`` at an ``await``, so its ``async with`` blocks close in order on a
    live loop: runner processes stop, then the endpoint and the store, and nothing is left
    to die with a traceback when the loop closes. This holds whatever SIGINT does: a shell starts a
    background job with SIGINT ignored, and then asyncio's own Ctrl-C handling is off. A second SIGTERM
    during the teardown kills the process at once."""

    async def guarded() -> T:
        loop = asyncio.get_running_loop()
        task = asyncio.current_task()
        signalled = False

        def stop() -> None:
            nonlocal signalled
            signalled = True
            loop.remove_signal_handler(signal.SIGTERM)
            if task is not None:
                task.cancel()

        loop.add_signal_handler(signal.SIGTERM, stop)
        try:
            return await main
        except asyncio.CancelledError:
            if signalled:
                raise Terminated from None
            raise
        finally:
            loop.remove_signal_handler(signal.SIGTERM)

    previous = signal.getsignal(signal.SIGTERM)
    try:
        return asyncio.run(guarded())
    finally:
        signal.signal(signal.SIGTERM, previous)


def _hooks(progress: Progress) -> TrainingHooks:
    batches = progress.add_task("batches", total=None)
    rollouts = progress.add_task("rollouts", total=0)
    statuses: Counter[str] = Counter()

    def on_run_start(start: int, n_batches: int) -> None:
        progress.update(batches, total=n_batches, completed=start)

    def on_batch_start(i_batch: int, n: int) -> None:
        statuses.clear()
        progress.update(batches, completed=i_batch)
        progress.reset(rollouts, total=n, description=f"batch {i_batch} rollouts")

    def on_rollout(result: RolloutResult) -> None:
        statuses[result.status] += 1
        progress.advance(rollouts)

    def on_batch_end(i_batch: int, metrics: dict[str, float]) -> None:
        progress.update(batches, completed=i_batch + 1)
        odd = {k: v for k, v in statuses.items() if k != "succeeded"}
        progress.console.print(
            f"batch {i_batch:>3}: train reward {metrics.get(REWARD_KEY, float('nan')):.3f}  "
            f"loss {metrics.get('optim/loss:sum', float('nan')):8.3f}  "
            f"{metrics.get('time/total', float('nan')):.1f}s "
            f"({metrics.get('rollouts/per_s', float('nan')):.0f} rollouts/s)" + (f"  {odd}" if odd else ""),
            highlight=False,
        )

    def on_eval(i_batch: int, metrics: dict[str, float]) -> None:
        reward = metrics.get("test/" + REWARD_KEY, float("nan"))
        progress.console.print(f"[bold]eval before batch {i_batch}: test reward {reward:.3f}[/bold]")

    return TrainingHooks(
        on_run_start=on_run_start,
        on_batch_start=on_batch_start,
        on_rollout=on_rollout,
        on_batch_end=on_batch_end,
        on_eval=on_eval,
        on_log=lambda message: progress.console.print(message, highlight=False),
    )


def run_training_with_progress(config: TrainConfig, *, write_plot: bool = True) -> int:
    """``agl-tinker train``: the run with progress bars; prints reward before/after and writes the plot."""
    started = time.perf_counter()
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    try:  # the bars close before an error line, so that line is the run's last
        with Progress(*columns, console=console, transient=False) as progress:
            summary = run_until_terminated(train(config, _hooks(progress)))
    except Terminated as error:
        return _fail(f"{error}; the same command resumes from the last checkpoint", EXIT_TERMINATED)
    except _EXPECTED as error:
        return _fail(error)
    elapsed = time.perf_counter() - started
    if summary.start_batch >= summary.end_batch:
        console.print(f"run in {config.log_path} is already complete ({summary.end_batch} batches)")
    else:
        console.print(f"trained batches {summary.start_batch}..{summary.end_batch - 1} in {elapsed:.0f}s")
    if summary.reward_before is not None and summary.reward_after is not None:
        console.print(
            f"[bold]test reward: {summary.reward_before:.3f} before -> {summary.reward_after:.3f} after[/bold]"
        )
    elif summary.reward_after is not None:
        console.print(f"[bold]test reward: {summary.reward_after:.3f} after[/bold]")
    if write_plot:
        path = write_report(config.log_path).value_or(None)
        console.print(f"report: {path}" if path is not None else "report: no metrics to plot")
    index = write_transcript_index(config.log_path)
    if index is not None:
        console.print(f"transcripts: {index}")
    return 0


def run_evaluation(config: TrainConfig, checkpoint: str | None) -> int:
    """``agl-tinker eval``: the test-set metrics of a checkpoint, printed as lines of ``key value``."""

    async def go() -> dict[str, float]:
        async with open_run(config) as run:
            parts = run.parts
            path = checkpoint or _last_state(config)
            if path is not None:
                await parts.trainer.load_state(path)
            parts.server.set_sampler(await parts.trainer.sampler("eval"))
            resources_id = await parts.store.add_resources({"main_llm": parts.server.as_resource()})
            return await evaluate(parts, resources_id, 0)

    try:
        metrics = run_until_terminated(go())
    except Terminated as error:
        return _fail(error, EXIT_TERMINATED)
    except _EXPECTED as error:
        return _fail(error)
    if not metrics:
        return _fail(LaunchError("no test tasks configured (test_tasks)"))
    for key in sorted(metrics):
        print(f"{key} {metrics[key]:.6g}")
    return 0


def _last_state(config: TrainConfig) -> str | None:
    record = last_checkpoint(config.log_path)
    if record is None:
        console.print(f"no checkpoint in {Path(config.log_path) / CHECKPOINTS_FILE}: evaluating the initial weights")
        return None
    return record.state_path


def serve_store(host: str, port: int) -> int:
    """``agl-tinker store``: an in-memory store over HTTP until interrupted."""

    token = store_token(generate=not is_loopback(host))

    async def go() -> None:
        launcher_args = store_launcher_args(host, port)
        server = project_store_server(agl.InMemoryLightningStore(), token, launcher_args=launcher_args)
        await server.start()
        console.print(f"store serving at {server.endpoint} (Ctrl-C to stop)")
        if token is not None and not os.environ.get(STORE_TOKEN_ENV):
            # Shown once, on this terminal only: runners and the trainer need it in their environment.
            print(f"store token (export {STORE_TOKEN_ENV}=... on runners and the trainer): {token}", flush=True)
        elif token is not None:
            console.print(f"store requires the token in {STORE_TOKEN_ENV}")
        try:
            await asyncio.Event().wait()
        finally:
            await server.stop()

    try:
        run_until_terminated(go())
    except (KeyboardInterrupt, Terminated):
        return 0
    except (OSError, RuntimeError) as error:
        return _fail(LaunchError(f"cannot serve the store on {host}:{port}: {error}"))
    return 0


def serve_runners(agent: str, store_url: str, n: int, concurrency: int | None, python: str | None = None) -> int:
    """``agl-tinker runner``: ``n`` runner processes on ``store_url`` until interrupted.

    ``concurrency``: rollouts per process (``None``: Agent-lightning's stock one-at-a-time runner);
    ``python``: the interpreter they run under (checked first: ``adapters.runner.env_check``).
    """
    if python is not None:
        checked = check_runner_python(python, agent, stock_runner=concurrency is None)
        if isinstance(checked, Failure):
            return _fail(LaunchError(checked.failure()))
    try:
        runners = RunnerProcesses(
            agent,
            store_url,
            n,
            token=store_token(generate=False),
            concurrency=concurrency,
            python=python,
            first_worker_id=remote_first_worker_id(),
        )
    except ValueError as error:
        return _fail(error)
    with runners:
        each = "one rollout at a time" if concurrency is None else f"up to {concurrency} rollouts at once"
        console.print(f"{n} runner process(es) of {agent}, {each} each, attached to {store_url} (Ctrl-C to stop)")
        try:
            while runners.alive:
                time.sleep(0.5)
        except KeyboardInterrupt:
            return 0
    return _fail(LaunchError("every runner process exited")) if n else 0
