"""The suite's real-model LoRA checks and their control (``tests/integration/sum_checks.py``) at several seeds.

SmolLM2-135M-Instruct, LoRA rank 32, the arithmetic example for 6 batches (the chat check 3), one run after
another. Prints a markdown table: per run the held-out answers right greedily (of 75 sums; of 150 for ``chat``,
two sums a chat) before and after, the training reward in the first and last batch, and the wall time; then each
kind's range against what the suite asserts. bench/README.md (the real-model checks per seed) keeps the table the
bounds were chosen from.

    .venv/bin/python bench/bench_sum_checks.py [--kinds check,control,chat] [--seeds 0,1,2,3,4]
        [--eval-every 2] [--batches N]

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

from tests.integration.sum_checks import CHAT_PASS, CONTROL_MAX, SUMS_PASS, answers, run_sum_check


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--kinds", default="check,control", help="check, control, chat (comma-separated)")
    parser.add_argument("--seeds", default="0,1,2,3,4", help="comma-separated run seeds")
    parser.add_argument("--eval-every", type=int, default=None, help="evaluate every N batches too")
    parser.add_argument("--batches", type=int, default=None, help="batches to train (default: the suite's)")
    args = parser.parse_args()
    kinds, seeds = args.kinds.split(","), [int(s) for s in args.seeds.split(",")]
    header = "| run | seed | held-out answers before | after (of) | train first -> last batch | wall "
    print(header + "| at (batch: right) |")
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
                        kind,
                        eval_every=args.eval_every,
                        n_batches=args.batches,
                    )
                )
            seconds = time.monotonic() - start
            finals.setdefault(kind, []).append(outcome.after)
            print(
                f"| {kind} | {seed} | {outcome.before} | {outcome.after} ({answers(kind)}) | "
                f"{outcome.train_first:.2f} -> {outcome.train_last:.2f} | {seconds:.0f} s | "
                + ", ".join(f"{batch}: {right}" for batch, right in outcome.along)
                + " |",
                flush=True,
            )
    print()
    for kind, values in finals.items():
        bound = {"control": f"<= {CONTROL_MAX}", "chat": f">= {CHAT_PASS}"}.get(kind, f">= {SUMS_PASS}")
        print(f"{kind}: held-out answers after {min(values)}-{max(values)} over {len(values)} seeds; asserted {bound}")


if __name__ == "__main__":
    main()
