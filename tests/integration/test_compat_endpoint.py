"""The seed-compatible API end to end: a user's agent calling a real LLM endpoint.

``app.faces.compat.do_group_of_group_rollouts`` and ``AGLTestSetEvaluator`` drive an ``@agl.rollout``
agent (plain ``openai.AsyncOpenAI`` against its resource, ``agl.emit_reward``) executed by a real
``LitAgentRunner``, answered by ``PolicyEndpoint`` (Agent-lightning's LLMProxy) over a scripted
sampler, traced by the runner's real tracer and rebuilt with the real ``TracerTraceToTriplet``.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass
from typing import cast

import agentlightning as agl
import pytest
from agentlightning.execution import ThreadingEvent
from tinker_cookbook import renderers
from tinker_cookbook.rl.data_processing import assemble_training_data, compute_advantages
from tinker_cookbook.rl.types import TrajectoryGroup

from adapters.endpoint.policy_endpoint import EndpointConfig, PolicyEndpoint
from adapters.runner.processes import run_runner
from app.faces.compat import AGLDataset, AGLTestSetEvaluator, do_group_of_group_rollouts
from domain.groups import RolloutResult
from domain.sampling import SamplingDefaults
from ports.policy import SampledSequence, SamplingParams, StopReason
from tests.integration.agents import answer_agent

pytestmark = pytest.mark.slow

GROUP_SIZE = 2
TASKS: list[dict[str, str]] = [
    {"question": "What is 6 times 7?", "answer": "42"},
    {"question": "What is 2 plus 2?", "answer": "4"},
    {"question": "What is 3 plus 4?", "answer": "7"},
    {"question": "What is 9 minus 8?", "answer": "1"},
    {"question": "What is 10 minus 5?", "answer": "5"},
]
SCRIPT: dict[str, tuple[str, ...]] = {
    "What is 6 times 7?": ("I'm 42.",),  # always right: constant reward 1
    "What is 2 plus 2?": ("It is 5.",),  # always wrong: constant reward 0
    "What is 3 plus 4?": ("I'm 7.", "I'm 8."),  # right, wrong, right, ...
    "What is 9 minus 8?": ("Maybe 3.", "It is 1."),  # wrong, right, wrong, ...
    "What is 10 minus 5?": ("Half of ten is 5.",),  # always right
}
"""Replies per question, served in turn; with an even group size each mixed group gets one of each."""
ANSWERS = {task["question"]: task["answer"] for task in TASKS}
MIXED = {question for question, replies in SCRIPT.items() if len({ANSWERS[question] in r for r in replies}) > 1}
EXPECTED_REWARD_MEAN = 0.6  # per group of two: 1, 0, 0.5, 0.5, 1


def reward_for(question: str, reply: str) -> float:
    return 1.0 if ANSWERS[question] in reply else 0.0


@dataclass(frozen=True, slots=True)
class Reply:
    text: str
    tokens: tuple[int, ...]
    logprobs: tuple[float, ...]


class ScriptedSampler:
    """A deterministic policy: the reply depends only on the question and how often it was asked."""

    def __init__(self, renderer: renderers.Renderer, script: Mapping[str, Sequence[str]]) -> None:
        tokenizer = renderer.tokenizer
        im_end = cast(int, tokenizer.convert_tokens_to_ids("<|im_end|>"))
        self.prompts = {question: prompt_of(renderer, question) for question in script}
        self._question_of = {prompt: question for question, prompt in self.prompts.items()}
        self.replies: dict[str, tuple[Reply, ...]] = {}
        for k, (question, texts) in enumerate(script.items()):
            replies = []
            for j, text in enumerate(texts):
                tokens = (*cast(list[int], tokenizer.encode(text, add_special_tokens=False)), im_end)
                # Distinct per reply, so a logprob taken from the wrong call cannot match.
                logprobs = tuple(-(0.125 * (i + 1) + 0.01 * k + 0.001 * j) for i in range(len(tokens)))
                replies.append(Reply(text, tokens, logprobs))
            self.replies[question] = tuple(replies)
        self.calls: list[str] = []

    def reply_with_tokens(self, question: str, tokens: Sequence[int]) -> Reply:
        (reply,) = [r for r in self.replies[question] if r.tokens == tuple(tokens)]
        return reply

    async def sample(
        self, prompt_tokens: Sequence[int], params: SamplingParams, num_samples: int = 1
    ) -> Sequence[SampledSequence]:
        await asyncio.sleep(0)
        question = self._question_of[tuple(prompt_tokens)]  # an unknown prompt fails the request
        replies = self.replies[question]
        reply = replies[self.calls.count(question) % len(replies)]
        self.calls.append(question)
        return [SampledSequence(reply.tokens, reply.logprobs, StopReason.STOP)] * num_samples


def prompt_of(renderer: renderers.Renderer, question: str) -> tuple[int, ...]:
    return tuple(renderer.build_generation_prompt([{"role": "user", "content": question}]).to_ints())


@pytest.fixture
def sampler(renderer: renderers.Renderer) -> ScriptedSampler:
    return ScriptedSampler(renderer, SCRIPT)


@pytest.fixture
async def resources_id(
    store: agl.InMemoryLightningStore, renderer: renderers.Renderer, sampler: ScriptedSampler
) -> AsyncIterator[str]:
    config = EndpointConfig(defaults=SamplingDefaults(max_tokens=32))
    async with PolicyEndpoint(store, renderer, config, sampler=sampler) as endpoint:
        update = await store.add_resources({"main_llm": endpoint.as_resource()})
        stop = ThreadingEvent()
        runner = asyncio.create_task(run_runner(answer_agent, store, stop, poll_interval_s=0.02))
        try:
            yield update.resources_id
        finally:
            stop.set()
            await asyncio.wait_for(runner, 10)


def batch() -> list[str]:
    """Questions of the one batch, in the dataset's (seeded, shuffled) order."""
    return [builder.task["question"] for builder in AGLDataset(TASKS, batch_size=len(TASKS), seed=0).get_batch(0)]


