"""What the Tinker server liveness watch adds to each call: guarded vs unguarded, side by side in one run.

Calls that end at once (``asyncio.sleep(0)``), one at a time and in groups of 8 (a GRPO group's
requests), through ``ServerLiveness.guard`` with the watch on (``give_up_after_s=120``) and off (0).
No probe is sent: calls shorter than one probe interval never reach one. CPU time of this process.

    .venv/bin/python bench/bench_liveness.py [--calls 20000]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from adapters.tinker.liveness import ServerLiveness


async def instant() -> None:
    await asyncio.sleep(0)


async def cost_us(liveness: ServerLiveness, calls: int, group: int) -> float:
    """CPU microseconds per guarded call, ``group`` calls at a time."""
    started = time.process_time()
    for _ in range(calls // group):
        await asyncio.gather(*(liveness.guard(instant()) for _ in range(group)))
    return (time.process_time() - started) / calls * 1e6


async def main(calls: int) -> None:
    url = "http://127.0.0.1:9"  # never probed: no call lasts a probe interval
    watches = {"off": ServerLiveness(url, give_up_after_s=0), "on": ServerLiveness(url, give_up_after_s=120)}
    for group in (1, 8):
        rows = {name: [await cost_us(w, calls, group) for _ in range(3)] for name, w in watches.items()}
        off, on = sorted(rows["off"])[1], sorted(rows["on"])[1]
        added = on - off
        print(f"groups of {group}: watch off {off:.1f} us/call, on {on:.1f}, added {added:.1f} us (medians of 3)")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=20000)
    asyncio.run(main(parser.parse_args().calls))
