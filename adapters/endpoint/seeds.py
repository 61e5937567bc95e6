"""Each rollout's sampling seeds, from the rollout's own seed rather than the order requests arrive in.

Concurrent rollouts' requests reach the sampler in an order that varies from run to run, so a seed
drawn per request from one shared generator does not fix what a rollout samples. The training loop
gives each rollout a seed derived from the run's seed and the rollout's place in its batch
(``PolicyServer.seed_rollouts``); a request of that rollout then samples with a seed derived from it,
the policy version, which attempt of the rollout it belongs to (in the order attempts first called)
and how many turns that attempt was served before. A request's own ``seed`` still wins.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from domain.sampling import derive_seed


@dataclass(slots=True)
class _Seeded:
    seed: int
    attempts: list[str] = field(default_factory=list)
    """Attempt ids in the order they first asked for a seed."""


class RolloutSeeds:
    """Rollout id -> its seed, until the rollout is forgotten or one of the ``max_rollouts`` most recent."""

    def __init__(self, max_rollouts: int = 65536) -> None:
        self._seeds: OrderedDict[str, _Seeded] = OrderedDict()
        self._max = max_rollouts
        self._lock = threading.Lock()

    def assign(self, seeds: Mapping[str, int]) -> None:
        with self._lock:
            for rollout_id, seed in seeds.items():
                self._seeds[rollout_id] = _Seeded(seed)
                self._seeds.move_to_end(rollout_id)
            while len(self._seeds) > self._max:
                self._seeds.popitem(last=False)

    def seed_of(self, rollout_id: str, attempt_id: str, policy_version: int, turn: int) -> int | None:
        """The seed of the rollout attempt's ``turn``-th request (0: its first), or None for an unseeded rollout."""
        with self._lock:
            seeded = self._seeds.get(rollout_id)
            if seeded is None:
                return None
            if attempt_id not in seeded.attempts:
                seeded.attempts.append(attempt_id)
            return derive_seed(seeded.seed, policy_version, seeded.attempts.index(attempt_id), turn)

    def forget(self, rollout_ids: Sequence[str]) -> None:
        with self._lock:
            for rollout_id in rollout_ids:
                self._seeds.pop(rollout_id, None)

    def __len__(self) -> int:
        """How many rollouts have a seed held."""
        with self._lock:
            return len(self._seeds)
