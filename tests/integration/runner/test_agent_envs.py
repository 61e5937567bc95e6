"""The examples whose frameworks cannot share the trainer's dependencies, each in its own environment.

``examples/autogen_mcp`` (AutoGen 0.7.5 + an MCP server) and ``examples/crewai_flow`` (CrewAI 1.6.1)
get their environments from ``adapters.runner.agent_env`` (built once per machine, a minute or two each,
cached under ``$AGL_TINKER_CACHE``); a machine that cannot reach the package index at all skips, saying
so, and any other build failure fails. In each environment the agent first follows a scripted policy
(right answers score 1, malformed tool calls and empty replies score 0 without failing), then trains two
batches on the tiny model with ``runner_python`` set, as ``agl-tinker train`` runs it, every rollout's reward
arriving at the trainer. The agents catch no error wholesale, so a crashed rollout fails these tests rather
than scoring 0.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from examples.crewai_flow.helper_server import HelperServer
from tests.support.agent_envs import agent_env_or_skip
from tests.support.runs import ROOT, assert_batches_trained, batch_lines, example_overrides
from tests.support.scripted_policy import ScriptedPolicy, last_message, message_text, tool_call

pytestmark = pytest.mark.slow

EXAMPLES = {"autogen_mcp": "autogen_calculator", "crewai_flow": "crewai_number_flow"}
RUN_HANG_S = 600.0
"""Hang-only bound on an agent run or a two-batch training (a probe, runner start-up, an MCP server per rollout)."""
_ENVS: dict[str, Path] = {}


def agent_python(name: str) -> Path:
    """The example's environment (built on first use, then cached); a skip where the index cannot be reached."""
    if name not in _ENVS:
        _ENVS[name] = agent_env_or_skip(ROOT / "examples" / name / "requirements.txt").python
    return _ENVS[name]


@pytest.fixture(scope="module")
def helper() -> Iterator[HelperServer]:
    with HelperServer() as server:
        yield server


def tasks_of(name: str, file: str = "test_tasks.jsonl") -> list[dict[str, Any]]:
    return [json.loads(line) for line in (ROOT / "examples" / name / file).read_text().splitlines()]


async def run_in_env(python: Path, name: str, tasks: list[dict[str, Any]], policy_url: str) -> list[float]:
    """Each task through the example's agent, called directly, under the environment's interpreter."""
    code = (
        "import asyncio, json, sys\n"
        "import agentlightning as agl\n"
        f"from examples.{name}.agent import {EXAMPLES[name]} as agent\n"
        "tasks, url = json.loads(sys.argv[1]), sys.argv[2]\n"
        "async def main():\n"
        "    llm = agl.LLM(endpoint=url, model='policy')\n"
        "    return await asyncio.gather(*(agent(task, llm) for task in tasks))\n"
        "print('rewards:', json.dumps(asyncio.run(main())))\n"
    )
    process = await asyncio.create_subprocess_exec(
        str(python),
        "-c",
        code,
        json.dumps(tasks),
        policy_url,
        cwd=ROOT,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
        env={
            **os.environ,
            "PATH": os.pathsep.join([str(python.parent), os.environ["PATH"]]),  # as a runner process has it
            "LITELLM_LOCAL_MODEL_COST_MAP": "True",
            "TINKER_TELEMETRY": "0",
        },
    )
    out, _ = await asyncio.wait_for(process.communicate(), RUN_HANG_S)
    text = out.decode(errors="replace")
    assert process.returncode == 0, text[-3000:]
    (line,) = [line for line in text.splitlines() if line.startswith("rewards: ")]
    rewards: list[float] = json.loads(line.removeprefix("rewards: "))
    return rewards


