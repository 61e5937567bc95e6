"""The SkyRL compatibility proxy's own rules, without a server: what it amends, tracks and refuses."""

from __future__ import annotations

import math
import struct

import pytest
from tinker.proto import tinker_public_pb2 as pb

from adapters.tinker.server.compat_proxy import CompatProxy, ProxyState, restore_leading_prompt_logprob

ADAM = {"type": "adamw"}


def sample_response(prompt_logprobs: list[float]) -> bytes:
    message = pb.SampleResponse()
    message.prompt_logprobs = struct.pack(f"<{len(prompt_logprobs)}f", *prompt_logprobs)
    return message.SerializeToString()


def prompt_logprobs(body: bytes) -> list[float]:
    message = pb.SampleResponse()
    message.ParseFromString(body)
    raw = bytes(message.prompt_logprobs)
    return list(struct.unpack(f"<{len(raw) // 4}f", raw))


def test_exactly_one_missing_leading_prompt_logprob_comes_back_as_nan() -> None:
    fixed = prompt_logprobs(restore_leading_prompt_logprob(sample_response([-1.0, -2.0, -3.0]), prompt_length=4))
    assert math.isnan(fixed[0]) and fixed[1:] == [-1.0, -2.0, -3.0]


@pytest.mark.parametrize("n", [4, 2, 0])
def test_any_other_length_passes_through_untouched(n: int) -> None:
    body = sample_response([-0.5] * n)
    assert restore_leading_prompt_logprob(body, prompt_length=4) == body


def test_a_checkpoint_samples_until_its_run_takes_a_step() -> None:
    state = ProxyState()
    assert state.check_sample(("run-a", "ref")) is None  # a run the proxy has not seen train: passes
    state.live["run-a"] = {"ref", "batch-0"}
    assert state.check_sample(("run-a", "ref")) is None
    state.weights_changed("run-a")
    refusal = state.check_sample(("run-a", "ref"))
    assert refusal is not None and "adapter slot" in refusal and "'ref'" in refusal
    state.live["run-a"].add("batch-1")
    assert state.check_sample(("run-a", "batch-1")) is None
    assert state.check_sample(("run-b", "ref")) is None


@pytest.mark.parametrize(
    ("path", "payload", "named"),
    [
        ("/api/v1/optim_step", {"model_id": "m", "adam_params": {"learning_rate": 1e-3, "grad_clip_norm": 1.0}},
         "grad_clip_norm"),
        ("/api/v1/optim_step", {"model_id": "m", "optimizer_params": {"type": "dimuon"}}, "optimizer_params"),
        ("/api/v1/create_model", {"lora_config": {"rank": 8, "train_unembed": True}}, "train_unembed=true"),
        ("/api/v1/create_model", {"lora_config": {"rank": 8, "train_mlp": False, "train_unembed": False}},
         "train_mlp=false"),
        ("/api/v1/create_model", {"lora_config": {"rank": 8}, "optimizer_config": {"type": "dimuon"}}, "dimuon"),
        ("/api/v1/asample", {"topk_sample_logprobs": 5}, "topk_sample_logprobs"),
        ("/api/v1/asample", {"prompt_logprobs_last_n": 3}, "prompt_logprobs_last_n"),
    ],
)  # fmt: skip
def test_what_skyrl_would_ignore_is_refused_by_name(path: str, payload: dict[str, object], named: str) -> None:
    refusal = CompatProxy("http://127.0.0.1:9")._refuse(path, payload)
    assert refusal is not None and named in refusal


@pytest.mark.parametrize(
    ("path", "payload"),
    [
        ("/api/v1/optim_step", {"model_id": "m", "adam_params": {"learning_rate": 1e-3, "grad_clip_norm": 0.0}}),
        ("/api/v1/create_model", {"lora_config": {"rank": 8, "train_unembed": False}, "optimizer_config": ADAM}),
        ("/api/v1/asample", {"num_samples": 2, "topk_sample_logprobs": 0, "prompt_logprobs_last_n": None}),
        ("/api/v1/forward_backward", {"model_id": "m"}),
    ],
)  # fmt: skip
def test_what_skyrl_honours_passes(path: str, payload: dict[str, object]) -> None:
    assert CompatProxy("http://127.0.0.1:9")._refuse(path, payload) is None
