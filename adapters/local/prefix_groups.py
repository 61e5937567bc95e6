"""Which training sequences share a prefix worth computing once.

A GRPO batch holds each prompt ``group_size`` times, followed by different replies; a transformer's
activations over the prompt are the same in every copy. ``LocalTrainer`` runs a shared prefix once,
expands its KV cache to the group and runs only the suffixes against it: the same logprobs and gradients
(the backward sums the group's gradients through the expansion) for a fraction of the tokens. ``LocalSampler``
prefills distinct prompts that share a system or tools prompt the same way (``prompt_groups``). This module
only plans the groups; it knows token ids, not tensors.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from domain.tokens import common_prefix


@dataclass(frozen=True, slots=True)
class PrefixGroup:
    """Sequences (indices into the batch) whose first ``prefix`` tokens are the same; each has a token after it."""

    prefix: int
    members: tuple[int, ...]

    @property
    def saved_tokens(self) -> int:
        """Tokens not run again, against running every member in full (padding aside)."""
        return (len(self.members) - 1) * self.prefix


def prefix_groups(inputs: Sequence[Sequence[int]], min_prefix: int = 1) -> list[PrefixGroup]:
    """Partition the non-empty sequences ``inputs`` into groups sharing a prefix of at least ``min_prefix``.

    Sequences are taken in sorted order, so those with long common prefixes are neighbours; one joins the
    current group when the group, its prefix shrunk to what the newcomer shares, still spares at least the
    tokens it spared before (``(m - 1) * new >= (m - 2) * old`` for ``m`` members after joining), else it
    starts a group of its own. Every member keeps at least one token after the prefix (identical sequences
    included), so each has a suffix to run. Every index appears in exactly one group; a group of one shares
    nothing.
    """
    order = sorted(range(len(inputs)), key=lambda i: tuple(inputs[i]))
    groups: list[PrefixGroup] = []
    for i in order:
        seq = inputs[i]
        if not seq:
            raise ValueError("a training sequence must not be empty")
        if groups:
            last = groups[-1]
            shared = min(last.prefix, common_prefix(inputs[last.members[0]], seq), len(seq) - 1)
            m = len(last.members) + 1
            if shared >= min_prefix and (m - 1) * shared >= (m - 2) * last.prefix:
                groups[-1] = PrefixGroup(shared, (*last.members, i))
                continue
        groups.append(PrefixGroup(len(seq) - 1, (i,)))
    return groups


def prompt_groups(inputs: Sequence[Sequence[int]]) -> list[PrefixGroup]:
    """Partition the non-empty sequences ``inputs`` (distinct prompts to prefill) into groups that spare the most
    tokens in all: in sorted order, the split into runs of neighbours whose summed ``saved_tokens`` is largest
    (dynamic programming over the runs' start, quadratic in the number of prompts). Where ``prefix_groups``
    lets the first two sequences set a group's prefix, one prompt that starts like the rest only briefly stays
    alone here instead of shortening every other prompt's shared prefix. Every member keeps a token after it."""
    if any(not seq for seq in inputs):
        raise ValueError("a prompt must not be empty")
    order = sorted(range(len(inputs)), key=lambda i: tuple(inputs[i]))
    seqs = [inputs[i] for i in order]
    # best[j]: the most tokens spared over the first j sorted prompts; start[j]: where their last group starts.
    best, start = [0] * (len(seqs) + 1), [0] * (len(seqs) + 1)
    for j in range(1, len(seqs) + 1):
        best[j], start[j] = best[j - 1], j - 1
        shared = len(seqs[j - 1]) - 1
        for i in range(j - 2, -1, -1):
            shared = min(shared, common_prefix(seqs[i], seqs[i + 1]), len(seqs[i]) - 1)
            if shared == 0:
                break
            if best[i] + (j - 1 - i) * shared > best[j]:
                best[j], start[j] = best[i] + (j - 1 - i) * shared, i
    groups: list[PrefixGroup] = []
    j = len(seqs)
    while j > 0:
        i = start[j]
        prefix = min([len(s) - 1 for s in seqs[i:j]] + [common_prefix(seqs[k], seqs[k + 1]) for k in range(i, j - 1)])
        groups.append(PrefixGroup(prefix, tuple(order[i:j])))
        j = i
    return groups[::-1]
