"""The suite's real-model LoRA check and its control (``tests/integration/sum_checks.py``) at several seeds.

SmolLM2-135M-Instruct, LoRA rank 32, the arithmetic example for 6 batches, one run after another. Prints a
markdown table: per run the held-out sums answered right greedily (of 75) before and after, the training reward
in the first and last batch, and the wall time; then each kind's range against what the suite asserts.
bench/README.md (the real-model checks per seed) keeps the table the bounds were chosen from.

    .venv/bin/python bench/bench_sum_checks.py [--kinds check,control] [--seeds 0,1,2,3,4]
        [--eval-every 2] [--batches 6]

``--eval-every N`` also evaluates every N batches and prints the held-out sums at each evaluation; ``--batches``
trains that many instead of the suite's.
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

from tests.integration.sum_checks import BATCHES, CONTROL_MAX, SUMS_PASS, TEST_ITEMS, run_sum_check


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--kinds", default="check,control", help="check, control or both (comma-separated)")
    parser.add_argument("--seeds", default="0,1,2,3,4", help="comma-separated run seeds")
    parser.add_argument("--eval-every", type=int, default=None, help="evaluate every N batches too")
    parser.add_argument("--batches", type=int, default=BATCHES, help="batches to train (default: the suite's)")
    args = parser.parse_args()
    kinds, seeds = args.kinds.split(","), [int(s) for s in args.seeds.split(",")]
    print(
        f"| run | seed | held-out sums before | after (of {TEST_ITEMS}) | train first -> last batch | wall "
        "| sums at (batch: right) |"
    )
    print("|---|---|---|---|---|---|---|", flush=True)
    finals: dict[str, list[int]] = {}
    for kind in kinds:
        for seed in seeds:
            start = time.monotonic()
            with tempfile.TemporaryDirectory(prefix=f"sums-{kind}-{seed}-") as directory:
                outcome = asyncio.run(
                    run_sum_check(
                        Path(directory),
                        seed,
                        control=kind == "control",
                        eval_every=args.eval_every or args.batches,
                        batches=args.batches,
                    )
                )
            seconds = time.monotonic() - start
            finals.setdefault(kind, []).append(outcome.after)
            print(
                f"| {kind} | {seed} | {outcome.before} | {outcome.after} | "
                f"{outcome.train_first:.2f} -> {outcome.train_last:.2f} | {seconds:.0f} s | "
                + ", ".join(f"{batch}: {right}" for batch, right in outcome.along)
                + " |",
                flush=True,
            )
    print()
    for kind, values in finals.items():
        bound = f"<= {CONTROL_MAX}" if kind == "control" else f">= {SUMS_PASS}"
        print(f"{kind}: held-out sums after {min(values)}-{max(values)} over {len(values)} seeds; asserted {bound}")


if __name__ == "__main__":
    main()
