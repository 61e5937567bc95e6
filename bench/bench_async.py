"""Synchronous vs asynchronous off-policy training, side by side, through the real pipeline.

Two workloads, each trained the same number of steps (100: the demo's length) in both modes with
the demo's config (10 groups of 8 a step, 250 warm-start steps), the same seed, tiny model, warm
start and batches (embedded store over HTTP, runner processes, policy endpoint, reconstruction,
cookbook datums, local trainer), the ``ppo`` loss, and room for three batches in flight
(``concurrency=256``, two runner processes of 128 slots) in both:

* ``latency``: ``bench.async_agents:latency_agent``, the demo's task and reward behind a long-tailed
  wait (lognormal, median 1 s, capped at 10 s) seeded by the task's content, so both modes see the
  same latencies. The tasks are the demo's ten words, ``--variants`` times each with a ``variant``
  field (so there are more than ten distinct latencies), the test set the ten plain words, and
  the warm start the demo's own format chats. Async mode: ``discard``, the defaults (one batch ahead, at
  most one version off-policy, staler groups discarded and rolled out again); ``--async ahead2`` goes
  two ahead (it was the default until 2026-12-04: twice as stale, and slower here).
* ``demo``: the demo itself (``tasks=demo``, ``app.demo.agent:digit_agent``, no added latency).
  Async mode: ``discard`` (``async.enabled=true`` and nothing else: one batch ahead, one version).

Async modes use the default staleness-aware learning rate (a step's rate is ``learning_rate`` divided by
1 + its groups' mean staleness); ``<mode>-fixed-lr`` runs a mode with every step at ``learning_rate``.

Training time (``train s``) is the sum of ``time/total`` over the step lines of metrics.jsonl minus
step 0's ``time/eval``: every step from the first to the last, the in-loop evaluations after step 0
included; start-up (the first evaluation waits for the runner processes to start), the warm start
and the final evaluation after the last step excluded. ``start`` is that step-0 evaluation. ``wall`` is the whole
``train()`` call, start-up included. The test reward is the last ``test/`` reward (the final
evaluation, after the last step), ``best`` the highest; ``to R`` is the training time until an
evaluation first reached test reward ``R``, for each ``R`` of ``--targets`` (default 0.5,0.7,0.9):
the ratio "at equal reward".

``tr R`` is the training time until the mean train reward of the last 10 steps first reached ``R``
(``--train-targets``, default 0.5,0.6,0.7): 80 rollouts a step make it a lower-noise "reward reached" than
ten greedy test words, and a conservative one for async mode, whose rollouts sampled older weights.
``--from DIR`` reports the runs a ``--keep`` run left in ``DIR`` without running anything; ``--no-sync``
runs the async modes alone (to try one beside a sync run kept from before).

``--seeds 0,1,2`` runs every mode once per seed (default: seed 0 only) and ends with the medians over
seeds: training time, test reward, and the sync/async ratios, overall and at each target reward.
Both modes of a seed share its seed; one run is not enough to settle a ratio at equal reward, since
the test set is ten words (0.1 each) and a run's test reward moves by 0.2 from one evaluation to the next.

    .venv/bin/python bench/bench_async.py [--steps N] [--only latency|demo] \
        [--async discard,admit,ahead2,discard-fixed-lr,...] [--variants 8] [--targets 0.5,0.7,0.9] \
        [--seeds 0,1,2] [--train-targets 0.5,0.6,0.7] [--from DIR] [--no-sync] [key=value ...]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("TINKER_TELEMETRY", "0")
os.environ.setdefault("LITELLM_DONT_SHOW_FEEDBACK_BOX", "true")
os.environ.setdefault("AGENTOPS_LOG_LEVEL", "ERROR")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from app.config import load_config
from app.demo.task import digit_tasks, format_warm_start
from app.launch import train
from app.usecases.steps import REWARD_KEY
from bench.async_agents import task_latency_s
from domain.metric_names import TEST_REWARD

COMMON = ["eval_every=10", "n_runners=2", "runner_concurrency=128", "concurrency=256", "loss_fn=ppo"]
"""Both workloads, both modes (the command line's overrides go after these). ``ppo``: its clipped ratio keeps
off-policy steps bounded; with ``importance_sampling`` the demo's policy at its learning rate did not learn one
or two versions off-policy (test reward 0.30 and 0.10 against sync's 0.90 and 0.50). On-policy, with one substep,
both losses have the same gradient, so the sync runs are the demo's own."""
DEFAULT_STEPS = {"latency": 100, "demo": 100}
DEFAULT_ASYNC = {"latency": "discard", "demo": "discard"}
ASYNC_MODES: dict[str, list[str]] = {
    "discard": ["async.enabled=true", "async.sampling_steps_ahead=1", "async.max_steps_off_policy=1"],
    "admit": [
        "async.enabled=true",
        "async.sampling_steps_ahead=1",
        "async.max_steps_off_policy=1",
        "async.stale=admit",
    ],
    "ahead2": ["async.enabled=true", "async.sampling_steps_ahead=2", "async.max_steps_off_policy=2"],
}
ASYNC_MODES |= {f"{name}-fixed-lr": [*mode, "async.staleness_lr=false"] for name, mode in list(ASYNC_MODES.items())}
"""Each mode also without the staleness-aware learning rate (every step at ``learning_rate``)."""


TRAIN_WINDOW = 10
"""Steps in the trailing mean of the train reward that ``tr R`` columns time."""


@dataclass
class Result:
    name: str
    wall_s: float
    steps: list[dict[str, Any]]
    test_rewards: list[tuple[int, float]]

    def total(self, key: str) -> float:
        return sum(float(m.get(key, 0.0)) for m in self.steps)

    @property
    def startup_s(self) -> float:
        """The first evaluation (step 0): it waits for the runner processes to start and import the agent."""
        return float(self.steps[0].get("time/eval", 0.0)) if self.steps else 0.0

    @property
    def train_s(self) -> float:
        return self.total("time/total") - self.startup_s

    @property
    def test_reward(self) -> float | None:
        return self.test_rewards[-1][1] if self.test_rewards else None

    def time_to(self, target: float) -> float | None:
        """Training time until an evaluation first reached ``target`` (None: none did).

        The evaluation before step ``s`` is part of step ``s``'s line; the final one (after the last
        step) has a line of its own without ``time/total``."""
        for step, reward in self.test_rewards:
            if reward >= target - 1e-9:
                before = sum(float(m["time/total"]) for m in self.steps if int(m["progress/batch"]) < step)
                own = next((m for m in self.steps if int(m["progress/batch"]) == step), {})
                return max(0.0, before + float(own.get("time/eval", 0.0)) - self.startup_s)
        return None

    def time_to_train(self, target: float, window: int = TRAIN_WINDOW) -> float | None:
        """Training time until the mean train reward of the last ``window`` steps first reached ``target``.

        Eighty rollouts a step against the test set's ten words: a lower-noise "reward reached", if a
        conservative one for async mode, whose train reward is that of samples from older weights."""
        rewards: list[float] = []
        elapsed = -self.startup_s
        for m in self.steps:
            elapsed += float(m["time/total"])
            if REWARD_KEY in m:
                rewards.append(float(m[REWARD_KEY]))
            if len(rewards) >= window and statistics.fmean(rewards[-window:]) >= target - 1e-9:
                return max(0.0, elapsed)
        return None

    def train_reward_tail(self, n: int = 5) -> float | None:
        rewards = [float(m[REWARD_KEY]) for m in self.steps if REWARD_KEY in m]
        return statistics.fmean(rewards[-n:]) if rewards else None

    def staleness(self) -> tuple[float, float] | None:
        means = [float(m["async/staleness_mean"]) for m in self.steps if "async/staleness_mean" in m]
        maxes = [float(m["async/staleness_max"]) for m in self.steps if "async/staleness_max" in m]
        if not means:
            return None
        return statistics.fmean(means), max(maxes)


def read_metrics(log_path: Path) -> tuple[list[dict[str, Any]], list[tuple[int, float]]]:
    lines = [json.loads(line) for line in (log_path / "metrics.jsonl").read_text().splitlines() if line.strip()]
    steps = [m for m in lines if "progress/batch" in m and "time/total" in m]
    tests = [(int(m.get("step", -1)), float(m[TEST_REWARD])) for m in lines if TEST_REWARD in m]
    return steps, tests


WALL_FILE = "bench_wall.json"


def run(name: str, overrides: list[str], log_path: Path) -> Result:
    config = load_config(None, [f"log_path={log_path}", *overrides]).unwrap()
    started = time.perf_counter()
    asyncio.run(train(config))
    wall = time.perf_counter() - started
    (log_path / WALL_FILE).write_text(json.dumps({"wall_s": wall}))
    steps, tests = read_metrics(log_path)
    return Result(name, wall, steps, tests)


def load(name: str, log_path: Path) -> Result:
    """A finished run of a kept directory (wall time NaN when the run did not record it)."""
    wall_file = log_path / WALL_FILE
    wall = float(json.loads(wall_file.read_text())["wall_s"]) if wall_file.exists() else float("nan")
    steps, tests = read_metrics(log_path)
    return Result(name, wall, steps, tests)


def latency_files(workdir: Path, variants: int, overrides: list[str]) -> list[str]:
    """The latency workload's task, test and warm-start files (the demo's words, chats and seed)."""
    base = load_config(None, [*COMMON, *overrides]).unwrap()
    workdir.mkdir(parents=True, exist_ok=True)
    tasks = [{**t, "variant": v} for v in range(variants) for t in digit_tasks()]
    test = digit_tasks()
    chats = format_warm_start(seed=base.seed)  # as app.launch.warm_start_chats does for the demo
    (workdir / "tasks.jsonl").write_text("".join(json.dumps(t) + "\n" for t in tasks))
    (workdir / "test.jsonl").write_text("".join(json.dumps(t) + "\n" for t in test))
    (workdir / "warm.jsonl").write_text("".join(json.dumps({"messages": c}) + "\n" for c in chats))
    waits = sorted(task_latency_s(t) for t in tasks)
    print(
        f"latency agent: {len(tasks)} tasks, wait median {statistics.median(waits):.2f} s, "
        f"mean {statistics.fmean(waits):.2f} s, p90 {waits[int(0.9 * len(waits))]:.2f} s, max {waits[-1]:.2f} s; "
        f"mean of the slowest of {base.batch_size}: {_mean_max_of(waits, base.batch_size):.2f} s",
        flush=True,
    )
    return [
        "agent=bench.async_agents:latency_agent",
        f"tasks={workdir / 'tasks.jsonl'}",
        f"test_tasks={workdir / 'test.jsonl'}",
        f"warm_start.file={workdir / 'warm.jsonl'}",
    ]


def _mean_max_of(values: list[float], k: int, draws: int = 2000) -> float:
    import random

    rng = random.Random(0)
    return statistics.fmean(max(rng.sample(values, min(k, len(values)))) for _ in range(draws))


def _ratio(sync_s: float | None, async_s: float | None) -> str:
    if sync_s is None or async_s is None:
        return f"not reached by {'sync' if sync_s is None else 'async'}"
    return f"{sync_s:.1f} s vs {async_s:.1f} s, {sync_s / max(async_s, 1e-9):.2f}x"


def _f(value: float | None, fmt: str = "{:.2f}") -> str:
    return "-" if value is None else fmt.format(value)


def report(workload: str, results: list[Result], targets: list[float], train_targets: list[float]) -> None:
    print(f"\n== {workload} ==")
    header = (
        f"{'mode':<14}{'steps':>6}{'train s':>9}{'start':>7}{'wall s':>8}{'s/step':>8}{'sample':>8}"
        f"{'train':>7}{'eval':>7}{'tr.idle':>8}{'ro.idle':>8}{'stale':>11}{'test':>6}{'best':>6}{'train r':>8}"
        + "".join(f"{f'to {t:g}':>8}" for t in targets)
        + "".join(f"{f'tr {t:g}':>8}" for t in train_targets)
    )
    print(header)
    for r in results:
        n = len(r.steps)
        stale = r.staleness()
        print(
            f"{r.name:<14}{n:>6}{r.train_s:>9.1f}{r.startup_s:>7.1f}{r.wall_s:>8.1f}{r.train_s / max(n, 1):>8.2f}"
            f"{_f(r.total('time/sample') or None, '{:.1f}'):>8}{r.total('time/train'):>7.1f}"
            f"{r.total('time/eval'):>7.1f}{_f(r.total('time/trainer_idle') if stale else None, '{:.1f}'):>8}"
            f"{_f(r.total('time/rollouts_idle') if stale else None, '{:.1f}'):>8}"
            f"{(f'{stale[0]:.2f}/{stale[1]:.0f}' if stale else '-'):>11}"
            f"{_f(r.test_reward):>6}{_f(max((v for _, v in r.test_rewards), default=None)):>6}"
            f"{_f(r.train_reward_tail()):>8}"
            + "".join(f"{_f(r.time_to(t), '{:.1f}'):>8}" for t in targets)
            + "".join(f"{_f(r.time_to_train(t), '{:.1f}'):>8}" for t in train_targets)
        )
    if results and results[0].name != "sync":  # --no-sync: nothing to compare with
        for r in results:
            print(f"{r.name} evals: {' '.join(f'{s}:{v:.2f}' for s, v in r.test_rewards)}", flush=True)
        return
    sync = results[0]
    for r in results[1:]:
        tests = " ".join(f"{s}:{v:.2f}" for s, v in r.test_rewards)
        print(
            f"sync/{r.name}: {sync.train_s / r.train_s:.2f}x training time, {sync.wall_s / r.wall_s:.2f}x wall; "
            f"test reward {_f(sync.test_reward)} (sync) vs {_f(r.test_reward)} ({r.name}); "
            + "".join(f"to test reward {t:g}: {_ratio(sync.time_to(t), r.time_to(t))}; " for t in targets)
            + "".join(
                f"to train reward {t:g}: {_ratio(sync.time_to_train(t), r.time_to_train(t))}; " for t in train_targets
            )
            + f"{r.name} evals {tests}"
        )
    print(f"sync evals: {' '.join(f'{s}:{v:.2f}' for s, v in sync.test_rewards)}", flush=True)


def summarize(
    workload: str, seeds: list[int], by_seed: list[list[Result]], targets: list[float], train_targets: list[float]
) -> None:
    """Across seeds: each mode's median training time and test reward, and the median sync/async ratios.

    A ratio at equal reward exists for a seed only when both modes reached that reward; the line
    says for how many seeds it did."""
    print(f"\n== {workload}: {len(seeds)} seeds ({','.join(map(str, seeds))}), medians ==")
    for column in range(len(by_seed[0])):
        runs = [results[column] for results in by_seed]
        rewards = [r.test_reward for r in runs if r.test_reward is not None]
        print(
            f"{runs[0].name}: train s {statistics.median(r.train_s for r in runs):.1f} "
            f"({' '.join(f'{r.train_s:.1f}' for r in runs)}); test reward "
            f"{_f(statistics.median(rewards) if rewards else None)} ({' '.join(_f(r.test_reward) for r in runs)})"
        )
    first = 1 if by_seed[0][0].name == "sync" else len(by_seed[0])  # --no-sync: no ratios
    for column in range(first, len(by_seed[0])):
        name = by_seed[0][column].name
        speed = [results[0].train_s / results[column].train_s for results in by_seed]
        parts = [f"training time {statistics.median(speed):.2f}x ({' '.join(f'{x:.2f}' for x in speed)})"]
        for label, measure, chosen in (
            ("test reward", Result.time_to, targets),
            ("train reward", Result.time_to_train, train_targets),
        ):
            for target in chosen:
                pairs = [(measure(results[0], target), measure(results[column], target)) for results in by_seed]
                ratios = [s / max(a, 1e-9) for s, a in pairs if s is not None and a is not None]
                shown = " ".join("-" if s is None or a is None else f"{s / max(a, 1e-9):.2f}" for s, a in pairs)
                median = f"{statistics.median(ratios):.2f}x" if ratios else "-"
                parts.append(f"to {label} {target:g}: {median} ({shown}; both reached in {len(ratios)}/{len(pairs)})")
        print(f"sync/{name}:\n  " + "\n  ".join(parts), flush=True)


def _run_name(mode: str) -> str:
    return mode if mode == "sync" else f"async-{mode}"


def from_directory(workdir: Path, targets: list[float], train_targets: list[float]) -> None:
    """Report the runs a ``--keep`` run left in ``workdir`` (``<workload>/seed<N>/<mode>``), sync first."""
    for workload_dir in sorted(p for p in workdir.iterdir() if p.name in DEFAULT_STEPS):
        by_seed: dict[int, list[Result]] = {}
        for seed_dir in sorted(workload_dir.glob("seed*"), key=lambda p: int(p.name[4:])):
            modes = sorted(
                (p for p in seed_dir.iterdir() if (p / "metrics.jsonl").exists()), key=lambda p: p.name != "sync"
            )
            by_seed[int(seed_dir.name[4:])] = results = [load(_run_name(m.name), m) for m in modes]
            report(f"{workload_dir.name}, {seed_dir.name}", results, targets, train_targets)
        widest = max((len(r) for r in by_seed.values()), default=0)
        complete = {seed: results for seed, results in by_seed.items() if len(results) == widest}
        if len(complete) > 1:
            summarize(workload_dir.name, list(complete), list(complete.values()), targets, train_targets)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=None, help="steps per run (default 100 for both)")
    parser.add_argument("--only", choices=("latency", "demo"), default=None)
    parser.add_argument(
        "--async",
        dest="modes",
        default=None,
        help=f"comma-separated of {','.join(ASYNC_MODES)} (default: latency {DEFAULT_ASYNC['latency']}, "
        f"demo {DEFAULT_ASYNC['demo']})",
    )
    parser.add_argument("--targets", default="0.5,0.7,0.9", help="test rewards the 'to R' columns time")
    parser.add_argument("--variants", type=int, default=8, help="latency workload: copies of each demo word")
    parser.add_argument("--seeds", default="0", help="comma-separated seeds: every mode runs once per seed")
    parser.add_argument(
        "--train-targets",
        default="0.5,0.6,0.7",
        help=f"train rewards (mean of the last {TRAIN_WINDOW} steps) the 'tr R' columns time",
    )
    parser.add_argument("--from", dest="source", type=Path, default=None, help="report a --keep directory, run nothing")
    parser.add_argument("--keep", action="store_true", help="keep the run directories (printed)")
    parser.add_argument(
        "--no-sync", action="store_true", help="run the async modes only (compare with a kept sync run)"
    )
    parser.add_argument("overrides", nargs="*", help="config overrides for every run, e.g. concurrency=128")
    args = parser.parse_args()
    chosen = [m.strip() for m in (args.modes or "").split(",") if m.strip()]
    if unknown := [m for m in chosen if m not in ASYNC_MODES]:
        parser.error(f"unknown async mode(s) {unknown}: use {list(ASYNC_MODES)}")
    workloads = [args.only] if args.only else ["latency", "demo"]
    targets = [float(t) for t in args.targets.split(",") if t.strip()]
    train_targets = [float(t) for t in args.train_targets.split(",") if t.strip()]
    if args.source is not None:
        from_directory(args.source, targets, train_targets)
        return
    seeds = [int(s) for s in args.seeds.split(",") if s.strip()]
    workdir = Path(tempfile.mkdtemp(prefix="bench-async-"))
    try:
        for workload in workloads:
            steps = args.steps or DEFAULT_STEPS[workload]
            extra: list[str] = []
            if workload == "latency":
                extra = latency_files(workdir / "latency-files", args.variants, args.overrides)
            base = [*COMMON, f"max_batches={steps}", *extra]
            print(f"{workload}: {steps} steps each, overrides {' '.join([*base, *args.overrides])}", flush=True)
            modes = chosen or [DEFAULT_ASYNC[workload]]
            by_seed: list[list[Result]] = []
            for seed in seeds:
                results: list[Result] = []
                for mode in [*([] if args.no_sync else ["sync"]), *modes]:
                    overrides = [*base, f"seed={seed}", *args.overrides, *([] if mode == "sync" else ASYNC_MODES[mode])]
                    result = run(_run_name(mode), overrides, workdir / workload / f"seed{seed}" / mode)
                    print(
                        f"  seed {seed} {result.name}: {len(result.steps)} steps, {result.train_s:.1f} s training, "
                        f"{result.wall_s:.1f} s wall, test reward {_f(result.test_reward)}",
                        flush=True,
                    )
                    results.append(result)
                report(f"{workload}, seed {seed}", results, targets, train_targets)
                by_seed.append(results)
            if len(seeds) > 1:
                summarize(workload, seeds, by_seed, targets, train_targets)
    finally:
        if args.keep:
            print(f"run directories kept in {workdir}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
