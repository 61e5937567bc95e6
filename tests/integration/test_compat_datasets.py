"""The seed-compatible dataset names build real tinker-cookbook types with the original behaviour."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tinker_cookbook.rl.types import EnvGroupBuilder, RLDataset

from app.faces.compat import AGLDataset, AGLDatasetBuilder, AGLDummyEnv, dataset_to_env_group_builders


async def test_builder_splits_train_and_validation_like_the_original() -> None:
    train, val = await AGLDatasetBuilder(batch_size=2, train_dataset=[f"t{i}" for i in range(10)], group_size=3)()
    assert isinstance(train, RLDataset) and isinstance(val, RLDataset)
    assert len(train.dataset) == 7 and len(val.dataset) == 3
    assert len(train) == 3  # 7 tasks, batch 2, drop-last
    batch = train.get_batch(0)
    assert all(isinstance(b, EnvGroupBuilder) and b.num_envs == 3 for b in batch)
    envs = await batch[0].make_envs()
    assert len(envs) == 3 and all(isinstance(e, AGLDummyEnv) and e.task == batch[0].task for e in envs)
    (val_batch,) = [val.get_batch(i) for i in range(len(val))]
    assert [b.num_envs for b in val_batch] == [1, 1, 1]
    assert sorted(b.task for b in val_batch) == sorted(val.dataset)


async def test_stepping_a_dummy_env_says_why_it_cannot() -> None:
    with pytest.raises(NotImplementedError, match="runner"):
        await AGLDummyEnv("x").initial_observation()


async def test_tasks_load_from_a_jsonl_file(tmp_path: Path) -> None:
    path = tmp_path / "tasks.jsonl"
    path.write_text("\n".join(json.dumps({"q": i}) for i in range(4)))
    train, val = await AGLDatasetBuilder(batch_size=2, train_file=str(path), val_dataset=[{"q": 9}])()
    assert sorted(t["q"] for t in train.dataset) == [0, 1, 2, 3]
    assert [b.task for b in dataset_to_env_group_builders(val)] == [{"q": 9}]


async def test_unsupported_file_and_missing_train_set_are_clear_errors(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="unsupported task file"):
        await AGLDatasetBuilder(batch_size=1, train_file=str(tmp_path / "tasks.txt"))()
    with pytest.raises(ValueError, match="No train dataset"):
        await AGLDatasetBuilder(batch_size=1)()


def test_every_epoch_is_reshuffled_with_drop_last() -> None:
    dataset = AGLDataset(list(range(5)), batch_size=2, n_epochs=2, seed=3)
    assert len(dataset.indices) == 8 and len(dataset) == 4
    assert all(len(set(dataset.indices[e * 4 : (e + 1) * 4])) == 4 for e in range(2))
