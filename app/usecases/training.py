"""The synchronous on-policy RL loop over agent rollouts (tinker-cookbook's ``do_sync_training``).

Per batch: publish the endpoint as the agents' LLM resource, evaluate on the test set every
``eval_every`` batches, roll out the batch's groups through the store and runners, drop
constant-reward groups if asked, build datums (advantages, prefix merging, optional KL shaping),
run ``num_substeps`` forward-backward + optimizer steps, serve the new weights from the endpoint,
log metrics (with the batch's account: every rollout and group, dropped ones included), and
checkpoint every ``save_every`` batches. ``max_empty_batches`` consecutive batches without a
trainable rollout end the run with ``NothingToTrain`` instead of a run that silently learns
nothing; so does a run none of whose batches had one. The loop resumes at the batch after the
last checkpoint, so a crash repeats no finished batch and skips none.

It runs on the ports only (``TrainingParts``), with the steps it shares with the asynchronous loop
(``app.usecases.steps``); ``app.launch`` binds the ports to Agent-lightning, tinker-cookbook and a
policy backend.
"""

from __future__ import annotations

import logging
import time
from dataclasses import replace

from app.usecases.async_training import run_async_training
from app.usecases.group_rollouts import GroupRolloutOptions, rollout_groups
from app.usecases.rollouts import RolloutStats
from app.usecases.steps import (
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
from domain.accounting import missing_reward_warning
from ports.rollout_store import SpanT
from ports.run_log import TranscriptKind
from ports.trajectory_groups import GroupT, MemberT, TaskGroupT

logger = logging.getLogger(__name__)


async def run_training(
    parts: TrainingParts[TaskGroupT, MemberT, GroupT, SpanT], hooks: TrainingHooks | None = None
) -> TrainingSummary:
    """Train from the last checkpoint (or from scratch, after the warm start) to the end of the dataset.

    With ``settings.asynchronous`` set, rollouts keep running while the trainer steps (``app.usecases.async_training``).
    """
    if parts.settings.asynchronous is not None:
        return await run_async_training(parts, hooks)
    settings = parts.settings
    hooks = hooks or TrainingHooks()
    log = hooks.on_log or logger.info
    begun = await begin_run(parts, hooks, log)
    if isinstance(begun, TrainingSummary):
        return begun
    start, n_batches, reference, schedule = begun.start, begun.n_batches, begun.reference, begun.schedule
    summary = TrainingSummary(start_batch=start, end_batch=n_batches)
    options = GroupRolloutOptions(
        rollouts=rollout_options(parts), remove_constant_reward_groups=settings.remove_constant_reward_groups
    )
    empty = EmptyStreak(settings.max_empty_batches)

    for i_batch in range(start, n_batches):
        t_start = time.perf_counter()
        metrics: dict[str, float] = {
            "progress/batch": float(i_batch),
            "progress/done_frac": (i_batch + 1) / n_batches,
            "optim/lr": settings.rate_at(i_batch, schedule),
        }
        resources_id = await parts.store.add_resources({"main_llm": parts.server.as_resource()})
        if (
            settings.eval_every > 0
            and i_batch % settings.eval_every == 0
            and (i_batch > start or settings.eval_on_start)
        ):
            await evaluate_and_record(parts, resources_id, i_batch, metrics, summary, hooks)
            if reached(settings, summary) and i_batch > start:
                target = settings.target_test_reward
                log(f"test reward {summary.reward_after:.3f} reached the target {target}: stopping")
                parts.metrics.log_metrics(metrics, step=i_batch)
                summary.end_batch = n_batches = i_batch
                break

        task_groups_P = parts.dataset.get_batch(i_batch)
        n_rollouts = sum(g.num_envs for g in task_groups_P)
        if hooks.on_batch_start:
            hooks.on_batch_start(i_batch, n_rollouts)
        stats = RolloutStats()
        t_sample = time.perf_counter()
        batch = await rollout_groups(
            task_groups_P,
            resources_id,
            i_batch,
            store=parts.store,
            triplets=parts.triplets,
            assembler=parts.assembler,
            mode="train",
            options=options,
            on_result=forward_rollouts(hooks.on_rollout, parts.rollout_log, i_batch),
            stats=stats,
        )
        metrics["time/sample"] = time.perf_counter() - t_sample
        metrics["rollouts/per_s"] = n_rollouts / max(metrics["time/sample"], 1e-9)
        metrics["rollouts/store_calls_per_rollout"] = stats.store_calls / max(n_rollouts, 1)
        groups_P, account = batch.groups, batch.account
        await write_transcript(parts, TranscriptKind.TRAIN, i_batch, batch.scored)
        metrics.update(account.metrics())
        if groups_P:  # an empty batch has no reward: logging 0.0 would read as a bad policy
            metrics.update(parts.assembler.batch_metrics(groups_P, task_groups_P))
        stop = empty.record(i_batch, account)
        if (warning := missing_reward_warning(i_batch, account)) is not None:
            log(f"warning: {warning}")

        t_train = time.perf_counter()
        if groups_P:
            step_settings = replace(settings, learning_rate=settings.rate_at(i_batch, schedule))
            _data, train_metrics = await train_step(parts.trainer, parts.data, step_settings, groups_P, reference)
            metrics.update(train_metrics)
            parts.server.set_sampler(await parts.trainer.sampler(f"batch-{i_batch + 1:06d}"))
        elif not account.has_trainable:
            log(f"batch {i_batch}: no trainable rollout ({account.describe()})")
        else:
            log(f"batch {i_batch}: every group had a constant reward, weights unchanged ({account.describe()})")
        metrics["time/train"] = time.perf_counter() - t_train

        done = i_batch + 1
        if not stop and checkpoint_due(settings, done, n_batches):
            await save_checkpoint(parts.trainer, parts.checkpoints, f"{done:06d}", done, schedule=schedule)
        metrics.update(parts.server.take_metrics())
        metrics.update(parts.triplets.take_metrics())
        metrics["time/total"] = time.perf_counter() - t_start
        end_step(parts, hooks, empty, i_batch, metrics, stop)

    return await finish_run(parts, summary, empty, start, n_batches, hooks, schedule)
