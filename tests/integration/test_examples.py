"""The ``examples/`` agents through the real path: the policy endpoint over a scripted sampler, a real
``LitAgentRunner``, the store, ``EndpointTraceToTriplet``, reconstruction and the cookbook's datums;
then each example trained for two batches on the tiny model, as ``agl-tinker train`` runs it.

The scripted sampler replies one token per character (never the canonical tokens), so any
re-tokenisation of a reply between turns would show in the observations.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import agentlightning as agl
import pytest
from agentlightning.execution import ThreadingEvent
from tinker_cookbook import renderers

from adapters.agl.store import AglRolloutStore, AglTripletSource
from adapters.endpoint.capture import COMPLETION_SPAN, FINISH_REASON
from adapters.endpoint.policy_endpoint import PolicyEndpoint
from adapters.endpoint.triplets import EndpointTraceToTriplet
from adapters.runner.processes import run_runner
from app.usecases.rollouts import RolloutOptions, run_rollouts
from ports.rollout_store import RolloutRequest
from tests.support.endpoints import policy_endpoint
from tests.support.rollouts import run, run_in_thread, trajectory
from tests.support.runs import batch_lines, example_overrides
from tests.support.samplers import TOOL_CALL, CharSampler
from tests.support.trajectories import assert_exact, assert_extends, assert_one_datum_each
from tests.support.vllm import VllmStyleServer
from tests.support.waits import HANG_S

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
async def endpoint(store: agl.InMemoryLightningStore, renderer: renderers.Renderer) -> AsyncIterator[PolicyEndpoint]:
    async with policy_endpoint(store, renderer, max_tokens=64) as ep:
        yield ep


@pytest.fixture(scope="module")
def judge() -> Iterator[VllmStyleServer]:
    """An untrained judge on a vLLM-style server: replies "8" with token ids beyond the policy's vocabulary."""
    with VllmStyleServer("judge", "8", [999_999], ["8"]).serving() as server:
        yield server


def prompt(renderer: renderers.Renderer, messages: list[renderers.Message]) -> tuple[int, ...]:
    return tuple(renderer.build_generation_prompt(messages).to_ints())


def after_first_end(renderer: renderers.Renderer, short: list[Any], full: list[Any], im_end: int) -> tuple[int, ...]:
    """What the renderer adds to ``full`` after the reply that ends ``short``'s generation prompt."""
    prefix, rendered = prompt(renderer, short), prompt(renderer, full)
    assert rendered[: len(prefix)] == prefix
    rest = rendered[len(prefix) :]
    return rest[rest.index(im_end) + 1 :]


# --- multiturn -------------------------------------------------------------------------------------


async def test_multiturn_async_guessing_merges_three_turns_into_one_datum(
    store: agl.InMemoryLightningStore, endpoint: PolicyEndpoint, renderer: renderers.Renderer
) -> None:
    from examples.multiturn.agent import first_prompt, guess_number

    task = {"secret": 7, "low": 1, "high": 10, "max_turns": 3}
    sampler = CharSampler(renderer, ["3", "9", "7"])
    endpoint.set_sampler(sampler)

    ids = await run(store, guess_number, [task, task])

    results = [await trajectory(store, rollout_id) for rollout_id in ids]
    for i, result in enumerate(results):
        assert_exact(result, sampler, slice(3 * i, 3 * i + 3))
        assert_extends(result)
        # Reward at the end, as the agent computed it: found on the third guess.
        assert [t.reward for t in result.transitions] == [0.0, 0.0, pytest.approx(0.6)]
        first = [{"role": "user", "content": first_prompt(task)}]
        assert result.transitions[0].ob == prompt(renderer, first)  # type: ignore[arg-type]
        # Turn 2 = turn 1's exact prompt + sampled tokens + the "Higher." feedback, rendered.
        second = [*first, {"role": "assistant", "content": "3"}, {"role": "user", "content": "Higher."}]
        t1, t2, t3 = result.transitions
        assert t2.ob == t1.ob + t1.ac + after_first_end(renderer, first, second, sampler.im_end)
        third = [*second, {"role": "assistant", "content": "9"}, {"role": "user", "content": "Lower."}]
        assert t3.ob == t2.ob + t2.ac + after_first_end(renderer, second, third, sampler.im_end)
    assert endpoint.take_metrics()["endpoint/prefix/extended"] == 4.0
    await assert_one_datum_each(results)


