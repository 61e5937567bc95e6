"""Where the trainer's CPU per demo rollout goes: cProfile and per-thread CPU, 10-batch run minus 2-batch run.

Two demo runs with default settings (``max_batches=2`` and ``10``), each in a fresh process, under cProfile
(the trainer's main thread: its event loop, the endpoint, the loop, the training step) with every thread's CPU
(psutil) around the run. The difference of the two divided by the 8 x 80 rollouts between them is the cost per
rollout: start-up, the warm start and the evaluations before and after are in both and cancel out.

    .venv/bin/python bench/profile_demo.py [--top 25] [--short 2] [--long 10] [key=value ...]
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import json
import os
import pstats
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("TINKER_TELEMETRY", "0")
os.environ.setdefault("AGENTOPS_LOG_LEVEL", "ERROR")
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

ROLLOUTS_PER_BATCH = 80
Key = tuple[str, int, str]


def child(batches: int, out: Path, overrides: list[str]) -> None:
    import psutil

    from app.config import load_config
    from bench.bench_demo import pipeline

    def threads() -> dict[str, float]:
        names = {t.native_id: t.name for t in threading.enumerate()}
        return {
            names.get(t.id, "other").split("-")[0].split(" ")[0]: t.user_time + t.system_time
            for t in psutil.Process().threads()
        }

    with tempfile.TemporaryDirectory() as tmp:
        config = load_config(None, [f"log_path={Path(tmp) / 'run'}", f"max_batches={batches}", *overrides]).unwrap()
        before = threads()
        profile = cProfile.Profile()
        profile.enable()
        outcome = asyncio.run(pipeline(config))
        profile.disable()
        after = threads()
    profile.dump_stats(str(out))
    by_thread: dict[str, float] = {}
    for name, cpu in after.items():
        by_thread[name] = by_thread.get(name, 0.0) + cpu - before.get(name, 0.0)
    out.with_suffix(".json").write_text(json.dumps({"rollouts": outcome.rollouts, "threads": by_thread}))


def own_times(path: Path) -> tuple[dict[Key, float], dict[Key, float]]:
    """Own (tottime) and cumulative seconds per function of a cProfile dump."""
    stats = pstats.Stats(str(path)).stats  # type: ignore[attr-defined]
    return {k: v[2] for k, v in stats.items()}, {k: v[3] for k, v in stats.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--short", type=int, default=2)
    parser.add_argument("--long", type=int, default=10)
    parser.add_argument("overrides", nargs="*")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        dumps = {}
        for batches in (args.short, args.long):
            dumps[batches] = Path(tmp) / f"demo-{batches}.prof"
            subprocess.run(
                [sys.executable, __file__, "--child", str(batches), str(dumps[batches]), *args.overrides],
                cwd=ROOT, check=True, stdout=subprocess.DEVNULL,
            )  # fmt: skip
        meta = {b: json.loads(p.with_suffix(".json").read_text()) for b, p in dumps.items()}
        n = meta[args.long]["rollouts"] - meta[args.short]["rollouts"]
        print(f"per rollout over {n} rollouts (batches {args.short}..{args.long}), load {os.getloadavg()[0]:.1f}")
        threads_long, threads_short = meta[args.long]["threads"], meta[args.short]["threads"]
        print("CPU by thread, ms/rollout:")
        for name in sorted(threads_long, key=lambda t: -(threads_long[t] - threads_short.get(t, 0.0))):
            delta = threads_long[name] - threads_short.get(name, 0.0)
            if abs(delta) * 1000 / n >= 0.05:
                print(f"  {name:<28} {1000 * delta / n:7.2f}")
        own_long, cum_long = own_times(dumps[args.long])
        own_short, cum_short = own_times(dumps[args.short])
        for title, long, short in (("own", own_long, own_short), ("cumulative", cum_long, cum_short)):
            print(f"main thread, top {args.top} functions by {title} time, ms/rollout (10-batch minus 2-batch run):")
            deltas = sorted(((v - short.get(k, 0.0), k) for k, v in long.items()), reverse=True)
            for delta, (file, line, func) in deltas[: args.top]:
                where = file.replace(str(ROOT) + "/", "").split("site-packages/")[-1]
                print(f"  {1000 * delta / n:7.3f}  {func}  ({where}:{line})")


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        child(int(sys.argv[2]), Path(sys.argv[3]), sys.argv[4:])
    else:
        main()
