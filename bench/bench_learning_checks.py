"""The suite's learning checks (``tests/integration/learning_checks.py``) at several seeds, one run after another.

Prints a markdown table: per check and seed the greedy test reward (held-out items) before and after, the
training reward in the first and last batch, and the wall time; then per check the lowest and highest final
test reward, against the threshold the suite asserts. bench/README.md (the learning checks per seed) keeps the
table the thresholds were chosen from.

    .venv/bin/python bench/bench_learning_checks.py [--checks single-turn,control] [--seeds 0,1,2,3,4] [key=value ...]

Settings after the options (``max_batches=60``, ``learning_rate=5e-3``) are tried over each check's own.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("TINKER_TELEMETRY", "0")
os.environ.setdefault("LITELLM_DONT_SHOW_FEEDBACK_BOX", "true")
os.environ.setdefault("AGENTOPS_LOG_LEVEL", "ERROR")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.integration.learning_checks import CHECKS, Outcome, run_check, tiny_renderer


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--checks", default=",".join(CHECKS), help="comma-separated check names")
    parser.add_argument("--seeds", default="0,1,2,3,4", help="comma-separated run seeds")
    parser.add_argument("overrides", nargs="*", help="settings over each check's own (key=value)")
    args = parser.parse_args()
    extra = tuple(args.overrides)
    names, seeds = args.checks.split(","), [int(s) for s in args.seeds.split(",")]
    renderer = tiny_renderer()
    print("| check | seed | test before | test after | train first -> last batch | wall |", flush=True)
    print("|---|---|---|---|---|---|", flush=True)
    finals: dict[str, list[float]] = {}
    for name in names:
        for seed in seeds:
            start = time.monotonic()
            with tempfile.TemporaryDirectory(prefix=f"check-{name}-{seed}-") as directory:
                outcome: Outcome = asyncio.run(run_check(name, seed, Path(directory), renderer, extra))
            seconds = time.monotonic() - start
            finals.setdefault(name, []).append(outcome.after)
            print(
                f"| {name} | {seed} | {outcome.before:.2f} | {outcome.after:.2f} | "
                f"{outcome.train_first:.2f} -> {outcome.train_last:.2f} | {seconds:.0f} s |",
                flush=True,
            )
    print()
    for name, values in finals.items():
        check = CHECKS[name]
        bound = f"<= {check.threshold}" if check.control else f">= {check.threshold}"
        print(
            f"{name}: final test reward {min(values):.2f}-{max(values):.2f} over {len(values)} seeds; asserted {bound}"
        )


if __name__ == "__main__":
    main()
