"""The pre-flight of ``agl-tinker train``: bad input found in milliseconds, in one line, nothing heavy imported."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from returns.result import Failure, Success

from app.config import TrainConfig
from app.faces.preflight import EXIT_INPUT, EXIT_SETUP, port_in_use, preflight

ROOT = Path(__file__).resolve().parents[2]
HEAVY = {"agentlightning", "tinker", "tinker_cookbook", "torch", "litellm", "transformers", "openai"}


def problem(**settings: Any) -> tuple[str, int] | None:
    match preflight(TrainConfig.model_validate(settings)):
        case Failure(found):
            return found.message, found.exit_code
        case Success(_):
            return None
    raise AssertionError("unreachable")


def model_dir(tmp_path: Path, config_text: str = '{"model_type": "qwen3"}') -> Path:
    path = tmp_path / "model"
    path.mkdir()
    (path / "config.json").write_text(config_text)
    return path


def test_the_defaults_pass() -> None:
    assert problem() is None


def test_a_task_file_with_a_bad_line_is_named_with_its_line(tmp_path: Path) -> None:
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text('{"q": 1}\n\n{"q": 2\n')
    assert problem(tasks=str(tasks)) == (f"{tasks}:3: not a JSON value (Expecting ',' delimiter)", EXIT_INPUT)


@pytest.mark.parametrize(
    ("name", "text", "expected"),
    [
        ("missing.jsonl", None, "task file {path} does not exist"),
        ("tasks.txt", "x", "unsupported task file type '.txt' for {path}: use .jsonl, .json, .csv or .parquet"),
        ("tasks.json", '{"q": 1}', "{path}: must hold a JSON array of tasks, not a dict"),
        ("tasks.csv", "a,b\n1\n", "{path}:2: has 1 fields where the header has 2"),
        ("empty.jsonl", "\n", "{path}: holds no tasks"),
    ],
)
def test_test_task_files_are_checked_too(tmp_path: Path, name: str, text: str | None, expected: str) -> None:
    path = tmp_path / name
    if text is not None:
        path.write_text(text)
    assert problem(test_tasks=str(path)) == (expected.format(path=path), EXIT_INPUT)


def test_a_warm_start_file_with_a_non_chat_line_is_named(tmp_path: Path) -> None:
    chats = tmp_path / "chats.jsonl"
    chats.write_text(json.dumps({"messages": [{"role": "user", "content": "hi"}]}) + "\n" + '{"text": "x"}\n')
    found = problem(**{"warm_start": {"file": str(chats)}})
    assert found == (f"{chats}:2: not a chat record ('messages')", EXIT_INPUT)
    assert problem(**{"warm_start": {"file": str(chats), "steps": 0}}) is None  # unused: not checked


def test_a_missing_model_directory_keeps_its_exit_code(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere"
    expected = f"no Hugging Face model at {missing} (expected {missing / 'config.json'})"
    assert problem(policy={"model_path": str(missing)}) == (expected, EXIT_SETUP)


def test_a_named_pretrained_model_passes_and_a_misspelt_name_is_a_missing_directory() -> None:
    assert problem(policy={"model_path": "smollm2-135m-instruct"}) is None
    expected = "no Hugging Face model at smollm2-135m (expected smollm2-135m/config.json)"
    assert problem(policy={"model_path": "smollm2-135m"}) == (expected, EXIT_SETUP)


def test_a_corrupt_model_directory_is_one_line(tmp_path: Path) -> None:
    path = model_dir(tmp_path, '{"model_type": "qwen3",')
    found = problem(policy={"model_path": str(path)})
    assert found is not None and found[1] == EXIT_SETUP
    assert found[0].startswith(f"the model at {path} is corrupt: config.json is not valid JSON (")
    (path / "config.json").write_text("{}")
    (path / "tokenizer_config.json").write_text("[1, 2]")
    assert problem(policy={"model_path": str(path)}) == (
        f"the model at {path} is corrupt: tokenizer_config.json is not a JSON object",
        EXIT_SETUP,
    )


@pytest.mark.parametrize(
    ("agent", "expected"),
    [
        ("app.demo.agent", "agent reference 'app.demo.agent' must look like 'package.module:attribute'"),
        ("no.such.module:agent", "cannot load agent 'no.such.module:agent': no module named 'no'"),
        ("app.no_such_agent:agent", "cannot load agent 'app.no_such_agent:agent': no module named 'app.no_such_agent'"),
        ("json.decoder.x:y", "cannot load agent 'json.decoder.x:y': no module named 'json.decoder.x'"),
    ],
)
def test_an_agent_reference_that_cannot_be_found(agent: str, expected: str) -> None:
    assert problem(agent=agent) == (expected, EXIT_SETUP)
    assert problem(agent=agent, n_runners=0) is None  # runners elsewhere load their own agent


def test_agents_in_packages_and_in_the_working_directory_are_found() -> None:
    assert problem(agent="tests.integration.training_agents:always_seven_agent") is None
    assert problem(agent="app.demo.agent:whatever") is None  # the attribute is checked when runners load it


AGENT_NEEDING_A_MISSING_PACKAGE = """
from __future__ import annotations
import json
try:
    import optional_speedup_xyz  # guarded: not a requirement
