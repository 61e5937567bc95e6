"""Composition root of a training run: backend, store, runners, endpoint, datasets, logger.

The one place that binds adapters to the ports: ``open_run`` builds every part from a
``TrainConfig`` (the loop's ``TrainingParts`` plus the concrete endpoint and store behind them) and
tears them down in reverse order; ``train`` runs the loop on them. One-click mode (no ``store_url``) serves an embedded
``InMemoryLightningStore`` on 127.0.0.1 and starts ``n_runners`` runner processes on it;
distributed mode attaches to an ``agl store`` URL where runners from other machines take rollouts
(with ``n_runners=0`` they are watched through the worker records they keep in the store).
``open_run_on_store`` builds the same parts on a store someone else serves and feeds runners to
(``agl.Trainer`` for ``app.faces.agl_algorithm``); ``open_run`` wraps it with its own store and runners.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import logging
import os
import re
import secrets
import socket
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import agentlightning as agl
import httpx
from agentlightning.store.client_server import API_V1_AGL_PREFIX
from agentlightning.utils.server_launcher import PythonServerLauncherArgs
from returns.result import Failure
from tinker_cookbook import renderers
from tinker_cookbook.renderers import get_renderer
from tinker_cookbook.rl.types import TrajectoryGroup
from tinker_cookbook.tokenizer_utils import get_tokenizer
from tinker_cookbook.utils import ml_log
from tinker_cookbook.utils.lr_scheduling import compute_schedule_lr_multiplier

from adapters.agl.auth import STORE_TOKEN_ENV, TokenStoreClient, store_token
from adapters.agl.client_triplets import PolicyCallsOnly
from adapters.agl.server import project_store_server
from adapters.agl.store import AglRolloutStore, AglTripletSource, OutagePolicy
from adapters.agl.store_process import StoreProcess
from adapters.agl.workers import StoreWorkers
from adapters.agl1.environment import ensure_agl1_env
from adapters.agl1.processes import Agl1Controller, Agl1Server, Agl1StartError
from adapters.agl1.store import Agl1Launch, Agl1RolloutStore, ContractMismatch, check_contract
from adapters.cookbook.env import AGLDataset, AGLDummyEnv, AGLDummyEnvGroupBuilder, read_task_file
from adapters.cookbook.groups import CookbookGroups
from adapters.cookbook.smollm2 import register_smollm2_renderer
from adapters.cookbook.training import CookbookTrainingData, chat_datum
from adapters.endpoint.policy_endpoint import MASTER_KEY_ENV, EndpointConfig, PolicyEndpoint
from adapters.endpoint.span_log import RolloutGate, SpanLog, SpanRecorder
from adapters.endpoint.triplets import EndpointTraceToTriplet
from adapters.files.run_log import CookbookMetricsLog, JsonlCheckpointLog, JsonlRolloutLog
from adapters.files.transcripts import HtmlTranscriptLog
from adapters.runner.agent_env import AgentEnvError
from adapters.runner.env_check import check_runner_python
from adapters.runner.processes import RunnerProcesses, load_agent
from adapters.tinker.backend import SessionOutcome
from app.config import DEMO, Agl1Config, TrainConfig
from app.demo import task as demo_task
from app.usecases.rollouts import RolloutOptions
from app.usecases.steps import (
    AsyncSettings,
    TrainingHooks,
    TrainingParts,
    TrainingSettings,
    TrainingSummary,
    WarmStartSettings,
)
from app.usecases.training import run_training
from domain.batching import split_train_val
from domain.chats import Chat, ChatMessage, parse_chats
from domain.sampling import SamplingDefaults
from domain.staleness import StalenessPolicy
from ports.policy import LossName, Trainer
from ports.rollout_store import RolloutStore
from ports.runner_pool import RunnerPool
from ports.training_data import KLPenalty

logger = logging.getLogger(__name__)

STORE_CONNECT_TIMEOUT_S = 10.0


class LaunchError(RuntimeError):
    """A part of the run could not be set up; the message says which and why, in one line."""


@dataclass(frozen=True, slots=True)
class Backend:
    trainer: Trainer
    renderer: renderers.Renderer
    close: Callable[[SessionOutcome], Awaitable[None]] | None = None
    """Releases the backend; told whether the run ended well, failed, or was interrupted."""
    context_length: int | None = None
    """The model's context window, when the backend knows it (prompts beyond it are refused)."""


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def store_launcher_args(host: str, port: int) -> PythonServerLauncherArgs:
    """A store server in a thread of this process, logging only warnings (no per-request lines)."""
    return PythonServerLauncherArgs(
        host=host,
        port=port,
        launch_mode="thread",
        healthcheck_url=API_V1_AGL_PREFIX + "/health",
        log_level=logging.WARNING,
    )


