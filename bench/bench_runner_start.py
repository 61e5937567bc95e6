"""How long runner processes take to start, forked from the fork server or each its own interpreter.

Per trial and mode, alternating: a pool of ``--runners`` processes is started (``RunnerProcesses.start``) and
timed until every one has imported its agent (the agent module writes a file as it is imported), then a second
pool of the same size (the fork server already warm), then one runner is killed and its respawn timed. The CPU
column is what the runner processes (and the fork server) used, read before they stop. Each trial's fork server
is a fresh one (a new environment key), so its own imports are in the first pool's numbers.

    .venv/bin/python bench/bench_runner_start.py [--runners 4] [--trials 2]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from adapters.runner.processes import RunnerProcesses
from adapters.runner.protocol import FORK_ENV

AGENT = "tests.integration.runner.fork_facts_agent:reward_one"
STORE = "http://127.0.0.1:9"  # nothing listens: the runners start, import their agent and poll


def imported(where: Path) -> int:
    return sum(1 for path in where.glob("*.json") if path.stem != str(os.getpid()))


def wait_for(where: Path, n: int, timeout_s: float = 600.0) -> float:
    start = time.perf_counter()
    while imported(where) < n:
        if time.perf_counter() - start > timeout_s:
            raise SystemExit(f"only {imported(where)} of {n} runners imported their agent in {timeout_s:.0f} s")
        time.sleep(0.02)
    return time.perf_counter() - start


def descendants_cpu_s() -> float:
    total = 0.0
    for child in psutil.Process().children(recursive=True):
        try:
            times = child.cpu_times()
        except psutil.NoSuchProcess:
            continue
        total += times.user + times.system
    return total


def trial(mode: str, n: int, index: int) -> dict[str, float]:
    os.environ[FORK_ENV] = "1" if mode == "fork" else "0"
    os.environ["AGL_TINKER_BENCH_TRIAL"] = f"{mode}-{index}"  # a fresh fork server each trial
    with tempfile.TemporaryDirectory() as directory:
        where = Path(directory)
        os.environ["AGL_TINKER_TEST_FACTS"] = directory
        first_id = 1000 * (index + 1)
        first = RunnerProcesses(AGENT, STORE, n, first_worker_id=first_id).start().supervise()
        second = None
        try:
            cold = wait_for(where, n)
            second = RunnerProcesses(AGENT, STORE, n, first_worker_id=first_id + 100).start()
            warm = wait_for(where, 2 * n)
            first._processes[0].kill()
            started = time.perf_counter()
            wait_for(where, 2 * n + 1)
            respawn = time.perf_counter() - started
            cpu = descendants_cpu_s()
        finally:
            first.stop()
            if second is not None:
                second.stop()
    return {"cold": cold, "warm": warm, "respawn": respawn, "cpu": cpu}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runners", type=int, default=4)
    parser.add_argument("--trials", type=int, default=2)
    args = parser.parse_args()
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    os.environ.setdefault("TINKER_TELEMETRY", "0")
    print(f"load average {os.getloadavg()[0]:.2f}, {args.runners} runners a pool")
    print("| mode | trial | first pool ready | second pool ready | respawn ready | runner CPU |")
    print("|---|---|---|---|---|---|")
    for index in range(args.trials):
        for mode in ("spawn", "fork") if index % 2 == 0 else ("fork", "spawn"):
            row = trial(mode, args.runners, index)
            print(
                f"| {mode} | {index} | {row['cold']:.2f} s | {row['warm']:.2f} s | {row['respawn']:.2f} s "
                f"| {row['cpu']:.1f} s |",
                flush=True,
            )
    print(f"load average {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
