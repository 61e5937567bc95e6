"""Transcript pages: rollouts rendered to HTML with a fake tokenizer (escaped text, shaded tokens, rewards,
advantages, policy versions, bounded pages) and their index."""

from __future__ import annotations

import math
import os
import re
from collections.abc import Sequence
from html.parser import HTMLParser
from pathlib import Path

import pytest

from adapters.files.transcripts import HtmlTranscriptLog, TranscriptLimits, render_page, token_pieces
from app.faces.report import write_transcript_index
from domain.groups import RolloutResult, ScoredGroup
from domain.trajectory import EMPTY_TRAJECTORY, ReconstructedTrajectory, TokenTransition
from ports.run_log import TRANSCRIPTS_DIR, TranscriptKind

VOCAB = {
    1: "<|im_start|>user\n",
    2: "What is 3+4?",
    3: "<|im_end|>\n<|im_start|>assistant\n",
    4: "<script>alert('x')</script>",
    5: "<tool_call>calc(3+4)</tool_call>",
    6: "<|im_end|>",
    7: "\n<|im_start|>tool\n<tool_response>7 & done</tool_response>",
    8: " The answer is 7.",
}


def decode(tokens: Sequence[int]) -> str:
    return "".join(VOCAB[t] for t in tokens)


def two_turn_result(rollout_id: str, reward: float) -> RolloutResult:
    first = TokenTransition(
        ob=(1, 2, 3), ac=(4, 5, 6), logprobs=(-0.01, -2.0, -0.5), reward=0.0, episode_done=False, policy_version=3
    )
    second = TokenTransition(
        ob=(1, 2, 3, 4, 5, 6, 7, 3), ac=(8, 6), logprobs=(-0.2, 0.0), reward=reward, episode_done=True, policy_version=4
    )
    trajectory = ReconstructedTrajectory(
        transitions=(first, second), rejections=(), n_triplets=2, final_reward_missing=False
    )
    return RolloutResult(rollout_id=rollout_id, status="succeeded", trajectory=trajectory)


class _Text(HTMLParser):
    """The page's visible text and the token spans' (text, title, style)."""

    def __init__(self) -> None:
        super().__init__()
        self.text: list[str] = []
        self.tokens: list[tuple[str, str, str]] = []
        self._token: dict[str, str] | None = None
        self._in_style = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        attributes = {k: v or "" for k, v in attrs}
        self._in_style = tag == "style"
        if tag == "span" and attributes.get("class") == "tok":
            self._token = {"title": attributes.get("title", ""), "style": attributes.get("style", ""), "text": ""}

    def handle_endtag(self, tag: str) -> None:
        self._in_style = False
        if tag == "span" and self._token is not None:
            self.tokens.append((self._token["text"], self._token["title"], self._token["style"]))
            self._token = None

    def handle_data(self, data: str) -> None:
        if self._in_style:
            return
        self.text.append(data)
        if self._token is not None:
            self._token["text"] += data


def parse(page: str) -> _Text:
    parser = _Text()
    parser.feed(page)
    return parser


def test_a_training_page_shows_decoded_turns_escaped_with_rewards_advantages_and_versions() -> None:
    group = ScoredGroup(
        (two_turn_result("ro-a", 1.0), two_turn_result("ro-b", 0.0), RolloutResult("ro-c", "failed", EMPTY_TRAJECTORY)),
        (0.5, -0.5, None),
    )
    page = render_page(TranscriptKind.TRAIN, 3, [group], decode)

    assert "<script>" not in page  # every text is escaped
    assert "&lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt;" in page
    assert "http://" not in page and "https://" not in page and "<link" not in page  # self-contained
    parsed = parse(page)
    text = "".join(parsed.text)
    assert "Training batch 3" in text
    # First turn: the whole prompt; second: only what is new after the previous prompt and response.
    assert "<|im_start|>user\nWhat is 3+4?" in text
    assert "new observation (after the 6 tokens of the previous turn's prompt and response)" in text
    assert "<tool_response>7 & done</tool_response>" in text
    assert text.count("<|im_start|>user") == 2  # once per rollout with turns: the second turn does not repeat it
    # Rewards, totals, advantages, policy versions, status.
    assert "total reward 1.000 · advantage +0.500" in text
    assert "advantage -0.500" in text
    assert "policy version 3" in text and "policy version 4" in text
    assert "failed" in text and "no turn was kept" in text
    assert "no advantage (did not train)" in text
    # Each sampled token is a span shaded by exp(logprob), the logprob in its title.
    assert [t for t, _, _ in parsed.tokens[5:10]] == [
        "<script>alert('x')</script>",
        "<tool_call>calc(3+4)</tool_call>",
        "<|im_end|>",
        " The answer is 7.",
        "<|im_end|>",
    ]
    sampled = [(t, title, style) for t, title, style in parsed.tokens if title.startswith("token ")]
    assert len(sampled) == 2 * (3 + 2)
    alphas = {t: float(re.findall(r"rgba\([^)]*, ([0-9.]+)\)", style)[0]) for t, _, style in sampled[:3]}
    assert alphas["<script>alert('x')</script>"] > alphas["<|im_end|>"] > alphas["<tool_call>calc(3+4)</tool_call>"]
    assert sampled[1][1] == f"token 5 · logprob -2.0000 · p {math.exp(-2.0):.3f}"