@pytest.mark.parametrize("released", [True, False], ids=["endpoint-in-loop", "no-endpoint"])
async def test_the_endpoint_lets_go_of_a_rollouts_turns_once_the_loop_rebuilt_it(
    store: agl.InMemoryLightningStore, endpoint: PolicyEndpoint, renderer: renderers.Renderer, released: bool
) -> None:
    from examples.multiturn.agent import guess_number

    task = {"secret": 7, "low": 1, "high": 10, "max_turns": 3}
    endpoint.set_sampler(CharSampler(renderer, ["3", "9", "7"]))
    resources = await store.get_latest_resources()
    assert resources is not None
    stop = ThreadingEvent()
    runner = asyncio.create_task(run_runner(guess_number, store, stop, poll_interval_s=0.02))
    try:
        results = await run_rollouts(
            [RolloutRequest(task=task, mode="train", resources_id=resources.resources_id)] * 2,
            store=AglRolloutStore(store),
            triplets=AglTripletSource(EndpointTraceToTriplet()),
            options=RolloutOptions(rollout_timeout_s=HANG_S, endpoint=endpoint if released else None),
        )
    finally:
        stop.set()
        await asyncio.wait_for(runner, 30)

    assert [(r.status, len(r.trajectory.transitions)) for r in results] == [("succeeded", 3)] * 2
    assert endpoint.take_metrics()["endpoint/prefix/extended"] == 4.0  # the held turns were used
    assert endpoint.rollouts_held == (0 if released else 2)


async def test_multiturn_sync_guessing_runs_in_a_thread_hosted_runner_and_merges(
    store: agl.InMemoryLightningStore, endpoint: PolicyEndpoint, renderer: renderers.Renderer
) -> None:
    from examples.multiturn.agent import guess_number_sync

    sampler = CharSampler(renderer, ["5", "7"])
    endpoint.set_sampler(sampler)

    (rollout_id,) = await run_in_thread(store, guess_number_sync, [{"secret": 7, "low": 1, "high": 10}])

    result = await trajectory(store, rollout_id)
    assert_exact(result, sampler)
    assert_extends(result)
    assert [t.reward for t in result.transitions] == [0.0, pytest.approx(0.8)]  # agl.emit_reward, second guess
    assert endpoint.take_metrics()["endpoint/prefix/extended"] == 1.0
    await assert_one_datum_each([result])


# --- tools -----------------------------------------------------------------------------------------


async def test_tool_calls_are_parsed_run_locally_answered_and_merged_into_one_datum(
    store: agl.InMemoryLightningStore, endpoint: PolicyEndpoint, renderer: renderers.Renderer
) -> None:
    from tinker_cookbook.third_party.openai_compat import openai_tools_to_tinker

    from examples.tools.agent import SYSTEM, TOOLS, calculator_agent

    task = {"question": "What is 2 + 3?", "answer": 5}
    sampler = CharSampler(renderer, [TOOL_CALL, "The answer is 5."])
    endpoint.set_sampler(sampler)

    (rollout_id,) = await run(store, calculator_agent, [task])

    result = await trajectory(store, rollout_id)
    assert_exact(result, sampler)
    assert_extends(result)
    assert [t.reward for t in result.transitions] == [0.0, 1.0]
    # The first prompt declares the tools the Qwen3 way.
    conversation = renderer.create_conversation_prefix_with_tools(openai_tools_to_tinker(TOOLS), SYSTEM)
    first = prompt(renderer, [*conversation, {"role": "user", "content": task["question"]}])
    assert result.transitions[0].ob == first
    # The endpoint parsed the scripted reply into an OpenAI tool call (finish_reason "tool_calls") ...
    spans = [s for s in await store.query_spans(rollout_id, "latest") if s.name == COMPLETION_SPAN]
    assert [s.attributes[FINISH_REASON] for s in sorted(spans, key=lambda s: s.sequence_id)] == ["tool_calls", "stop"]
    # ... the agent ran add(2, 3) locally and sent "5" back as the tool's result, after the exact sample.
    t1, t2 = result.transitions
    added = renderer.tokenizer.decode(list(t2.ob[len(t1.ob) + len(t1.ac) :]))
    assert added == "\n<|im_start|>user\n<tool_response>\n5\n</tool_response><|im_end|>\n<|im_start|>assistant\n"
    assert endpoint.take_metrics()["endpoint/prefix/extended"] == 1.0
    await assert_one_datum_each([result])


# --- judge -----------------------------------------------------------------------------------------


async def test_the_judges_calls_are_never_trained_and_its_score_is_the_reward(
    store: agl.InMemoryLightningStore, endpoint: PolicyEndpoint, renderer: renderers.Renderer, judge: VllmStyleServer
) -> None:
    from examples.judge.agent import judged_agent

    task = {"question": "What do bees make?", "reference": "honey", "judge_url": judge.url}
    sampler = CharSampler(renderer, ["Honey."])
    endpoint.set_sampler(sampler)
    before = len(judge.requests)

    (rollout_id,) = await run(store, judged_agent, [task])

    result = await trajectory(store, rollout_id)
    assert_exact(result, sampler)  # one transition: the policy's; none for the judge
    assert [t.reward for t in result.transitions] == [pytest.approx(0.8)]
    assert result.transitions[0].ob == prompt(renderer, [{"role": "user", "content": task["question"]}])
    vocab = len(renderer.tokenizer)
    assert all(t < vocab for t in result.transitions[0].ob + result.transitions[0].ac)
    (request,) = judge.requests[before:]
    assert "Honey." in request["messages"][0]["content"]


# --- litellm and streaming (string tasks) ----------------------------------------------------------


