"""Token-in-token-out for multi-turn agents: the next prompt extends exactly what the policy saw and sampled.

An agent sends its whole history back on every turn, as text. Re-tokenising an earlier reply
rarely gives back the tokens the policy sampled (byte tokens, other merges), so the next
observation would not extend the previous observation + action, the cookbook could not merge the
turns into one datum, and the prompt trained on would not be the one the model saw. Here the
earlier reply's region of the rendered conversation is replaced by the sampled tokens:

    next prompt = previous prompt + previous sampled tokens (+ end-of-turn) + rendered new messages

Messages are compared in a normal form (role, text, tool calls), so clients that echo the reply
back with extra fields still match. When the history does not extend a served turn, the prompt is
rendered from text as before and the reason is reported (``PrefixBreak``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum

from returns.result import Failure, Result, Success


class PrefixBreak(StrEnum):
    """Why a turn's prompt could not extend the previous turn's exact tokens."""

    HISTORY_EDITED = "history_edited"
    """An assistant message in the history is not a reply this endpoint served for the rollout."""
    TOOLS_CHANGED = "tools_changed"
    """The tool declarations differ from the served turn's (they are part of the rendered prefix)."""
    RENDER_NOT_PREFIX = "render_not_prefix"
    """The renderer's output for the longer conversation does not start with its output for the shorter."""
    NO_END_OF_REPLY = "no_end_of_reply"
    """The re-rendered reply has no end-of-turn token to splice at."""


@dataclass(frozen=True, slots=True)
class NormalMessage:
    """A chat message as far as rendering cares: role, text, and tool calls (name, arguments)."""

    role: str
    text: str
    tool_calls: tuple[tuple[str, str], ...] = ()
    tool_call_id: str = ""


@dataclass(frozen=True, slots=True)
class ServedTurn:
    """One completion this endpoint served in a rollout: its request, exact prompt and sampled tokens."""

    messages: tuple[NormalMessage, ...]
    tools: str
    """The request's tool declarations in a canonical text form ("" without tools)."""
    prompt: tuple[int, ...]
    sampled: tuple[int, ...]
    reply: NormalMessage
    sequence_id: int = 0
    """The request's place in the attempt's span order (its record's ``sequence_id``)."""
    choice: int = 0
    """Which of the request's ``n`` choices this is."""


@dataclass(frozen=True, slots=True)
class TurnMatch:
    """A served turn whose request + reply the new request's messages start with."""

    turn: ServedTurn
    n_prefix_messages: int
    """How many of the new messages the turn's request held (the reply is the next one)."""


def match_served_turn(
    messages: Sequence[NormalMessage], tools: str, served: Sequence[ServedTurn]
) -> Result[TurnMatch | None, PrefixBreak]:
    """The latest served turn the request continues; ``None`` for a request with no assistant message."""
    for turn in reversed(served):
        n = len(turn.messages)
        if len(messages) > n and messages[n] == turn.reply and tuple(messages[:n]) == turn.messages:
            if tools != turn.tools:
                return Failure(PrefixBreak.TOOLS_CHANGED)
            return Success(TurnMatch(turn=turn, n_prefix_messages=n))
    if any(m.role == "assistant" for m in messages):
        return Failure(PrefixBreak.HISTORY_EDITED)
    return Success(None)


def splice_prompt(
    turn: ServedTurn,
    rendered_prefix: Sequence[int],
    rendered_full: Sequence[int],
    end_of_turn_ids: frozenset[int],
) -> Result[tuple[int, ...], PrefixBreak]:
    """The new prompt: the turn's exact prompt and sample, then what the renderer adds after the reply.

    ``rendered_prefix`` is the generation prompt rendered from the turn's own messages (text), and
    ``rendered_full`` the one rendered from the new request; the region between the end of the first
    and the first end-of-turn token after it is the re-tokenised reply, which the sampled tokens replace.
    """
    n = len(rendered_prefix)
    if tuple(rendered_full[:n]) != tuple(rendered_prefix):
        return Failure(PrefixBreak.RENDER_NOT_PREFIX)
    rest = rendered_full[n:]
    end = next((i for i, token in enumerate(rest) if token in end_of_turn_ids), None)
    if end is None:
        return Failure(PrefixBreak.NO_END_OF_REPLY)
    ended = bool(turn.sampled) and turn.sampled[-1] in end_of_turn_ids
    closing = () if ended else (rest[end],)
    return Success((*turn.prompt, *turn.sampled, *closing, *rest[end + 1 :]))


@dataclass(frozen=True, slots=True)
class ServedChoice:
    """One recorded choice of one served request, and the served choice its prompt continues, if any."""

    sequence_id: int
    choice: int
    n_choices: int
    extends: tuple[int, int] | None = None
    """``(sequence_id, choice)`` of the served choice this request's prompt extends token for token."""

    @property
    def key(self) -> tuple[int, int]:
        return (self.sequence_id, self.choice)


@dataclass(frozen=True, slots=True)
class KeptChoices:
    """Which served choices are trained, in branch order, and what was left out."""

    trained: tuple[ServedChoice, ...]
    """Every kept choice, each branch's continuations right after it (depth first, in request order)."""
    ambiguous_calls: int = 0
    """Requests with ``n > 1`` that no later request continued: the kept choice is unknown, none is trained."""
    unkept_choices: int = 0
    """Choices of ``n > 1`` requests the agent did not continue while it continued another."""


def kept_choices(served: Sequence[ServedChoice]) -> KeptChoices:
    """Train only what the agent kept, and keep each branch together.

    A request with one choice is kept. Of a request with ``n > 1`` choices, the agent kept the ones a
    later request continues token for token; when none is continued (the last turn, or a history the
    agent rewrote) the kept choice cannot be known, so none of them is trained (``ambiguous_calls``).

    The order is depth first: each kept choice, then the requests that continue it (in request
    order), so parallel branches of one rollout come out as separate chains whatever order they were
    served in, and a continuation always follows the branch it extends.
    """
    continued = {c.extends for c in served if c.extends is not None}
    kept: list[ServedChoice] = []
    ambiguous_calls = unkept = 0
    by_call: dict[int, list[ServedChoice]] = {}
    for choice in served:
        by_call.setdefault(choice.sequence_id, []).append(choice)
    for _sequence_id, choices in sorted(by_call.items()):
        if len(choices) == 1 and choices[0].n_choices == 1:
            kept.append(choices[0])
            continue
        chosen = [c for c in choices if c.key in continued]
        if chosen:
            unkept += len(choices) - len(chosen)
        else:
            ambiguous_calls += 1
        kept.extend(chosen)
    keys = {c.key for c in kept}
    children: dict[tuple[int, int] | None, list[ServedChoice]] = {}
    for choice in sorted(kept, key=lambda c: c.key):
        parent = choice.extends if choice.extends in keys else None
        children.setdefault(parent, []).append(choice)
    ordered: list[ServedChoice] = []
    stack = list(reversed(children.get(None, [])))
    while stack:
        choice = stack.pop()
        ordered.append(choice)
        stack.extend(reversed(children.get(choice.key, [])))
    return KeptChoices(trained=tuple(ordered), ambiguous_calls=ambiguous_calls, unkept_choices=unkept)
