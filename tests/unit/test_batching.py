"""Seeded epoch shuffling, batching and train/validation split (pure domain)."""

from __future__ import annotations

from collections import Counter
from random import Random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from domain.batching import batch_positions, epoch_indices, n_batches, split_train_val


class TestEpochIndices:
    @given(st.integers(0, 60), st.integers(1, 16), st.integers(0, 4), st.integers(0, 10_000))
    def test_each_index_once_per_epoch_except_the_dropped_tail(
        self, n: int, batch_size: int, n_epochs: int, seed: int
    ) -> None:
        indices = epoch_indices(n, batch_size=batch_size, n_epochs=n_epochs, shuffle=True, seed=seed)
        per_epoch = n - n % batch_size
        assert len(indices) == per_epoch * n_epochs
        for epoch in range(n_epochs):
            chunk = indices[epoch * per_epoch : (epoch + 1) * per_epoch]
            assert len(set(chunk)) == len(chunk)
            assert set(chunk) <= set(range(n))

    def test_matches_the_original_random_stream(self) -> None:
        rng = Random(7)
        expected: list[int] = []
        for _ in range(2):
            epoch = list(range(10))
            rng.shuffle(epoch)
            expected.extend(epoch[:8])
        assert list(epoch_indices(10, batch_size=4, n_epochs=2, shuffle=True, seed=7)) == expected

    def test_no_shuffle_keeps_order_and_tail(self) -> None:
        assert epoch_indices(5, batch_size=2, n_epochs=2, shuffle=False, seed=0) == (0, 1, 2, 3, 4, 0, 1, 2, 3, 4)

    def test_bad_batch_size_is_a_clear_error(self) -> None:
        with pytest.raises(ValueError, match="batch_size"):
            epoch_indices(5, batch_size=0, n_epochs=1, shuffle=True, seed=0)


class TestBatches:
    @given(st.integers(0, 50), st.integers(1, 8))
    def test_batches_cover_full_batches_only(self, n: int, batch_size: int) -> None:
        covered = Counter(i for b in range(n_batches(n, batch_size)) for i in batch_positions(n, batch_size, b))
        assert sum(covered.values()) == (n // batch_size) * batch_size
        assert all(v == 1 for v in covered.values())

    def test_out_of_range_batch_raises(self) -> None:
        with pytest.raises(IndexError):
            batch_positions(10, 5, 2)


class TestSplit:
    @given(st.integers(0, 100), st.floats(0, 1), st.integers(0, 1000))
    def test_split_partitions_the_indices(self, n: int, fraction: float, seed: int) -> None:
        train, val = split_train_val(n, train_fraction=fraction, seed=seed)
        assert sorted(train + val) == list(range(n))
        assert len(train) == int(n * fraction)
        assert list(train) == sorted(train) and list(val) == sorted(val)
