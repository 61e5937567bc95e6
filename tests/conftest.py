"""Test order for two test processes: the longest modules first.

``scripts/test.sh`` runs pytest-xdist with ``--dist loadfile``: each process takes whole modules in
collection order. A long module collected last (the Tinker-API server's, alphabetically late) would run
alone at the end while the other process idles; started first, it overlaps everything else. The list
holds the modules that took longest in a ``--durations`` run; the rest keep their order.
"""

from __future__ import annotations

import pytest

LONGEST_FIRST = (
    "test_tinker_server.py",
    "test_training.py",
    "test_async_training.py",
    "test_runner_supervision.py",
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(LONGEST_FIRST)))
