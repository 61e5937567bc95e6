"""The plan of shared prefixes the local trainer runs once: a partition whose prefixes are truly shared."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from adapters.local.prefix_groups import prefix_groups, prompt_groups
from domain.tokens import common_prefix

tokens = st.integers(min_value=0, max_value=5)
sequences = st.lists(st.lists(tokens, min_size=1, max_size=12), max_size=24)


@given(sequences, st.integers(min_value=1, max_value=4))
def test_groups_partition_the_batch_and_share_exactly_their_prefix(seqs: list[list[int]], min_prefix: int) -> None:
    groups = prefix_groups(seqs, min_prefix)
    members = sorted(i for g in groups for i in g.members)
    assert members == list(range(len(seqs)))
    for g in groups:
        head = seqs[g.members[0]][: g.prefix]
        for i in g.members:
            assert seqs[i][: g.prefix] == head
            assert len(seqs[i]) > g.prefix  # every member has a suffix to run
        if len(g.members) > 1:
            assert g.prefix >= min_prefix
        assert g.saved_tokens == (len(g.members) - 1) * g.prefix


@given(
    st.lists(st.lists(tokens, min_size=1, max_size=10), min_size=1, max_size=5, unique_by=lambda p: p[0]),
    st.integers(min_value=1, max_value=8),
    st.data(),
)
def test_a_grpo_batch_runs_each_prompt_once(prompts: list[list[int]], group_size: int, data: st.DataObject) -> None:
    """Each prompt (distinct first tokens) sampled ``group_size`` times with replies that differ from their first
    token: one group per prompt, its prefix the whole prompt."""
    first_tokens = st.lists(st.integers(100, 200), min_size=group_size, max_size=group_size, unique=True)
    seqs, owner = [], []
    for k, prompt in enumerate(prompts):
        for first in data.draw(first_tokens):
            seqs.append([*prompt, first, *data.draw(st.lists(tokens, max_size=4))])
            owner.append(k)
    groups = prefix_groups(seqs)
    assert len(groups) == len(prompts)
    for g in groups:
        (k,) = {owner[i] for i in g.members}
        assert len(g.members) == group_size
        assert g.prefix == (len(prompts[k]) if group_size > 1 else len(seqs[g.members[0]]) - 1)


def test_identical_sequences_keep_a_token_to_run() -> None:
    (group,) = prefix_groups([[1, 2, 3], [1, 2, 3], [1, 2, 3, 4]])
    assert group.prefix == 2 and sorted(group.members) == [0, 1, 2]
    assert common_prefix([1, 2, 3], [1, 2, 4]) == 2


def test_an_unrelated_prompt_sorted_first_does_not_shorten_the_others_prefix() -> None:
    """Prompts under one long system prompt, and one that starts like it only briefly, sorted before them: the
    greedy plan shares one token among all, the prompt plan the system prompt among the four."""
    system = [1, 2, 3, 4, 5, 6, 7, 8]
    prompts = [[1, 0, 9], *([*system, t, 9] for t in (10, 11, 12, 13))]
    assert {g.members: g.prefix for g in prefix_groups(prompts)} == {(0, 1, 2, 3, 4): 1}
    groups = {g.members: g.prefix for g in prompt_groups(prompts)}
    assert groups == {(0,): 2, (1, 2, 3, 4): len(system)}


@given(st.lists(st.lists(tokens, min_size=1, max_size=12), max_size=24, unique_by=tuple))
def test_the_prompt_plan_is_a_true_partition_sparing_at_least_what_the_greedy_one_does(seqs: list[list[int]]) -> None:
    groups = prompt_groups(seqs)
    assert sorted(i for g in groups for i in g.members) == list(range(len(seqs)))
    for g in groups:
        head = seqs[g.members[0]][: g.prefix]
        assert all(seqs[i][: g.prefix] == head and len(seqs[i]) > g.prefix for i in g.members)
    spared = sum(g.saved_tokens for g in groups)
    assert spared >= sum(g.saved_tokens for g in prefix_groups(seqs))
