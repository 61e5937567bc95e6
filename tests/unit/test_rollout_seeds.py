"""Sampling seeds come from a rollout's own seed and the request's place in it, never from arrival order."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from adapters.endpoint.seeds import RolloutSeeds
from domain.sampling import derive_seed


def test_a_derived_seed_is_the_same_in_every_process_and_version() -> None:
    """A run's seeds must not change with the interpreter (``hash`` of a str does, per process)."""
    assert derive_seed(0, "train", 0, 0, 0) == 1865889042754719363
    assert derive_seed(0, "train", 0, 0, 1) == 2845464595066289831


@given(st.lists(st.integers() | st.text(), max_size=6))
def test_a_derived_seed_fits_62_bits(parts: list[int | str]) -> None:
    assert 0 <= derive_seed(*parts) < 2**62


def test_each_turn_attempt_and_policy_version_of_a_rollout_has_its_own_seed() -> None:
    seeds = RolloutSeeds()
    seeds.assign({"ro-1": 11, "ro-2": 12})
    first = seeds.seed_of("ro-1", "at-a", 1, 0)
    assert first is not None and seeds.seed_of("ro-1", "at-a", 1, 0) == first
    others = [
        seeds.seed_of("ro-1", "at-a", 1, 1),  # the next turn
        seeds.seed_of("ro-1", "at-b", 1, 0),  # a retried attempt
        seeds.seed_of("ro-1", "at-a", 2, 0),  # newer weights
        seeds.seed_of("ro-2", "at-a", 1, 0),  # another rollout
    ]
    assert len({first, *others}) == 5


def test_attempts_are_told_apart_by_the_order_they_first_call_not_by_their_random_ids() -> None:
    runs = []
    for attempts in (["at-x", "at-y"], ["at-q", "at-p"]):
        seeds = RolloutSeeds()
        seeds.assign({"ro-1": 7})
        runs.append([seeds.seed_of("ro-1", attempt, 1, 0) for attempt in attempts])
    assert runs[0] == runs[1]


def test_a_rollout_without_a_seed_or_forgotten_gets_none() -> None:
    seeds = RolloutSeeds(max_rollouts=2)
    assert seeds.seed_of("ro-1", "at-a", 1, 0) is None
    seeds.assign({"ro-1": 1, "ro-2": 2})
    seeds.forget(["ro-1"])
    assert seeds.seed_of("ro-1", "at-a", 1, 0) is None
    seeds.assign({"ro-3": 3, "ro-4": 4})  # beyond the bound: the oldest goes
    assert seeds.seed_of("ro-2", "at-a", 1, 0) is None
    assert len(seeds) == 2