def local_model_dir(config: TrainConfig) -> Path:
    """The configured model directory, a named pretrained model (materialised once per machine from its installed
    package; a directory of the same name comes first), or the tiny offline model (built once under ``log_path``)."""
    if config.policy.model_path is not None:
        name = _pretrained_name(config)
        if name is not None:
            from adapters.local.pretrained import PretrainedUnavailable, pretrained_model_dir

            try:
                return pretrained_model_dir(name)
            except PretrainedUnavailable as error:
                raise LaunchError(f"policy.model_path={name}: {error}") from error
        path = Path(config.policy.model_path).expanduser()
        if not (path / "config.json").is_file():
            raise LaunchError(f"no Hugging Face model at {path} (expected {path / 'config.json'})")
        return path
    from adapters.local import cached_tiny_model

    path = Path(config.log_path) / "tiny-model"
    if not (path / "config.json").is_file():
        policy = config.policy
        cached_tiny_model(
            path, seed=config.seed, echo_steps=policy.tiny_echo_steps, echo_system=policy.tiny_echo_system
        )
    return path


def _pretrained_name(config: TrainConfig) -> str | None:
    """``policy.model_path`` when it names one of ``adapters.local.pretrained``'s models, not a directory."""
    from adapters.local.pretrained import PRETRAINED_MODELS

    name = config.policy.model_path
    if name is None or name not in PRETRAINED_MODELS or (Path(name).expanduser() / "config.json").is_file():
        return None
    return name


def local_renderer_name(config: TrainConfig) -> str:
    """``policy.renderer_name`` when it is set; unset, a named pretrained model's own renderer (whose tokens are
    its chat template's), else the default."""
    name = _pretrained_name(config)
    if "renderer_name" in config.policy.model_fields_set or name is None:
        return config.policy.renderer_name
    from adapters.local.pretrained import pretrained_renderer_name

    return pretrained_renderer_name(name) or config.policy.renderer_name


def _context_length(model_dir: Path) -> int | None:
    """``max_position_embeddings`` of a Hugging Face model directory, if it declares one."""
    try:
        value = json.loads((model_dir / "config.json").read_text()).get("max_position_embeddings")
    except (OSError, ValueError):
        return None
    return value if isinstance(value, int) and value > 0 else None


async def open_backend(config: TrainConfig) -> Backend:
    policy = config.policy
    register_smollm2_renderer()
    if policy.backend == "local":
        from adapters.local import LocalTrainer
        from adapters.local.backend import SHARED_PREFIX_MIN_WORK

        model_dir = local_model_dir(config)
        trainer = LocalTrainer(
            model_dir,
            lora_rank=policy.lora_rank,
            train_unembed=policy.train_unembed,
            seed=config.seed,
            checkpoint_dir=Path(config.log_path) / "checkpoints",
            num_threads=policy.num_threads,
            shared_prefix_min_work={"auto": SHARED_PREFIX_MIN_WORK, "always": 0.0, "never": float("inf")}[
                policy.shared_prefix
            ],
        )
        renderer = get_renderer(local_renderer_name(config), get_tokenizer(str(model_dir)))

        async def close_local(_outcome: SessionOutcome) -> None:
            trainer.close()

        return Backend(trainer=trainer, renderer=renderer, close=close_local, context_length=_context_length(model_dir))
    from adapters.tinker.backend import TinkerConfig, TinkerTrainer

    assert policy.base_model is not None  # checked by PolicyConfig
    tinker_trainer = await TinkerTrainer.connect(
        TinkerConfig(
            base_model=policy.base_model,
            lora_rank=policy.lora_rank,
            train_unembed=policy.train_unembed,
            base_url=policy.base_url,
            seed=config.seed,
            coalesce_window_s=policy.coalesce_window_s,
            unreachable_after_s=policy.unreachable_after_s,
        )
    )
    renderer = get_renderer(policy.renderer_name, get_tokenizer(policy.base_model))
    return Backend(trainer=tinker_trainer, renderer=renderer, close=tinker_trainer.close)


