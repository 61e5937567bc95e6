"""The Tinker adapter against tinker's own types and tinker-cookbook's datum builders."""

from __future__ import annotations

import asyncio
import typing

import numpy as np
import pytest
import tinker
import torch
from tinker import types
from tinker_cookbook.completers import TokensWithLogprobs
from tinker_cookbook.rl.data_processing import trajectory_to_data
from tinker_cookbook.rl.types import Trajectory, Transition
from tinker_cookbook.supervised.common import datum_from_model_input_weights

from adapters.tinker.backend import (
    TinkerConfig,
    TinkerTrainer,
    TinkerUnavailable,
    datum_from_tinker,
    datum_to_tinker,
    forward_backward_from_tinker,
    sampling_params_to_tinker,
    sequences_from_tinker,
)
from ports.policy import LossName, SampledSequence, SamplingParams, StopReason, TrainingDatum
from tests.support.waits import HANG_S


def tensors(datum: types.Datum) -> dict[str, tuple[str, list[int] | None, list[float] | list[int]]]:
    return {k: (v.dtype, v.shape, v.data) for k, v in datum.loss_fn_inputs.items()}


class TestDatumConversion:
    def test_an_rl_datum_matches_the_cookbooks_own_and_round_trips(self) -> None:
        prompt, action, logprobs = [11, 12, 13], [21, 22], [-0.5, -0.25]
        trajectory = Trajectory(
            transitions=[
                Transition(
                    ob=types.ModelInput.from_ints(prompt),
                    ac=TokensWithLogprobs(tokens=action, maybe_logprobs=logprobs),
                    reward=1.0,
                    episode_done=True,
                )
            ],
            final_ob=types.ModelInput.empty(),
        )
        (cookbook,) = trajectory_to_data(trajectory, traj_advantage=0.75)

        port = datum_from_tinker(cookbook)
        ours = datum_to_tinker(port, LossName.IMPORTANCE_SAMPLING)

        assert port == TrainingDatum(
            model_input=(11, 12, 13, 21),
            target_tokens=(12, 13, 21, 22),
            logprobs=(0.0, 0.0, -0.5, -0.25),
            advantages=(0.0, 0.0, 0.75, 0.75),
            mask=(0.0, 0.0, 1.0, 1.0),
        )
        assert isinstance(ours, tinker.Datum) and isinstance(ours.model_input, tinker.ModelInput)
        assert ours.model_input.to_ints() == cookbook.model_input.to_ints()
        assert tensors(ours) == tensors(cookbook)
        assert {k: v.dtype for k, v in ours.loss_fn_inputs.items()} == {
            "target_tokens": "int64",
            "logprobs": "float32",
            "advantages": "float32",
            "mask": "float32",
        }

    def test_every_loss_is_one_tinker_names(self) -> None:
        assert {loss.value for loss in LossName} <= set(typing.get_args(types.LossFnType))

    def test_a_cross_entropy_datum_matches_the_cookbooks_supervised_datum(self) -> None:
        tokens = [5, 6, 7, 8]
        cookbook = datum_from_model_input_weights(
            types.ModelInput.from_ints(tokens), torch.tensor([0.0, 0.0, 1.0, 1.0])
        )

        port = datum_from_tinker(cookbook)
        ours = datum_to_tinker(port, LossName.CROSS_ENTROPY)

        assert port == TrainingDatum(model_input=(5, 6, 7), target_tokens=(6, 7, 8), weights=(0.0, 1.0, 1.0))
        assert tensors(ours) == tensors(cookbook)
        assert set(ours.loss_fn_inputs) == {"target_tokens", "weights"}
        assert isinstance(ours.loss_fn_inputs["weights"], types.TensorData)

    def test_float_values_arrive_as_float32_like_the_cookbooks(self) -> None:
        datum = TrainingDatum((1, 2), (2, 3), logprobs=(-0.1, -0.2), advantages=(0.3, 0.3), mask=(1.0, 1.0))
        ours = datum_to_tinker(datum, LossName.PPO)
        np.testing.assert_array_equal(
            ours.loss_fn_inputs["logprobs"].to_numpy(), np.asarray([-0.1, -0.2], dtype=np.float32)
        )

    def test_a_datum_whose_sequences_disagree_in_length_is_refused(self) -> None:
        datum = TrainingDatum((1, 2, 3), (2, 3, 4), logprobs=(0.0,), advantages=(0.0,) * 3, mask=(1.0,) * 3)
        with pytest.raises(ValueError, match="logprobs has length 1, model_input has 3"):
            datum_to_tinker(datum, LossName.PPO)


class TestSamplingConversion:
    def test_params_map_field_by_field_and_no_stops_keeps_eos(self) -> None:
        params = SamplingParams(max_tokens=9, temperature=0.7, top_k=4, top_p=0.9, seed=3)
        assert sampling_params_to_tinker(params) == types.SamplingParams(
            max_tokens=9, temperature=0.7, top_k=4, top_p=0.9, seed=3, stop=None
        )
        assert sampling_params_to_tinker(SamplingParams(4, stop_token_ids=(2,))).stop == [2]
        assert sampling_params_to_tinker(SamplingParams(4, stop_strings=("\n",))).stop == ["\n"]

    def test_mixed_stop_ids_and_strings_are_refused(self) -> None:
        with pytest.raises(ValueError, match="not both"):
            sampling_params_to_tinker(SamplingParams(4, stop_token_ids=(2,), stop_strings=("x",)))

    def test_a_sample_response_becomes_port_sequences(self) -> None:
        response = types.SampleResponse(
            sequences=[
                types.SampledSequence(
                    stop_reason="length",
                    sequence_id="s0",
                    tokens_np=np.asarray([4, 5], dtype=np.int32),
                    logprobs_np=np.asarray([-0.5, -1.5], dtype=np.float32),
                )
            ]
        )
        assert sequences_from_tinker(response) == [SampledSequence((4, 5), (-0.5, -1.5), StopReason.LENGTH)]

    def test_forward_backward_output_gives_per_datum_logprobs_and_metrics(self) -> None:
        output = types.ForwardBackwardOutput(
            loss_fn_output_type="ArrayRecord",
            loss_fn_outputs=[{"logprobs": types.TensorData(data=[-0.25, -0.5], dtype="float32")}],
            metrics={"loss:sum": 1.5},
        )
        converted = forward_backward_from_tinker(output)
        assert converted.logprobs_D == ((-0.25, -0.5),)
        assert converted.metrics == {"loss:sum": 1.5}


class TestConnecting:
    async def test_an_unreachable_server_fails_with_a_typed_error_within_the_timeout(
        self, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        monkeypatch.setenv("TINKER_API_KEY", "tml-not-a-real-key-4242")
        config = TinkerConfig(base_model="Qwen/Qwen3-4B", base_url="http://127.0.0.1:9", connect_timeout_s=1.5)
        with pytest.raises(TinkerUnavailable) as info:
            await asyncio.wait_for(TinkerTrainer.connect(config), HANG_S)  # a connect that never gives up hangs
        assert "tml-not-a-real-key-4242" not in str(info.value) + repr(info.value) + repr(config)