def calculator_reply(mode: str) -> Any:
    """The policy AutoGen talks to: one ``calculate`` call for the question, then the tool's result as the answer."""

    def reply(request: dict[str, Any]) -> dict[str, Any]:
        last = last_message(request)
        if last.get("role") == "tool":
            return {"content": f"The result is {message_text(last)}."}
        expression = re.search(r"-?\d+ [-+*] -?\d+", message_text(last)).group(0)  # type: ignore[union-attr]
        if mode == "bad_arguments":
            return {"tool_calls": [tool_call("calculate", '{"expression": "' + expression + '",')]}
        if mode == "unknown_tool":
            return {"tool_calls": [tool_call("divide", json.dumps({"expression": expression}))]}
        if mode == "empty":
            return {"content": ""}
        return {"tool_calls": [tool_call("calculate", json.dumps({"expression": expression}))]}

    return reply


def number_reply(mode: str, numbers: dict[str, int]) -> Any:
    """The policy the CrewAI flow drafts with: the task's number in digits (or nothing useful)."""

    def reply(request: dict[str, Any]) -> dict[str, Any]:
        words = re.search(r"number (.+) in digits", message_text(last_message(request))).group(1)  # type: ignore[union-attr]
        return {"content": {"right": f"That is {numbers[words]}.", "empty": "", "no_number": "no idea"}[mode]}

    return reply


@pytest.mark.parametrize("mode", ["right", "bad_arguments", "unknown_tool", "empty"])
async def test_the_autogen_agent_calls_the_mcp_calculator_and_scores_what_it_answers(mode: str) -> None:
    python = agent_python("autogen_mcp")
    tasks = tasks_of("autogen_mcp")

    with ScriptedPolicy(calculator_reply(mode)).serving() as policy:
        rewards = await run_in_env(python, "autogen_mcp", tasks, policy.url)

    if mode == "right":
        assert rewards == [1.0] * len(tasks)
        # The MCP server computed each result: it reached the policy as the tool message.
        tool_results = {message_text(last_message(r)) for r in policy.requests if last_message(r).get("role") == "tool"}
        assert tool_results == {str(task["answer"]) for task in tasks}
    else:
        assert rewards == [0.0] * len(tasks)


@pytest.mark.parametrize("mode", ["right", "empty", "no_number"])
async def test_the_crewai_flow_asks_the_policy_then_the_helper(mode: str, helper: HelperServer) -> None:
    python = agent_python("crewai_flow")
    tasks = [{**task, "helper_url": helper.url} for task in tasks_of("crewai_flow")]
    numbers = {task["words"]: task["answer"] for task in tasks}
    asked_before = len(helper.requests)

    with ScriptedPolicy(number_reply(mode, numbers)).serving() as policy:
        rewards = await run_in_env(python, "crewai_flow", tasks, policy.url)

    assert rewards == ([1.0] * len(tasks) if mode == "right" else [0.0] * len(tasks))
    assert len(policy.requests) == len(tasks)
    assert all(r["model"] == "policy" for r in policy.requests)
    assert len(helper.requests) - asked_before == len(tasks)  # an empty draft too: the helper reads "none" off it


@pytest.mark.parametrize("name", list(EXAMPLES))
async def test_each_agent_env_example_trains_two_batches_with_runner_python(
    tmp_path: Path, tiny_model: Path, helper: HelperServer, monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    from app.config import load_config
    from app.launch import train

    python = agent_python(name)
    monkeypatch.setenv("HELPER_BASE_URL", helper.url)  # the runner processes inherit it
    overrides = [*example_overrides(tmp_path, tiny_model, name, EXAMPLES[name]), f"runner_python={python}"]
    cfg = load_config(None, overrides).unwrap()

    summary = await asyncio.wait_for(train(cfg), RUN_HANG_S)

    assert (summary.start_batch, summary.end_batch) == (0, 2)
    lines = batch_lines(tmp_path / "run")
    assert all(m["rollouts/n_enqueued"] == 4 for m in lines)
    assert all(m["rollouts/n_succeeded"] == 4 for m in lines)  # junk from the tiny model crashes no agent
    assert all(m["rollouts/n_without_reward"] == 0 for m in lines)  # each reward came back from the agent's env
    assert_batches_trained(tmp_path / "run", 2)
