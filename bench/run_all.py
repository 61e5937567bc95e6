"""Every throughput benchmark of the trainer in one command, one table at the end.

Each measurement runs in a process of its own (``--child``), one after another, so none inherits another's
imports, threads or memory; their output goes to ``--log`` (default ``bench-run-all.log``), the table to stdout:

- trainer CPU per demo rollout: the trainer process's own CPU (``time.process_time``; runner processes are
  other processes) of a 10-batch demo run minus that of a 2-batch run, over the 8 x 80 rollouts between
  (start-up, warm start and the evaluations before and after cancel out), default settings otherwise; in the
  same runs, what the per-batch extras cost of it: the transcript pages and the metrics log, each writer timed by
  the CPU of the thread that runs it (``time.thread_time``: neither load nor other threads count);
- memory per rollout: the trainer's RSS slope over a demo run by the CLI (``bench/bench_demo_memory.py``), from
  rollout 10,000 to the end of 640 batches (51,200 rollouts); ``--quick``: from rollout 2,400 to the end of 100
  batches, where start-up growth still shows (the issue's 4.5 KB per rollout over the first 8,000);
- demo pipeline rollouts/s: the median over that run's batches of its own ``rollouts/per_s`` (the rollout phase);
- direct sampling rollouts/s: the demo's learning with the tiny model sampled in process
  (``bench/bench_demo.py``'s direct loop, 30 batches, warm start included);
- trivial agent rollouts/s: ``bench/bench_throughput.py`` row (a), 512 rollouts, one runner process x 64;
- the quick-start agent at full concurrency: ``bench/bench_latency.py``'s part 4, best batch of 64 x (0.5 s wait
  + a call through a client built in the rollout), one runner process x 64; ``--quick`` runs the default row
  only, the full run also the per-client-TLS row (before ``adapters/runner/tls.py``) and the one-client row;
- runner start: ``bench/bench_runner_start.py``, one trial each way: four runners forked from the fork server
  (after its first four) and four each started as its own interpreter, with the first four and a respawn.

    .venv/bin/python bench/run_all.py [--quick] [--log bench-run-all.log]
        [--only demo-cpu,memory,direct,trivial,quickstart,runner-start]
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import importlib
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, cast

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("TINKER_TELEMETRY", "0")
os.environ.setdefault("LITELLM_DONT_SHOW_FEEDBACK_BOX", "true")
os.environ.setdefault("AGENTOPS_LOG_LEVEL", "ERROR")
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

RESULT = "RESULT "
PARTS = ("demo-cpu", "memory", "direct", "trivial", "quickstart", "runner-start")
ROLLOUTS_PER_BATCH = 80


def _emit(result: dict[str, Any]) -> None:
    print(RESULT + json.dumps(result), flush=True)


EXTRAS = {
    "transcripts": ("adapters.files.transcripts", "HtmlTranscriptLog", "write"),
    "metrics log": ("adapters.files.run_log", "CookbookMetricsLog", "log_metrics"),
}
"""The per-batch extras a demo run with default settings writes: the writer of each (module, class, method)."""


def _timed(spent: dict[str, float], name: str, method: Callable[..., Any]) -> Callable[..., Any]:
    """``method``, adding the CPU time of the thread that runs it to ``spent[name]``."""

    @functools.wraps(method)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        started = time.thread_time()
        try:
            return method(*args, **kwargs)
        finally:
            spent[name] += time.thread_time() - started

    return wrapper


def child_demo_cpu(batches: str) -> None:
    from app.config import load_config
    from bench.bench_demo import pipeline

    spent = dict.fromkeys(EXTRAS, 0.0)
    for name, (module, cls, method) in EXTRAS.items():
        owner = getattr(importlib.import_module(module), cls)
        setattr(owner, method, _timed(spent, name, getattr(owner, method)))
    with tempfile.TemporaryDirectory() as tmp:
        config = load_config(None, [f"log_path={Path(tmp) / 'run'}", f"max_batches={batches}"]).unwrap()
        outcome = asyncio.run(pipeline(config))
    _emit({"cpu_s": outcome.cpu_s, "rollouts": outcome.rollouts, "seconds": outcome.seconds, "extras": spent})


def child_direct(batches: str) -> None:
    from app.config import load_config
    from bench.bench_demo import direct

    with tempfile.TemporaryDirectory() as tmp:
        config = load_config(None, [f"log_path={Path(tmp) / 'run'}", f"max_batches={batches}"]).unwrap()
        outcome = asyncio.run(direct(config))
    _emit({"rollouts": outcome.rollouts, "seconds": outcome.seconds, "cpu_s": outcome.cpu_s})


def child_memory(batches: str, from_rollout: str) -> None:
    from bench.bench_demo_memory import measure

    result = measure(False, [f"n_epochs={batches}"], int(from_rollout))
    print(result.line(), flush=True)
    _emit({
        "kib_per_rollout": result.kib_per_rollout, "first": result.first, "last": result.last,
        "exit_code": result.exit_code, "median_rate": result.median_rate, "batches": len(result.rollout_rates),
    })  # fmt: skip


def child_trivial(rollouts: str) -> None:
    from bench.bench_throughput import tiny_renderer, with_runners

    with tempfile.TemporaryDirectory() as tmp:
        renderer = tiny_renderer(Path(tmp))
        row, _ = asyncio.run(with_runners("(a) trivial", renderer, "lean", 1, 64, int(rollouts), 128))
    _emit({"rate": row.rate, "trainer_ms": 1000 * row.trainer_cpu_s / row.rollouts})


def child_quickstart(rows: str, batches: str) -> None:
    from bench.bench_latency import quickstart
    from bench.bench_throughput import tiny_renderer

    async def run(renderer: Any) -> list[dict[str, Any]]:
        measured = []
        for row in rows.split(","):
            result = await quickstart(renderer, row, int(batches), 0.5, None)
            measured.append({"row": row, "label": result.label, "best": min(result.walls), "walls": result.walls})
        return measured

    with tempfile.TemporaryDirectory() as tmp:
        _emit({"rows": asyncio.run(run(tiny_renderer(Path(tmp))))})


def child_runner_start(runners: str) -> None:
    from bench.bench_runner_start import trial

    _emit({mode: trial(mode, int(runners), index) for index, mode in enumerate(("spawn", "fork"))})


CHILDREN: dict[str, Callable[..., None]] = {
    "demo-cpu": child_demo_cpu,
    "direct": child_direct,
    "memory": child_memory,
    "trivial": child_trivial,
    "quickstart": child_quickstart,
    "runner-start": child_runner_start,
}


@dataclass
class Runner:
    log: Path

    def __call__(self, name: str, *args: str) -> dict[str, Any]:
        """Run ``--child name args`` in a fresh process (its output appended to the log); its result."""
        started = time.perf_counter()
        print(f"  {name} {' '.join(args)} ...", end="", flush=True)
        with self.log.open("a") as log:
            log.write(f"\n===== {name} {' '.join(args)} (load {os.getloadavg()[0]:.1f})\n")
            log.flush()
            child = subprocess.Popen(
                [sys.executable, str(Path(__file__).resolve()), "--child", name, *args],
                cwd=ROOT, stdout=subprocess.PIPE, stderr=log, text=True,
            )  # fmt: skip
            results = []
            for line in cast(IO[str], child.stdout):  # as it comes, so the log shows progress
                log.write(line)
                log.flush()
                if line.startswith(RESULT):
                    results.append(line[len(RESULT) :])
            code = child.wait()
        print(f" {time.perf_counter() - started:.0f} s", flush=True)
        if code != 0 or not results:
            raise RuntimeError(f"{name} failed (exit {code}); see {self.log}")
        result: dict[str, Any] = json.loads(results[-1])
        return result


def main(args: argparse.Namespace) -> None:
    log = Path(args.log).resolve()
    log.write_text("")
    run = Runner(log)
    load0, started = os.getloadavg()[0], time.perf_counter()
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    print(f"bench/run_all.py{' --quick' if args.quick else ''} at {commit.stdout.strip()}, load {load0:.1f}, log {log}")
    rows: list[tuple[str, str, str, str]] = []

    only = set(args.only.split(","))
    if "demo-cpu" in only:
        demo_cpu(run, rows)
    if "memory" in only:
        demo_memory(run, rows, args.quick)
    if "direct" in only:
        direct(run, rows)
    if "trivial" in only:
        trivial(run, rows)
    if "quickstart" in only:
        quickstart(run, rows, args.quick)
    if "runner-start" in only:
        runner_start(run, rows)
    print_table(rows)
    print(
        f"\n{time.perf_counter() - started:.0f} s in all; load average {load0:.1f} at the start, "
        f"{os.getloadavg()[0]:.1f} at the end ({os.cpu_count()} cores)"
    )


Rows = list[tuple[str, str, str, str]]


def demo_cpu(run: Runner, rows: Rows) -> None:
    short, long = run("demo-cpu", "2"), run("demo-cpu", "10")
    rollouts = long["rollouts"] - short["rollouts"]
    per_rollout = (long["cpu_s"] - short["cpu_s"]) / rollouts
    rows.append((
        "trainer CPU per demo rollout (10 - 2 batches)", f"{1000 * per_rollout:.2f} ms",
        f"{short['cpu_s']:.1f} s / {long['cpu_s']:.1f} s of CPU", "<= 5 ms",
    ))  # fmt: skip
    extras = {name: (long["extras"][name] - short["extras"][name]) / rollouts for name in EXTRAS}
    rows.append((
        "of which per-batch extras (same runs)", f"{1000 * sum(extras.values()):.3f} ms",
        ", ".join(f"{name} {1000 * ms:.3f} ms ({100 * ms / per_rollout:.1f}%)" for name, ms in extras.items()),
        "a few %",
    ))  # fmt: skip


def demo_memory(run: Runner, rows: Rows, quick: bool) -> None:
    batches, from_rollout = (100, 30 * ROLLOUTS_PER_BATCH) if quick else (640, 10_000)
    memory = run("memory", str(batches), str(from_rollout))
    (x0, y0), (x1, y1) = memory["first"], memory["last"]
    rows.append((
        f"trainer RSS growth, rollouts {x0:,}-{x1:,}", f"{memory['kib_per_rollout']:.2f} KiB/rollout",
        f"{y0:.0f} -> {y1:.0f} MiB{'; --quick: start-up growth included' if quick else ''}", "<= 1 KiB",
    ))  # fmt: skip
    rows.append((
        "demo pipeline, rollout phase", f"{memory['median_rate']:.0f} rollouts/s",
        f"median of {memory['batches']} batches' rollouts/per_s", ">= 300/s",
    ))  # fmt: skip


def direct(run: Runner, rows: Rows) -> None:
    measured = run("direct", "30")
    rows.append((
        "demo sampled directly (30 batches)", f"{measured['rollouts'] / measured['seconds']:.0f} rollouts/s",
        f"{measured['rollouts']} rollouts in {measured['seconds']:.1f} s, warm start included", "(reference ~420/s)",
    ))  # fmt: skip


def trivial(run: Runner, rows: Rows) -> None:
    trivial = run("trivial", "512")
    rows.append((
        "trivial agent, 1 runner x 64", f"{trivial['rate']:.0f} rollouts/s",
        f"512 rollouts, trainer CPU {trivial['trainer_ms']:.2f} ms/rollout", ">= 600/s",
    ))  # fmt: skip


def quickstart(run: Runner, rows: Rows, is_quick: bool) -> None:
    quick_rows = "shared" if is_quick else "per-client,shared,one-client"
    quick = run("quickstart", quick_rows, "3" if is_quick else "5")
    for row in quick["rows"]:
        walls = " ".join(f"{w:.2f}" for w in row["walls"])
        rows.append((
            f"quick-start agent 64 x 0.5 s, {row['label']}", f"{row['best']:.2f} s best",
            f"batches {walls} (ideal 0.50)", "<= 1.0 s" if row["row"] == "shared" else "",
        ))  # fmt: skip


def runner_start(run: Runner, rows: Rows) -> None:
    measured = run("runner-start", "4")
    for mode, label in (("fork", "forked from the fork server"), ("spawn", "each its own interpreter")):
        m = measured[mode]
        rows.append((
            f"4 more runners ready, {label}", f"{m['warm']:.2f} s",
            f"first 4 {m['cold']:.2f} s, a respawn {m['respawn']:.2f} s, runner CPU {m['cpu']:.1f} s", "",
        ))  # fmt: skip


def print_table(rows: Rows) -> None:
    if not rows:
        return
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    header = ("measure", "result", "detail", "target")
    widths = [max(w, len(h)) for w, h in zip(widths, header, strict=True)]
    print()
    for row in (header, tuple("-" * w for w in widths), *rows):
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip())


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] == "--child":
        CHILDREN[sys.argv[2]](*sys.argv[3:])
        sys.exit(0)
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="a shorter memory span, fewer quick-start rows")
    parser.add_argument("--log", default="bench-run-all.log", help="the benchmarks' own output")
    parser.add_argument("--only", default=",".join(PARTS), help="a subset: " + ", ".join(PARTS))
    main(parser.parse_args())
