"""The start-up hook an agent's environment gets: a fresh venv whose forked children die with their parent."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from adapters.runner.pdeathsig_hook import install_startup_hook

HANG_S = 60.0
"""Only catches a hang."""

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")

PARENT = """
import os, sys, threading, time
def fork_sleeper():
    pid = os.fork()
    if pid == 0:
        time.sleep(600)
        os._exit(0)
    return pid
main_child = fork_sleeper()
box = []
worker = threading.Thread(target=lambda: box.append(fork_sleeper()))
worker.start(); worker.join()
print(main_child, box[0], flush=True)
time.sleep(600)
"""


@pytest.fixture(scope="module")
def hooked_python(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A plain venv (no pip, nothing of this project) with the hook installed."""
    env = tmp_path_factory.mktemp("env") / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(env)], check=True, timeout=HANG_S)
    python = env / "bin" / "python"
    purelib = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True, text=True, check=True, timeout=HANG_S,
    ).stdout.strip()  # fmt: skip
    install_startup_hook(Path(purelib))
    return python


def _gone(pid: int) -> bool:
    """Whether ``pid`` has ended (a zombie counts: its parent, gone too, cannot reap it before init does)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return True
    return state in {"Z", "X"}


def _wait_gone(pid: int) -> bool:
    deadline = time.monotonic() + HANG_S
    while time.monotonic() < deadline:
        if _gone(pid):
            return True
        time.sleep(0.05)
    return False


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGKILL], ids=["SIGTERM", "SIGKILL"])
def test_a_child_forked_from_the_main_thread_dies_with_its_parent_one_forked_from_a_thread_is_left_alone(
    hooked_python: Path, signum: int
) -> None:
    parent = subprocess.Popen(
        [str(hooked_python), "-c", PARENT], stdout=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True
    )
    try:
        assert parent.stdout is not None
        main_child, thread_child = (int(pid) for pid in parent.stdout.readline().split())
        parent.send_signal(signum)
        parent.wait(HANG_S)
        assert _wait_gone(main_child)
        assert not _gone(thread_child)  # the kernel would have killed it when its (short-lived) thread ended
    finally:
        parent.kill()
        for pid in (locals().get("main_child"), locals().get("thread_child")):
            if isinstance(pid, int) and not _gone(pid):
                os.kill(pid, signal.SIGKILL)


def test_the_hook_is_what_arms_them(tmp_path: Path) -> None:
    """The same script in a venv without the hook leaves its child behind (so the test above can fail)."""
    env = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(env)], check=True, timeout=HANG_S)
    parent = subprocess.Popen(
        [str(env / "bin" / "python"), "-c", PARENT], stdout=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True
    )
    assert parent.stdout is not None
    children = [int(pid) for pid in parent.stdout.readline().split()]
    parent.kill()
    parent.wait(HANG_S)
    try:
        assert not any(_gone(pid) for pid in children)
    finally:
        for pid in children:
            os.kill(pid, signal.SIGKILL)


def test_the_hook_is_installed_as_a_pth_line_that_site_runs(tmp_path: Path) -> None:
    pth = install_startup_hook(tmp_path)
    assert pth.read_text().startswith("import ")  # site executes only lines that start so
    assert (tmp_path / "_agl_tinker_pdeathsig.py").is_file()