def read_tasks(source: str, config: TrainConfig, *, train: bool) -> list[Any]:
    """The demo's tasks or a task file's, each exactly as written."""
    if source == DEMO:
        return list(demo_task.digit_tasks(config.demo_repeats if train else 1))
    if not Path(source).is_file():
        raise LaunchError(f"task file {source} does not exist")
    try:
        return read_task_file(source)
    except ValueError as error:
        raise LaunchError(str(error)) from error


def split_tasks(config: TrainConfig) -> tuple[list[Any], list[Any]]:
    """Training and test tasks: ``test_tasks`` when given, a ``test_split`` of ``tasks`` when asked, else none.

    The demo's test set (its ten words once each) is implied by ``tasks=demo``.
    """
    train = read_tasks(config.tasks, config, train=True)
    if config.test_tasks is not None:
        return train, read_tasks(config.test_tasks, config, train=False)
    if config.test_split > 0:
        train_idx, test_idx = split_train_val(len(train), train_fraction=1 - config.test_split, seed=config.seed)
        return [train[i] for i in train_idx], [train[i] for i in test_idx]
    if config.tasks == DEMO:
        return train, read_tasks(DEMO, config, train=False)
    return train, []


async def build_datasets(config: TrainConfig) -> tuple[AGLDataset[Any], AGLDataset[Any] | None]:
    """The training batches, and the test set rolled out once per task (``None`` without test tasks)."""
    train, test = split_tasks(config)
    return task_datasets(config, train, test)


def task_datasets(
    config: TrainConfig, train: Sequence[Any], test: Sequence[Any]
) -> tuple[AGLDataset[Any], AGLDataset[Any] | None]:
    """Datasets over tasks given as they are (a config's task files, or ``agl.Trainer.fit``'s datasets)."""
    dataset: AGLDataset[Any] = AGLDataset(
        train, batch_size=config.batch_size, group_size=config.group_size, seed=config.seed, n_epochs=config.n_epochs
    )
    if len(dataset) == 0:
        raise LaunchError(f"{len(train)} training tasks make no batch of {config.batch_size}")
    test_dataset = AGLDataset(test, batch_size=len(test), shuffle=False, group_size=1) if test else None
    return dataset, test_dataset


def warm_start_chats(config: TrainConfig) -> list[Chat]:
    """The supervised warm-start chats: from ``warm_start.file``, the demo's format chats, or none."""
    cfg = config.warm_start
    if cfg.steps == 0:
        return []
    if cfg.file is not None:
        return _read_chats(Path(cfg.file))
    if config.tasks != DEMO:
        return []
    return [Chat(cast(list[ChatMessage], chat)) for chat in demo_task.format_warm_start(seed=config.seed)]


def _read_chats(path: Path) -> list[Chat]:
    if not path.is_file():
        raise LaunchError(f"warm-start file {path} does not exist")
    parsed = parse_chats(path.read_text(), str(path))
    if isinstance(parsed, Failure):
        raise LaunchError(str(parsed.failure()))
    return list(parsed.unwrap())


