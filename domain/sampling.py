"""Sampling defaults of the policy endpoint: what a request gets for what it leaves out, and its bounds.

Plain values with their own validation, shared by the endpoint (which checks each request against
them) and the training loop (which swaps them for a greedy evaluation).
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass, replace


@dataclass(frozen=True, slots=True)
class SamplingDefaults:
    """What a request gets for each parameter it leaves out, and the bounds it may ask for.

    Swapping these (``PolicyEndpoint.set_sampling_defaults``) is how evaluation samples at a
    different temperature from training without touching agent code.
    """

    max_tokens: int = 512
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1
    seed: int | None = None
    max_tokens_limit: int = 8192
    """Largest ``max_tokens`` a request may ask for."""
    max_samples: int = 8
    """Largest ``n`` a request may ask for."""
    max_prompt_tokens: int | None = None
    """Longest rendered prompt served (the model's context); longer ones are refused before sampling."""

    def __post_init__(self) -> None:
        if not 1 <= self.max_tokens <= self.max_tokens_limit:
            raise ValueError(f"max_tokens {self.max_tokens} must lie in [1, {self.max_tokens_limit}]")
        check_temperature(self.temperature)
        check_top_p(self.top_p)
        check_top_k(self.top_k)
        if self.max_samples < 1:
            raise ValueError(f"max_samples must be >= 1, got {self.max_samples}")
        if self.max_prompt_tokens is not None and self.max_prompt_tokens < 1:
            raise ValueError(f"max_prompt_tokens must be >= 1, got {self.max_prompt_tokens}")

    def with_temperature(self, temperature: float) -> SamplingDefaults:
        """The same defaults sampling at ``temperature`` (e.g. 0 for a greedy evaluation)."""
        return replace(self, temperature=temperature)


def check_temperature(value: float) -> None:
    if not (math.isfinite(value) and 0.0 <= value <= 2.0):
        raise ValueError(f"temperature {value} must lie in [0, 2]")


def check_top_p(value: float) -> None:
    if not (math.isfinite(value) and 0.0 < value <= 1.0):
        raise ValueError(f"top_p {value} must lie in (0, 1]")


def check_top_k(value: int) -> None:
    if value != -1 and value < 1:
        raise ValueError(f"top_k {value} must be -1 (no limit) or >= 1")


def derive_seed(*parts: int | str) -> int:
    """A 62-bit sampling seed from ``parts`` (e.g. the run's seed and a rollout's place in its batch).

    Stable across processes and runs, unlike ``hash``: the same parts always give the same seed.
    """
    digest = hashlib.blake2b(repr(parts).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") >> 2
