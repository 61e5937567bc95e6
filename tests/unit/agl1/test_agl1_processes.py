"""What the run says about the local controller: the agent's own error from its log, and when it has given up."""

from __future__ import annotations

import sys
from pathlib import Path

from adapters.agl1.environment import Agl1Env
from adapters.agl1.processes import Agl1Controller

TRACEBACK = """\
[info     ] Spawned rollout subprocess     attempt_id=0 rollout_id=ro-1
Traceback (most recent call last):
  File "agents.py", line 9, in run
    raise RuntimeError("the agent crashed on purpose")
RuntimeError: the agent crashed on purpose
[warning  ] Failed to patch rollout      error='404' rollout_id=ro-1
"""


def controller(tmp_path: Path, program: str) -> Agl1Controller:
    """A controller whose process runs ``program`` instead of ``agl-controller``."""
    local = Agl1Controller(
        Agl1Env(path=tmp_path / "env", built=False), "key", tmp_path, server_url="http://s", agent_url="http://a"
    )
    local._process.args = [sys.executable, "-c", program]
    return local


def test_the_first_error_is_the_agents_exception_line(tmp_path: Path) -> None:
    local = controller(tmp_path, "pass")
    assert local.first_error() is None
    (tmp_path / "agl1-controller.log").write_text(TRACEBACK)
    first = local.first_error()
    assert first is not None and first.endswith("RuntimeError: the agent crashed on purpose")


def test_a_controller_that_exits_gives_the_run_up_and_a_stopped_one_does_not(tmp_path: Path) -> None:
    crashed = controller(tmp_path, "import sys; sys.exit(3)")
    crashed.start()
    assert crashed._process.popen is not None
    crashed._process.popen.wait(60)
    assert crashed.given_up and crashed.alive == 0 and "exited with code 3" in crashed.describe()

    stopped = controller(tmp_path, "import time; time.sleep(60)")
    stopped.start()
    assert stopped.alive == 1 and not stopped.given_up
    stopped.stop()
    assert not stopped.given_up