@contextlib.asynccontextmanager
async def open_store(config: TrainConfig) -> AsyncIterator[tuple[agl.LightningStore, str, str | None]]:
    """The store the loop and the endpoint use, the URL runners attach to, and the token they need.

    The embedded store always requires a token (``AGL_TINKER_STORE_TOKEN`` or one made for this
    run), so nothing else on the machine, not even a stale runner of an earlier run, can use it.
    """
    if config.store_url is not None:
        token = store_token(generate=False)
        # No /health probing between the client's own retries: it logs an ERROR line per failed call, and
        # AglRolloutStore rides out outages itself (one warning when one starts, one when it ends).
        client = TokenStoreClient(config.store_url, token, health_retry_delays=())
        try:
            await asyncio.wait_for(client.query_rollouts(limit=1), STORE_CONNECT_TIMEOUT_S)
        except Exception as error:  # timeout, refused connection, HTTP error: all mean unusable
            await client.close()
            if getattr(error, "status", None) == 401:
                raise LaunchError(
                    f"the store at {config.store_url} refused this run: set {STORE_TOKEN_ENV} to its token"
                ) from error
            raise LaunchError(f"cannot reach the store at {config.store_url}: {type(error).__name__}") from error
        try:
            yield client, config.store_url, token
        finally:
            await client.close()
        return
    if config.store_process:
        async with _store_process(config) as served:
            yield served
        return
    store = agl.InMemoryLightningStore(thread_safe=True)
    token = store_token(generate=True)
    assert token is not None
    launcher_args = store_launcher_args("127.0.0.1", config.store_port or free_port())
    server = project_store_server(store, token, launcher_args=launcher_args)
    try:
        await server.start()
    except RuntimeError as error:
        raise LaunchError(f"cannot serve the store on 127.0.0.1:{server.launcher_args.port}: {error}") from error
    try:
        yield store, server.endpoint, token
    finally:
        await server.stop()


@contextlib.asynccontextmanager
async def _store_process(config: TrainConfig) -> AsyncIterator[tuple[agl.LightningStore, str, str | None]]:
    """The embedded store in a child process; the loop and the endpoint use it over HTTP."""
    token = store_token(generate=True)
    assert token is not None
    port = config.store_port or free_port()
    process = StoreProcess(port, token).spawn()  # from the run's own thread, which outlives the store
    try:
        await asyncio.to_thread(process.wait_ready)
    except RuntimeError as error:
        raise LaunchError(f"cannot serve the store on 127.0.0.1:{port}: {error}") from error
    client = TokenStoreClient(process.url, token, health_retry_delays=())
    try:
        yield client, process.url, token
    finally:
        await client.close()
        await asyncio.to_thread(process.stop)


def open_logger(config: TrainConfig) -> ml_log.Logger:
    """metrics.jsonl (and config.json) through the cookbook's JSON logger; W&B when configured."""
    loggers: list[ml_log.Logger] = [ml_log.JsonLogger(config.log_path)]
    if config.wandb_project:
        loggers.append(
            ml_log.WandbLogger(
                project=config.wandb_project,
                config=config.model_dump(by_alias=True),
                log_dir=config.log_path,
                wandb_name=config.wandb_name,
            )
        )
    ml_logger = ml_log.MultiplexLogger(loggers)
    ml_logger.log_hparams(config.model_dump(by_alias=True))
    return ml_logger


def training_settings(
    config: TrainConfig,
    vocab_size: int | None = None,
    runners: RunnerPool | None = None,
) -> TrainingSettings:
    """The loop's settings from the run's config; ``vocab_size`` (the policy tokenizer's) rejects other models' ids.

    ``runners``: the runner processes this run supervises (their deaths end rollouts at once).
    """
    warm = config.warm_start
    return TrainingSettings(
        log_path=config.log_path,
        learning_rate=config.learning_rate,
        loss=LossName(config.loss_fn),
        num_substeps=config.num_substeps,
        kl=KLPenalty(config.kl_penalty_coef, config.kl_discount_factor),
        remove_constant_reward_groups=config.remove_constant_reward_groups,
        rollouts=RolloutOptions(
            rollout_timeout_s=config.rollout_timeout_s,
            queue_timeout_s=config.queue_timeout_s,
            concurrency=config.concurrency,
            vocab_size=vocab_size,
            runners=runners,
            forget_finished=not config.keep_rollouts,
            # Tinker's sampler serves a seeded request alone (adapters.tinker.coalescing): seeds there would
            # cost the coalesced groups, and its service does not promise the same tokens for a seed anyway.
            sampling_seed=config.seed if config.policy.backend == "local" else None,
        ),
        eval_every=config.eval_every,
        eval_on_start=config.eval_on_start,
        eval_temperature=config.eval_temperature,
        save_every=config.save_every,
        max_batches=config.max_batches,
        target_test_reward=config.target_test_reward,
        warm_start=WarmStartSettings(steps=warm.steps, batch_size=warm.batch_size, learning_rate=warm.learning_rate),
        max_empty_batches=config.max_empty_batches,
        asynchronous=async_settings(config),
        transcript_groups=config.transcript_groups,
        lr_schedule=(
            None
            if config.lr_schedule == "constant"
            else functools.partial(compute_schedule_lr_multiplier, config.lr_schedule)
        ),
    )


