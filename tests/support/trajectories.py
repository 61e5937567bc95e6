"""Assertions on reconstructed trajectories: exactly what the policy saw and sampled, histories that
extend token for token, one cookbook datum per multi-turn trajectory."""

from __future__ import annotations

from collections.abc import Sequence

from adapters.cookbook.rl_types import to_trajectory_group
from adapters.cookbook.training import CookbookTrainingData
from domain.trajectory import ReconstructedTrajectory
from ports.training_data import KLPenalty
from tests.support.samplers import CharSampler


def assert_exact(result: ReconstructedTrajectory, sampler: CharSampler, calls: slice = slice(None)) -> None:
    """Each transition holds exactly what the sampler saw and produced on ``calls``, in order."""
    assert not result.rejections
    assert [t.ob for t in result.transitions] == sampler.prompts[calls]
    assert [t.ac for t in result.transitions] == [o.tokens for o in sampler.outputs[calls]]
    assert [t.logprobs for t in result.transitions] == [o.logprobs for o in sampler.outputs[calls]]


def assert_extends(result: ReconstructedTrajectory) -> None:
    for before, after in zip(result.transitions, result.transitions[1:], strict=False):
        assert after.ob[: len(before.ob) + len(before.ac)] == before.ob + before.ac


async def assert_one_datum_each(trajectories: Sequence[ReconstructedTrajectory]) -> None:
    """The cookbook merges each multi-turn trajectory into one datum holding the history unchanged."""
    group = to_trajectory_group(trajectories, [0.0] * len(trajectories), [{}] * len(trajectories), {})
    data_D, metrics = await CookbookTrainingData().rl_data([group], KLPenalty(), None)
    assert len(data_D) == len(trajectories)
    assert metrics["reconstruct/merge_ratio"] == 1.0
    for datum, result in zip(data_D, trajectories, strict=True):
        last = result.transitions[-1]
        assert (*datum.model_input, datum.target_tokens[-1]) == last.ob + last.ac
        assert sum(datum.mask) == sum(len(t.ac) for t in result.transitions)
