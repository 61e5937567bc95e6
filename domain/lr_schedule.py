"""The learning-rate schedule of a run that can be extended past the batches it first planned.

A schedule (a multiplier of the base rate at step ``i`` of ``n``, tinker-cookbook's ``constant``,
``linear`` or ``cosine``) is fixed by the batches a run plans: resuming it never recomputes it. Rerunning
with a larger ``max_batches`` appends a segment: its batches follow the same shape over the extra batches
only, starting from the rate of the previous segment's last batch. So the rate never jumps up at the
resume step (a linear schedule restarts its decay from where it ended instead of from the base rate,
and never trains at its zero end point), and a run's rates depend on its plans, not on how often it
was interrupted.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

Multiplier = Callable[[int, int], float]
"""The base rate's multiplier at step ``i`` (0-based) of ``n`` steps."""


def extend_schedule(segments: Sequence[int], n_batches: int) -> tuple[int, ...]:
    """The segment ends of a run now planning ``n_batches``: a new segment when it plans more than before.

    ``segments`` are the ends (exclusive, increasing) recorded so far; none: a run starting now. A run
    planning fewer batches stops earlier on the schedule it has.
    """
    if not segments:
        return (n_batches,)
    ends = tuple(segments)
    return (*ends, n_batches) if n_batches > ends[-1] else ends


def scheduled_multiplier(multiplier: Multiplier, step: int, segments: Sequence[int]) -> float:
    """The multiplier of step ``step`` of a run whose schedule has the segment ends ``segments``.

    In the first segment it is ``multiplier(step, segments[0])``. A later segment starts from the
    multiplier of the previous segment's last step and applies the shape to its own steps, so step
    ``end`` continues at exactly the rate of step ``end - 1`` and decays from there.
    """
    if not segments:
        raise ValueError("a schedule needs at least one segment")
    scale, begin = 1.0, 0
    for end in segments[:-1]:
        if step < end:
            return scale * multiplier(step - begin, end - begin)
        scale *= multiplier(end - 1 - begin, end - begin)
        begin = end
    return scale * multiplier(step - begin, segments[-1] - begin)