def transcript_log(config: TrainConfig, renderer: renderers.Renderer) -> HtmlTranscriptLog | None:
    """The run's transcript pages, decoded with the policy's tokenizer (special tokens kept), unless turned off."""
    if not config.transcripts:
        return None
    tokenizer = renderer.tokenizer

    def decode(tokens: Sequence[int]) -> str:
        return str(tokenizer.decode(list(tokens), skip_special_tokens=False))

    return HtmlTranscriptLog(config.log_path, decode)


def async_settings(config: TrainConfig) -> AsyncSettings | None:
    """The asynchronous mode's settings, or None for the synchronous loop."""
    mode = config.asynchronous
    if not mode.enabled:
        return None
    return AsyncSettings(
        max_steps_off_policy=mode.max_steps_off_policy,
        sampling_steps_ahead=mode.sampling_steps_ahead,
        stale=StalenessPolicy(mode.stale),
        groups_per_batch=mode.groups_per_batch,
        num_minibatches=mode.num_minibatches,
        staleness_lr=mode.staleness_lr,
    )


def trace_adapter(config: TrainConfig, client: agl.TraceToTripletBase | None = None) -> agl.TraceToTripletBase:
    """The adapter that turns a rollout's spans into triplets, per ``trajectory_source``.

    ``client`` reads the agent's own spans (default ``TracerTraceToTriplet``; ``agl.Trainer``'s adapter).
    """
    if config.trajectory_source == "client":
        inner = client or agl.TracerTraceToTriplet()
        return PolicyCallsOnly(inner, EndpointConfig().model_name, agent_match=config.agent_match)
    return EndpointTraceToTriplet(agent_match=config.agent_match)


def agent_match_from(config: TrainConfig, given: str | None, *, source: str, shown: str) -> TrainConfig:
    """``agent_match`` from ``source`` (e.g. the agent's ``trained_agents``) where the config gives none; the
    config's wins where both are set (``shown``: how the warning names the other value). ``ValueError`` when
    ``given`` is not a regular expression."""
    if not given:
        return config
    if config.agent_match is not None:
        if config.agent_match != given:
            logger.warning("agent_match=%r of the config wins over %s", config.agent_match, shown)
        return config
    try:
        re.compile(given)
    except re.error as error:
        raise ValueError(f"{source} {given!r} is not a regular expression: {error}") from None
    logger.info("agent_match=%r from %s", given, source)
    return config.model_copy(update={"agent_match": given})


def with_trained_agents(config: TrainConfig, trained: str | None) -> TrainConfig:
    """``agent_match`` from the agent's ``trained_agents`` (Agent-lightning's deprecated spelling of it)."""
    try:
        return agent_match_from(
            config, trained, source="the agent's trained_agents", shown=f"the agent's trained_agents={trained!r}"
        )
    except ValueError as error:
        raise LaunchError(str(error)) from None


def runner_concurrency(config: TrainConfig) -> int | None:
    """Rollouts per runner process; ``None`` (the stock ``LitAgentRunner``) where the client's own spans are read."""
    return None if config.trajectory_source == "client" else config.runner_concurrency