async def roll_out_batch(
    store: agl.InMemoryLightningStore, resources_id: str, *, drop_constant: bool = False
) -> tuple[list[TrajectoryGroup], dict[int, str]]:
    dataset = AGLDataset(TASKS, batch_size=len(TASKS), group_size=GROUP_SIZE, seed=0)
    rollout_ids: dict[int, str] = {}

    def record(index: int, result: RolloutResult) -> None:
        rollout_ids[index] = result.rollout_id

    groups = await do_group_of_group_rollouts(
        dataset.get_batch(0),
        resources_id,
        0,
        store=store,
        adapter=agl.TracerTraceToTriplet(),
        mode="train",
        do_remove_constant_reward_groups=drop_constant,
        rollout_timeout_s=60,
        on_result=record,
    )
    return groups, rollout_ids


def test_the_batch_mixes_constant_and_non_constant_groups_in_a_shuffled_order() -> None:
    questions = batch()
    assert sorted(questions) == sorted(SCRIPT)
    assert questions != [task["question"] for task in TASKS], "seed 0 should shuffle, so order is really checked"
    assert 0 < len(MIXED) < len(SCRIPT)


async def test_groups_come_back_in_input_order_with_the_samplers_tokens_logprobs_and_emitted_rewards(
    store: agl.InMemoryLightningStore, resources_id: str, sampler: ScriptedSampler
) -> None:
    groups, rollout_ids = await roll_out_batch(store, resources_id)

    questions = batch()
    assert len(groups) == len(questions)
    assert sorted(sampler.calls) == sorted(q for q in questions for _ in range(GROUP_SIZE))
    for i_group, (question, group) in enumerate(zip(questions, groups, strict=True)):
        assert len(group.trajectories_G) == GROUP_SIZE
        rewards = []
        for j, trajectory in enumerate(group.trajectories_G):
            (transition,) = trajectory.transitions  # one LLM call, one transition
            assert transition.ob.to_ints() == list(sampler.prompts[question]), "group out of input order"
            reply = sampler.reply_with_tokens(question, transition.ac.tokens)
            assert transition.ac.maybe_logprobs == list(reply.logprobs)
            assert transition.episode_done is True
            spans = await store.query_spans(rollout_ids[i_group * GROUP_SIZE + j], "latest")
            emitted = agl.find_final_reward(list(spans))
            assert transition.reward == emitted == reward_for(question, reply.text)
            rewards.append(transition.reward)
        assert sorted(group.get_total_rewards()) == sorted(rewards)
        served = (sampler.replies[question] * GROUP_SIZE)[:GROUP_SIZE]  # whatever order the runner took
        assert sorted(rewards) == sorted(reward_for(question, r.text) for r in served)
        assert (len(set(rewards)) > 1) == (question in MIXED)


