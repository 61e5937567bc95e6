"""Training data from trajectory groups, built by tinker-cookbook's own data processing.

RL: ``compute_advantages`` (group-centred rewards) and ``assemble_training_data`` (prefix-merged
datums with masks), optionally ``incorporate_kl_penalty`` against a reference policy. SFT:
``conversation_to_datum`` through the renderer. The results are converted to the port's
``TrainingDatum`` so either backend can train on them. ``CookbookTrainingData`` is the
``ports.training_data.TrainingDataBuilder`` the training loop drives.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import tinker
import torch
from tinker_cookbook import renderers
from tinker_cookbook.rl.data_processing import assemble_training_data, compute_advantages
from tinker_cookbook.rl.metrics import compute_kl_sample_train, incorporate_kl_penalty
from tinker_cookbook.rl.types import TrajectoryGroup
from tinker_cookbook.supervised.data import conversation_to_datum
from tinker_cookbook.utils.misc_utils import dict_mean, split_list

from adapters.cookbook.conversation import openai_conversation
from adapters.tinker.backend import datum_from_tinker, datum_to_tinker
from domain.chats import Chat
from domain.staleness import ratio_clip_fraction
from ports.policy import LogprobScorer, LossName, TrainingDatum
from ports.training_data import KLPenalty

METRIC_RATIO_CLIP_FRAC = "optim/ratio_clip_frac"
"""Fraction of action tokens whose importance ratio lies outside the default PPO range [0.8, 1.2]."""


class _CookbookReference:
    """Gives a ``LogprobScorer`` the ``compute_logprobs_async`` shape ``incorporate_kl_penalty`` calls."""

    def __init__(self, scorer: LogprobScorer) -> None:
        self._scorer = scorer

    async def compute_logprobs_async(self, model_input: tinker.ModelInput) -> list[float | None]:
        return await self._scorer.compute_logprobs(model_input.to_ints())


async def rl_training_data(
    groups_P: Sequence[TrajectoryGroup],
    *,
    kl: KLPenalty | None = None,
    reference: LogprobScorer | None = None,
) -> tuple[list[TrainingDatum], dict[str, float]]:
    """Datums for an RL loss from the batch's groups (empty when no group has an action token)."""
    groups = list(groups_P)
    if not groups:
        return [], {}
    advantages_P = compute_advantages(groups)
    data_D, _metadata = assemble_training_data(groups, advantages_P)
    n_trajectories = sum(len(g.trajectories_G) for g in groups)
    # 1.0 when every multi-turn trajectory merged into one datum; more when prefixes broke.
    metrics: dict[str, float] = {"reconstruct/merge_ratio": len(data_D) / max(n_trajectories, 1)}
    if kl is not None and kl.coef > 0 and data_D:
        if reference is None:
            raise ValueError("a KL penalty needs a reference policy")
        shaped = await incorporate_kl_penalty(
            data_D,
            _CookbookReference(reference),  # duck-typed: only compute_logprobs_async is called
            kl.coef,
            kl.discount_factor,
        )
        metrics.update({k: float(v) for k, v in shaped.items()})
    return [datum_from_tinker(d) for d in data_D], metrics


def supervised_datum(
    conversation: Sequence[renderers.Message], renderer: renderers.Renderer, max_length: int | None = None
) -> TrainingDatum:
    """A cross-entropy datum training on the assistant messages (weights normalised per example)."""
    return datum_from_tinker(conversation_to_datum(list(conversation), renderer, max_length))


def chat_datum(chat: Chat, renderer: renderers.Renderer, max_length: int | None = None) -> TrainingDatum:
    """A warm-start chat (OpenAI messages and tools) trained on the tokens the endpoint would serve it as."""
    return supervised_datum(openai_conversation(renderer, chat.messages, chat.tools), renderer, max_length)


def substeps(data_D: Sequence[TrainingDatum], num_substeps: int) -> list[list[TrainingDatum]]:
    """The batch split into ``num_substeps`` minibatches, as the cookbook's ``train_step`` splits it."""
    if not data_D:
        return []
    return split_list(list(data_D), min(num_substeps, len(data_D)))


def sample_train_kl(
    data_D: Sequence[TrainingDatum], training_logprobs_D: Sequence[Sequence[float]]
) -> dict[str, float]:
    """The cookbook's KL between sampling and training-forward logprobs, the sampling entropy, and
    ``optim/ratio_clip_frac``: how much of the batch off-policy data pushes outside the PPO clip range.
    """
    if not any(m > 0 for d in data_D for m in d.mask):
        return {}
    tinker_D = [datum_to_tinker(d, LossName.IMPORTANCE_SAMPLING) for d in data_D]
    logprobs_D = [torch.tensor(list(lp), dtype=torch.float32) for lp in training_logprobs_D]
    metrics = {k: float(v) for k, v in compute_kl_sample_train(tinker_D, logprobs_D).items()}
    # Flattened over datums; ratio_clip_fraction raises on misaligned lengths, as safezip does above.
    metrics[METRIC_RATIO_CLIP_FRAC] = ratio_clip_fraction(
        [x for d in data_D for x in d.logprobs],
        [float(x) for lp in training_logprobs_D for x in lp],
        [m for d in data_D for m in d.mask],
    )
    return metrics


class CookbookTrainingData:
    """``ports.training_data.TrainingDataBuilder`` on the functions above."""

    async def rl_data(
        self, groups_P: Sequence[TrajectoryGroup], kl: KLPenalty, reference: LogprobScorer | None
    ) -> tuple[list[TrainingDatum], dict[str, float]]:
        return await rl_training_data(groups_P, kl=kl, reference=reference)

    def minibatches(self, data_D: Sequence[TrainingDatum], num_substeps: int) -> list[list[TrainingDatum]]:
        return substeps(data_D, num_substeps)

    def sample_train_kl(
        self, data_D: Sequence[TrainingDatum], training_logprobs_D: Sequence[Sequence[float]]
    ) -> dict[str, float]:
        return sample_train_kl(data_D, training_logprobs_D)

    def mean_metrics(self, metrics_S: Sequence[Mapping[str, float]]) -> dict[str, float]:
        return dict_mean([dict(m) for m in metrics_S])
