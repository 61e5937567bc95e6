"""What the rollout loop needs from the runner processes this run started (none for remote runners).

Agent-lightning's store cannot tell that a runner process died (its rollout stays ``running``) nor
stop a hung agent, so the loop asks the pool: which store worker ids belong to dead processes (their
rollouts end at once), restart the process of a hung rollout, and whether any runner is left at all.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Protocol


class RunnerPool(Protocol):
    """Supervised runner processes, identified in the store by their worker ids."""

    @property
    def alive(self) -> int:
        """Runner processes running now."""
        ...

    @property
    def given_up(self) -> bool:
        """No runner is alive and none will be restarted: no rollout can ever run."""
        ...

    def describe(self) -> str:
        """One line on the pool's health (alive, restarts, last exit code), for error messages."""
        ...

    def first_error(self) -> str | None:
        """The first error the runner processes logged (the agent's, its framework's), as one line; None if none
        (or the runners live elsewhere): what a run that cannot train names as the likely cause."""
        ...

    def dead_workers(self) -> Collection[str]:
        """Store worker ids of every process that has died; never reused, so their rollouts are lost."""
        ...

    def restart(self, worker_id: str) -> None:
        """Kill and respawn the process serving ``worker_id`` (its agent hung); unknown ids are ignored."""
        ...
