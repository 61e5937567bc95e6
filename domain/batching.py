"""Dataset batching as in the original ``AGLDataset``: seeded per-epoch shuffle with drop-last.

Index arithmetic only; the task payloads stay wherever the caller keeps them.
"""

from __future__ import annotations

from random import Random


def epoch_indices(n_items: int, *, batch_size: int, n_epochs: int, shuffle: bool, seed: int) -> tuple[int, ...]:
    """Dataset indices for all epochs, flattened.

    With ``shuffle`` every epoch is a fresh permutation from one ``Random(seed)`` stream and drops
    its tail that does not fill a batch; without it every epoch is ``0..n-1`` in order (the tail
    then rolls into the next epoch's batches, as in the original).
    """
    if batch_size <= 0:
        raise ValueError(f"batch_size must be positive, got {batch_size}")
    if n_epochs < 0 or n_items < 0:
        raise ValueError(f"n_items and n_epochs must be non-negative, got {n_items}, {n_epochs}")
    indices: list[int] = []
    rng = Random(seed)
    for _ in range(n_epochs):
        epoch = list(range(n_items))
        if shuffle:
            rng.shuffle(epoch)
            epoch = epoch[: len(epoch) - len(epoch) % batch_size]
        indices.extend(epoch)
    return tuple(indices)


def n_batches(n_indices: int, batch_size: int) -> int:
    """Number of full batches (a partial last batch is not counted, as in the original)."""
    return n_indices // batch_size


def batch_positions(n_indices: int, batch_size: int, index: int) -> range:
    """Positions into the flattened indices that make up batch ``index``."""
    if not 0 <= index < max(n_batches(n_indices, batch_size), 1):
        raise IndexError(f"batch {index} out of range for {n_batches(n_indices, batch_size)} batches")
    return range(index * batch_size, min((index + 1) * batch_size, n_indices))


def split_train_val(n_items: int, *, train_fraction: float, seed: int) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """Seeded split into sorted train and validation index sets, as the original builder does."""
    if not 0.0 <= train_fraction <= 1.0:
        raise ValueError(f"train_fraction must be within [0, 1], got {train_fraction}")
    indices = list(range(n_items))
    Random(seed).shuffle(indices)
    cut = int(n_items * train_fraction)
    return tuple(sorted(indices[:cut])), tuple(sorted(indices[cut:]))
