"""The synchronous on-policy RL loop over Agent-lightning rollouts (tinker-cookbook's ``do_sync_training``).

Per batch: register the endpoint as the store's LLM resource, evaluate on the test set every
``eval_every`` batches, roll out the batch's groups through the store and runners, drop
constant-reward groups if asked, build datums with the cookbook (advantages, prefix merging,
optional KL shaping), run ``num_substeps`` forward-backward + optimizer steps, publish the new
weights to the endpoint, log metrics, and checkpoint every ``save_every`` batches. The loop
resumes from ``checkpoints.jsonl`` at the batch after the last saved one, so a crash repeats
no finished batch and skips none. It takes its parts as arguments; ``app.launch`` builds them.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentlightning import LightningStore, TraceToTripletBase
from tinker_cookbook import renderers
from tinker_cookbook.checkpoint_utils import get_last_checkpoint
from tinker_cookbook.rl.metric_util import compute_trajectory_metrics
from tinker_cookbook.rl.types import TrajectoryGroup
from tinker_cookbook.utils import ml_log
from tinker_cookbook.utils.misc_utils import dict_mean

from adapters.cookbook_training import (
    KLPenalty,
    LogprobScorer,
    rl_training_data,
    sample_train_kl,
    substeps,
    supervised_datum,
)
from adapters.endpoint import PolicyEndpoint
from app.compat import AGLDataset, AGLTestSetEvaluator, do_group_of_group_rollouts
from app.config import TrainConfig, WarmStartConfig
from app.report import TRAIN_REWARD
from app.rollouts import RolloutStats
from domain.groups import RolloutResult
from ports.policy import AdamParams, LossName, Trainer, TrainingDatum

logger = logging.getLogger(__name__)

REWARD_KEY = TRAIN_REWARD
"""Mean total reward per trajectory in cookbook metrics (the test set's is ``test/`` + this)."""
CHECKPOINTS_FILE = "checkpoints.jsonl"
METRICS_FILE = "metrics.jsonl"
REFERENCE_FILE = "kl_reference.json"


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """A resumable point: ``batch`` batches are done and ``state_path`` holds weights and optimizer."""

    name: str
    batch: int
    state_path: str
    final: bool = False
    """Written at the end of a run (or at its early stop): resuming it trains nothing."""


def last_checkpoint(log_path: str | Path) -> Checkpoint | None:
    """The newest resumable record of ``checkpoints.jsonl`` (the cookbook's format and reader)."""
    record = get_last_checkpoint(str(log_path))
    if record is None or record.batch is None or record.state_path is None:
        return None
    return Checkpoint(name=record.name, batch=record.batch, state_path=record.state_path, final=bool(record.final))


async def save_checkpoint(trainer: Trainer, log_path: str | Path, name: str, batch: int, **extra: Any) -> Checkpoint:
    """Save the trainer's state and append its record (written last, so a crash mid-save is ignored)."""
    state_path = await trainer.save_state(name)
    record = {"name": name, "batch": batch, "state_path": state_path, **extra}
    with open(Path(log_path) / CHECKPOINTS_FILE, "a") as file:
        file.write(json.dumps(record) + "\n")
    return Checkpoint(name=name, batch=batch, state_path=state_path, final=bool(extra.get("final")))


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
        return self.evals[0][1] if self.evals else None

    @property
    def reward_after(self) -> float | None:
        return self.evals[-1][1] if self.evals else None


@dataclass(frozen=True, slots=True)
class TrainingParts:
    """Everything the loop drives; built by ``app.launch`` (or by a trainer embedding this)."""

    config: TrainConfig
    trainer: Trainer
    renderer: renderers.Renderer
    endpoint: PolicyEndpoint
    store: LightningStore
    adapter: TraceToTripletBase
    dataset: AGLDataset[Any]
    test_dataset: AGLDataset[Any] | None
    warm_start_chats: Sequence[Sequence[renderers.Message]] = ()


def total_batches(config: TrainConfig, dataset: AGLDataset[Any]) -> int:
    return min(len(dataset), config.max_batches) if config.max_batches else len(dataset)


async def warm_start(
    trainer: Trainer,
    renderer: renderers.Renderer,
    chats: Sequence[Sequence[renderers.Message]],
    cfg: WarmStartConfig,
    log: Callable[[str], None] = logger.info,
) -> dict[str, float]:
    """Supervised steps on ``chats`` (cross-entropy), cycling through them."""
    if cfg.steps == 0 or not chats:
        return {}
    data = [supervised_datum(chat, renderer) for chat in chats]
    losses: list[float] = []
    for step in range(cfg.steps):
        start = (step * cfg.batch_size) % len(data)
        batch = (data + data)[start : start + min(cfg.batch_size, len(data))]
        output = await trainer.forward_backward(batch, LossName.CROSS_ENTROPY)
        await trainer.optim_step(AdamParams(learning_rate=cfg.learning_rate))
        losses.append(output.metrics.get("loss:sum", 0.0) / len(batch))
    log(f"warm start: {cfg.steps} supervised steps, loss per example {losses[0]:.3f} -> {losses[-1]:.3f}")
    return {"warm_start/loss_first": losses[0], "warm_start/loss_last": losses[-1]}


async def evaluate(parts: TrainingParts, resources_id: str, i_batch: int) -> dict[str, float]:
    """Test-set metrics at the eval temperature, ``test/``-prefixed; empty without a test set."""
    if parts.test_dataset is None or len(parts.test_dataset) == 0:
        return {}
    cfg = parts.config
    previous = parts.endpoint.set_temperature(cfg.eval_temperature)
    try:
        evaluator = AGLTestSetEvaluator(parts.test_dataset, name="test")
        return await evaluator(
            resources_id,
            parts.store,
            parts.adapter,
            "val",
            i_batch,
            concurrency=cfg.concurrency,
            rollout_timeout_s=cfg.rollout_timeout_s,
        )
    finally:
        parts.endpoint.set_sampling_defaults(previous)


async def train_step(
    trainer: Trainer,
    cfg: TrainConfig,
    groups_P: Sequence[TrajectoryGroup],
    reference: LogprobScorer | None = None,
) -> tuple[list[TrainingDatum], dict[str, float]]:
    """Cookbook datums, then ``num_substeps`` forward-backward + optimizer steps; returns the datums and metrics."""
    data_D, metrics = await rl_training_data(
        groups_P, kl=KLPenalty(cfg.kl_penalty_coef, cfg.kl_discount_factor), reference=reference
    )
    loss = LossName(cfg.loss_fn)
    step_metrics: list[dict[str, float]] = []
    training_logprobs_D: list[tuple[float, ...]] = []
    for minibatch in substeps(data_D, cfg.num_substeps):
        output = await trainer.forward_backward(minibatch, loss)
        training_logprobs_D.extend(output.logprobs_D)
        optim = await trainer.optim_step(AdamParams(learning_rate=cfg.learning_rate))
        step_metrics.append({f"optim/{k}": v for k, v in {**output.metrics, **optim}.items()})
    metrics.update(dict_mean(step_metrics))  # per key, over the substeps
    metrics.update(sample_train_kl(data_D, training_logprobs_D))
    metrics["optim/n_datums"] = float(len(data_D))
    return data_D, metrics


async def run_training(
    parts: TrainingParts, ml_logger: ml_log.Logger, hooks: TrainingHooks | None = None
) -> TrainingSummary:
    """Train from the last checkpoint (or from scratch, after the warm start) to the end of the dataset."""
    cfg = parts.config
    hooks = hooks or TrainingHooks()
    log = hooks.on_log or logger.info
    n_batches = total_batches(cfg, parts.dataset)
    resume = last_checkpoint(cfg.log_path)
    if resume is not None and resume.final:
        log(f"the run in {cfg.log_path} is complete (final checkpoint after batch {resume.batch})")
        return TrainingSummary(start_batch=resume.batch, end_batch=resume.batch, final_checkpoint=resume)
    reference: LogprobScorer | None = None
    if resume is not None:
        if cfg.kl_penalty_coef > 0:
            reference = await _load_reference(parts.trainer, cfg.log_path, log)
        await parts.trainer.load_state(resume.state_path)
        start = resume.batch
        log(f"resuming after batch {start} from {resume.state_path}")
    else:
        start = 0
        warm = await warm_start(parts.trainer, parts.renderer, parts.warm_start_chats, cfg.warm_start, log)
        if warm:
            ml_logger.log_metrics(warm, step=0)
        if cfg.kl_penalty_coef > 0:
            reference = await _save_reference(parts.trainer, cfg.log_path)
    summary = TrainingSummary(start_batch=start, end_batch=n_batches)
    if hooks.on_run_start:
        hooks.on_run_start(start, n_batches)
    parts.endpoint.set_sampler(await parts.trainer.sampler(f"batch-{start:06d}"))

    for i_batch in range(start, n_batches):
        t_start = time.perf_counter()
        metrics: dict[str, float] = {
            "progress/batch": float(i_batch),
            "progress/done_frac": (i_batch + 1) / n_batches,
            "optim/lr": cfg.learning_rate,
        }
        resources = await parts.store.add_resources({"main_llm": parts.endpoint.as_resource()})
        if cfg.eval_every > 0 and i_batch % cfg.eval_every == 0:
            await _evaluate_and_record(parts, resources.resources_id, i_batch, metrics, summary, hooks)
            if _reached(cfg, summary) and i_batch > start:
                log(f"test reward {summary.reward_after:.3f} reached the target {cfg.target_test_reward}: stopping")
                ml_logger.log_metrics(metrics, step=i_batch)
                summary.end_batch = n_batches = i_batch
                break

        builders_P = parts.dataset.get_batch(i_batch)
        if hooks.on_batch_start:
            hooks.on_batch_start(i_batch, sum(b.num_envs for b in builders_P))
        stats = RolloutStats()
        t_sample = time.perf_counter()
        groups_P = await do_group_of_group_rollouts(
            builders_P,
            resources.resources_id,
            i_batch,
            store=parts.store,
            adapter=parts.adapter,
            mode="train",
            do_remove_constant_reward_groups=cfg.remove_constant_reward_groups,
            concurrency=cfg.concurrency,
            rollout_timeout_s=cfg.rollout_timeout_s,
            on_result=_forward_rollouts(hooks.on_rollout),
            stats=stats,
        )
        n_rollouts = sum(b.num_envs for b in builders_P)
        metrics["time/sample"] = time.perf_counter() - t_sample
        metrics["rollouts/per_s"] = n_rollouts / max(metrics["time/sample"], 1e-9)
        metrics["rollouts/store_calls_per_rollout"] = stats.store_calls / max(n_rollouts, 1)
        metrics.update(compute_trajectory_metrics(groups_P, [b.logging_tags() for b in builders_P]))

        t_train = time.perf_counter()
        if groups_P:
            _data, train_metrics = await train_step(parts.trainer, cfg, groups_P, reference)
            metrics.update(train_metrics)
            parts.endpoint.set_sampler(await parts.trainer.sampler(f"batch-{i_batch + 1:06d}"))
        else:
            log(f"batch {i_batch}: no trainable group, weights unchanged")
        metrics["time/train"] = time.perf_counter() - t_train

        done = i_batch + 1
        if cfg.save_every > 0 and done % cfg.save_every == 0 and done < n_batches:
            await save_checkpoint(parts.trainer, cfg.log_path, f"{done:06d}", done)
        metrics["time/total"] = time.perf_counter() - t_start
        ml_logger.log_metrics(metrics, step=i_batch)
        if hooks.on_batch_end:
            hooks.on_batch_end(i_batch, metrics)

    if start < n_batches:
        summary.final_checkpoint = await save_checkpoint(parts.trainer, cfg.log_path, "final", n_batches, final=True)
    already_evaluated = bool(summary.evals) and summary.evals[-1][0] == n_batches
    if cfg.eval_every > 0 and not already_evaluated and (start < n_batches or not summary.evals):
        resources = await parts.store.add_resources({"main_llm": parts.endpoint.as_resource()})
        final: dict[str, float] = {}
        await _evaluate_and_record(parts, resources.resources_id, n_batches, final, summary, hooks)
        if final:
            ml_logger.log_metrics(final, step=n_batches)
    return summary


async def _scorer(trainer: Trainer) -> LogprobScorer:
    sampler = await trainer.sampler("kl-reference")
    if not isinstance(sampler, LogprobScorer):
        raise TypeError(f"{type(sampler).__name__} cannot score sequences, so it cannot be a KL reference")
    return sampler


async def _save_reference(trainer: Trainer, log_path: str | Path) -> LogprobScorer:
    """The KL reference is the policy RL starts from (after the warm start); kept for resuming."""
    state_path = await trainer.save_state("kl-reference")
    (Path(log_path) / REFERENCE_FILE).write_text(json.dumps({"state_path": state_path}))
    return await _scorer(trainer)


async def _load_reference(trainer: Trainer, log_path: str | Path, log: Callable[[str], None]) -> LogprobScorer:
    file = Path(log_path) / REFERENCE_FILE
    if file.is_file():
        await trainer.load_state(json.loads(file.read_text())["state_path"])
    else:
        log(f"no {REFERENCE_FILE} in {log_path}: the KL reference is the resumed policy")
    return await _scorer(trainer)


def _reached(cfg: TrainConfig, summary: TrainingSummary) -> bool:
    return cfg.target_test_reward is not None and (summary.reward_after or 0.0) >= cfg.target_test_reward


def _forward_rollouts(callback: Callable[[RolloutResult], None] | None) -> Callable[[int, RolloutResult], None] | None:
    if callback is None:
        return None
    return lambda _index, result: callback(result)


async def _evaluate_and_record(
    parts: TrainingParts,
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
    reward = eval_metrics.get(f"test/{REWARD_KEY}")
    if reward is not None:
        summary.evals.append((i_batch, float(reward)))
    if hooks.on_eval:
        hooks.on_eval(i_batch, eval_metrics)
