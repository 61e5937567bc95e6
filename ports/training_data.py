"""What the training use case needs to turn groups into datums and to describe a step.

The adapter is tinker-cookbook's data processing (advantages, prefix-merged datums, KL shaping,
sampling-vs-training KL, metric means); the loop only sees the port's ``TrainingDatum``s.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol, TypeVar

from ports.policy import LogprobScorer, TrainingDatum

GroupT_contra = TypeVar("GroupT_contra", contravariant=True)


@dataclass(frozen=True, slots=True)
class KLPenalty:
    """KL-to-reference shaping of the advantages; off when ``coef`` is 0."""

    coef: float = 0.0
    discount_factor: float = 0.0


class TrainingDataBuilder(Protocol[GroupT_contra]):
    """Datums for the RL loss and the metrics that describe them."""

    async def rl_data(
        self, groups_P: Sequence[GroupT_contra], kl: KLPenalty, reference: LogprobScorer | None
    ) -> tuple[list[TrainingDatum], dict[str, float]]:
        """Advantages and datums of a batch (empty when no group has an action token)."""
        ...

    def minibatches(self, data_D: Sequence[TrainingDatum], num_substeps: int) -> list[list[TrainingDatum]]:
        """The batch split into ``num_substeps`` optimizer steps (fewer when there are fewer datums)."""
        ...

    def sample_train_kl(
        self, data_D: Sequence[TrainingDatum], training_logprobs_D: Sequence[Sequence[float]]
    ) -> dict[str, float]:
        """KL between the sampling and the training-forward logprobs, and the sampling entropy."""
        ...

    def mean_metrics(self, metrics_S: Sequence[Mapping[str, float]]) -> dict[str, float]:
        """Each key's mean over the dictionaries that hold it (a missing key is not a zero): a step's metrics
        over its substeps or minibatches."""
        ...
