"""Small statistics over metric dictionaries."""

from __future__ import annotations

from collections.abc import Mapping, Sequence


def mean_per_key(metrics_S: Sequence[Mapping[str, float]]) -> dict[str, float]:
    """The mean of each key over the dictionaries that hold it (a missing key is not a zero)."""
    values: dict[str, list[float]] = {}
    for metrics in metrics_S:
        for key, value in metrics.items():
            values.setdefault(key, []).append(float(value))
    return {key: sum(vs) / len(vs) for key, vs in values.items()}
