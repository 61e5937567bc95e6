"""What idle runners cost the store server: its process's CPU while two runners wait for rollouts that never come.

The store server runs as ``train`` runs it (``adapters.agl.server``, a thread of this process, an in-memory
store); two ``ConcurrentRunner`` s (32 slots each, 50 ms poll interval, the defaults) run in a child process
over HTTP with nothing queued. ``--stock`` serves Agent-lightning's plain ``LightningStoreServer`` instead,
so the runners poll it every 50 ms as they did before ``adapters.agl.dequeue``. Prints this process's CPU
(``time.process_time``, the server thread's work) per second of the window.

    .venv/bin/python bench/bench_idle_runners.py [--stock] [--seconds 20]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import time
from pathlib import Path

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("TINKER_TELEMETRY", "0")
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

RUNNERS = """
import asyncio, sys
import agentlightning as agl
from agentlightning.execution import ThreadingEvent
from adapters.runner.processes import run_concurrent_runner

@agl.rollout
async def never_called(task: dict, llm: agl.LLM) -> float:
    return 0.0

async def main() -> None:
    client = agl.LightningStoreClient(sys.argv[1])
    stop = ThreadingEvent()
    runners = [run_concurrent_runner(never_called, client, stop, worker_id=i, concurrency=32) for i in range(2)]
    print("ready", flush=True)
    await asyncio.gather(*runners)

asyncio.run(main())
"""


async def measure(stock: bool, seconds: float) -> float:
    import agentlightning as agl

    from adapters.agl.server import project_store_server
    from app.launch import free_port, store_launcher_args

    store = agl.InMemoryLightningStore(thread_safe=True)
    args = store_launcher_args("127.0.0.1", free_port())
    server = (
        agl.LightningStoreServer(store, launcher_args=args)
        if stock
        else project_store_server(store, None, launcher_args=args)
    )
    await server.start()
    child = subprocess.Popen(
        [sys.executable, "-c", RUNNERS, server.endpoint], cwd=ROOT, stdout=subprocess.PIPE, text=True
    )  # fmt: skip
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "ready"
        await asyncio.sleep(5)  # the runners' first requests and the server's warm-up
        cpu, wall = time.process_time(), time.perf_counter()
        await asyncio.sleep(seconds)
        return (time.process_time() - cpu) / (time.perf_counter() - wall)
    finally:
        child.kill()
        child.wait()
        await server.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--stock", action="store_true")
    parser.add_argument("--seconds", type=float, default=20.0)
    args = parser.parse_args()
    share = asyncio.run(measure(args.stock, args.seconds))
    which = "stock server, runners poll every 50 ms" if args.stock else "project server, runners wait on it"
    print(
        f"{which}: store server CPU {1000 * share:.1f} ms per second, two idle runners (load {os.getloadavg()[0]:.1f})"
    )


if __name__ == "__main__":
    main()