except ImportError:
    pass
import trainer_only_package_xyz
import agentlightning as agl
"""


@pytest.mark.parametrize("runner_python", [None, sys.executable], ids=["this-env", "runner_python"])
def test_an_agent_importing_a_package_the_runners_environment_lacks_is_named_before_anything_heavy(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, runner_python: str | None
) -> None:
    """The quick probe runs where the runners will (``runner_python``; the trainer's own here) and reads the module
    without importing it: the same line ``agl-tinker train`` printed after loading Agent-lightning there."""
    (tmp_path / "needy_agent.py").write_text(AGENT_NEEDING_A_MISSING_PACKAGE)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PYTHONPATH", str(ROOT))  # the runner part, as an agent's environment has it installed
    where = f"runner environment {runner_python}: " if runner_python else ""
    expected = f"{where}cannot load agent 'needy_agent:solve': No module named 'trainer_only_package_xyz'"
    assert problem(agent="needy_agent:solve", runner_python=runner_python) == (expected, EXIT_SETUP)
    (tmp_path / "needy_agent.py").write_text(AGENT_NEEDING_A_MISSING_PACKAGE.replace("trainer_only_package_xyz", "csv"))
    assert problem(agent="needy_agent:solve", runner_python=runner_python) is None


def test_a_port_in_use_is_named() -> None:
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        assert port_in_use("127.0.0.1", port)
        assert problem(endpoint_port=port) == (f"port {port} on 127.0.0.1 is in use", EXIT_INPUT)
        assert problem(store_port=port) == (f"port {port} on 127.0.0.1 is in use", EXIT_INPUT)
        assert problem(store_port=port, store_url="http://127.0.0.1:1") is None  # no embedded store to serve
    assert not port_in_use("127.0.0.1", port)


def test_the_preflight_imports_nothing_heavy(tmp_path: Path) -> None:
    """Run in a fresh interpreter: the CLI calls it before Agent-lightning, torch or tinker are imported."""
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text("{\n")
    code = (
        "import sys, time; t = time.perf_counter()\n"
        "from app.config import TrainConfig\nfrom app.faces.preflight import preflight\n"
        f"result = preflight(TrainConfig(tasks={str(tasks)!r}, policy={{'model_path': {str(tmp_path)!r}}}))\n"
        "print(type(result).__name__, round(time.perf_counter() - t, 3))\n"
        "print(','.join(sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    verdict, loaded = out.splitlines()
    print(f"preflight in a fresh interpreter, imports included: {verdict.split()[1]}s")  # timing note, not asserted
    assert verdict.split()[0] == "Failure"
    assert not {m.split(".")[0] for m in loaded.split(",")} & HEAVY
