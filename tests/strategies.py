"""Hypothesis strategies for triplet payloads: well-formed ones and every way they go wrong."""

from __future__ import annotations

import math

from hypothesis import strategies as st

from domain.triplets import RawTriplet

token_ids = st.lists(st.integers(min_value=0, max_value=50_000), min_size=1, max_size=12)
logprob = st.floats(min_value=-30.0, max_value=0.0, allow_nan=False)
reward = st.one_of(st.none(), st.floats(min_value=-10, max_value=10, allow_nan=False))


@st.composite
def good_triplet(draw: st.DrawFn) -> RawTriplet:
    response = draw(token_ids)
    logprobs = [{"token": f"t{t}", "logprob": draw(logprob)} for t in response]
    return RawTriplet(
        prompt={"token_ids": draw(token_ids), "raw_content": "..."},
        response={"token_ids": response, "logprobs": logprobs},
        reward=draw(reward),
    )


@st.composite
def bad_triplet(draw: st.DrawFn) -> RawTriplet:
    """A triplet broken in exactly one way that reconstruction must reject."""
    base = draw(good_triplet())
    prompt = dict(base.prompt) if isinstance(base.prompt, dict) else {}
    response = dict(base.response) if isinstance(base.response, dict) else {}
    defect = draw(
        st.sampled_from(
            [
                "not_mapping",
                "no_ids",
                "empty_ids",
                "bad_ids",
                "no_logprobs",
                "bad_logprob",
                "count",
                "nan_reward",
                "str_reward",
            ]
        )
    )
    reward_value: object = base.reward
    if defect == "not_mapping":
        return RawTriplet(prompt=[1, 2, 3], response=response, reward=reward_value)
    if defect == "no_ids":
        del response["token_ids"]
    elif defect == "empty_ids":
        prompt["token_ids"] = []
    elif defect == "bad_ids":
        prompt["token_ids"] = draw(st.sampled_from([[1, -2], [1.5], ["a"], [True], "123", [2**40]]))
    elif defect == "no_logprobs":
        del response["logprobs"]
    elif defect == "bad_logprob":
        response["logprobs"] = [{"logprob": draw(st.sampled_from([math.nan, math.inf, 3.0, "x", None]))}] * len(
            response["token_ids"]
        )
    elif defect == "count":
        response["logprobs"] = [*list(response["logprobs"]), {"logprob": -1.0}]
    elif defect == "nan_reward":
        reward_value = draw(st.sampled_from([math.nan, math.inf, -math.inf]))
    elif defect == "str_reward":
        reward_value = draw(st.sampled_from(["1.0", True, [1.0]]))
    return RawTriplet(prompt=prompt, response=response, reward=reward_value)


any_triplet = st.one_of(good_triplet(), bad_triplet())
garbage_triplet = st.builds(
    RawTriplet,
    prompt=st.one_of(st.none(), st.integers(), st.text(), st.dictionaries(st.text(), st.integers())),
    response=st.one_of(st.none(), st.dictionaries(st.sampled_from(["token_ids", "logprobs"]), st.integers())),
    reward=st.one_of(st.none(), st.floats(), st.text()),
)
