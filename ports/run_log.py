"""Where a run leaves its trace on disk: checkpoint records, the KL reference, metrics, rollouts and transcripts.

Checkpoint records follow tinker-cookbook's ``checkpoints.jsonl``; metrics its ``ml_log`` loggers;
transcripts are HTML pages of decoded rollouts under ``log_path/transcripts``.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Protocol

from domain.groups import RolloutResult, ScoredGroup

TRANSCRIPTS_DIR = "transcripts"
"""The folder of ``log_path`` that holds the transcript pages (``train-000003.html``, ``eval-000010.html``)
and the ``index.html`` that ``agl-tinker report`` writes beside them."""
TRANSCRIPT_INDEX = "index.html"
"""The page of ``TRANSCRIPTS_DIR`` that links the others (``agl-tinker report`` writes it)."""


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """A resumable point: ``batch`` batches are done and ``state_path`` holds weights and optimizer."""

    name: str
    batch: int
    state_path: str
    final: bool = False
    """Written at the end of a run (or at its early stop): resuming it trains nothing, unless the run now
    plans more batches than ``planned_batches`` (a larger ``max_batches``), which continue from it."""
    planned: int | None = None
    """Final records: the batches the run planned when it wrote this (more than ``batch`` after an early stop)."""
    frontier: int | None = None
    """Asynchronous runs: the first dataset batch whose groups had not been started (``batch`` counts steps)."""
    pending: tuple[tuple[int, int], ...] = ()
    """Asynchronous runs: (batch, group) of every group before ``frontier`` not trained yet (in flight at the
    checkpoint): a resumed run rolls them out again, and trains no group twice."""
    schedule: tuple[int, ...] = ()
    """The learning-rate schedule's segment ends (``domain.lr_schedule``): the batches the run first planned,
    then each extension's; none in records written before they were kept."""

    @property
    def planned_batches(self) -> int:
        return self.planned if self.planned is not None else self.batch


class CheckpointLog(Protocol):
    """The run's checkpoint records, newest last."""

    def last(self) -> Checkpoint | None:
        """The newest resumable record, if any."""
        ...

    def append(self, checkpoint: Checkpoint) -> None:
        """Record a checkpoint whose state is already saved (so a crash mid-save leaves no record)."""
        ...

    def reference_state(self) -> str | None:
        """Where the KL reference policy's weights were saved (``Trainer.scorer`` opens them), if recorded."""
        ...

    def set_reference_state(self, state_path: str) -> None: ...


class MetricsLog(Protocol):
    """One line of metrics per step."""

    def log_metrics(self, metrics: Mapping[str, float], step: int) -> None: ...

    def truncate_from(self, step: int) -> None:
        """Forget the lines of ``step`` and later: a resumed run logs them again, so none is doubled."""
        ...


class RolloutLog(Protocol):
    """Every training rollout as rebuilt, written once it finishes, so it can be read after the trainer let go of it."""

    def append(self, batch: int, result: RolloutResult, group: int | None = None) -> None:
        """Record one finished rollout of dataset batch ``batch`` (its status, tokens, logprobs and rewards);
        ``group``: its group's index in the batch, where the loop knows it (the asynchronous one)."""
        ...

    def truncate_from(self, batch: int, groups: Collection[tuple[int, int]] = ()) -> None:
        """Forget the rollouts of dataset batch ``batch`` and later, and those of the (batch, group) ``groups``:
        a resumed run rolls them out again, so none is written twice."""
        ...


class TranscriptKind(StrEnum):
    """What a transcript page shows (the first part of its file name)."""

    TRAIN = "train"
    """Some groups of a training batch (an asynchronous run's step), with their GRPO advantages."""
    EVAL = "eval"
    """An evaluation on the test set."""


class TranscriptLog(Protocol):
    """Readable pages of what the agent did: each rollout's turns decoded with the policy's tokenizer."""

    def write(self, kind: TranscriptKind, index: int, groups: Sequence[ScoredGroup]) -> str:
        """Write (or rewrite) the page of ``kind`` for batch ``index`` showing ``groups``; returns where it went."""
        ...

    def truncate_from(self, index: int) -> None:
        """Remove the pages of batch ``index`` and later (a resumed run writes them again) and an index of pages
        that named them."""
        ...
