"""Processes the tests start: stopped in order, and whether one is still alive."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess


def stop(
    process: subprocess.Popen[str] | subprocess.Popen[bytes] | None,
    sig: int = signal.SIGINT,
    timeout_s: float = 30.0,
    group: bool = False,
) -> None:
    """Send ``sig``; kill the process (its whole group when ``group``) if it has not exited after ``timeout_s``."""
    if process is None or process.poll() is not None:
        return
    process.send_signal(sig)
    try:
        process.wait(timeout_s)
    except subprocess.TimeoutExpired:
        if group:
            os.killpg(process.pid, signal.SIGKILL)
        else:
            process.kill()
        process.wait(10)


def stop_group(process: subprocess.Popen[str] | subprocess.Popen[bytes] | None, timeout_s: float = 30.0) -> None:
    """SIGINT to the session ``process`` leads (``start_new_session=True``), then ``stop`` it and kill the group if
    need be: a wrapper such as ``faketime`` waits for the program it starts without passing signals on."""
    if process is None or process.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGINT)
    stop(process, timeout_s=timeout_s, group=True)


def alive(pid: int) -> bool:
    """Whether ``pid`` runs: a zombie (killed, not yet reaped, as orphans here wait for PID 1) counts as dead."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def parent_of(pid: int) -> int:
    """The parent process id of ``pid`` (from ``/proc``)."""
    with open(f"/proc/{pid}/stat") as stat:
        return int(stat.read().rsplit(")", 1)[1].split()[1])


def children(pid: int) -> list[int]:
    """The live processes whose parent is ``pid``."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as stat:
                    fields = stat.read().rsplit(")", 1)[1].split()
            except (OSError, IndexError):
                continue
            if fields[0] != "Z" and int(fields[1]) == pid:
                found.append(int(entry))
    return found
