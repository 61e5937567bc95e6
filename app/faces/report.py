"""Plots a run's reward and loss curves from its ``metrics.jsonl`` to a PNG."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from returns.result import Failure, Result, Success

from domain.metric_names import TEST_REWARD, TRAIN_REWARD

LOSS = "optim/loss:sum"
ENTROPY = "optim/entropy"


@dataclass(slots=True)
class Curves:
    """(step, value) series read from a metrics file."""

    train_reward: list[tuple[int, float]] = field(default_factory=list)
    test_reward: list[tuple[int, float]] = field(default_factory=list)
    loss: list[tuple[int, float]] = field(default_factory=list)
    entropy: list[tuple[int, float]] = field(default_factory=list)


def read_curves(metrics_file: Path) -> Result[Curves, str]:
    """The curves in ``metrics_file``; a later line for the same step (a resumed run) replaces the earlier."""
    if not metrics_file.is_file():
        return Failure(f"no metrics file at {metrics_file}: train first, or pass the run's log_path")
    rows: dict[tuple[str, int], float] = {}
    for n, line in enumerate(metrics_file.read_text().splitlines(), start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            return Failure(f"{metrics_file}:{n} is not JSON")
        step = record.get("step")
        if not isinstance(step, int):
            continue
        for key in (TRAIN_REWARD, TEST_REWARD, LOSS, ENTROPY):
            value = record.get(key)
            if isinstance(value, int | float):
                rows[(key, step)] = float(value)
    curves = Curves()
    series = {
        TRAIN_REWARD: curves.train_reward,
        TEST_REWARD: curves.test_reward,
        LOSS: curves.loss,
        ENTROPY: curves.entropy,
    }
    for (key, step), value in sorted(rows.items(), key=lambda item: item[0][1]):
        series[key].append((step, value))
    if not curves.train_reward and not curves.test_reward:
        return Failure(f"{metrics_file} holds no reward metrics yet")
    return Success(curves)


def plot(curves: Curves, out: Path, title: str = "") -> Path:
    """Reward (train and test) above, loss and sampling entropy below; returns ``out``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (top, bottom) = plt.subplots(2, 1, figsize=(8, 6), sharex=True)
    if curves.train_reward:
        top.plot(*zip(*curves.train_reward, strict=True), label="train reward (sampled)", alpha=0.7)
    if curves.test_reward:
        top.plot(*zip(*curves.test_reward, strict=True), "o-", label="test reward (eval temperature)")
    top.set_ylabel("mean reward")
    top.set_ylim(-0.05, 1.05)
    top.legend(loc="lower right")
    top.grid(alpha=0.3)
    if curves.loss:
        bottom.plot(*zip(*curves.loss, strict=True), color="tab:red", label="loss (sum over tokens)")
    bottom.set_ylabel("loss", color="tab:red")
    if curves.entropy:
        # On-policy importance sampling starts every step at ratio 1, so its loss sits near 0;
        # the sampling entropy shows how far the policy has sharpened.
        right = bottom.twinx()
        right.plot(*zip(*curves.entropy, strict=True), color="tab:green", label="sampling entropy (nats/token)")
        right.set_ylabel("entropy", color="tab:green")
    bottom.set_xlabel("batch")
    bottom.grid(alpha=0.3)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=100)
    plt.close(fig)
    return out


def write_report(log_path: str | Path, out: str | Path | None = None) -> Result[Path, str]:
    """``report.png`` in the run directory (or ``out``) from its ``metrics.jsonl``."""
    run = Path(log_path)
    target = Path(out) if out is not None else run / "report.png"
    return read_curves(run / "metrics.jsonl").map(lambda curves: plot(curves, target, title=str(run)))