AglTrainingParts = TrainingParts[AGLDummyEnvGroupBuilder[Any], AGLDummyEnv[Any], TrajectoryGroup, agl.Span]
"""The loop's parts bound to Agent-lightning and tinker-cookbook."""


@dataclass(frozen=True, slots=True)
class Run:
    """An open run: the loop's parts, and the concrete pieces behind them for callers that need them."""

    parts: AglTrainingParts
    endpoint: PolicyEndpoint
    renderer: renderers.Renderer
    store: agl.LightningStore | SpanRecorder
    """The Agent-lightning store the runners and the endpoint use (embedded or a client); for 1.x agents, the
    endpoint's own log of what it served."""


AGL1_KEY_ENV = "AGL_KEY"
"""Agent-lightning 1.x's one key (server, controller, agents): the endpoint requires it from 1.x agents too."""


@dataclass(frozen=True, slots=True)
class StoreSide:
    """What the run's store gives the rest: where the endpoint records, which rollouts it serves, the port the
    loop uses, and the runners started once the endpoint serves (``None``: watched through the 0.x store)."""

    recorder: agl.LightningStore | SpanRecorder
    rollout_store: RolloutStore[agl.Span]
    gate: RolloutGate | None = None
    runners: Callable[[PolicyEndpoint], contextlib.AbstractAsyncContextManager[RunnerPool]] | None = None
    key_env: str | None = None
    """The endpoint requires this variable's key even on loopback (``None``: only off loopback)."""


def check_runner_agent(config: TrainConfig) -> str | None:
    """Load the agent where the runners will run it: here, or in ``runner_python``'s environment (one probe).

    Returns its ``trained_agents`` (None when it has none)."""
    if config.runner_python is None:
        try:
            trained = getattr(load_agent(config.agent), "trained_agents", None)
        except ValueError as error:
            raise LaunchError(str(error)) from error
        return trained if isinstance(trained, str) else None
    checked = check_runner_python(config.runner_python, config.agent, stock_runner=runner_concurrency(config) is None)
    if isinstance(checked, Failure):
        raise LaunchError(checked.failure())
    return checked.unwrap().trained_agents


@contextlib.asynccontextmanager
async def open_run(config: TrainConfig) -> AsyncIterator[Run]:
    """Every part of a run, started in dependency order and stopped in reverse."""
    if config.agl1 is not None:
        async with open_agl1_run(config) as run:
            yield run
        return
    if config.n_runners > 0:
        config = with_trained_agents(config, check_runner_agent(config))
    train_tasks, test_tasks = split_tasks(config)
    async with open_store(config) as (store, url, token):
        if config.n_runners == 0:
            async with open_run_on_store(config, store, train_tasks, test_tasks) as run:
                yield run
            return
        concurrency = runner_concurrency(config)
        local = RunnerProcesses(
            config.agent, url, config.n_runners, token=token, concurrency=concurrency, python=config.runner_python
        )
        async with open_run_on_store(config, store, train_tasks, test_tasks, runners=local) as run:
            with local:
                local.supervise()
                yield run


@contextlib.asynccontextmanager
async def open_agl1_run(config: TrainConfig) -> AsyncIterator[Run]:
    """A run whose agents are Agent-lightning 1.x's: rollouts on ``agl-server`` (started here from the cached 1.x
    environment, or ``agl1.server_url``), agents started by its controller (a local one started here once the
    endpoint serves, with ``agent_url`` on it), calls and rewards recorded by the endpoint in a ``SpanLog``."""
    agl1 = config.agl1
    assert agl1 is not None
    train_tasks, test_tasks = split_tasks(config)
    key = os.environ.get(AGL1_KEY_ENV) or ""
    if agl1.server_url is not None and not key:
        raise LaunchError(f"agl1.server_url: set {AGL1_KEY_ENV} to the server's key")
    previous_key = os.environ.get(AGL1_KEY_ENV)
    key = key or secrets.token_urlsafe(24)
    os.environ[AGL1_KEY_ENV] = key  # the endpoint reads the key it requires from the environment
    try:
        async with _agl1_parts(config, agl1, key, train_tasks, test_tasks) as run:
            yield run
    finally:
        if previous_key is None:
            os.environ.pop(AGL1_KEY_ENV, None)
        else:
            os.environ[AGL1_KEY_ENV] = previous_key


