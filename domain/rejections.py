"""Why a triplet could not become a transition.

Every triplet that reconstruction drops carries one of these reasons, so a run can say exactly
what it lost and why instead of dropping it silently::

    RejectionReason
    ├── MALFORMED_PAYLOAD        prompt or response is not a mapping
    ├── NO_TOKEN_IDS             no ``token_ids`` key (the endpoint did not return them)
    ├── EMPTY_TOKEN_IDS          ``token_ids`` present but empty
    ├── BAD_TOKEN_IDS            not a list of non-negative ints
    ├── TOKEN_OUT_OF_VOCAB       an id beyond the policy's vocabulary (another model's tokens)
    ├── LOGPROBS_MISSING         response tokens without logprobs
    ├── BAD_LOGPROBS             logprobs that are not finite numbers <= 0
    ├── LOGPROB_COUNT_MISMATCH   logprob count differs from response token count
    ├── BAD_REWARD               a reward that is not a number
    └── NON_FINITE_REWARD        a NaN or infinite reward
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class RejectionReason(StrEnum):
    """The typed reason a triplet was not turned into a transition."""

    MALFORMED_PAYLOAD = "malformed_payload"
    NO_TOKEN_IDS = "no_token_ids"
    EMPTY_TOKEN_IDS = "empty_token_ids"
    BAD_TOKEN_IDS = "bad_token_ids"
    TOKEN_OUT_OF_VOCAB = "token_out_of_vocab"
    LOGPROBS_MISSING = "logprobs_missing"
    BAD_LOGPROBS = "bad_logprobs"
    LOGPROB_COUNT_MISMATCH = "logprob_count_mismatch"
    BAD_REWARD = "bad_reward"
    NON_FINITE_REWARD = "non_finite_reward"


@dataclass(frozen=True, slots=True)
class TripletRejection:
    """One triplet that reconstruction dropped, with where it was and why."""

    index: int
    """Position of the triplet in the rollout's ordered triplet list."""
    reason: RejectionReason
    detail: str
    """Short human-readable explanation (never the payload itself: it can be large)."""
