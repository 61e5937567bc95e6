"""``agl1.*`` settings: how a 1.x agent is named on the command line, and what is refused."""

from __future__ import annotations

from returns.result import Failure, Success

from app.config import load_config


def test_a_local_agent_and_its_requirements_parse_with_the_task_as_agl_task() -> None:
    loaded = load_config(None, ["agl1.agent=my_pkg.agents:MyAgent", "agl1.requirements=reqs.txt"])
    assert isinstance(loaded, Success)
    agl1 = loaded.unwrap().agl1
    assert agl1 is not None and (agl1.agent, agl1.requirements) == ("my_pkg.agents:MyAgent", "reqs.txt")
    assert agl1.env_map == {"AGL_TASK": "input"} and agl1.server_url is None


def test_without_an_agent_or_a_server_the_message_says_what_to_set() -> None:
    loaded = load_config(None, ["agl1.requirements=reqs.txt"])
    assert isinstance(loaded, Failure)
    assert "agl1.agent=package.module:Class is needed" in str(loaded.failure())


def test_attaching_needs_a_launch_setting() -> None:
    loaded = load_config(None, ["agl1.server_url=http://host:8080"])
    assert isinstance(loaded, Failure) and "agl1.job_template" in str(loaded.failure())
    attached = load_config(None, ["agl1.server_url=http://host:8080", "agl1.job_template=job.yaml"])
    assert isinstance(attached, Success)
