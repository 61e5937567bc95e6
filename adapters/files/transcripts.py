"""``ports.run_log.TranscriptLog`` as HTML pages: what the agent did, readable in a browser.

One self-contained page per evaluation (``eval-000010.html``) and per training batch
(``train-000003.html``, a few of its groups) under ``log_path/transcripts``, built with tinker-cookbook's
``logtree`` (its page frame and CSS; nothing is fetched from the network). Each rollout shows its status,
rewards, total and GRPO advantage, then turn by turn: the prompt decoded with the policy's tokenizer
(after the first turn only the part that does not repeat the previous turn's prompt and response: the
new observation, tool results included), the policy version that sampled the turn, and the sampled
response as one span per token, its background as intense as the token's probability, its logprob in
the tooltip. Every text is escaped; pages are bounded (rollouts per page, characters per prompt, shaded
tokens per response), and say so where they cut.
"""

from __future__ import annotations

import html
import math
import os
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from tinker_cookbook.utils import logtree

from domain.groups import RolloutResult, ScoredGroup
from domain.tokens import common_prefix
from domain.trajectory import TokenTransition
from ports.run_log import TRANSCRIPT_INDEX, TRANSCRIPTS_DIR, TranscriptKind

Decode = Callable[[Sequence[int]], str]
"""Token ids to text, with the policy's tokenizer (special tokens kept: they show the chat framing)."""

DECODE_WINDOW = 6
"""Tokens decoded before each token to find its own text (a character may span several byte-level tokens)."""
REPLACEMENT = "\ufffd"

CSS = """
.tx-note { color: #555; font-size: 0.85rem; margin: 0.3rem 0; }
.tx-turn { border: 1px solid #e5e7eb; border-radius: 6px; margin: 0.5rem 0; padding: 0.4rem 0.6rem; }
.tx-turn-head { font-weight: 600; font-size: 0.9rem; color: #374151; margin-bottom: 0.25rem; }
.tx-label { font-size: 0.78rem; text-transform: uppercase; letter-spacing: 0.04em; color: #6b7280; margin-top: 0.3rem; }
.tx-text { font-family: var(--lt-mono, "Courier New", monospace); font-size: 0.85rem; white-space: pre-wrap;
           word-break: break-word; margin: 0.15rem 0; padding: 0.35rem 0.45rem; border-radius: 4px; }
.tx-prompt { background: #f3f4f6; }
.tx-response { background: #fff; border: 1px solid #d1fae5; }
.tx-elided { color: #b45309; font-style: italic; }
.tok { border-radius: 2px; }
.tx-legend .tok { padding: 0 0.3rem; margin-right: 0.2rem; }
.tx-bad { color: #b91c1c; font-weight: 600; }
"""


@dataclass(frozen=True, slots=True)
class TranscriptLimits:
    """What keeps a page bounded (each cut is said on the page)."""

    max_rollouts: int = 64
    """Rollouts shown per page; the rest are counted."""
    max_prompt_chars: int = 4000
    """Characters shown per prompt: its head and its tail (the latest messages), the middle elided."""
    max_shaded_tokens: int = 1024
    """Response tokens shown one span each; the rest of a longer response is shown as plain text."""
    max_response_chars: int = 8000
    """Characters of that plain remainder."""


class HtmlTranscriptLog:
    """``ports.run_log.TranscriptLog`` writing ``log_path/transcripts/{kind}-{index:06d}.html``."""

    def __init__(self, log_path: str | Path, decode: Decode, limits: TranscriptLimits = TranscriptLimits()) -> None:
        self.directory = Path(log_path) / TRANSCRIPTS_DIR
        self.decode = decode
        self.limits = limits

    def write(self, kind: TranscriptKind, index: int, groups: Sequence[ScoredGroup]) -> str:
        path = self.directory / f"{kind.value}-{index:06d}.html"
        write_atomically(path, render_page(kind, index, groups, self.decode, self.limits))
        return str(path)

    def truncate_from(self, index: int) -> None:
        remove_pages_from(self.directory, index)