async def test_removing_constant_reward_groups_keeps_exactly_the_mixed_ones_in_order(
    store: agl.InMemoryLightningStore, resources_id: str, sampler: ScriptedSampler
) -> None:
    groups, _ = await roll_out_batch(store, resources_id, drop_constant=True)

    kept = [q for q in batch() if q in MIXED]
    assert len(groups) == len(kept)
    for question, group in zip(kept, groups, strict=True):
        assert sorted(group.get_total_rewards()) == [0.0, 1.0]
        assert {t.transitions[0].ob.to_ints() == list(sampler.prompts[question]) for t in group.trajectories_G} == {
            True
        }
    assert len(sampler.calls) == len(TASKS) * GROUP_SIZE, "dropped groups were still rolled out"


async def test_cookbook_turns_the_groups_into_datums_that_train_on_the_samplers_reply(
    store: agl.InMemoryLightningStore, resources_id: str, sampler: ScriptedSampler
) -> None:
    groups, _ = await roll_out_batch(store, resources_id)
    questions = batch()

    advantages_P = compute_advantages(groups)
    data_D, metadata_D = assemble_training_data(groups, advantages_P)

    assert len(data_D) == len(TASKS) * GROUP_SIZE  # one single-turn datum per trajectory
    for datum, meta in zip(data_D, metadata_D, strict=True):
        question = questions[meta["group_idx"]]
        transition = groups[meta["group_idx"]].trajectories_G[meta["traj_idx"]].transitions[0]
        reply = sampler.reply_with_tokens(question, transition.ac.tokens)
        advantage = float(advantages_P[meta["group_idx"]][meta["traj_idx"]])
        mask = datum.loss_fn_inputs["mask"].to_torch() > 0
        targets = datum.loss_fn_inputs["target_tokens"].to_torch()
        assert targets[mask].tolist() == list(reply.tokens)
        assert datum.loss_fn_inputs["logprobs"].to_torch()[mask].tolist() == pytest.approx(list(reply.logprobs))
        advantages_T = datum.loss_fn_inputs["advantages"].to_torch()[mask].tolist()
        assert advantages_T == pytest.approx([advantage] * len(reply.tokens))
        assert [*datum.model_input.to_ints(), int(targets[-1])] == list(sampler.prompts[question] + reply.tokens)
        if question in MIXED:
            assert advantage == pytest.approx(0.5 if reward_for(question, reply.text) else -0.5)
        else:
            assert advantage == 0.0


async def test_the_evaluator_reports_prefixed_cookbook_metrics_with_the_expected_reward(
    store: agl.InMemoryLightningStore, resources_id: str, sampler: ScriptedSampler
) -> None:
    dataset = AGLDataset(TASKS, batch_size=len(TASKS), group_size=GROUP_SIZE, seed=0)
    evaluator = AGLTestSetEvaluator(dataset, name="test")

    metrics = await evaluator(resources_id, store, agl.TracerTraceToTriplet(), "val", 0, rollout_timeout_s=60)

    assert metrics and all(key.startswith("test/") for key in metrics)
    assert metrics["test/env/all/reward/total"] == pytest.approx(EXPECTED_REWARD_MEAN)
    assert metrics["test/env/all/total_episodes"] == len(TASKS) * GROUP_SIZE
    assert metrics["test/env/all/total_turns"] == len(TASKS) * GROUP_SIZE
    assert metrics["test/env/all/frac_tasks_usable"] == 1.0
    reply_tokens = [len(r.tokens) for q in SCRIPT for r in (sampler.replies[q] * GROUP_SIZE)[:GROUP_SIZE]]
    assert metrics["test/env/all/ac_tokens_per_turn"] == pytest.approx(sum(reply_tokens) / len(reply_tokens))
    assert len(sampler.calls) == len(TASKS) * GROUP_SIZE
