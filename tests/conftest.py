"""Test order for two test processes: the longest modules first.

``scripts/test.sh`` runs pytest-xdist with ``--dist loadfile``: each process takes whole modules in
collection order. A long module collected last (the learning checks, the Tinker-API server's) would run alone
at the end while the other process idles; started first, it overlaps everything else. The list holds the
modules that took longest in a ``--durations`` run, longest first (60 s or more each); the rest keep their order.
"""

from __future__ import annotations

from pathlib import Path

import pytest

TESTS = Path(__file__).parent

LONGEST_FIRST = (
    "integration/test_learning.py",
    "integration/test_learning_real_model.py",
    "integration/test_training.py",
    "integration/tinker/server/test_tinker_server.py",
    "integration/test_async_training.py",
    "integration/runner/test_agent_envs.py",
    "integration/runner/test_runner_supervision.py",
    "integration/test_examples.py",
    "integration/test_faults.py",
    "integration/agl1/test_agl1_training.py",
    "integration/runner/test_distributed.py",
    "integration/runner/test_runner_env.py",
    "integration/runner/test_runner_terminal_and_errors.py",
    "integration/test_agl_algorithm.py",
    "integration/test_clock_skew.py",
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.relative_to(TESTS).as_posix(), len(LONGEST_FIRST)))