def remove_pages_from(directory: Path, index: int) -> list[str]:
    """Remove the pages of batch ``index`` and later, temporary files a crash left mid-write, and (when a page
    went) the report's index that linked it; returns the names removed.

    Each removal is one unlink, so a crash between two leaves pages a resumed run rewrites anyway.
    """
    if not directory.is_dir():
        return []
    kinds = {kind.value for kind in TranscriptKind}
    removed: list[str] = []
    for path in directory.iterdir():
        if path.name.partition("-")[0] not in kinds:
            continue
        page = path.suffix == ".html" and path.stem.partition("-")[2].isdigit()
        if path.suffix == ".tmp" or (page and int(path.stem.partition("-")[2]) >= index):
            path.unlink(missing_ok=True)
            removed.append(path.name)
    index_page = directory / TRANSCRIPT_INDEX
    if any(name.endswith(".html") for name in removed) and index_page.is_file():
        index_page.unlink()  # ``agl-tinker report`` writes it again
        removed.append(TRANSCRIPT_INDEX)
    return removed


@dataclass(frozen=True, slots=True)
class _Styled:
    """A logtree ``Formatter``: ready HTML, and the CSS of the transcript pages (logtree puts it in the head once)."""

    html: str

    def to_html(self) -> str:
        return self.html

    def get_css(self) -> str:
        return CSS

    def to_data(self) -> None:
        return None


