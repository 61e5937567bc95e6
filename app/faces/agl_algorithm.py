"""The ``agl.Trainer`` face: an Agent-lightning ``Algorithm`` that trains with this project's loop.

``agl.Trainer(algorithm=TinkerAlgorithm(config), n_runners=N).fit(agent, train_dataset=..., val_dataset=...)``
is how the original example starts training. The trainer serves its store and starts the runners;
the algorithm opens the policy backend and endpoint on that store (``app.launch.open_run_on_store``)
and runs the same loop as ``agl-tinker train`` (``app.usecases.training.run_training``) on the datasets
exactly as given: ``val_dataset`` is the test set, each task rolled out once; none, no evaluation.
With ``trajectory_source=client`` the trainer's adapter reads the agent's spans (policy calls only).
Its ``agent_match`` (``agl.Trainer(adapter=TracerTraceToTriplet(agent_match=...))``) selects the trained
calls for either trajectory source where the config gives no ``agent_match`` (the config's wins). A
``LitAgent``'s ``trained_agents`` is not read here: ``agl.Trainer.fit`` does not hand the agent over.

Settings of the config that the trainer owns instead are not used here: ``store_url``,
``store_port``, ``n_runners``, ``agent``, ``tasks``, ``test_tasks``, ``test_split``.

Importing this module needs only Agent-lightning: the trainer's own modules (``returns``, tinker, torch behind
them) are imported when an algorithm runs, so a runner script in an agent's own environment can import
``end_forked_children_with_this_process`` from here.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator, Sequence
from typing import TYPE_CHECKING, Any

from agentlightning import Algorithm, Dataset, FastAlgorithm, TraceToTripletBase

from adapters.runner.entry import end_forked_children_with_this_process

if TYPE_CHECKING:  # the trainer's side, imported when an algorithm runs (see the module's docstring)
    from app.config import TrainConfig
    from app.launch import Run
    from app.usecases.steps import TrainingHooks, TrainingSummary

__all__ = ["Tinker", "TinkerAlgorithm", "TinkerDryRun", "end_forked_children_with_this_process", "tasks_of"]

logger = logging.getLogger(__name__)


def tasks_of(dataset: Dataset[Any] | None) -> list[Any]:
    """The dataset's tasks in order, untouched (Agent-lightning datasets index, they need not iterate)."""
    if dataset is None:
        return []
    return [dataset[i] for i in range(len(dataset))]


def with_adapter_agent_match(config: TrainConfig, adapter: TraceToTripletBase) -> TrainConfig:
    """``agent_match`` from the trainer's adapter (``TracerTraceToTriplet(agent_match=...)``) where the config has
    none; the config's wins where both are set."""
    given = getattr(adapter, "agent_match", None)
    if not isinstance(given, str):
        return config
    from app.launch import agent_match_from

    return agent_match_from(
        config, given, source="the trainer adapter's agent_match", shown=f"the trainer adapter's {given!r}"
    )


class _OnTrainerStore(Algorithm):
    """What both algorithms share: the run's parts on the trainer's store, adapter and proxy port."""

    def __init__(self, config: TrainConfig) -> None:
        super().__init__()
        self.config = config
        end_forked_children_with_this_process()  # the trainer's runner processes end with it, even on SIGTERM

    def run_config(self) -> TrainConfig:
        """The config, with the trainer's ``llm_proxy`` port when the config names none."""
        proxy = self.get_llm_proxy()
        if self.config.endpoint_port is not None or proxy is None:
            return self.config
        logger.info("the policy endpoint replaces the trainer's llm_proxy, on its port")
        return self.config.model_copy(update={"endpoint_port": proxy.server_launcher_args.port})

    def trainer_adapter(self) -> TraceToTripletBase:
        """The trainer's adapter; it reads the agent's own spans when ``trajectory_source`` is ``client``."""
        adapter = self.get_adapter()
        if not isinstance(adapter, TraceToTripletBase):
            raise TypeError(f"the trainer's adapter is a {type(adapter).__name__}, not a TraceToTripletBase")
        return adapter

    @contextlib.asynccontextmanager
    async def open_run(self, config: TrainConfig, train: Sequence[Any], test: Sequence[Any]) -> AsyncIterator[Run]:
        if not train:
            raise ValueError(f"{type(self).__name__} needs tasks: pass train_dataset to agl.Trainer.fit or dev")
        from app.launch import open_run_on_store

        adapter = self.trainer_adapter()
        config = with_adapter_agent_match(config, adapter)
        async with open_run_on_store(config, self.get_store(), train, test, client_adapter=adapter) as run:
            yield run


class TinkerAlgorithm(_OnTrainerStore):
    """Trains the policy of ``config.policy`` (local or Tinker) on the agent's rollouts.

    ``summary`` holds the run's ``TrainingSummary`` once ``fit`` returns (the algorithm runs in the
    caller's process with Agent-lightning's default client-server strategy).
    """

    def __init__(self, config: TrainConfig, hooks: TrainingHooks | None = None) -> None:
        super().__init__(config)
        self.hooks = hooks
        self.summary: TrainingSummary | None = None

    async def run(self, train_dataset: Dataset[Any] | None = None, val_dataset: Dataset[Any] | None = None) -> None:
        from app.usecases.training import run_training

        async with self.open_run(self.run_config(), tasks_of(train_dataset), tasks_of(val_dataset)) as run:
            self.summary = await run_training(run.parts, self.hooks)


Tinker = TinkerAlgorithm
"""The original example's name (``agl_tinker.algo.Tinker``)."""


class TinkerDryRun(_OnTrainerStore, FastAlgorithm):
    """``agl.Trainer(algorithm=TinkerDryRun(config)).dev(agent, tasks)``: the plumbing without training.

    ``Trainer.dev`` accepts only a ``FastAlgorithm``, which a training run is not. This one rolls
    every training task out once with the current policy (the run's last checkpoint, else the
    initial weights) at the training temperature, and each ``val_dataset`` task once at the eval
    temperature; no train step, no checkpoint. ``metrics`` holds ``dev/train/*`` and ``test/*``.
    """

    def __init__(self, config: TrainConfig) -> None:
        super().__init__(config)
        self.metrics: dict[str, float] = {}

    async def run(self, train_dataset: Dataset[Any] | None = None, val_dataset: Dataset[Any] | None = None) -> None:
        from app.usecases.evaluation import all_task_groups, evaluate_task_groups
        from app.usecases.steps import evaluate

        train = tasks_of(train_dataset)
        once = self.run_config().model_copy(update={"batch_size": max(len(train), 1), "group_size": 1, "n_epochs": 1})
        async with self.open_run(once, train, tasks_of(val_dataset)) as run:
            parts = run.parts
            last = parts.checkpoints.last()
            if last is not None:
                await parts.trainer.load_state(last.state_path)
            parts.server.set_sampler(await parts.trainer.sampler("dev"))
            resources_id = await parts.store.add_resources({"main_llm": parts.server.as_resource()})
            self.metrics = await evaluate_task_groups(
                all_task_groups(parts.dataset),
                resources_id,
                0,
                store=parts.store,
                triplets=parts.triplets,
                assembler=parts.assembler,
                mode="train",
                rollouts=parts.settings.rollouts,
                name="dev/train",
            )
            self.metrics.update(await evaluate(parts, resources_id, 0))
        for key in sorted(self.metrics):
            logger.info("dev: %s = %.4g", key, self.metrics[key])
