"""Transcript pages of a real run: two batches on the tiny model, evaluated before each and after the last,
read back as a browser shows them (headless Chromium's DOM where it is installed, else ``html.parser``)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import warnings
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest

from adapters.files.run_log import ROLLOUTS_FILE
from app.config import TrainConfig, load_config
from app.demo import task as demo_task
from app.launch import train
from ports.run_log import TRANSCRIPTS_DIR
from tests.support.cli import cli
from tests.support.waits import HANG_S

pytestmark = pytest.mark.slow

BROWSERS = ("chromium", "chromium-browser", "google-chrome")


def config(tmp_path: Path, **overrides: Any) -> TrainConfig:
    base = [
        f"log_path={tmp_path / 'run'}",
        "agent=tests.integration.training_agents:always_seven_agent",
        "n_runners=2",
        "batch_size=3",
        "group_size=4",
        "max_tokens=4",
        "warm_start.steps=10",
        "eval_every=1",
        "save_every=0",
        "max_batches=2",
        "rollout_timeout_s=60",
        "save_rollouts=true",
        "kl_penalty_coef=0",
    ]
    return load_config(None, base + [f"{k}={v}" for k, v in overrides.items()]).unwrap()


class _Visible(HTMLParser):
    """The text a browser shows (no head, no style), and each token span's text."""

    def __init__(self) -> None:
        super().__init__()
        self.parts: list[str] = []
        self.tokens: list[str] = []
        self._skip = 0
        self._token: list[str] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in ("head", "style", "title", "script"):
            self._skip += 1
        if tag == "span" and ("class", "tok") in attrs:
            self._token = []

    def handle_endtag(self, tag: str) -> None:
        if tag in ("head", "style", "title", "script"):
            self._skip -= 1
        if tag == "span" and self._token is not None:
            self.tokens.append("".join(self._token))
            self._token = None

    def handle_data(self, data: str) -> None:
        if self._skip:
            return
        self.parts.append(data)
        if self._token is not None:
            self._token.append(data)

    @property
    def text(self) -> str:
        return "".join(self.parts)


def browser() -> str | None:
    return next((path for name in BROWSERS if (path := shutil.which(name)) is not None), None)


def shown(page: Path) -> _Visible:
    """What the page shows: the DOM headless Chromium built from it where one is installed, else the file parsed."""
    markup = page.read_text()
    chromium = browser()
    if chromium is not None:
        dumped = subprocess.run(
            [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--dump-dom", page.resolve().as_uri()],
            capture_output=True, text=True, timeout=HANG_S, check=True,
        )  # fmt: skip
        markup = dumped.stdout
        assert "<body" in markup, dumped.stderr[-2000:]
    parsed = _Visible()
    parsed.feed(markup)
    return parsed


@pytest.mark.parametrize("mode", ["sync", "async"])
async def test_a_run_writes_readable_pages_of_its_evaluations_and_training_groups(tmp_path: Path, mode: str) -> None:
    if browser() is None:
        warnings.warn(
            f"none of {', '.join(BROWSERS)} is on PATH: the pages are checked with html.parser, not a browser's DOM",
            stacklevel=1,
        )
    cfg = config(tmp_path, **({"async.enabled": "true"} if mode == "async" else {}))
    await train(cfg)

    run = Path(cfg.log_path)
    folder = run / TRANSCRIPTS_DIR
    assert sorted(p.name for p in folder.glob("*.html")) == [
        "eval-000000.html", "eval-000001.html", "eval-000002.html", "train-000000.html", "train-000001.html",
    ]  # fmt: skip
    from tinker_cookbook.tokenizer_utils import get_tokenizer

    tokenizer = get_tokenizer(str(run / "tiny-model"))

    def decode(tokens: list[int]) -> str:
        return str(tokenizer.decode(tokens, skip_special_tokens=False))

    saved = {r["rollout_id"]: r for r in map(json.loads, (run / ROLLOUTS_FILE).read_text().splitlines())}
    for step in (0, 1):
        page = shown(folder / f"train-{step:06d}.html")
        assert f"Training batch {step}" in page.text
        # The first transcript_groups (2) of the batch's 3 groups, 4 rollouts each, each one a rollout trained on.
        ids = re.findall(r"rollout (\S+) · status", page.text)
        assert len(ids) == 2 * 4 and set(ids) <= set(saved)
        for rollout_id in ids:
            (turn,) = saved[rollout_id]["transitions"]
            assert decode(turn["ob"]) in page.text  # the prompt, decoded
            assert decode(turn["ac"]) in page.text  # the sampled response, token span after token span
            assert f"policy version {turn['policy_version']} · reward {turn['reward']:.3f}" in page.text
        assert len(page.tokens) - 5 == sum(len(saved[i]["transitions"][0]["ac"]) for i in ids)  # 5: the legend
        # GRPO advantages: each member's total reward minus its group's mean.
        for group in page.text.split("Group ")[1:]:
            scores = [(float(t), float(a)) for t, a in re.findall(r"total reward (\S+) · advantage (\S+)\n", group)]
            assert len(scores) == 4, group[:500]
            mean = sum(t for t, _ in scores) / 4
            assert [a for _, a in scores] == pytest.approx([t - mean for t, _ in scores], abs=2e-3)

    words = [task["word"] for task in demo_task.digit_tasks(1)]
    for i in (0, 1, 2):
        page = shown(folder / f"eval-{i:06d}.html")
        assert f"Evaluation at batch {i}" in page.text and "nothing here trains" in page.text
        assert len(re.findall(r"rollout \S+ · status", page.text)) == len(words)
        assert all(word in page.text for word in words)  # each test task's prompt
        assert "<|im_start|>assistant" in page.text and "advantage +" not in page.text

    # agl-tinker report lists the pages, newest first, next to report.png.
    reported = cli("report", str(run))
    assert reported.returncode == 0, reported.stderr
    index = folder / "index.html"
    assert f"transcripts: {index}" in reported.stdout
    listed = re.findall(r'href="([^"]+\.html)"', index.read_text())
    by_age = sorted(folder.glob("[et]*.html"), key=lambda p: (p.stat().st_mtime, p.name), reverse=True)
    assert listed == [p.name for p in by_age]
    assert listed[0] == "eval-000002.html"  # the final evaluation is the newest page
    assert "../report.png" in index.read_text()
