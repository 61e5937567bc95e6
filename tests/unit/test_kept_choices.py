"""Which served choices are trained, and in what order (``domain.multiturn.kept_choices``)."""

from __future__ import annotations

from domain.multiturn import ServedChoice, kept_choices


def keys(choices: tuple[ServedChoice, ...]) -> list[tuple[int, int]]:
    return [c.key for c in choices]


def test_single_choice_requests_are_all_kept_in_request_order() -> None:
    served = [ServedChoice(1, 0, 1), ServedChoice(2, 0, 1, extends=(1, 0)), ServedChoice(3, 0, 1)]

    kept = kept_choices(served)

    assert keys(kept.trained) == [(1, 0), (2, 0), (3, 0)]
    assert (kept.ambiguous_calls, kept.unkept_choices) == (0, 0)


def test_only_the_continued_choice_of_a_multi_choice_request_is_kept() -> None:
    served = [ServedChoice(1, i, 3) for i in range(3)] + [ServedChoice(2, 0, 1, extends=(1, 2))]

    kept = kept_choices(served)

    assert keys(kept.trained) == [(1, 2), (2, 0)]
    assert (kept.ambiguous_calls, kept.unkept_choices) == (0, 2)


def test_a_multi_choice_request_nobody_continued_is_ambiguous_and_not_trained() -> None:
    served = [ServedChoice(1, 0, 1), ServedChoice(2, 0, 2, extends=(1, 0)), ServedChoice(2, 1, 2, extends=(1, 0))]

    kept = kept_choices(served)

    assert keys(kept.trained) == [(1, 0)]
    assert (kept.ambiguous_calls, kept.unkept_choices) == (1, 0)


def test_two_continued_choices_are_two_branches_each_followed_by_its_continuations() -> None:
    served = [
        ServedChoice(1, 0, 2),
        ServedChoice(1, 1, 2),
        ServedChoice(2, 0, 1, extends=(1, 1)),
        ServedChoice(3, 0, 1, extends=(1, 0)),
        ServedChoice(4, 0, 1, extends=(2, 0)),
    ]

    assert keys(kept_choices(served).trained) == [(1, 0), (3, 0), (1, 1), (2, 0), (4, 0)]


def test_the_order_does_not_depend_on_the_order_records_are_listed_in() -> None:
    served = [
        ServedChoice(1, 0, 1),
        ServedChoice(2, 0, 1),
        ServedChoice(3, 0, 1, extends=(1, 0)),
        ServedChoice(4, 0, 1, extends=(2, 0)),
    ]

    assert keys(kept_choices(served).trained) == keys(kept_choices(list(reversed(served))).trained)
    assert keys(kept_choices(served).trained) == [(1, 0), (3, 0), (2, 0), (4, 0)]
