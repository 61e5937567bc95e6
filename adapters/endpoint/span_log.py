"""The endpoint's own record of its rollouts, for a store that keeps no spans (Agent-lightning 1.x).

Agent-lightning 1.x's ``agl-server`` holds rollouts and their events, but no spans and no sequence
counter. The endpoint still records what it served and the rewards agents post the way it records
them in a 0.x store: one span per completion choice and one reward span per reward event, each
numbered from one counter per rollout as it is recorded, so ``domain.reward_order`` places rewards
by that order, on no clock. The rollout-store adapter (``adapters.agl1.store``) opens each rollout
it enqueues here, ends it once the server calls it terminal (or it is cancelled), and forgets it once
trained; calls for a rollout that is not open are refused, so an agent left over from an ended
rollout fails fast instead of being served.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from enum import Enum
from typing import Protocol

from agentlightning import Span


class RolloutState(Enum):
    OPEN = "open"
    """Enqueued and not yet terminal: its agent is served."""
    ENDED = "ended"
    """Terminal or cancelled: its spans are kept until forgotten, its agent is refused."""
    UNKNOWN = "unknown"
    """Never enqueued by this run, or forgotten."""


class SpanRecorder(Protocol):
    """Where the endpoint records completions and rewards: a 0.x ``LightningStore`` or a ``SpanLog``."""

    async def add_span(self, span: Span) -> Span | None: ...

    async def get_next_span_sequence_id(self, rollout_id: str, attempt_id: str) -> int: ...


class RolloutGate(Protocol):
    """Which rollouts the endpoint serves under the 1.x URL shapes."""

    def state(self, rollout_id: str) -> RolloutState: ...


class SpanLog:
    """Spans per rollout, numbered from one counter per rollout (from 1), in memory until forgotten."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._spans: dict[str, list[Span]] = {}
        self._next: dict[str, int] = {}
        self._ended: set[str] = set()

    def open(self, rollout_ids: Iterable[str]) -> None:
        with self._lock:
            for rollout_id in rollout_ids:
                self._spans.setdefault(rollout_id, [])
                self._next.setdefault(rollout_id, 1)

    def end(self, rollout_ids: Iterable[str]) -> None:
        with self._lock:
            self._ended.update(rid for rid in rollout_ids if rid in self._spans)

    def forget(self, rollout_ids: Iterable[str]) -> None:
        with self._lock:
            for rollout_id in rollout_ids:
                self._spans.pop(rollout_id, None)
                self._next.pop(rollout_id, None)
                self._ended.discard(rollout_id)

    def state(self, rollout_id: str) -> RolloutState:
        with self._lock:
            if rollout_id not in self._spans:
                return RolloutState.UNKNOWN
            return RolloutState.ENDED if rollout_id in self._ended else RolloutState.OPEN

    def __len__(self) -> int:
        with self._lock:
            return len(self._spans)

    def spans(self, rollout_id: str) -> list[Span]:
        """The rollout's spans in sequence order (empty for an unknown rollout)."""
        with self._lock:
            return sorted(self._spans.get(rollout_id, []), key=lambda s: s.sequence_id)

    async def get_next_span_sequence_id(self, rollout_id: str, attempt_id: str) -> int:
        """The rollout's next number; ``KeyError`` for a rollout not held (the provider counts it unnumbered)."""
        with self._lock:
            number = self._next[rollout_id]
            self._next[rollout_id] = number + 1
            return number

    async def add_span(self, span: Span) -> Span | None:
        """Keep ``span`` if its rollout is held (an ended one too: the call began before it ended)."""
        with self._lock:
            held = self._spans.get(span.rollout_id)
            if held is None:
                return None
            held.append(span)
            self._next[span.rollout_id] = max(self._next[span.rollout_id], span.sequence_id + 1)
            return span