@contextlib.asynccontextmanager
async def _agl1_parts(
    config: TrainConfig, agl1: Agl1Config, key: str, train_tasks: Sequence[Any], test_tasks: Sequence[Any]
) -> AsyncIterator[Run]:
    """The 1.x server (started here unless attached to), the contract check, and the run on its store."""
    log_dir = Path(config.log_path)
    log_dir.mkdir(parents=True, exist_ok=True)
    job_template = None
    if agl1.job_template is not None:
        try:
            job_template = Path(agl1.job_template).read_text()
        except OSError as error:
            raise LaunchError(f"agl1.job_template: cannot read {agl1.job_template}: {error.strerror}") from error
    env = None
    server: Agl1Server | None = None
    if agl1.server_url is None:
        try:
            env = await asyncio.to_thread(ensure_agl1_env, agl1.requirements)
        except AgentEnvError as error:
            raise LaunchError(str(error)) from error
        server = Agl1Server(env, key, log_dir)
    try:
        if server is not None:
            try:
                await asyncio.to_thread(server.start)
            except Agl1StartError as error:
                raise LaunchError(str(error)) from error
        url = server.url if server is not None else str(agl1.server_url)
        headers = {"Authorization": f"Bearer {key}"}
        async with httpx.AsyncClient(base_url=url, headers=headers, timeout=60) as client:
            try:
                await check_contract(client)
            except ContractMismatch as error:
                raise LaunchError(f"agl-server at {url}: {error}") from error
            spans = SpanLog()
            launch = Agl1Launch(
                agent_class=agl1.agent,
                env_map=dict(agl1.env_map),
                job_template=job_template,
                timeout_s=int(config.rollout_timeout_s) + 60,  # the loop's own deadline comes first
            )
            store = Agl1RolloutStore(client, spans, launch, OutagePolicy(config.outage_tolerance_s))

            @contextlib.asynccontextmanager
            async def controller(endpoint: PolicyEndpoint) -> AsyncIterator[RunnerPool]:
                assert env is not None
                local = Agl1Controller(
                    env,
                    key,
                    log_dir,
                    server_url=url,
                    agent_url=endpoint.endpoint.removesuffix("/v1"),
                    max_agents=agl1.max_agents,
                    poll_interval_s=agl1.poll_interval_s,
                    pythonpath=[str(Path.cwd())],
                )
                local.start()
                try:
                    yield local
                finally:
                    await asyncio.to_thread(local.stop)

            side = StoreSide(
                recorder=spans,
                rollout_store=store,
                gate=spans,
                runners=controller if server is not None else None,
                key_env=AGL1_KEY_ENV,
            )
            async with open_run_on_store(config, None, train_tasks, test_tasks, side=side) as run:
                store.policy_version = lambda: run.endpoint.policy_version
                yield run
    finally:
        if server is not None:
            await asyncio.to_thread(server.stop)


def is_thread_safe(store: agl.LightningStore) -> bool:
    """Whether another thread (a store server's, the LiteLLM endpoint's) may call ``store``; a server answers for
    the store it wraps."""
    inner = store.store if isinstance(store, agl.LightningStoreServer) else store
    return bool(inner.capabilities.get("thread_safe", False))


