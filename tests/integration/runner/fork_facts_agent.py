"""An agent module that writes, as it is imported, what its runner process looks like (``test_fork_server``)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import agentlightning as agl

_where = os.environ.get("AGL_TINKER_TEST_FACTS")
if _where:
    Path(_where, f"{os.getpid()}.json").write_text(
        json.dumps(
            {
                "pid": os.getpid(),
                "ppid": os.getppid(),
                "sid": os.getsid(0),
                "cwd": os.getcwd(),
                "mark": os.environ.get("AGL_TINKER_TEST_MARK"),
                "stdin": os.readlink("/proc/self/fd/0"),
                "comm": Path("/proc/self/comm").read_text().strip(),
            }
        )
    )


@agl.rollout
def reward_one(task: dict[str, object], llm: agl.LLM) -> float:
    return 1.0
