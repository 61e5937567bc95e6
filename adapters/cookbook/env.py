"""Agent-lightning tasks dressed as tinker-cookbook environments and datasets.

Seed-compatible: ``AGLDummyEnv``, ``AGLDummyEnvGroupBuilder``, ``AGLDataset`` and
``AGLDatasetBuilder`` keep the original example's names and signatures. The agent owns the real
environment logic inside its rollout, so the env itself is never stepped; the index arithmetic
lives in ``domain.batching``.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Generic, TypeVar, cast

import chz
import pandas as pd
from returns.result import Failure, Success
from tinker_cookbook.completers import StopCondition
from tinker_cookbook.rl.types import (
    Action,
    Env,
    EnvGroupBuilder,
    Observation,
    RLDataset,
    RLDatasetBuilder,
    StepResult,
)

from domain.batching import batch_positions, epoch_indices, n_batches, split_train_val
from domain.tasks import parse_csv_tasks, parse_json_tasks, parse_jsonl_tasks

T_task = TypeVar("T_task")

logger = logging.getLogger(__name__)


class AGLDummyEnv(Env, Generic[T_task]):
    """Holds one task for the store; stepping it is an error because the agent runs elsewhere."""

    def __init__(self, task: T_task) -> None:
        self.task = task

    async def initial_observation(self) -> tuple[Observation, StopCondition]:
        raise NotImplementedError("AGLDummyEnv is executed by an Agent-lightning runner, not stepped")

    async def step(self, action: Action, *, extra: object | None = None) -> StepResult:
        raise NotImplementedError("AGLDummyEnv is executed by an Agent-lightning runner, not stepped")


class AGLDummyEnvGroupBuilder(EnvGroupBuilder, Generic[T_task]):
    """A GRPO group: ``num_envs`` copies of one task."""

    def __init__(self, task: T_task, num_envs: int) -> None:
        if num_envs < 0:
            raise ValueError(f"num_envs must be non-negative, got {num_envs}")
        self.task = task
        self.num_envs = num_envs

    async def make_envs(self) -> Sequence[AGLDummyEnv[T_task]]:
        return [AGLDummyEnv(self.task) for _ in range(self.num_envs)]

    def logging_tags(self) -> list[str]:
        return []


class AGLDataset(RLDataset, Generic[T_task]):
    """Task list as a cookbook ``RLDataset``: seeded per-epoch shuffle with drop-last.

    ``indices`` holds the flattened dataset indices of all epochs, as in the original.
    """

    def __init__(
        self,
        dataset: Sequence[T_task],
        *,
        batch_size: int,
        shuffle: bool = True,
        group_size: int = 4,
        seed: int = 42,
        n_epochs: int = 1,
    ) -> None:
        self.dataset = dataset
        self.batch_size = batch_size
        self.shuffle = shuffle
        self.group_size = group_size
        self.n_epochs = n_epochs
        self.indices: list[int] = list(
            epoch_indices(len(dataset), batch_size=batch_size, n_epochs=n_epochs, shuffle=shuffle, seed=seed)
        )

    def get_batch(self, index: int) -> Sequence[AGLDummyEnvGroupBuilder[T_task]]:
        return [
            AGLDummyEnvGroupBuilder(self.dataset[self.indices[i]], self.group_size)
            for i in batch_positions(len(self.indices), self.batch_size, index)
        ]

    def __len__(self) -> int:
        return n_batches(len(self.indices), self.batch_size)


def read_task_file(path: str) -> list[object]:
    """Tasks from a ``.jsonl``, ``.json``, ``.csv`` or ``.parquet`` file, each exactly as the file holds it.

    Raises ``ValueError`` naming the file (and line) when it cannot be read as tasks.
    """
    suffix = Path(path).suffix
    if suffix == ".parquet":
        return _read_parquet(path)
    parse = _PARSERS.get(suffix)
    if parse is None:
        raise ValueError(f"unsupported task file type {suffix!r} for {path}: use .jsonl, .json, .csv or .parquet")
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise ValueError(f"{path}: cannot read tasks ({error})") from error
    match parse(text, path):
        case Success(tasks):
            return list(tasks)
        case Failure(problem):
            raise ValueError(str(problem))
    raise AssertionError("unreachable")


_PARSERS = {".jsonl": parse_jsonl_tasks, ".json": parse_json_tasks, ".csv": parse_csv_tasks}


def _read_parquet(path: str) -> list[object]:
    """Rows as dicts with the columns' own types (nulls stay ``None``)."""
    try:
        frame = pd.read_parquet(path)
    except (OSError, ValueError, ImportError) as error:
        raise ValueError(f"{path}: cannot read tasks ({error})") from error
    frame = frame.astype(object).where(frame.notna(), None)
    if frame.empty:
        raise ValueError(f"{path}: holds no tasks")
    return cast(list[object], frame.to_dict(orient="records"))


@chz.chz
class AGLDatasetBuilder(RLDatasetBuilder, Generic[T_task]):
    """Builds train and validation ``AGLDataset``s from files or in-memory task lists.

    Without a validation set the training tasks are split by ``train_val_split``; validation is
    always one batch with group size 1, so every validation task is rolled out exactly once.
    """

    batch_size: int
    n_epochs: int = 1
    train_file: str | None = None
    val_file: str | None = None
    train_dataset: Sequence[T_task] | None = None
    val_dataset: Sequence[T_task] | None = None
    train_val_split: float = 0.7
    shuffle: bool = True
    group_size: int = 4
    seed: int = 42

    async def __call__(self) -> tuple[AGLDataset[T_task], AGLDataset[T_task]]:
        if self.train_file is not None:
            train = cast(Sequence[T_task], read_task_file(self.train_file))
        elif self.train_dataset is not None:
            train = self.train_dataset
        else:
            raise ValueError("No train dataset provided: set train_file or train_dataset")
        if self.val_file is not None:
            val = cast(Sequence[T_task], read_task_file(self.val_file))
        elif self.val_dataset is not None:
            val = self.val_dataset
        else:
            train_idx, val_idx = split_train_val(len(train), train_fraction=self.train_val_split, seed=self.seed)
            logger.warning(
                "No validation dataset provided, splitting train dataset into train (%d) and validation (%d)",
                len(train_idx),
                len(val_idx),
            )
            train, val = [train[i] for i in train_idx], [train[i] for i in val_idx]
        return (
            AGLDataset(
                train,
                batch_size=self.batch_size,
                n_epochs=self.n_epochs,
                shuffle=self.shuffle,
                group_size=self.group_size,
                seed=self.seed,
            ),
            AGLDataset(val, batch_size=max(len(val), 1), shuffle=False, group_size=1),
        )