@pytest.mark.parametrize(
    ("reference", "tasks", "replies", "content", "rewards"),
    [
        (
            "examples.litellm_client.agent:echo_agent",
            ["007", "42"],
            ["007", "4 2"],
            "Repeat exactly, nothing else: {task}",
            [1.0, 0.0],
        ),
        (
            "examples.streaming.agent:letter_count_agent",
            ["banana", "ox"],
            ["6 letters", "3"],
            "How many letters are in the word {task!r}? Reply with a number.",
            [1.0, 0.0],
        ),
    ],
    ids=["litellm_client", "streaming"],
)
async def test_string_task_agents_get_their_tasks_unchanged_and_yield_exact_tokens(
    store: agl.InMemoryLightningStore,
    endpoint: PolicyEndpoint,
    renderer: renderers.Renderer,
    reference: str,
    tasks: list[str],
    replies: list[str],
    content: str,
    rewards: list[float],
) -> None:
    from adapters.runner.processes import load_agent

    sampler = CharSampler(renderer, replies)
    endpoint.set_sampler(sampler)

    ids = await run(store, load_agent(reference), tasks)

    for i, (rollout_id, task) in enumerate(zip(ids, tasks, strict=True)):
        rollout = await store.get_rollout_by_id(rollout_id)
        assert rollout is not None and rollout.input == task and isinstance(rollout.input, str)
        result = await trajectory(store, rollout_id)
        (transition,) = result.transitions
        assert not result.rejections
        assert transition.ob == sampler.prompts[i]
        assert transition.ob == prompt(renderer, [{"role": "user", "content": content.format(task=task)}])
        assert transition.ac == sampler.outputs[i].tokens
        assert transition.logprobs == sampler.outputs[i].logprobs
        assert transition.reward == rewards[i]


# --- training each example -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "agent"),
    [
        ("hello", "hello"),
        ("multiturn", "guess_number"),
        ("tools", "calculator_agent"),
        ("judge", "judged_agent"),
        ("litellm_client", "echo_agent"),
        ("streaming", "letter_count_agent"),
    ],
)
async def test_each_example_trains_two_batches_on_the_tiny_model(
    tmp_path: Path, tiny_model: Path, judge: VllmStyleServer, monkeypatch: pytest.MonkeyPatch, name: str, agent: str
) -> None:
    from app.config import load_config
    from app.launch import train

    monkeypatch.setenv("JUDGE_BASE_URL", judge.url)  # the runner processes inherit it
    cfg = load_config(None, example_overrides(tmp_path, tiny_model, name, agent)).unwrap()

    summary = await asyncio.wait_for(train(cfg), 150)

    assert (summary.start_batch, summary.end_batch) == (0, 2)
    lines = batch_lines(tmp_path / "run")
    assert [m["progress/batch"] for m in lines] == [0, 1]
    assert all(m["rollouts/n_enqueued"] == 4 for m in lines)
    assert all(m["env/all/by_group/frac_status_succeeded"] == 1.0 for m in lines)  # junk replies crash no agent
    assert all(m["rollouts/n_without_reward"] == 0 for m in lines)  # every trained rollout's reward came back
    if name == "judge":
        assert len(judge.requests) >= 8  # every rollout asked the judge


@pytest.mark.parametrize(
    ("name", "agent"),
    [
        ("hello", "hello"),
        ("multiturn", "guess_number_sync"),
        ("multiturn", "guess_number"),
        ("tools", "calculator_agent"),
        ("judge", "judged_agent"),
        ("litellm_client", "echo_agent"),
        ("streaming", "letter_count_agent"),
    ],
)
def test_each_example_trains_through_agl_trainer_fit(
    tmp_path: Path, tiny_model: Path, judge: VllmStyleServer, monkeypatch: pytest.MonkeyPatch, name: str, agent: str
) -> None:
    import importlib

    from app.config import load_config
    from app.faces.agl_algorithm import Tinker
    from app.launch import free_port

    monkeypatch.setenv("JUDGE_BASE_URL", judge.url)  # the trainer's runner processes inherit it
    overrides = example_overrides(tmp_path, tiny_model, name, agent)
    cfg = load_config(None, [o for o in overrides if not o.startswith(("agent=", "tasks=", "n_runners="))]).unwrap()
    tasks = [json.loads(line) for line in (ROOT / "examples" / name / "tasks.jsonl").read_text().splitlines()]
    trainer = agl.Trainer(
        algorithm=Tinker(cfg),
        n_runners=1,
        port=free_port(),
        runner=agl.LitAgentRunner(tracer=agl.AgentOpsTracer(), poll_interval=0.05),
    )

    module = importlib.import_module(f"examples.{name}.{'hello' if name == 'hello' else 'agent'}")
    trainer.fit(getattr(module, agent), train_dataset=tasks[:4])

    lines = batch_lines(tmp_path / "run")
    assert [m["progress/batch"] for m in lines] == [0, 1]
    assert all(m["rollouts/n_enqueued"] == 4 for m in lines)
    assert all(m["rollouts/n_without_reward"] == 0 for m in lines)