def write_atomically(path: Path, text: str) -> None:
    """``text`` to ``path`` through a file beside it: a browser (or a crash) never sees half a page."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile("w", dir=path.parent, prefix=path.name, suffix=".tmp", delete=False) as file:
        file.write(text)
    os.replace(file.name, path)


def page_title(kind: TranscriptKind, index: int) -> str:
    if kind is TranscriptKind.EVAL:
        return f"Evaluation at batch {index}"
    return f"Training batch {index}"


def render_page(
    kind: TranscriptKind,
    index: int,
    groups: Sequence[ScoredGroup],
    decode: Decode,
    limits: TranscriptLimits = TranscriptLimits(),
) -> str:
    """The whole HTML document of one page."""
    title = page_title(kind, index)
    n_rollouts = sum(len(g.results) for g in groups)
    with logtree.init_trace(title, path=None) as trace:
        logtree.log_formatter(_Styled(_summary(kind, groups, n_rollouts, limits)))  # the page's CSS comes with it
        shown = 0
        for i_group, group in enumerate(groups):
            if shown >= limits.max_rollouts:
                break
            totals = [r.trajectory.total_reward for r in group.results]
            with logtree.scope_header(f"Group {i_group}: {len(group.results)} rollout(s), rewards {_floats(totals)}"):
                logtree.table_from_dict_of_lists(_group_table(group))
                for i_member, (result, advantage) in enumerate(zip(group.results, group.advantages, strict=True)):
                    if shown >= limits.max_rollouts:
                        break
                    shown += 1
                    heading = (
                        f"Rollout {i_member} · {result.status} · total reward {result.trajectory.total_reward:.3f}"
                        + (f" · advantage {advantage:+.3f}" if advantage is not None else "")
                    )
                    with logtree.scope_header(heading):
                        logtree.log_html(render_rollout(result, advantage, decode, limits))
        if shown < n_rollouts:
            logtree.log_html(
                f'<p class="tx-elided">{n_rollouts - shown} more rollout(s) not shown '
                f"(at most {limits.max_rollouts} per page).</p>"
            )
    return (
        '<!doctype html>\n<html lang="en">\n<head>\n'
        + trace.head_html()
        + "\n</head>\n"
        + trace.body_html(wrap_body=True)
        + "</html>\n"
    )


def _summary(kind: TranscriptKind, groups: Sequence[ScoredGroup], n_rollouts: int, limits: TranscriptLimits) -> str:
    totals = [r.trajectory.total_reward for g in groups for r in g.results]
    mean = sum(totals) / len(totals) if totals else 0.0
    what = (
        "the test set at the evaluation temperature: nothing here trains"
        if kind is TranscriptKind.EVAL
        else "the first groups of the batch; advantage = total reward minus the mean of the group's trained "
        "members (tinker-cookbook's compute_advantages, before any KL shaping); no advantage: the rollout did "
        "not train (excluded, or its group was dropped)"
    )
    legend = "".join(
        f'<span class="tok" style="{_shade(p)}" title="p={p:.2f}">{p:.2f}</span>' for p in (0.05, 0.25, 0.5, 0.75, 1.0)
    )
    return (
        f'<p class="tx-note">{len(groups)} group(s), {n_rollouts} rollout(s), mean total reward {mean:.3f}: '
        f"{html.escape(what)}.</p>"
        '<p class="tx-note tx-legend">Response tokens are shaded by their sampling probability exp(logprob) '
        f"(hover a token for its id and logprob): {legend}</p>"
        f'<p class="tx-note">Bounded: at most {limits.max_rollouts} rollouts per page, {limits.max_prompt_chars} '
        f"characters per prompt (head and tail), {limits.max_shaded_tokens} shaded tokens per response.</p>"
    )


def _group_table(group: ScoredGroup) -> dict[str, list[str]]:
    results = group.results
    return {
        "rollout": [str(i) for i in range(len(results))],
        "id": [r.rollout_id for r in results],
        "status": [r.status + (f" ({r.reason})" if r.reason else "") for r in results],
        "turns": [str(len(r.trajectory.transitions)) for r in results],
        "rewards": [_floats([t.reward for t in r.trajectory.transitions]) for r in results],
        "total": [f"{r.trajectory.total_reward:.3f}" for r in results],
        "advantage": [f"{a:+.3f}" if a is not None else "—" for a in group.advantages],
        "policy versions": [_versions(r) for r in results],
    }


def _versions(result: RolloutResult) -> str:
    versions = [t.policy_version for t in result.trajectory.transitions]
    return ", ".join("?" if v is None else str(v) for v in versions) or "—"


def _floats(values: Sequence[float]) -> str:
    return "[" + ", ".join(f"{v:.3f}" for v in values) + "]"


def render_rollout(result: RolloutResult, advantage: float | None, decode: Decode, limits: TranscriptLimits) -> str:
    """One rollout: its account, then each kept turn (prompt, or the new part of it, and the shaded response)."""
    trajectory = result.trajectory
    facts = [
        f"rollout {result.rollout_id}",
        f"status {result.status}" + (f" ({result.reason})" if result.reason else ""),
        f"total reward {trajectory.total_reward:.3f}",
        f"advantage {advantage:+.3f}" if advantage is not None else "no advantage (did not train)",
        f"{len(trajectory.transitions)} turn(s) of {trajectory.n_triplets} triplet(s)",
    ]
    parts = [f'<p class="tx-note">{html.escape(" · ".join(facts))}</p>']
    rejected = trajectory.rejection_counts()
    if rejected:
        counts = ", ".join(f"{reason.value}: {n}" for reason, n in sorted(rejected.items()))
        parts.append(f'<p class="tx-note tx-bad">rejected triplets: {html.escape(counts)}</p>')
    if trajectory.final_reward_missing:
        parts.append('<p class="tx-note tx-bad">the final turn carried no reward</p>')
    if not trajectory.transitions:
        parts.append('<p class="tx-note tx-bad">no turn was kept: nothing to show</p>')
    previous: tuple[int, ...] = ()
    for i_turn, transition in enumerate(trajectory.transitions):
        parts.append(render_turn(i_turn, transition, previous, decode, limits))
        previous = transition.ob + transition.ac
    return "".join(parts)


def render_turn(
    i_turn: int, transition: TokenTransition, previous: Sequence[int], decode: Decode, limits: TranscriptLimits
) -> str:
    version = "?" if transition.policy_version is None else str(transition.policy_version)
    head = (
        f"Turn {i_turn} · policy version {version} · reward {transition.reward:.3f} · "
        f"{len(transition.ob)} prompt / {len(transition.ac)} response tokens"
        + (" · last" if transition.episode_done else "")
    )
    shared = common_prefix(transition.ob, previous)
    if i_turn == 0 or shared == 0:
        label = "prompt"
        new_ob = transition.ob
    else:
        label = f"new observation (after the {shared} tokens of the previous turn's prompt and response)"
        new_ob = transition.ob[shared:]
    prompt = _capped(decode(list(new_ob)), limits.max_prompt_chars)
    return (
        f'<div class="tx-turn"><div class="tx-turn-head">{html.escape(head)}</div>'
        f'<div class="tx-label">{html.escape(label)}</div>'
        f'<div class="tx-text tx-prompt">{prompt}</div>'
        f'<div class="tx-label">sampled response</div>'
        f'<div class="tx-text tx-response">{shaded_response(transition, decode, limits)}</div></div>'
    )


def _capped(text: str, max_chars: int) -> str:
    """Escaped ``text``, its middle elided (and said so) beyond ``max_chars``: a quarter head, the rest tail."""
    if len(text) <= max_chars:
        return html.escape(text)
    head = max_chars // 4
    tail = max_chars - head
    elided = len(text) - head - tail
    return (
        html.escape(text[:head])
        + f'<span class="tx-elided">[… {elided} characters elided …]</span>'
        + html.escape(text[-tail:])
    )


def token_pieces(tokens: Sequence[int], decode: Decode, window: int = DECODE_WINDOW) -> list[str]:
    """Each token's own text: decoded after a few tokens of context, minus that context's text.

    A character split over several byte-level tokens shows on the token that completes it (the
    others' pieces are empty); where context and token do not decode as a prefix of one another, the
    token is decoded alone.
    """
    pieces: list[str] = []
    for i in range(len(tokens)):
        lo = max(0, i - window)
        before = decode(list(tokens[lo:i])).rstrip(REPLACEMENT) if i > lo else ""
        upto = decode(list(tokens[lo : i + 1]))
        complete = upto.rstrip(REPLACEMENT) if i + 1 < len(tokens) else upto
        if complete.startswith(before):
            pieces.append(complete[len(before) :])
        else:
            pieces.append(decode([tokens[i]]))
    return pieces


def _shade(probability: float) -> str:
    alpha = 0.08 + 0.72 * min(1.0, max(0.0, probability))
    return f"background-color: rgba(22, 163, 74, {alpha:.3f})"


def shaded_response(transition: TokenTransition, decode: Decode, limits: TranscriptLimits) -> str:
    """The sampled tokens, one span each shaded by exp(logprob), the logprob in its title; capped."""
    shown = transition.ac[: limits.max_shaded_tokens]
    spans = []
    for token, piece, logprob in zip(shown, token_pieces(shown, decode), transition.logprobs, strict=False):
        probability = math.exp(min(logprob, 0.0))
        tip = f"token {token} · logprob {logprob:.4f} · p {probability:.3f}"
        spans.append(
            f'<span class="tok" style="{_shade(probability)}" title="{html.escape(tip)}">{html.escape(piece)}</span>'
        )
    rest = transition.ac[limits.max_shaded_tokens :]
    if rest:
        spans.append(
            f'<span class="tx-elided">[{len(rest)} more tokens, unshaded (at most {limits.max_shaded_tokens} '
            "shaded per response):]</span>"
        )
        spans.append(_capped(decode(list(rest)), limits.max_response_chars))
    return "".join(spans)
