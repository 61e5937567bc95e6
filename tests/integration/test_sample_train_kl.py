"""The sampler-trainer KL (tinker-cookbook's ``optim/kl_sample_train_v1``/``v2``) in every training step.

The logprobs the sampler reported when it sampled ride in each datum; the trainer's forward-backward
returns its own for the same tokens (``ForwardBackwardOutput.logprobs_D``, as the Tinker SDK returns
``loss_fn_outputs[i]["logprobs"]``); ``train_step`` hands both to ``compute_kl_sample_train``. The SkyRL
run in ``test_tinker_server`` checks the same keys on the Tinker backend.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path

import pytest

from adapters.cookbook.training import CookbookTrainingData, sample_train_kl, substeps
from app.config import load_config
from app.launch import train
from app.usecases.steps import TrainingSettings, train_step
from domain.metric_names import KL_SAMPLE_TRAIN_V1, KL_SAMPLE_TRAIN_V2, SAMPLING_ENTROPY
from ports.policy import AdamParams, ForwardBackwardOutput, LogprobScorer, LossName, TrainingDatum
from ports.training_data import KLPenalty
from tests.support.runs import batch_lines

KEYS = {KL_SAMPLE_TRAIN_V1, KL_SAMPLE_TRAIN_V2, SAMPLING_ENTROPY}


@pytest.mark.slow
async def test_every_batch_logs_a_near_zero_kl_on_the_local_backend(tmp_path: Path) -> None:
    """The local sampler and trainer run the same weights in float32: they agree up to rounding.

    Measured on this project's tiny model: |v1| <= 5e-8, v2 <= 2e-13 (one substep); the bounds leave 1000x.
    """
    cfg = load_config(
        None,
        [
            f"log_path={tmp_path / 'run'}",
            "agent=tests.integration.training_agents:always_seven_agent",
            "n_runners=1",
            "batch_size=2",
            "group_size=4",
            "max_tokens=4",
            "learning_rate=1e-2",
            "warm_start.steps=0",
            "eval_every=0",
            "save_every=0",
            "rollout_timeout_s=60",
            "max_batches=2",
            "seed=1",
            "kl_penalty_coef=0",
        ],
    ).unwrap()
    await train(cfg)

    lines = batch_lines(Path(cfg.log_path))
    assert len(lines) == 2
    for m in lines:
        assert m.keys() >= KEYS, sorted(m)
        assert abs(m[KL_SAMPLE_TRAIN_V1]) < 1e-4, m[KL_SAMPLE_TRAIN_V1]
        assert 0.0 <= m[KL_SAMPLE_TRAIN_V2] < 1e-9, m[KL_SAMPLE_TRAIN_V2]
        assert math.isfinite(m[SAMPLING_ENTROPY]) and m[SAMPLING_ENTROPY] > 0


class DriftingTrainer:
    """Answers each forward-backward with the datums' sampling logprobs minus ``drift`` per optimizer step taken."""

    def __init__(self, drift: float) -> None:
        self.drift = drift
        self.steps = 0

    async def forward_backward(self, data_D: Sequence[TrainingDatum], loss: LossName) -> ForwardBackwardOutput:
        shift = self.drift * self.steps
        return ForwardBackwardOutput(
            logprobs_D=tuple(tuple(lp - shift for lp in d.logprobs) for d in data_D), metrics={"loss:sum": 0.0}
        )

    async def optim_step(self, params: AdamParams) -> Mapping[str, float]:
        self.steps += 1
        return {}


class FixedData:
    """The cookbook's minibatches, KL and metric means on ready-made datums."""

    def __init__(self, data_D: list[TrainingDatum]) -> None:
        self.data_D = data_D

    async def rl_data(
        self, groups_P: Sequence[object], kl: KLPenalty, reference: LogprobScorer | None
    ) -> tuple[list[TrainingDatum], dict[str, float]]:
        return list(self.data_D), {}

    def minibatches(self, data_D: Sequence[TrainingDatum], num_substeps: int) -> list[list[TrainingDatum]]:
        return substeps(data_D, num_substeps)

    def sample_train_kl(
        self, data_D: Sequence[TrainingDatum], training_logprobs_D: Sequence[Sequence[float]]
    ) -> dict[str, float]:
        return sample_train_kl(data_D, training_logprobs_D)

    def mean_metrics(self, metrics_S: Sequence[Mapping[str, float]]) -> dict[str, float]:
        return CookbookTrainingData().mean_metrics(metrics_S)


def rl_datum(logprob: float) -> TrainingDatum:
    return TrainingDatum((1, 2), (2, 3), logprobs=(0.0, logprob), advantages=(0.0, 1.0), mask=(0.0, 1.0))


@pytest.mark.parametrize(("num_substeps", "v1"), [(1, 0.0), (2, 0.25)])
async def test_the_kl_covers_every_substep_as_the_cookbook_logs_it(num_substeps: int, v1: float) -> None:
    """The cookbook's ``train_step`` gathers the training logprobs of all substeps: the first is on-policy,
    later ones come after an optimizer step, so with 2 substeps half the tokens differ by the drift."""
    data = FixedData([rl_datum(-1.0), rl_datum(-2.0), rl_datum(-0.5), rl_datum(-3.0)])
    settings = TrainingSettings(log_path="unused", learning_rate=1e-3, num_substeps=num_substeps)
    _data_D, metrics = await train_step(DriftingTrainer(drift=0.5), data, settings, [object()])  # type: ignore[arg-type]
    assert metrics[KL_SAMPLE_TRAIN_V1] == pytest.approx(v1)
    assert metrics[KL_SAMPLE_TRAIN_V2] == pytest.approx(0.5 * 0.5**2 * (num_substeps - 1) / 2)
    assert metrics[SAMPLING_ENTROPY] == pytest.approx((1.0 + 2.0 + 0.5 + 3.0) / 4)
