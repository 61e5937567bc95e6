"""What the use cases need from the agent-facing policy endpoint.

The endpoint serves the current weights to the agents; the loop swaps them after each train step,
switches sampling defaults for evaluation, and registers the endpoint as the agents' LLM resource.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol

from domain.sampling import SamplingDefaults
from ports.policy import Sampler


class PolicyServer(Protocol):
    def set_sampler(self, sampler: Sampler) -> int:
        """Serve these weights from the next request on; returns the new policy version."""
        ...

    def set_sampling_defaults(self, defaults: SamplingDefaults) -> SamplingDefaults:
        """Replace the defaults; returns the previous ones to restore later."""
        ...

    def set_temperature(self, temperature: float) -> SamplingDefaults:
        """Change only the default temperature; returns the previous defaults."""
        ...

    def seed_rollouts(self, seeds: Mapping[str, int]) -> None:
        """Sample each of these rollouts (id -> seed) from its own seed, whatever order its requests arrive in."""
        ...

    def forget(self, rollout_ids: Sequence[str]) -> None:
        """Drop what the endpoint holds for these finished rollouts (e.g. their served turns)."""
        ...

    def backend_failure(self) -> str | None:
        """Why the policy backend failed the latest request that reached it (one line), if it did."""
        ...

    def take_metrics(self) -> dict[str, float]:
        """The endpoint's counters since the last call (e.g. how multi-turn prompts were built)."""
        ...

    def as_resource(self) -> object:
        """The LLM resource agents read the endpoint from (opaque to the use cases)."""
        ...
