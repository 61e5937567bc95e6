"""An AutoGen agent with an MCP tool server: ``AssistantAgent`` + ``McpWorkbench`` over stdio.

Each rollout starts the calculator MCP server next to this file (``calculator_server.py``: ``add``,
``subtract``, ``multiply``), gives its tools to an AutoGen ``AssistantAgent`` whose model client is
``OpenAIChatCompletionClient`` pointed at the policy (``llm.endpoint``, ``llm.model``), and runs it on
an arithmetic question. The agent calls the tools as it sees fit, AutoGen sends the results back and
asks the model again; the last message's last number is the answer, rewarded 1.0 when it is right.
Every call AutoGen makes to the policy goes through the rollout's endpoint URL, so the whole
exchange is one trajectory.

AutoGen does not install beside the trainer's locked versions, so this agent runs in its own
environment (``requirements.txt``):

    agl-tinker train agent=examples.autogen_mcp.agent:autogen_calculator \\
        runner_python=$(bash scripts/agent-env.sh examples/autogen_mcp/requirements.txt) ...

A policy that answers nonsense (a malformed tool call, arguments that are not JSON, an empty reply)
gets reward 0: the rollout never fails because of what the model wrote.

Each task: ``{"question": "What is 12 + 30?", "answer": 42}``.
"""

from __future__ import annotations

import logging
import re
import sys
from pathlib import Path
from typing import Any

import agentlightning as agl
from autogen_agentchat.agents import AssistantAgent
from autogen_agentchat.messages import TextMessage
from autogen_core.models import ModelFamily, ModelInfo
from autogen_ext.models.openai import OpenAIChatCompletionClient
from autogen_ext.tools.mcp import McpWorkbench, StdioServerParams

SERVER = Path(__file__).resolve().with_name("calculator_server.py")
SYSTEM = (
    "You are a careful calculator. Use the tools add, subtract and multiply for arithmetic, "
    "then state the result as a number."
)
# What AutoGen needs to know about a model it has no card for: the policy takes tools, nothing else.
MODEL_INFO = ModelInfo(
    vision=False,
    function_calling=True,
    json_output=False,
    structured_output=False,
    family=ModelFamily.UNKNOWN,
    multiple_system_messages=True,
)
logger = logging.getLogger(__name__)


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
    server = StdioServerParams(command=sys.executable, args=[str(SERVER)], read_timeout_seconds=60)
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
    except Exception as error:  # whatever the policy wrote (bad tool-call JSON, no reply) scores 0, never a crash
        logger.info("rollout scored 0: %s: %s", type(error).__name__, error)
        return 0.0
    finally:
        await client.close()
