"""Reconstruction throughput on long multi-turn trajectories, and the domain's import time.

.venv/bin/python bench/bench_reconstruction.py
"""

from __future__ import annotations

import random
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from domain.trajectory import reconstruct_trajectory
from domain.triplets import RawTriplet


def multi_turn(n_turns: int, turn_tokens: int, rng: random.Random) -> list[RawTriplet]:
    context: list[int] = [rng.randrange(50_000) for _ in range(256)]
    triplets = []
    for i in range(n_turns):
        response = [rng.randrange(50_000) for _ in range(turn_tokens)]
        triplets.append(
            RawTriplet(
                prompt={"token_ids": list(context)},
                response={"token_ids": response, "logprobs": [{"logprob": -rng.random()} for _ in response]},
                reward=1.0 if i == n_turns - 1 else None,
            )
        )
        context += response + [rng.randrange(50_000) for _ in range(32)]
    return triplets


def main() -> None:
    rng = random.Random(0)
    started = time.perf_counter()
    out = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", "import domain.trajectory, domain.groups, domain.batching"],
        capture_output=True,
        text=True,
        check=True,
        cwd=Path(__file__).resolve().parents[1],
    )
    wall = time.perf_counter() - started
    cumulative_us = max(
        int(line.split("|")[1])
        for line in out.stderr.splitlines()
        if line.count("|") == 2 and line.split("|")[1].strip().isdigit()
    )
    print(f"domain import: {cumulative_us / 1e6:.3f}s (largest cumulative module), interpreter+import {wall:.3f}s")
    for n_turns, turn_tokens in [(4, 64), (16, 128), (32, 256)]:
        trajectories = [multi_turn(n_turns, turn_tokens, rng) for _ in range(8)]
        tokens = sum(len(t.prompt["token_ids"]) + len(t.response["token_ids"]) for tr in trajectories for t in tr)  # type: ignore[index]
        started = time.perf_counter()
        repeats = 5
        for _ in range(repeats):
            for triplets in trajectories:
                reconstruct_trajectory(triplets)
        elapsed = time.perf_counter() - started
        n_triplets = repeats * n_turns * len(trajectories)
        print(
            f"{n_turns:>3} turns x {turn_tokens:>3} tokens: {n_triplets / elapsed:>10,.0f} triplets/s, "
            f"{repeats * tokens / elapsed:>14,.0f} tokens/s"
        )


if __name__ == "__main__":
    main()