def test_an_evaluation_page_says_nothing_trains_and_shows_no_advantage() -> None:
    page = render_page(TranscriptKind.EVAL, 10, [ScoredGroup.untrained([two_turn_result("ro-e", 1.0)])], decode)
    text = "".join(parse(page).text)
    assert "Evaluation at batch 10" in text and "nothing here trains" in text
    assert "advantage +" not in text and "no advantage (did not train)" in text


def test_pages_are_bounded_and_say_so() -> None:
    long_prompt = TokenTransition(
        ob=(2,) * 1000, ac=(8,) * 30, logprobs=(-0.1,) * 30, reward=1.0, episode_done=True, policy_version=0
    )
    trajectory = ReconstructedTrajectory((long_prompt,), (), 1, False)
    results = [RolloutResult(f"ro-{i}", "succeeded", trajectory) for i in range(5)]
    limits = TranscriptLimits(max_rollouts=3, max_prompt_chars=400, max_shaded_tokens=10)
    page = render_page(TranscriptKind.TRAIN, 0, [ScoredGroup.untrained(results)], decode, limits)
    parsed = parse(page)
    text = "".join(parsed.text)
    assert "2 more rollout(s) not shown (at most 3 per page)" in text
    assert f"[… {12 * 1000 - 400} characters elided …]" in text
    assert "[20 more tokens, unshaded (at most 10 shaded per response):]" in text
    assert sum(1 for _, title, _ in parsed.tokens if title.startswith("token ")) == 3 * 10


def test_token_pieces_put_a_split_character_on_the_token_that_completes_it() -> None:
    data = "né".encode()  # é is two bytes: one token each

    def byte_decode(tokens: Sequence[int]) -> str:
        return bytes(tokens).decode("utf-8", errors="replace")

    assert token_pieces(list(data), byte_decode) == ["n", "", "é"]
    assert token_pieces([data[1]], byte_decode) == ["\ufffd"]  # a sequence that ends mid-character says so


def test_the_log_writes_one_page_per_kind_and_batch_and_the_index_lists_them_newest_first(tmp_path: Path) -> None:
    log = HtmlTranscriptLog(tmp_path, decode)
    group = ScoredGroup((two_turn_result("ro-a", 1.0),), (0.0,))
    first = Path(log.write(TranscriptKind.TRAIN, 3, [group]))
    second = Path(log.write(TranscriptKind.EVAL, 10, [group]))
    assert first == tmp_path / TRANSCRIPTS_DIR / "train-000003.html"
    assert second == tmp_path / TRANSCRIPTS_DIR / "eval-000010.html"
    assert not list((tmp_path / TRANSCRIPTS_DIR).glob("*.tmp"))
    os.utime(first, (1_000_000, 1_000_000))  # older than the evaluation's page
    index = write_transcript_index(tmp_path)
    assert index == tmp_path / TRANSCRIPTS_DIR / "index.html"
    links = re.findall(r'href="([^"]+\.html)"', index.read_text())
    assert links == ["eval-000010.html", "train-000003.html"]
    assert write_transcript_index(tmp_path / "elsewhere") is None


def test_a_scored_group_needs_one_advantage_per_rollout() -> None:
    with pytest.raises(ValueError, match="one advantage"):
        ScoredGroup((two_turn_result("ro", 1.0),), ())
