"""Names of the metrics the loop, the console and the report agree on (the cookbook's keys)."""

from __future__ import annotations

TRAIN_REWARD = "env/all/reward/total"
"""Mean total reward per trajectory in ``compute_trajectory_metrics``."""
TEST_PREFIX = "test/"
"""Prefix of the evaluation's metrics."""
TEST_REWARD = TEST_PREFIX + TRAIN_REWARD
KL_SAMPLE_TRAIN_V1 = "optim/kl_sample_train_v1"
"""tinker-cookbook's ``compute_kl_sample_train``: mean over action tokens of sampler minus trainer logprob."""
KL_SAMPLE_TRAIN_V2 = "optim/kl_sample_train_v2"
"""The same, half the mean squared difference (never negative)."""
SAMPLING_ENTROPY = "optim/entropy"
"""The same function's minus mean sampler logprob of the action tokens (nats per token)."""
