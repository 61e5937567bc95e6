"""Names of the metrics the loop, the console and the report agree on (the cookbook's keys)."""

from __future__ import annotations

TRAIN_REWARD = "env/all/reward/total"
"""Mean total reward per trajectory in ``compute_trajectory_metrics``."""
TEST_PREFIX = "test/"
"""Prefix of the evaluation's metrics."""
TEST_REWARD = TEST_PREFIX + TRAIN_REWARD
