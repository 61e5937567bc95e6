"""The policy the agents sample from and the trainer that improves it.

Shaped after tinker's ``SamplingClient`` and ``TrainingClient`` so that the Tinker adapter stays a
thin translation, while the local PyTorch backend implements the same calls in process.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Protocol, runtime_checkable


class LossName(StrEnum):
    """Losses with Tinker's definitions (``tinker.types.LossFnType``)."""

    IMPORTANCE_SAMPLING = "importance_sampling"
    PPO = "ppo"
    CISPO = "cispo"
    CROSS_ENTROPY = "cross_entropy"


class StopReason(StrEnum):
    STOP = "stop"
    """A stop token or stop string ended the sequence."""
    LENGTH = "length"
    """``max_tokens`` was reached."""


@dataclass(frozen=True, slots=True)
class SamplingParams:
    """Mirror of ``tinker.types.SamplingParams``."""

    max_tokens: int
    temperature: float = 1.0
    top_k: int = -1
    top_p: float = 1.0
    stop_token_ids: tuple[int, ...] = ()
    stop_strings: tuple[str, ...] = ()
    seed: int | None = None


@dataclass(frozen=True, slots=True)
class SampledSequence:
    """One sampled continuation with the exact logprob of each sampled token."""

    tokens: tuple[int, ...]
    logprobs: tuple[float, ...]
    stop_reason: StopReason


@dataclass(frozen=True, slots=True)
class TrainingDatum:
    """Mirror of a ``tinker.Datum`` as the cookbook builds it for RL and SFT losses.

    All per-token sequences have the length of ``model_input`` (targets are shifted by one).
    """

    model_input: tuple[int, ...]
    target_tokens: tuple[int, ...]
    weights: tuple[float, ...] = ()
    """cross_entropy only: per-token loss weights."""
    logprobs: tuple[float, ...] = ()
    """RL losses only: sampling logprobs of the target tokens."""
    advantages: tuple[float, ...] = ()
    """RL losses only: per-token advantages (0 where the token is not an action)."""
    mask: tuple[float, ...] = ()
    """RL losses only: 1.0 on action tokens."""


@dataclass(frozen=True, slots=True)
class AdamParams:
    """Mirror of ``tinker.types.AdamParams`` (same defaults)."""

    learning_rate: float = 1e-4
    beta1: float = 0.9
    beta2: float = 0.95
    eps: float = 1e-12
    weight_decay: float = 0.0
    grad_clip_norm: float = 0.0


@dataclass(frozen=True, slots=True)
class ForwardBackwardOutput:
    """Per-datum training-forward logprobs of the targets, and loss metrics."""

    logprobs_D: tuple[tuple[float, ...], ...]
    metrics: Mapping[str, float] = field(default_factory=dict)


class Sampler(Protocol):
    """Samples continuations from one fixed set of weights."""

    async def sample(
        self, prompt_tokens: Sequence[int], params: SamplingParams, num_samples: int = 1
    ) -> Sequence[SampledSequence]: ...


@runtime_checkable
class LogprobScorer(Protocol):
    """A frozen policy that scores a token sequence (the KL reference)."""

    async def compute_logprobs(self, tokens: Sequence[int]) -> list[float | None]:
        """The logprob of each token given the ones before it (``None`` for the first)."""
        ...


class Trainer(Protocol):
    """A trainable policy: gradients, optimizer steps, fresh samplers, checkpoints."""

    async def forward_backward(self, data_D: Sequence[TrainingDatum], loss: LossName) -> ForwardBackwardOutput: ...

    async def optim_step(self, params: AdamParams) -> Mapping[str, float]: ...

    async def sampler(self, name: str) -> Sampler:
        """Publish the current weights under ``name`` and return a sampler bound to them."""
        ...

    async def save_state(self, name: str) -> str:
        """Save weights and optimizer state; returns the path ``load_state`` accepts."""
        ...

    async def load_state(self, path: str) -> None:
        """Continue from a state ``save_state`` wrote (weights and optimizer)."""
        ...

    async def save_weights_for_sampler(self, name: str) -> str:
        """Save the current weights for sampling and scoring; returns the path ``scorer`` accepts."""
        ...

    async def scorer(self, path: str) -> LogprobScorer:
        """A frozen scorer on weights ``save_weights_for_sampler`` saved (the KL reference).

        Opening it leaves the weights being trained as they are, also after a resume on a fresh process.
        """
        ...
