"""An AutoGen agent with an MCP tool server: ``AssistantAgent`` + ``McpWorkbench`` over stdio.

Each rollout starts the calculator MCP server Agent-lightning's calc_x uses, by its command name
(``mcp-server-calculator``, PyPI's ``mcp-server-calculator``, installed by ``requirements.txt``; one tool,
``calculate(expression)``), gives its tools to an AutoGen ``AssistantAgent`` whose model client is
``OpenAIChatCompletionClient`` pointed at the policy (``llm.endpoint``, ``llm.model``), and runs it on
an arithmetic question. The agent calls the tool as it sees fit, AutoGen sends the results back and
asks the model again; the last message's last number is the answer, rewarded 1.0 when it is right.
Every call AutoGen makes to the policy goes through the rollout's endpoint URL, so the whole
exchange is one trajectory. The command is found on ``PATH``: runner processes put their
environment's ``bin/`` first on it, so no activation or absolute path is needed.

AutoGen does not install beside the trainer's locked versions, so this agent runs in its own
environment (``requirements.txt``):

    agl-tinker train agent=examples.autogen_mcp.agent:autogen_calculator \\
        runner_python=$(bash scripts/agent-env.sh examples/autogen_mcp/requirements.txt) ...

A policy that answers nonsense (a malformed tool call, arguments that are not JSON, an unknown tool, an
empty reply) gets reward 0: AutoGen hands such tool errors back to the model as the tool's result. Anything
else that goes wrong (the MCP server missing, the endpoint down) fails the rollout, as it should.

Each task: ``{"question": "What is 12 + 30?", "answer": 42}``.
"""

from __future__ import annotations

import re
from typing import Any

import agentlightning as agl
from autogen_agentchat.agents import AssistantAgent
from autogen_agentchat.messages import TextMessage
from autogen_core.models import ModelFamily, ModelInfo
from autogen_ext.models.openai import OpenAIChatCompletionClient
from autogen_ext.tools.mcp import McpWorkbench, StdioServerParams

SERVER_COMMAND = "mcp-server-calculator"
"""The console script of PyPI's ``mcp-server-calculator`` (``requirements.txt``); calc_x runs it through ``uvx``."""
SYSTEM = "You are a careful calculator. Use the tool calculate for arithmetic, then state the result as a number."
# What AutoGen needs to know about a model it has no card for: the policy takes tools, nothing else.
MODEL_INFO = ModelInfo(
    vision=False,
    function_calling=True,
    json_output=False,
    structured_output=False,
    family=ModelFamily.UNKNOWN,
    multiple_system_messages=True,
)


def final_reward(answer: str, expected: int) -> float:
    numbers = re.findall(r"-?\d+", answer)
    return 1.0 if numbers and int(numbers[-1]) == expected else 0.0


def final_text(messages: Any) -> str:
    """The text of the run's last message from the agent (empty when it ended on something else)."""
    for message in reversed(list(messages)):
        if isinstance(message, TextMessage) and message.source != "user":
            return message.content
    return ""


@agl.rollout
async def autogen_calculator(task: dict[str, Any], llm: agl.LLM) -> float:
    client = OpenAIChatCompletionClient(
        model=llm.model, base_url=llm.endpoint, api_key="unused", model_info=MODEL_INFO, temperature=1.0
    )
    server = StdioServerParams(command=SERVER_COMMAND, args=[], read_timeout_seconds=60)
    try:
        async with McpWorkbench(server) as workbench:
            agent = AssistantAgent(
                "calculator",
                model_client=client,
                workbench=workbench,
                system_message=SYSTEM,
                reflect_on_tool_use=True,  # after the tools ran, the model states the result
                max_tool_iterations=int(task.get("max_steps", 3)),
            )
            result = await agent.run(task=task["question"])
        return final_reward(final_text(result.messages), int(task["answer"]))
    finally:
        await client.close()
