"""What the application needs from a rollout store and from a span-to-triplet adapter.

Spans are opaque here (``SpanT``): the store hands them out and the triplet source reads them, so
no Agent-lightning type crosses into the application's signatures.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol, TypeVar

from domain.triplets import RawTriplet

LOST = "lost"
"""Terminal status of a rollout the store no longer knows (it came back empty after an outage)."""


class StoreUnavailable(RuntimeError):
    """The store stayed unreachable longer than the run tolerates; the message names it and for how long."""


SpanT = TypeVar("SpanT")
SpanT_co = TypeVar("SpanT_co", covariant=True)
SpanT_contra = TypeVar("SpanT_contra", contravariant=True)


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """Store-side retries (Agent-lightning's ``RolloutConfig``), used only when asked for."""

    max_attempts: int = 1
    """Attempts including the first; 1 means no retry."""
    retry_on: tuple[str, ...] = ("failed", "timeout", "unresponsive")
    """Attempt statuses that trigger another attempt."""
    attempt_timeout_s: float | None = None
    unresponsive_s: float | None = None


@dataclass(frozen=True, slots=True)
class RolloutRequest:
    """One task to enqueue."""

    task: object
    mode: str
    """``train``, ``val`` or ``test``."""
    resources_id: str | None
    seed: int | None = None
    """The rollout's sampling seed: the endpoint derives each of its requests' seeds from it (None: arrival order)."""


@dataclass(frozen=True, slots=True)
class TakenRollout:
    """A rollout a runner has taken, and which worker runs it (when it started is timed by the caller's own clock:
    the store's may be another machine's)."""

    worker_id: str | None


class RolloutStore(Protocol[SpanT_co]):
    """Queue of rollouts that runners elsewhere execute and trace, and the resources they use."""

    async def add_resources(self, resources: Mapping[str, object]) -> str:
        """Publish resources (e.g. the policy endpoint) for the next rollouts; returns their id."""
        ...

    async def enqueue_many(self, requests: Sequence[RolloutRequest], retry: RetryPolicy) -> Sequence[str]:
        """Enqueue in order and return the new rollout ids in the same order."""
        ...

    async def terminal_statuses(self, rollout_ids: Sequence[str]) -> Mapping[str, str]:
        """The subset of ``rollout_ids`` that is terminal now, with its status; one call, no waiting.

        Ids the store has forgotten (it restarted empty) come back as ``LOST`` so that no batch waits
        for them. Every method may raise ``StoreUnavailable`` once the store stays unreachable.
        """
        ...

    async def taken(self, rollout_ids: Sequence[str]) -> Mapping[str, TakenRollout]:
        """The subset of ``rollout_ids`` that a runner has taken (out of the queue); one call."""
        ...

    async def latest_spans(self, rollout_id: str) -> Sequence[SpanT_co]:
        """Spans of the rollout's latest attempt, in store order."""
        ...

    async def cancel(self, rollout_ids: Sequence[str]) -> None:
        """Mark rollouts cancelled so that no runner starts them; unknown ids are ignored."""
        ...

    async def forget(self, rollout_ids: Sequence[str]) -> None:
        """Drop finished rollouts the run will not read again (trained), so memory stays flat over a long run.

        A store that cannot forget keeps them; failing to forget never fails the run.
        """
        ...


class TripletSource(Protocol[SpanT_contra]):
    """Turns one rollout's spans into ordered, still untrusted triplets."""

    def adapt(self, spans: Sequence[SpanT_contra]) -> Sequence[RawTriplet]: ...

    def take_metrics(self) -> Mapping[str, float]:
        """Counts of the calls it left out since the last call (e.g. other agents' calls under ``agent_match``)."""
        ...
