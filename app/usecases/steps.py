"""The steps both training loops are made of, and what they share: settings, parts, hooks and summary.

``TrainingParts`` is everything a loop drives, as ports (``app.launch`` binds them to Agent-lightning,
tinker-cookbook and a policy backend); ``TrainingSettings`` its knobs. The steps: ``begin_run``
(resume after the last checkpoint, or warm-start, keep the KL reference, serve the weights),
``evaluate_and_record`` (the test set at the eval temperature), ``train_step`` (datums, then
``num_substeps`` forward-backward + optimizer steps), ``save_checkpoint`` (when ``checkpoint_due``),
``end_step`` (log a batch, stop on a streak of empty ones) and ``finish_run`` (a run that trained
nothing is an error, else the final checkpoint and evaluation). ``EmptyStreak`` counts
batches without a trainable rollout and raises ``NothingToTrain`` for the loops. The synchronous loop
is ``app.usecases.training``, the asynchronous one ``app.usecases.async_training``; this module
imports neither.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Generic

from app.usecases.evaluation import all_task_groups, evaluate_policy
from app.usecases.rollouts import RolloutOptions
from domain.accounting import MISSING_REWARD_CAUSES, BatchAccount
from domain.groups import RolloutResult, ScoredGroup
from domain.lr_schedule import extend_schedule, scheduled_multiplier
from domain.metric_names import TEST_PREFIX, TRAIN_REWARD
from domain.staleness import StalenessPolicy
from ports.policy import AdamParams, LogprobScorer, LossName, Trainer, TrainingDatum
from ports.policy_endpoint import PolicyServer
from ports.rollout_store import RolloutStore, SpanT, TripletSource
from ports.run_log import Checkpoint, CheckpointLog, MetricsLog, RolloutLog, TranscriptKind, TranscriptLog
from ports.training_data import KLPenalty, TrainingDataBuilder
from ports.trajectory_groups import GroupAssembler, GroupT, MemberT, TaskBatches, TaskGroupT

logger = logging.getLogger(__name__)

REWARD_KEY = TRAIN_REWARD
"""Mean total reward per trajectory in the batch metrics (the test set's is ``test/`` + this)."""


@dataclass(frozen=True, slots=True)
class WarmStartSettings:
    """Supervised (cross-entropy) steps before RL, cycling through the warm-start datums."""

    steps: int = 0
    batch_size: int = 32
    learning_rate: float = 1e-2


@dataclass(frozen=True, slots=True)
class AsyncSettings:
    """Asynchronous off-policy training: rollouts for the next steps run while the trainer steps."""

    max_steps_off_policy: int = 1
    """A group sampled more than this many policy versions before its step is stale."""
    sampling_steps_ahead: int = 1
    """Admission control: start a dataset batch's rollouts at most this many steps before its own step."""
    stale: StalenessPolicy = StalenessPolicy.DISCARD
    """DISCARD (the cookbook's): a stale group is dropped and its task rolled out again; ADMIT: nothing is dropped."""
    groups_per_batch: int | None = None
    """Finished groups each step takes (None: the dataset's batch size)."""
    num_minibatches: int = 1
    """Stream minibatches: above 1, each substep's groups are forward-backward'ed in this many parts as they arrive."""
    staleness_lr: bool = True
    """Divide a step's learning rate by 1 + its groups' mean staleness (``domain.staleness.staleness_scaled_lr``)."""

    def __post_init__(self) -> None:
        if self.max_steps_off_policy < 0 or self.sampling_steps_ahead < 0:
            raise ValueError("max_steps_off_policy and sampling_steps_ahead must be >= 0")
        if self.num_minibatches < 1:
            raise ValueError(f"num_minibatches must be at least 1, got {self.num_minibatches}")
        if self.groups_per_batch is not None and self.groups_per_batch < 1:
            raise ValueError(f"groups_per_batch must be at least 1, got {self.groups_per_batch}")


@dataclass(frozen=True, slots=True)
class TrainingSettings:
    """The loop's knobs (``app.launch.training_settings`` maps a ``TrainConfig`` onto them)."""

    log_path: str
    """Named in messages; the files themselves go through the run-log ports."""
    learning_rate: float
    loss: LossName = LossName.IMPORTANCE_SAMPLING
    num_substeps: int = 1
    kl: KLPenalty = field(default_factory=KLPenalty)
    remove_constant_reward_groups: bool = False
    rollouts: RolloutOptions = field(default_factory=RolloutOptions)
    eval_every: int = 0
    eval_on_start: bool = True
    """Evaluate at the run's first batch too; false: only at later multiples of ``eval_every`` and the end."""
    eval_temperature: float = 0.0
    save_every: int = 0
    max_batches: int | None = None
    target_test_reward: float | None = None
    warm_start: WarmStartSettings = field(default_factory=WarmStartSettings)
    max_empty_batches: int = 3
    """Consecutive batches without a trainable rollout that end the run with an error; 0 never stops."""
    asynchronous: AsyncSettings | None = None
    """None: the synchronous on-policy loop."""
    lr_schedule: Callable[[int, int], float] | None = None
    """The multiplier of ``learning_rate`` at step ``i`` of ``n`` (the cookbook's schedules, bound in ``app.launch``);
    None: constant."""

    def rate_at(self, step: int, schedule: int | Sequence[int]) -> float:
        """The learning rate of step ``step`` of a run of ``schedule`` steps, or of the segment ends ``schedule``
        (a run extended past what it first planned: ``domain.lr_schedule``)."""
        if self.lr_schedule is None:
            return self.learning_rate
        ends = (schedule,) if isinstance(schedule, int) else schedule
        return self.learning_rate * scheduled_multiplier(self.lr_schedule, step, ends)

    transcript_groups: int = 2
    """Groups of each training batch (asynchronous: step) written to its transcript page; 0: no training pages."""


class NothingToTrain(RuntimeError):
    """Batches keep coming back without a trainable rollout or a reward (the agent fails, times out, emits nothing)."""

    @classmethod
    def after(
        cls, n_empty: int, i_batch: int, account: BatchAccount, cause: str | None = None, agent_error: str | None = None
    ) -> NothingToTrain:
        batches = "batch" if n_empty == 1 else "batches"
        because = f"; {cause}" if cause else ""
        if agent_error:
            because += f"; the runners' first logged error: {agent_error}"
        if account.has_trainable:  # trainable rollouts, none of them rewarded
            return cls(
                f"{n_empty} consecutive {batches} had no reward (batch {i_batch}: {account.describe()}): "
                f"{MISSING_REWARD_CAUSES}{because}"
            )
        return cls(
            f"{n_empty} consecutive {batches} had no trainable rollout (batch {i_batch}: {account.describe()}){because}"
        )


@dataclass(slots=True)
class EmptyStreak:
    """Consecutive batches without a trainable rollout or any reward, and the last of them (``NothingToTrain``)."""

    limit: int
    """``max_empty_batches``: a streak this long ends the run; 0 never does."""
    n: int = 0
    last: tuple[int, BatchAccount] | None = None

    def record(self, i_batch: int, account: BatchAccount) -> bool:
        """Count the batch; whether the streak has reached the limit."""
        if account.has_trainable and account.has_reward:
            self.n = 0
        else:
            self.n, self.last = self.n + 1, (i_batch, account)
        return 0 < self.limit <= self.n

    def check(self, n_run: int, cause: str | None = None, agent_error: str | None = None) -> None:
        """Raise ``NothingToTrain`` when none of the ``n_run`` batches of this run could train."""
        if self.last is not None and self.n == n_run:
            raise self.error(cause, agent_error)

    def error(self, cause: str | None = None, agent_error: str | None = None) -> NothingToTrain:
        """The streak's error; ``cause``: what the policy backend last failed with, which outranks the count;
        ``agent_error``: the first error the runner processes logged (``RunnerPool.first_error``)."""
        assert self.last is not None, "only a streak of empty batches is an error"
        return NothingToTrain.after(self.n, *self.last, cause=cause, agent_error=agent_error)


@dataclass(slots=True)
class TrainingHooks:
    """Progress callbacks for a UI (all optional)."""

    on_run_start: Callable[[int, int], None] | None = None
    """(start_batch, n_batches)"""
    on_batch_start: Callable[[int, int], None] | None = None
    """(i_batch, n_rollouts)"""
    on_rollout: Callable[[RolloutResult], None] | None = None
    on_batch_end: Callable[[int, dict[str, float]], None] | None = None
    on_eval: Callable[[int, dict[str, float]], None] | None = None
    on_log: Callable[[str], None] | None = None


@dataclass(slots=True)
class TrainingSummary:
    """What a run did: batches trained now, and the test reward at its first and last evaluation."""

    start_batch: int
    end_batch: int
    evals: list[tuple[int, float]] = field(default_factory=list)
    """(batch, test reward) for each evaluation of this run."""
    final_checkpoint: Checkpoint | None = None

    @property
    def reward_before(self) -> float | None:
        """The test reward at the run's first batch; None without an evaluation there (``eval_on_start``)."""
        return self.evals[0][1] if self.evals and self.evals[0][0] == self.start_batch else None

    @property
    def reward_after(self) -> float | None:
        return self.evals[-1][1] if self.evals else None


@dataclass(frozen=True, slots=True)
class TrainingParts(Generic[TaskGroupT, MemberT, GroupT, SpanT]):
    """Everything the loop drives, as ports; built by ``app.launch`` (or by a trainer embedding this)."""

    settings: TrainingSettings
    trainer: Trainer
    server: PolicyServer
    store: RolloutStore[SpanT]
    triplets: TripletSource[SpanT]
    assembler: GroupAssembler[TaskGroupT, MemberT, GroupT]
    data: TrainingDataBuilder[GroupT]
    dataset: TaskBatches[TaskGroupT]
    test_dataset: TaskBatches[TaskGroupT] | None
    checkpoints: CheckpointLog
    metrics: MetricsLog
    warm_start_data: Sequence[TrainingDatum] = ()
    """Cross-entropy datums of the supervised warm start (none: no warm start)."""
    rollout_log: RolloutLog | None = None
    """Where every training rollout is written as rebuilt (none: nowhere)."""
    transcripts: TranscriptLog | None = None
    """Where each evaluation and the first ``transcript_groups`` groups of each batch are written as readable
    pages (none: no pages)."""


def total_batches(settings: TrainingSettings, n_batches: int) -> int:
    return min(n_batches, settings.max_batches) if settings.max_batches else n_batches


async def save_checkpoint(
    trainer: Trainer,
    checkpoints: CheckpointLog,
    name: str,
    batch: int,
    *,
    final: bool = False,
    planned: int | None = None,
    frontier: int | None = None,
    pending: Sequence[tuple[int, int]] = (),
    schedule: Sequence[int] = (),
) -> Checkpoint:
    """Save the trainer's state and record it (recorded last, so a crash mid-save is ignored)."""
    state_path = await trainer.save_state(name)
    checkpoint = Checkpoint(
        name,
        batch,
        state_path,
        final=final,
        planned=planned,
        frontier=frontier,
        pending=tuple(pending),
        schedule=tuple(schedule),
    )
    checkpoints.append(checkpoint)
    return checkpoint


async def warm_start(
    trainer: Trainer,
    data_D: Sequence[TrainingDatum],
    settings: WarmStartSettings,
    log: Callable[[str], None] = logger.info,
) -> dict[str, float]:
    """Supervised steps on ``data_D`` (cross-entropy), cycling through them."""
    if settings.steps == 0 or not data_D:
        return {}
    data = list(data_D)
    losses: list[float] = []
    for step in range(settings.steps):
        start = (step * settings.batch_size) % len(data)
        batch = (data + data)[start : start + min(settings.batch_size, len(data))]
        output = await trainer.forward_backward(batch, LossName.CROSS_ENTROPY)
        await trainer.optim_step(AdamParams(learning_rate=settings.learning_rate))
        losses.append(output.metrics.get("loss:sum", 0.0) / len(batch))
    log(f"warm start: {settings.steps} supervised steps, loss per example {losses[0]:.3f} -> {losses[-1]:.3f}")
    return {"warm_start/loss_first": losses[0], "warm_start/loss_last": losses[-1]}


async def evaluate(
    parts: TrainingParts[TaskGroupT, MemberT, GroupT, SpanT], resources_id: str, i_batch: int
) -> dict[str, float]:
    """Test-set metrics at the eval temperature, ``test/``-prefixed; empty without a test set."""
    if parts.test_dataset is None:
        return {}
    settings = parts.settings
    scored: list[ScoredGroup] = []
    task_groups = all_task_groups(parts.test_dataset)
    metrics = await evaluate_policy(
        parts.server,
        settings.eval_temperature,
        task_groups,
        resources_id,
        i_batch,
        store=parts.store,
        triplets=parts.triplets,
        assembler=parts.assembler,
        rollouts=rollout_options(parts),
        name=TEST_PREFIX.rstrip("/"),
        on_groups=scored.extend,
    )
    await write_transcript(parts, TranscriptKind.EVAL, i_batch, scored)
    n_unusable = round(len(task_groups) * (1.0 - metrics.get(f"{TEST_PREFIX}env/all/frac_tasks_usable", 1.0)))
    if n_unusable:
        logger.warning(
            "%d of %d test tasks left no trajectory (failed or timed out before any answer; rollout_timeout_s=%s):"
            " each counts 0 in the test reward",
            n_unusable,
            len(task_groups),
            settings.rollouts.rollout_timeout_s,
        )
    return metrics


async def write_transcript(
    parts: TrainingParts[TaskGroupT, MemberT, GroupT, SpanT],
    kind: TranscriptKind,
    index: int,
    scored: Sequence[ScoredGroup],
) -> None:
    """The page of an evaluation, or of the first ``transcript_groups`` groups of a training batch, if the run
    writes pages. Rendered off the event loop (decoding takes a while; the endpoint serves meanwhile); a page
    that cannot be written is a warning, never the end of the run."""
    if parts.transcripts is None:
        return
    if kind is TranscriptKind.TRAIN:
        scored = scored[: max(0, parts.settings.transcript_groups)]
    if not scored:
        return
    try:
        await asyncio.to_thread(parts.transcripts.write, kind, index, list(scored))
    except Exception as error:  # a page is a convenience: training goes on without it
        logger.warning("transcript %s %d not written: %s: %s", kind.value, index, type(error).__name__, error)


async def train_step(
    trainer: Trainer,
    data: TrainingDataBuilder[GroupT],
    settings: TrainingSettings,
    groups_P: Sequence[GroupT],
    reference: LogprobScorer | None = None,
) -> tuple[list[TrainingDatum], dict[str, float]]:
    """Datums, then ``num_substeps`` forward-backward + optimizer steps; returns the datums and metrics.

    The sampler-trainer KL (``optim/kl_sample_train_v1``/``v2``) compares the datums' sampling logprobs with
    the training logprobs every forward-backward returns, over all substeps as the cookbook's ``train_step``
    gathers them: the first substep's are on-policy, later ones come after this step's earlier updates.
    """
    data_D, metrics = await data.rl_data(groups_P, settings.kl, reference)
    step_metrics: list[dict[str, float]] = []
    training_logprobs_D: list[tuple[float, ...]] = []
    for minibatch in data.minibatches(data_D, settings.num_substeps):
        output = await trainer.forward_backward(minibatch, settings.loss)
        training_logprobs_D.extend(output.logprobs_D)
        optim = await trainer.optim_step(AdamParams(learning_rate=settings.learning_rate))
        step_metrics.append({f"optim/{k}": v for k, v in {**output.metrics, **optim}.items()})
    metrics.update(data.mean_metrics(step_metrics))  # per key, over the substeps
    metrics.update(data.sample_train_kl(data_D, training_logprobs_D))
    metrics["optim/n_datums"] = float(len(data_D))
    return data_D, metrics


@dataclass(frozen=True, slots=True)
class RunStart:
    """Where a run starts: the batch (or step) after the last checkpoint, and what it starts with."""

    start: int
    n_batches: int
    reference: LogprobScorer | None
    resume: Checkpoint | None
    policy_version: int
    """The endpoint's version of the weights it serves from the start."""
    schedule: tuple[int, ...]
    """The learning-rate schedule's segment ends (``TrainingSettings.rate_at``), recorded with every checkpoint."""


async def begin_run(
    parts: TrainingParts[TaskGroupT, MemberT, GroupT, SpanT], hooks: TrainingHooks, log: Callable[[str], None]
) -> RunStart | TrainingSummary:
    """Resume from the last checkpoint or warm-start, keep the KL reference, serve the weights.

    A run whose last checkpoint is final is complete: its summary comes back instead. A resumed run first
    forgets what it redoes (``forget_redone``) and keeps its learning-rate schedule, extended by a segment
    when it now plans more batches than before (``domain.lr_schedule``).
    """
    settings = parts.settings
    n_batches = total_batches(settings, len(parts.dataset))
    resume = parts.checkpoints.last()
    if resume is not None and resume.final and resume.planned_batches >= n_batches:
        log(f"the run in {settings.log_path} is complete (final checkpoint after batch {resume.batch})")
        return TrainingSummary(start_batch=resume.batch, end_batch=resume.batch, final_checkpoint=resume)
    reference: LogprobScorer | None = None
    if resume is not None:
        await parts.trainer.load_state(resume.state_path)
        if settings.kl.coef > 0:
            reference = await _load_reference(parts, log)
        start = resume.batch
        forget_redone(parts, resume)
        log(f"resuming after batch {start} from {resume.state_path}")
    else:
        start = 0
        warm = await warm_start(parts.trainer, parts.warm_start_data, settings.warm_start, log)
        if warm:
            parts.metrics.log_metrics(warm, step=0)
        if settings.kl.coef > 0:
            reference = await _save_reference(parts)
    if hooks.on_run_start:
        hooks.on_run_start(start, n_batches)
    version = parts.server.set_sampler(await parts.trainer.sampler(f"batch-{start:06d}"))
    return RunStart(start, n_batches, reference, resume, version, extend_schedule(recorded_schedule(resume), n_batches))


def recorded_schedule(resume: Checkpoint | None) -> tuple[int, ...]:
    """The schedule a run resumes with; a record from before schedules were kept: a final one's planned batches."""
    if resume is None:
        return ()
    if resume.schedule:
        return resume.schedule
    return (resume.planned,) if resume.final and resume.planned else ()


def forget_redone(parts: TrainingParts[TaskGroupT, MemberT, GroupT, SpanT], resume: Checkpoint) -> None:
    """Cut the run's files back to ``resume``: the metrics lines and transcript pages of its step and later, and
    the rollouts of the batches (an asynchronous run: of the groups) it redoes, so each appears once."""
    parts.metrics.truncate_from(resume.batch)
    if parts.rollout_log is not None:
        frontier = resume.frontier if resume.frontier is not None else resume.batch
        parts.rollout_log.truncate_from(frontier, resume.pending)
    if parts.transcripts is not None:
        parts.transcripts.truncate_from(resume.batch)


def checkpoint_due(settings: TrainingSettings, done: int, n_batches: int) -> bool:
    """Whether a checkpoint is saved after ``done`` of ``n_batches`` batches (the last one's is ``finish_run``'s)."""
    return settings.save_every > 0 and done % settings.save_every == 0 and done < n_batches


def runners_first_error(parts: TrainingParts[TaskGroupT, MemberT, GroupT, SpanT]) -> str | None:
    """The first error the run's own runner processes logged, if it started any."""
    runners = parts.settings.rollouts.runners
    return None if runners is None else runners.first_error()


def end_step(
    parts: TrainingParts[TaskGroupT, MemberT, GroupT, SpanT],
    hooks: TrainingHooks,
    empty: EmptyStreak,
    step: int,
    metrics: dict[str, float],
    stop: bool,
) -> None:
    """Log a batch's metrics and hand them to the UI; ``stop`` (the empty streak reached its limit) ends the run."""
    parts.metrics.log_metrics(metrics, step=step)
    if hooks.on_batch_end:
        hooks.on_batch_end(step, metrics)
    if stop:
        raise empty.error(parts.server.backend_failure(), runners_first_error(parts))


async def finish_run(
    parts: TrainingParts[TaskGroupT, MemberT, GroupT, SpanT],
    summary: TrainingSummary,
    empty: EmptyStreak,
    start: int,
    n_batches: int,
    hooks: TrainingHooks,
    schedule: Sequence[int] = (),
) -> TrainingSummary:
    """How both loops end a run, once its batches are done and its rollouts stopped.

    ``NothingToTrain`` when none of the run's batches could train (naming the policy backend's last
    failure, if any); else the final checkpoint, then the final evaluation unless the last batch was
    just evaluated. Returns ``summary``.
    """
    empty.check(n_batches - start, parts.server.backend_failure(), runners_first_error(parts))
    settings = parts.settings
    if start < n_batches:
        summary.final_checkpoint = await save_checkpoint(
            parts.trainer,
            parts.checkpoints,
            "final",
            n_batches,
            final=True,
            planned=total_batches(settings, len(parts.dataset)),
            schedule=schedule,
        )
    already_evaluated = bool(summary.evals) and summary.evals[-1][0] == n_batches
    if settings.eval_every > 0 and not already_evaluated and (start < n_batches or not summary.evals):
        resources_id = await parts.store.add_resources({"main_llm": parts.server.as_resource()})
        final: dict[str, float] = {}
        await evaluate_and_record(parts, resources_id, n_batches, final, summary, hooks)
        if final:
            parts.metrics.log_metrics(final, step=n_batches)
    return summary


async def _save_reference(parts: TrainingParts[TaskGroupT, MemberT, GroupT, SpanT]) -> LogprobScorer:
    """The KL reference is the policy RL starts from (after the warm start); its weights are kept for resuming."""
    path = await parts.trainer.save_weights_for_sampler("kl-reference")
    parts.checkpoints.set_reference_state(path)
    return await parts.trainer.scorer(path)


async def _load_reference(
    parts: TrainingParts[TaskGroupT, MemberT, GroupT, SpanT], log: Callable[[str], None]
) -> LogprobScorer:
    """The recorded KL reference, opened beside the resumed policy (never loaded into it)."""
    path = parts.checkpoints.reference_state()
    if path is None:
        log(f"no KL reference recorded in {parts.settings.log_path}: the KL reference is the resumed policy")
        return await _save_reference(parts)
    return await parts.trainer.scorer(path)


def reached(settings: TrainingSettings, summary: TrainingSummary) -> bool:
    return settings.target_test_reward is not None and (summary.reward_after or 0.0) >= settings.target_test_reward


def rollout_options(parts: TrainingParts[TaskGroupT, MemberT, GroupT, SpanT]) -> RolloutOptions:
    """The run's rollout options, with its endpoint letting go of each rollout once the loop rebuilt it."""
    return replace(parts.settings.rollouts, endpoint=parts.server)


def forward_rollouts(
    callback: Callable[[RolloutResult], None] | None,
    log: RolloutLog | None = None,
    batch: int = 0,
    group: int | None = None,
) -> Callable[[int, RolloutResult], None] | None:
    """Each finished rollout to the run's hook and to its rollout log (as rollouts of dataset batch ``batch``,
    of its group ``group`` when known)."""
    if callback is None and log is None:
        return None

    def forward(_index: int, result: RolloutResult) -> None:
        if log is not None:
            log.append(batch, result, group)
        if callback is not None:
            callback(result)

    return forward


async def evaluate_and_record(
    parts: TrainingParts[TaskGroupT, MemberT, GroupT, SpanT],
    resources_id: str,
    i_batch: int,
    metrics: dict[str, float],
    summary: TrainingSummary,
    hooks: TrainingHooks,
) -> None:
    t_eval = time.perf_counter()
    eval_metrics = await evaluate(parts, resources_id, i_batch)
    if not eval_metrics:
        return
    metrics.update(eval_metrics)
    metrics["time/eval"] = time.perf_counter() - t_eval
    reward = eval_metrics.get(TEST_PREFIX + REWARD_KEY)
    if reward is not None:
        summary.evals.append((i_batch, float(reward)))
    if hooks.on_eval:
        hooks.on_eval(i_batch, eval_metrics)
