"""Plots a run's reward and loss curves from its ``metrics.jsonl`` to a PNG, and lists its transcript pages."""

from __future__ import annotations

import html
import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from returns.result import Failure, Result, Success

from domain.metric_names import KL_SAMPLE_TRAIN_V1, KL_SAMPLE_TRAIN_V2, SAMPLING_ENTROPY, TEST_REWARD, TRAIN_REWARD
from ports.run_log import TRANSCRIPT_INDEX, TRANSCRIPTS_DIR

LOSS = "optim/loss:sum"
ENTROPY = SAMPLING_ENTROPY


@dataclass(slots=True)
class Curves:
    """(step, value) series read from a metrics file."""

    train_reward: list[tuple[int, float]] = field(default_factory=list)
    test_reward: list[tuple[int, float]] = field(default_factory=list)
    loss: list[tuple[int, float]] = field(default_factory=list)
    entropy: list[tuple[int, float]] = field(default_factory=list)
    kl_v1: list[tuple[int, float]] = field(default_factory=list)
    kl_v2: list[tuple[int, float]] = field(default_factory=list)


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
        for key in (TRAIN_REWARD, TEST_REWARD, LOSS, ENTROPY, KL_SAMPLE_TRAIN_V1, KL_SAMPLE_TRAIN_V2):
            value = record.get(key)
            if isinstance(value, int | float):
                rows[(key, step)] = float(value)
    curves = Curves()
    series = {
        TRAIN_REWARD: curves.train_reward,
        TEST_REWARD: curves.test_reward,
        LOSS: curves.loss,
        ENTROPY: curves.entropy,
        KL_SAMPLE_TRAIN_V1: curves.kl_v1,
        KL_SAMPLE_TRAIN_V2: curves.kl_v2,
    }
    for (key, step), value in sorted(rows.items(), key=lambda item: item[0][1]):
        series[key].append((step, value))
    if not curves.train_reward and not curves.test_reward:
        return Failure(f"{metrics_file} holds no reward metrics yet")
    return Success(curves)


def plot(curves: Curves, out: Path, title: str = "") -> Path:
    """Reward (train and test) above, loss and sampling entropy below, and under them, when the metrics hold it,
    the sampler-trainer KL (``kl_sample_train_v1``/``v2``); returns ``out``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    with_kl = bool(curves.kl_v1 or curves.kl_v2)
    fig, axes = plt.subplots(3 if with_kl else 2, 1, figsize=(8, 8.5 if with_kl else 6), sharex=True)
    top, bottom = axes[0], axes[1]
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
    bottom.grid(alpha=0.3)
    if with_kl:
        plot_sample_train_kl(axes[2], curves)
    axes[-1].set_xlabel("batch")
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=100)
    plt.close(fig)
    return out


def plot_sample_train_kl(ax: Any, curves: Curves) -> None:
    """The KL between the sampler's logprobs and the trainer's forward pass on the same tokens, per batch.

    Near 0 when both compute the same distribution (the local backend at ``num_substeps=1``: about 1e-8;
    with more substeps, later ones train after an optimizer step). tinker-cookbook's ``rl_numerics_check``
    saw healthy trainers under 0.011 and a sampler-trainer bug at 0.09, which makes the importance ratios,
    and with them learning, wrong. The symmetric-log axis keeps v1's sign.
    """
    if curves.kl_v1:
        ax.plot(*zip(*curves.kl_v1, strict=True), "o-", ms=3, color="tab:purple", label="kl_sample_train_v1")
    if curves.kl_v2:
        ax.plot(*zip(*curves.kl_v2, strict=True), "s-", ms=3, color="tab:orange", label="kl_sample_train_v2")
    ax.axhline(0.0, color="black", lw=0.5)
    ax.axhline(0.01, color="tab:red", ls=":", lw=1, label="0.01")
    ax.set_yscale("symlog", linthresh=1e-4)
    ax.set_ylabel("sampler-trainer KL")
    ax.legend(loc="best", fontsize="small")
    ax.grid(alpha=0.3)


def write_report(log_path: str | Path, out: str | Path | None = None) -> Result[Path, str]:
    """``report.png`` in the run directory (or ``out``) from its ``metrics.jsonl``."""
    run = Path(log_path)
    target = Path(out) if out is not None else run / "report.png"
    return read_curves(run / "metrics.jsonl").map(lambda curves: plot(curves, target, title=str(run)))


def transcript_pages(log_path: str | Path) -> list[Path]:
    """The run's transcript pages (``train-*.html``, ``eval-*.html``), newest first."""
    folder = Path(log_path) / TRANSCRIPTS_DIR
    if not folder.is_dir():
        return []
    pages = [p for p in folder.glob("*.html") if p.name != TRANSCRIPT_INDEX and p.is_file()]
    return sorted(pages, key=lambda p: (p.stat().st_mtime, p.name), reverse=True)


def write_transcript_index(log_path: str | Path) -> Path | None:
    """``transcripts/index.html``: a self-contained page linking every transcript page, newest first, and the
    run's ``report.png`` when there is one; None (and no file) when the run wrote no page."""
    run = Path(log_path)
    pages = transcript_pages(run)
    if not pages:
        return None
    rows = []
    for page in pages:
        kind, _, index = page.stem.partition("-")
        stat = page.stat()
        written = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(stat.st_mtime))
        rows.append(
            f'<tr><td><a href="{html.escape(page.name, quote=True)}">{html.escape(page.name)}</a></td>'
            f"<td>{html.escape(kind)}</td><td>{html.escape(index.lstrip('0') or '0')}</td>"
            f"<td>{written}</td><td>{stat.st_size // 1024 + 1} KiB</td></tr>"
        )
    plot = (
        '<p><a href="../report.png"><img src="../report.png" alt="reward and loss curves" style="max-width:100%">'
        "</a></p>"
        if (run / "report.png").is_file()
        else ""
    )
    title = f"Transcripts of {run}"
    text = (
        '<!doctype html>\n<html lang="en">\n<head><meta charset="UTF-8">'
        f"<title>{html.escape(title)}</title><style>"
        "body{font-family:sans-serif;max-width:1000px;margin:0 auto;padding:14px;color:#333}"
        "table{border-collapse:collapse;width:100%}td,th{border-bottom:1px solid #e5e7eb;padding:0.4rem;"
        "text-align:left}th{background:#eef2f7}</style></head>\n<body>"
        f"<h1>{html.escape(title)}</h1>"
        f"<p>{len(pages)} page(s), newest first: <b>eval</b> pages show an evaluation on the test set, <b>train</b> "
        "pages the first groups of a training batch.</p>"
        f"{plot}<table><thead><tr><th>page</th><th>kind</th><th>batch</th><th>written</th><th>size</th></tr>"
        f"</thead><tbody>{''.join(rows)}</tbody></table></body></html>\n"
    )
    out = run / TRANSCRIPTS_DIR / TRANSCRIPT_INDEX
    out.write_text(text)
    return out
