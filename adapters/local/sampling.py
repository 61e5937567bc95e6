"""Choosing the next token for a batch of rows, and deciding when a row stops.

Logprob convention (documented choice): the logprob returned for a sampled token is its log
probability under ``softmax(logits / temperature)`` -- the tempered distribution the token was drawn
from -- *before* top-k/top-p truncation. At temperature 1 this is exactly the training forward's
``log_softmax(logits)``, which is what importance sampling needs. Greedy rows (temperature <= 0)
report the temperature-1 logprob.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch

from ports.policy import SamplingParams, StopReason


@dataclass(slots=True)
class RowState:
    """One sequence being generated: its parameters, randomness and output so far."""

    params: SamplingParams
    rng: random.Random
    stop_token_ids: frozenset[int]
    tokens: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    stop_reason: StopReason | None = None


def make_row(params: SamplingParams, seed: int, eos_token_id: int | None) -> RowState:
    """A fresh row; with neither stop tokens nor stop strings it stops at EOS, like Tinker's ``stop=None``."""
    stop_ids = set(params.stop_token_ids)
    if not stop_ids and not params.stop_strings and eos_token_id is not None:
        stop_ids.add(eos_token_id)
    return RowState(params=params, rng=random.Random(seed), stop_token_ids=frozenset(stop_ids))


def _filter_top_k_top_p(scaled: torch.Tensor, top_k: torch.Tensor, top_p: torch.Tensor) -> torch.Tensor:
    """Set logits outside each row's top-k / nucleus to -inf (rows with k=-1, p=1 are untouched)."""
    vocab = scaled.shape[-1]
    sorted_logits, sorted_idx = torch.sort(scaled, dim=-1, descending=True)
    ranks = torch.arange(vocab, device=scaled.device).unsqueeze(0)
    k = torch.where(top_k > 0, top_k.clamp(max=vocab), torch.full_like(top_k, vocab))
    drop = ranks >= k.unsqueeze(1)
    probs = torch.softmax(sorted_logits.masked_fill(drop, float("-inf")), dim=-1)
    mass_before = torch.cumsum(probs, dim=-1) - probs
    drop |= mass_before >= top_p.unsqueeze(1)
    drop[:, 0] = False
    keep_sorted = sorted_logits.masked_fill(drop, float("-inf"))
    return torch.full_like(scaled, float("-inf")).scatter(-1, sorted_idx, keep_sorted)


def choose_tokens(logits: torch.Tensor, rows: Sequence[RowState]) -> tuple[list[int], list[float]]:
    """Pick one token per row from ``logits`` [B, V]; returns the tokens and their logprobs."""
    logits = logits.to(torch.float64) if logits.dtype == torch.float64 else logits.float()
    temps = torch.tensor([r.params.temperature for r in rows], dtype=logits.dtype)
    greedy = temps <= 0
    scaled = logits / torch.where(greedy, torch.ones_like(temps), temps).unsqueeze(1)
    logprobs_full = torch.log_softmax(scaled, dim=-1)
    top_k = torch.tensor([r.params.top_k for r in rows], dtype=torch.long)
    top_p = torch.tensor([r.params.top_p for r in rows], dtype=logits.dtype)
    needs_filter = bool(((top_k > 0) | (top_p < 1)).any())
    sample_logits = _filter_top_k_top_p(scaled, top_k, top_p) if needs_filter else scaled
    probs = torch.softmax(sample_logits, dim=-1)
    cdf = torch.cumsum(probs, dim=-1)
    uniforms = torch.tensor([r.rng.random() for r in rows], dtype=cdf.dtype).unsqueeze(1)
    drawn = torch.searchsorted(cdf, uniforms * cdf[:, -1:], right=True).squeeze(1)
    drawn = torch.minimum(drawn, torch.full_like(drawn, cdf.shape[-1] - 1))
    # A zero-probability token can only be hit through rounding at the top of the CDF: step back.
    drawn = torch.where(probs.gather(1, drawn.unsqueeze(1)).squeeze(1) > 0, drawn, probs.argmax(-1))
    chosen = torch.where(greedy, logits.argmax(dim=-1), drawn)
    chosen_logprobs = logprobs_full.gather(1, chosen.unsqueeze(1)).squeeze(1)
    return [int(t) for t in chosen.tolist()], [float(x) for x in chosen_logprobs.tolist()]


class StopChecker:
    """Detects stop tokens, stop strings (by decoding a tail window) and the token budget."""

    def __init__(self, decode: Callable[[list[int]], str]) -> None:
        self._decode = decode

    def update(self, row: RowState, token: int, logprob: float) -> bool:
        """Append ``token`` to ``row``; returns True (and sets the stop reason) when the row is done."""
        row.tokens.append(token)
        row.logprobs.append(logprob)
        if token in row.stop_token_ids or self._hit_stop_string(row):
            row.stop_reason = StopReason.STOP
        elif len(row.tokens) >= row.params.max_tokens:
            row.stop_reason = StopReason.LENGTH
        return row.stop_reason is not None

    def _hit_stop_string(self, row: RowState) -> bool:
        strings = row.params.stop_strings
        if not strings:
            return False
        # A byte-level token carries at least one byte, and a character at most four bytes.
        window = 4 * max(len(s) for s in strings) + 4
        tail = self._decode(row.tokens[-window:])
        return any(s in tail for s in strings if s)
