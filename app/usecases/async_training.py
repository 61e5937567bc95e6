"""Asynchronous off-policy training: runners keep rolling out while the trainer steps.

tinker-cookbook's async semantics over agent rollouts. Every GRPO group (one task, ``group_size``
rollouts) is rolled out on its own as soon as admission allows: dataset batch ``b`` may start
once the trainer is at step ``b - sampling_steps_ahead`` or later. Each step takes exactly
``groups_per_batch`` finished groups, in the order they finish (a slow group never holds a step
up, and a step never trains part of a group). A group's staleness is the number of policy versions
between the oldest version that sampled it (the endpoint tags each completion) and the step that
trains it; under ``StalenessPolicy.DISCARD`` (the cookbook's) a group more than
``max_steps_off_policy`` behind is dropped and its task rolled out again, under ``ADMIT`` admission
alone bounds it. Sampling logprobs are the sampling version's own, so the importance-sampling and
PPO ratios stay right off-policy; ``optim/ratio_clip_frac`` shows how far the data drifted. Unless
``staleness_lr`` is off, a step's learning rate is divided by 1 + its groups' mean staleness (logged as
``optim/lr``): late gradients overshoot at a rate tuned for fresh data. With
``num_minibatches`` above 1 a step streams (the cookbook's stream minibatch): each substep's groups
are forward-backward'ed in that many equal parts as they arrive, then one optimizer step.

The endpoint swaps weights between requests (a completion is sampled by one version). Evaluation
needs the endpoint at its eval temperature, so it waits until no training rollout is running and
holds new ones until it is done. A checkpoint records the dataset frontier and the groups before it
still in flight; a resumed run rolls those out again and starts new ones from the frontier, so a
crash trains no group twice and loses none. Metrics per step: ``async/staleness_{mean,max}``,
``async/groups_{stale_dropped,requeued}``, ``time/trainer_idle`` (waiting for groups),
``time/rollouts_idle`` (no group rollout running: the runners waited on admission or evaluation),
``async/rollouts_running`` when the step began, and the rollout accounting of the groups trained.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Generic

from app.usecases.group_rollouts import GroupedBatch, GroupRolloutOptions, rollout_groups
from app.usecases.steps import (
    AsyncSettings,
    EmptyStreak,
    TrainingHooks,
    TrainingParts,
    TrainingSummary,
    begin_run,
    checkpoint_due,
    end_step,
    evaluate_and_record,
    finish_run,
    forward_rollouts,
    reached,
    rollout_options,
    save_checkpoint,
    train_step,
    write_transcript,
)
from domain.accounting import BatchAccount, missing_reward_warning
from domain.staleness import StalenessPolicy, staleness_metrics, staleness_scaled_lr, steps_behind
from ports.policy import AdamParams, LogprobScorer, LossName, TrainingDatum
from ports.rollout_store import SpanT
from ports.run_log import TranscriptKind
from ports.trajectory_groups import GroupT, MemberT, TaskGroupT

logger = logging.getLogger(__name__)

GroupKey = tuple[int, int]
"""(dataset batch, group index in it)."""


@dataclass(slots=True)
class _Finished(Generic[TaskGroupT, GroupT]):
    key: GroupKey
    task_group: TaskGroupT
    batch: GroupedBatch[GroupT]
    started_version: int


@dataclass(slots=True)
class _Flow:
    """What the producer and the trainer share."""

    step: int
    version: int
    frontier: int
    """The next dataset batch to start."""
    open_keys: set[GroupKey] = field(default_factory=set)
    """Started and not yet trained (nor dropped for good)."""
    running: int = 0
    """Group rollouts under way right now."""
    idle_since: float | None = None
    """When ``running`` last fell to 0 (None while some run)."""
    idle_s: float = 0.0
    """Seconds with no group rollout running, summed since the last ``take_idle``."""
    rollouts_allowed: asyncio.Event = field(default_factory=asyncio.Event)
    changed: asyncio.Condition = field(default_factory=asyncio.Condition)

    def started_one(self) -> None:
        if self.running == 0 and self.idle_since is not None:
            self.idle_s += time.perf_counter() - self.idle_since
            self.idle_since = None
        self.running += 1

    def ended_one(self) -> None:
        self.running -= 1
        if self.running == 0:
            self.idle_since = time.perf_counter()

    def take_idle(self) -> float:
        """Rollout-idle seconds since the last call (runners had nothing to run: the trainer held them up)."""
        now = time.perf_counter()
        idle = self.idle_s + (now - self.idle_since if self.idle_since is not None else 0.0)
        self.idle_s, self.idle_since = 0.0, (now if self.idle_since is not None else None)
        return idle


async def run_async_training(
    parts: TrainingParts[TaskGroupT, MemberT, GroupT, SpanT], hooks: TrainingHooks | None = None
) -> TrainingSummary:
    """Train from the last checkpoint to the end of the dataset with rollouts running ahead of the trainer."""
    settings = parts.settings
    assert settings.asynchronous is not None, "run_training dispatches here only in async mode"
    config: AsyncSettings = settings.asynchronous
    hooks = hooks or TrainingHooks()
    log = hooks.on_log or logger.info
    begun = await begin_run(parts, hooks, log)
    if isinstance(begun, TrainingSummary):
        return begun
    start, n_batches, reference, schedule = begun.start, begun.n_batches, begun.reference, begun.schedule
    summary = TrainingSummary(start_batch=start, end_batch=n_batches)
    resume = begun.resume
    frontier = resume.frontier if resume is not None and resume.frontier is not None else start
    flow = _Flow(step=start, version=begun.policy_version, frontier=frontier, idle_since=time.perf_counter())
    flow.rollouts_allowed.set()
    finished: asyncio.Queue[_Finished[TaskGroupT, GroupT] | BaseException] = asyncio.Queue()
    resources_id = await parts.store.add_resources({"main_llm": parts.server.as_resource()})
    n_slots = max(1, settings.rollouts.concurrency // max(1, _group_size(parts, start)))
    groups_per_step = config.groups_per_batch or len(parts.dataset.get_batch(start))
    if n_slots < groups_per_step * (1 + config.sampling_steps_ahead):
        log(
            f"concurrency {settings.rollouts.concurrency} lets {n_slots} groups roll out at once; sampling "
            f"{config.sampling_steps_ahead} step(s) ahead of {groups_per_step} groups a step needs "
            f"{groups_per_step * (1 + config.sampling_steps_ahead)}: raise concurrency to overlap more"
        )
    if settings.loss is LossName.IMPORTANCE_SAMPLING and config.max_steps_off_policy + config.sampling_steps_ahead > 0:
        log(
            "async mode with loss_fn=importance_sampling: off-policy ratios are not clipped; if "
            "optim/ratio_clip_frac stays high and the reward does not rise, use loss_fn=ppo"
        )
    group_slots = asyncio.Semaphore(n_slots)
    tasks: set[asyncio.Task[None]] = set()
    n_dataset = len(parts.dataset)

    async def roll(key: GroupKey, task_group: TaskGroupT) -> None:
        try:
            async with group_slots:
                await flow.rollouts_allowed.wait()
                flow.started_one()
                try:
                    started = flow.version
                    batch = await rollout_groups(
                        [task_group],
                        resources_id,
                        key[0],
                        store=parts.store,
                        triplets=parts.triplets,
                        assembler=parts.assembler,
                        mode="train",
                        options=GroupRolloutOptions(
                            rollouts=replace(rollout_options(parts), concurrency=max(1, task_group.num_envs)),
                            remove_constant_reward_groups=settings.remove_constant_reward_groups,
                        ),
                        on_result=forward_rollouts(hooks.on_rollout, parts.rollout_log, key[0], key[1]),
                        first_group=key[1],
                    )
                finally:
                    flow.ended_one()
                    async with flow.changed:
                        flow.changed.notify_all()
            await finished.put(_Finished(key, task_group, batch, started))
        except asyncio.CancelledError:
            raise
        except BaseException as error:  # NoRunners, StoreUnavailable: the trainer re-raises it
            await finished.put(error)

    def spawn(key: GroupKey, task_group: TaskGroupT) -> None:
        flow.open_keys.add(key)
        task = asyncio.create_task(roll(key, task_group), name=f"group-{key[0]}-{key[1]}")
        tasks.add(task)
        task.add_done_callback(tasks.discard)

    async def produce() -> None:
        if resume is not None:
            for b, i in resume.pending:
                spawn((b, i), parts.dataset.get_batch(b)[i])
        while flow.frontier < min(n_batches, n_dataset):
            async with flow.changed:
                await flow.changed.wait_for(lambda: flow.frontier <= flow.step + config.sampling_steps_ahead)
            b = flow.frontier
            for i, task_group in enumerate(parts.dataset.get_batch(b)):
                spawn((b, i), task_group)
            flow.frontier = b + 1

    producer = asyncio.create_task(produce(), name="async-producer")

    async def take(n: int) -> tuple[list[_Finished[TaskGroupT, GroupT]], int]:
        return await _take_groups(finished, flow, config, n, producer, tasks, spawn)

    empty = EmptyStreak(settings.max_empty_batches)
    try:
        for step in range(start, n_batches):
            t_start = time.perf_counter()
            metrics: dict[str, float] = {
                "progress/batch": float(step),
                "progress/done_frac": (step + 1) / n_batches,
                "optim/lr": settings.rate_at(step, schedule),
                "async/rollouts_running": float(flow.running),
            }
            if settings.eval_every > 0 and step % settings.eval_every == 0 and (step > start or settings.eval_on_start):
                await _evaluate_between_rollouts(parts, flow, resources_id, step, metrics, summary, hooks)
                if reached(settings, summary) and step > start:
                    log(f"test reward {summary.reward_after:.3f} reached the target {settings.target_test_reward}")
                    parts.metrics.log_metrics(metrics, step=step)
                    summary.end_batch = n_batches = step
                    break
            if hooks.on_batch_start:
                hooks.on_batch_start(step, sum(_group_sizes(parts, step)))
            t_wait = time.perf_counter()
            streamed: _Streamed[TaskGroupT, GroupT] | None = None
            if config.num_minibatches > 1:
                streamed = await _stream_train(
                    parts, config, groups_per_step, take, reference, flow.version, settings.rate_at(step, schedule)
                )
                taken, dropped = streamed.taken, streamed.dropped
                metrics["time/trainer_idle"] = streamed.waited_s
            else:
                taken, dropped = await take(groups_per_step)
                metrics["time/trainer_idle"] = time.perf_counter() - t_wait
            metrics["async/groups_stale_dropped"] = float(dropped)
            metrics["async/groups_requeued"] = float(dropped if config.stale is StalenessPolicy.DISCARD else 0)
            groups = [g for item in taken for g in item.batch.groups]
            await write_transcript(parts, TranscriptKind.TRAIN, step, [s for item in taken for s in item.batch.scored])
            behind = _steps_behind(taken, flow.version)
            metrics.update(staleness_metrics(behind))
            account = BatchAccount.merge([item.batch.account for item in taken])
            metrics.update(account.metrics())
            if groups:
                metrics.update(parts.assembler.batch_metrics(groups, [item.task_group for item in taken]))
            stop = empty.record(step, account)
            if (warning := missing_reward_warning(step, account)) is not None:
                log(f"warning: {warning}")

            t_train = time.perf_counter()
            if streamed is not None:
                metrics.update(streamed.metrics)
            elif groups:
                lr = _learning_rate(settings.rate_at(step, schedule), config, behind)
                step_settings = replace(settings, learning_rate=lr)
                _data, train_metrics = await train_step(parts.trainer, parts.data, step_settings, groups, reference)
                metrics.update(train_metrics)
                metrics["optim/lr"] = lr
            if groups:
                flow.version = parts.server.set_sampler(await parts.trainer.sampler(f"batch-{step + 1:06d}"))
            else:
                log(f"step {step}: nothing to train ({account.describe()})")
            metrics["time/train"] = time.perf_counter() - t_train + (streamed.trained_s if streamed else 0.0)
            flow.open_keys.difference_update(item.key for item in taken)
            async with flow.changed:
                flow.step = step + 1
                flow.changed.notify_all()

            done = step + 1
            if not stop and checkpoint_due(settings, done, n_batches):
                pending = sorted(k for k in flow.open_keys if k[0] < flow.frontier)
                await save_checkpoint(
                    parts.trainer,
                    parts.checkpoints,
                    f"{done:06d}",
                    done,
                    frontier=flow.frontier,
                    pending=pending,
                    schedule=schedule,
                )
            metrics.update(parts.server.take_metrics())
            metrics.update(parts.triplets.take_metrics())
            metrics["time/rollouts_idle"] = flow.take_idle()
            metrics["time/total"] = time.perf_counter() - t_start
            # Rollouts finished per second of this step (sync mode's figure is per second of sampling).
            metrics["rollouts/per_s"] = account.n_enqueued / max(metrics["time/total"], 1e-9)
            end_step(parts, hooks, empty, step, metrics, stop)
    finally:
        producer.cancel()
        for task in list(tasks):
            task.cancel()
        await asyncio.gather(producer, *tasks, return_exceptions=True)
    return await finish_run(parts, summary, empty, start, n_batches, hooks, schedule)


@dataclass(slots=True)
class _Streamed(Generic[TaskGroupT, GroupT]):
    """One step trained minibatch by minibatch as its groups came in."""

    taken: list[_Finished[TaskGroupT, GroupT]]
    dropped: int
    metrics: dict[str, float]
    waited_s: float
    """Waiting for groups (the trainer's idle time)."""
    trained_s: float
    """Building datums, forward-backward and optimizer steps."""


async def _stream_train(
    parts: TrainingParts[TaskGroupT, MemberT, GroupT, SpanT],
    config: AsyncSettings,
    groups_per_step: int,
    take: Callable[[int], Awaitable[tuple[list[_Finished[TaskGroupT, GroupT]], int]]],
    reference: LogprobScorer | None,
    version: int,
    rate: float,
) -> _Streamed[TaskGroupT, GroupT]:
    """The cookbook's stream minibatch: each substep's groups in ``num_minibatches`` equal parts, each part
    forward-backward'ed as soon as its groups are in, then one optimizer step for the substep.

    Gradients add up across a substep's forward-backward calls (the losses are sums), so a substep
    trains on the same data as the unstreamed step; only advantages' KL shaping is per minibatch, as
    in the cookbook. The policy version does not change within the step (the sampler is published
    after it), so staleness is judged against one version throughout.
    """
    settings = parts.settings
    per_minibatch = max(1, groups_per_step // settings.num_substeps // config.num_minibatches)
    taken: list[_Finished[TaskGroupT, GroupT]] = []
    dropped = 0
    waited = trained = 0.0
    data_D: list[TrainingDatum] = []
    logprobs_D: list[tuple[float, ...]] = []
    prepared: list[dict[str, float]] = []
    substeps: list[dict[str, float]] = []
    rates: list[float] = []
    for _ in range(settings.num_substeps):
        passes: list[dict[str, float]] = []
        substep_items: list[_Finished[TaskGroupT, GroupT]] = []
        for _ in range(config.num_minibatches):
            t_wait = time.perf_counter()
            items, n_dropped = await take(per_minibatch)
            t_train = time.perf_counter()
            waited += t_train - t_wait
            taken.extend(items)
            substep_items.extend(items)
            dropped += n_dropped
            groups = [g for item in items for g in item.batch.groups]
            if groups:
                minibatch_D, minibatch_metrics = await parts.data.rl_data(groups, settings.kl, reference)
                prepared.append(minibatch_metrics)
                if minibatch_D:
                    output = await parts.trainer.forward_backward(minibatch_D, settings.loss)
                    data_D.extend(minibatch_D)
                    logprobs_D.extend(output.logprobs_D)
                    passes.append(dict(output.metrics))
            trained += time.perf_counter() - t_train
        if passes:
            t_train = time.perf_counter()
            lr = _learning_rate(rate, config, _steps_behind(substep_items, version))
            rates.append(lr)
            optim = await parts.trainer.optim_step(AdamParams(learning_rate=lr))
            substeps.append(
                {f"optim/{k}": v for k, v in {**_sum_passes(passes, parts.data.mean_metrics), **optim}.items()}
            )
            trained += time.perf_counter() - t_train
    metrics = parts.data.mean_metrics(prepared)
    metrics.update(parts.data.mean_metrics(substeps))
    if data_D:
        metrics.update(parts.data.sample_train_kl(data_D, logprobs_D))
    metrics["optim/n_datums"] = float(len(data_D))
    metrics["optim/n_minibatches"] = float(len(prepared))
    if rates:
        metrics["optim/lr"] = sum(rates) / len(rates)
    return _Streamed(taken, dropped, metrics, waited, trained)


def _steps_behind(taken: Sequence[_Finished[TaskGroupT, GroupT]], version: int) -> list[int]:
    """Versions behind ``version`` of each taken group (its oldest completion's, else when it started)."""
    return [
        steps_behind(version, oldest if oldest is not None else item.started_version)
        for item in taken
        for oldest in item.batch.oldest_versions
    ]


def _learning_rate(learning_rate: float, config: AsyncSettings, behind: Sequence[int]) -> float:
    """The step's rate: scaled down by its groups' staleness unless ``config.staleness_lr`` is off."""
    return staleness_scaled_lr(learning_rate, behind) if config.staleness_lr else learning_rate


def _sum_passes(
    passes: Sequence[Mapping[str, float]], mean: Callable[[Sequence[Mapping[str, float]]], dict[str, float]]
) -> dict[str, float]:
    """One substep's forward-backward metrics: ``:sum`` metrics add up over its passes, others are averaged."""
    sums = {k for p in passes for k in p if k.endswith(":sum")}
    summed = {k: sum(p.get(k, 0.0) for p in passes) for k in sums}
    return {**mean([{k: v for k, v in p.items() if not k.endswith(":sum")} for p in passes]), **summed}


async def _take_groups(
    finished: asyncio.Queue[_Finished[TaskGroupT, GroupT] | BaseException],
    flow: _Flow,
    config: AsyncSettings,
    n: int,
    producer: asyncio.Task[None],
    tasks: set[asyncio.Task[None]],
    spawn: Callable[[GroupKey, TaskGroupT], None],
) -> tuple[list[_Finished[TaskGroupT, GroupT]], int]:
    """The next ``n`` finished groups that are fresh enough (fewer when the dataset runs out), and how many were
    dropped as stale (each one's task is rolled out again)."""
    taken: list[_Finished[TaskGroupT, GroupT]] = []
    dropped = 0
    while len(taken) < n:
        if finished.empty() and not tasks and producer.done():
            if producer.exception() is not None:
                raise producer.exception()  # type: ignore[misc]
            break
        item = await _next(finished, producer, tasks)
        if item is None:
            continue
        if isinstance(item, BaseException):
            raise item
        oldest = [v for v in item.batch.oldest_versions if v is not None]
        sampled = min(oldest) if oldest else item.started_version
        stale = steps_behind(flow.version, sampled) > config.max_steps_off_policy
        if config.stale is StalenessPolicy.DISCARD and stale:
            dropped += 1
            logger.info("group %s is %d versions behind: rolled out again", item.key, flow.version - sampled)
            spawn(item.key, item.task_group)
            continue
        taken.append(item)
    return taken, dropped


async def _next(
    finished: asyncio.Queue[_Finished[TaskGroupT, GroupT] | BaseException],
    producer: asyncio.Task[None],
    tasks: set[asyncio.Task[None]],
) -> _Finished[TaskGroupT, GroupT] | BaseException | None:
    """The next finished group, or None when the producer ended meanwhile (so the caller re-checks)."""
    getter = asyncio.ensure_future(finished.get())
    waiters: set[asyncio.Future[object]] = {getter}  # type: ignore[arg-type]
    if not producer.done():
        waiters.add(producer)  # type: ignore[arg-type]
    elif not tasks:
        waiters.add(asyncio.ensure_future(asyncio.sleep(0.05)))
    await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
    if getter.done():
        return getter.result()
    getter.cancel()
    return None


async def _evaluate_between_rollouts(
    parts: TrainingParts[TaskGroupT, MemberT, GroupT, SpanT],
    flow: _Flow,
    resources_id: str,
    step: int,
    metrics: dict[str, float],
    summary: TrainingSummary,
    hooks: TrainingHooks,
) -> None:
    """Hold new training rollouts, wait for the running ones, evaluate, let them go again."""
    flow.rollouts_allowed.clear()
    try:
        async with flow.changed:
            await flow.changed.wait_for(lambda: flow.running == 0)
        await evaluate_and_record(parts, resources_id, step, metrics, summary, hooks)
    finally:
        flow.rollouts_allowed.set()


def _group_sizes(parts: TrainingParts[TaskGroupT, MemberT, GroupT, SpanT], batch: int) -> Sequence[int]:
    if batch >= len(parts.dataset):
        return [0]
    return [g.num_envs for g in parts.dataset.get_batch(batch)]


def _group_size(parts: TrainingParts[TaskGroupT, MemberT, GroupT, SpanT], batch: int) -> int:
    return max(_group_sizes(parts, batch))