@contextlib.asynccontextmanager
async def open_run_on_store(
    config: TrainConfig,
    store: agl.LightningStore | None,
    train_tasks: Sequence[Any],
    test_tasks: Sequence[Any],
    *,
    client_adapter: agl.TraceToTripletBase | None = None,
    runners: RunnerPool | None = None,
    side: StoreSide | None = None,
) -> AsyncIterator[Run]:
    """A run's backend, endpoint and logger on a store that others serve and feed runners to.

    Starts no store server and no runner (``agl.Trainer`` does both for ``app.faces.agl_algorithm``);
    the tasks are used exactly as given, the test tasks rolled out once each. ``client_adapter``
    reads the agent's spans when ``trajectory_source`` is ``client``; ``runners``, the runner processes the
    caller supervises (``None``: runners elsewhere, watched through the worker records they keep in the store).
    ``side``: another store's parts (Agent-lightning 1.x's), used instead of ``store``'s.
    """
    if side is None:
        if store is None:
            raise LaunchError("a run needs a store")
        rollout_store = AglRolloutStore(
            store, OutagePolicy(config.outage_tolerance_s), forgets_finished=not config.keep_rollouts
        )
        side = StoreSide(recorder=store, rollout_store=rollout_store)
    other_thread = (
        "its HTTP server" if isinstance(store, agl.LightningStoreServer)
        else "the LiteLLM endpoint" if config.endpoint_server == "litellm"
        else None
    )  # fmt: skip
    if other_thread is not None and isinstance(side.recorder, agl.LightningStore) and not is_thread_safe(side.recorder):
        raise LaunchError(
            f"the {type(side.recorder).__name__} is not thread-safe, and {other_thread} calls it from its own thread: "
            "use agl.InMemoryLightningStore(thread_safe=True)"
        )
    Path(config.log_path).mkdir(parents=True, exist_ok=True)
    dataset, test_dataset = task_datasets(config, train_tasks, test_tasks)
    chats = warm_start_chats(config)
    backend = await open_backend(config)
    outcome: SessionOutcome = "success"
    try:
        async with contextlib.AsyncExitStack() as stack:
            defaults = SamplingDefaults(
                max_tokens=config.max_tokens,
                temperature=config.train_temperature,
                top_p=config.top_p,
                top_k=config.top_k,
                max_tokens_limit=max(config.max_tokens, 8192),
                max_prompt_tokens=config.max_prompt_tokens or backend.context_length,
            )
            endpoint = PolicyEndpoint(
                side.recorder,
                backend.renderer,
                EndpointConfig(
                    host=config.endpoint_host,
                    port=config.endpoint_port,
                    defaults=defaults,
                    server=config.endpoint_server,
                    eval_temperature=config.eval_temperature,
                    master_key_env=side.key_env or MASTER_KEY_ENV,
                    require_key=side.key_env is not None,
                ),
                gate=side.gate,
            )
            await stack.enter_async_context(endpoint)
            if runners is None and side.runners is not None:
                runners = await stack.enter_async_context(side.runners(endpoint))
            if runners is None and isinstance(side.recorder, agl.LightningStore):
                watch = StoreWorkers(side.recorder, silence_s=config.worker_silence_s).watch()
                runners = await stack.enter_async_context(watch)
            ml_logger = open_logger(config)
            stack.callback(ml_logger.close)
            parts: AglTrainingParts = TrainingParts(
                settings=training_settings(config, vocab_size=len(backend.renderer.tokenizer), runners=runners),
                trainer=backend.trainer,
                server=endpoint,
                store=side.rollout_store,
                triplets=AglTripletSource(trace_adapter(config, client_adapter)),
                assembler=CookbookGroups(),
                data=CookbookTrainingData(),
                dataset=dataset,
                test_dataset=test_dataset,
                checkpoints=JsonlCheckpointLog(config.log_path),
                metrics=CookbookMetricsLog(ml_logger, config.log_path),
                warm_start_data=[chat_datum(chat, backend.renderer) for chat in chats],
                rollout_log=JsonlRolloutLog(config.log_path) if config.save_rollouts else None,
                transcripts=transcript_log(config, backend.renderer),
            )
            yield Run(parts=parts, endpoint=endpoint, renderer=backend.renderer, store=side.recorder)
    except Exception:
        outcome = "errored"
        raise
    except BaseException:
        outcome = "interrupted"
        raise
    finally:
        if backend.close is not None:
            await backend.close(outcome)


async def train(config: TrainConfig, hooks: TrainingHooks | None = None) -> TrainingSummary:
    """One training run from a config: the facade a trainer embeds."""
    async with open_run(config) as run:
        return await run_training(run.parts, hooks)
