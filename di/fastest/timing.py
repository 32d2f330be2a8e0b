"""How :class:`di.AutoFastest` times its candidates: whole prepared calls in
blocks of back-to-back calls, in interleaved rounds, within a budget, the clearly
slower candidates dropped from the race (:func:`time_interleaved`); a call of an
engine that computes asynchronously waits for its result (:func:`waiting`).
"""

from __future__ import annotations

import gc
import itertools
import math
import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any

from di.families import family_of, get_family
from di.pytrees import tree_leaves

__all__ = ["BLOCK_S", "MAX_ROUNDS", "MIN_ROUNDS", "RACE_FACTOR", "time_interleaved", "waiting"]


BLOCK_S = 1e-3
"""Target duration of one timed block of back-to-back calls: long enough to
resolve microsecond calls, short enough that most blocks escape preemption."""


MIN_ROUNDS = 5


MAX_ROUNDS = 5000


RACE_FACTOR = 2.0
"""Once a quarter of the budget is spent, a candidate whose fastest block is this
many times slower than the best candidate's median stops being timed (it is
``slower`` whatever the remaining rounds say). Its fastest block, not its median:
a machine's hiccups only ever make blocks slower, so one slow phase cannot knock
the true winner out of the race."""


def waiting(run: Callable[[], Any], result: Any) -> Callable[[], Any]:
    """The candidate's call, waiting for its result where the engine computes
    asynchronously (as the result's families say), so timings count the work done."""
    arrays = [leaf for leaf in tree_leaves(result) if family_of(leaf) is not None]
    if not arrays:
        return run

    def run_and_wait() -> Any:
        result = run()
        for leaf in tree_leaves(result):
            family = family_of(leaf)
            if family is not None:
                get_family(family).block(leaf)
        return result

    return run_and_wait


def time_interleaved(
    calls: Sequence[Callable[[], Any]], budget_s: float, shared: Callable[[Any], Any] | None = None
) -> tuple[list[list[float]], list[Exception | None]]:
    """Per-call seconds of each call, measured in interleaved rounds.

    Each round times one block of back-to-back calls of every candidate still in
    the race (the block length set per candidate so a block lasts about
    :data:`BLOCK_S`; an untimed call first, so a block measures the engine's
    steady state, not its waking up after another engine), starting with a
    different candidate each round, so drift in the machine's load hits them
    alike. Rounds go on until ``budget_s`` is spent (at least :data:`MIN_ROUNDS`,
    at most :data:`MAX_ROUNDS`); once a quarter of it is, a candidate whose
    fastest block is :data:`RACE_FACTOR` times the best median stops being timed,
    and the timing ends when one candidate is left. A call that raises stops
    being timed, its error kept.

    Args:
        calls: zero-argument callables, already warmed up.
        budget_s: seconds to spend.
        shared: for calls that several processes make together (collectives:
            each must make the same calls in the same order), the function
            returning process 0's value on every process; the schedule (block
            lengths, rounds) is then process 0's, and no candidate leaves the
            race early (:func:`_time_in_step`).

    Returns:
        One list of per-call seconds (one per block) for each call, and the
        error each call raised (``None`` for those that never did).

    Examples:
        >>> from di.fastest.timing import time_interleaved
        >>> samples, errors = time_interleaved([lambda: sum(range(10)), lambda: 1 / 0], 0.01)
        >>> len(samples[0]) >= 5, samples[1], errors[0], type(errors[1]).__name__
        (True, [], None, 'ZeroDivisionError')
    """
    if shared is not None:
        return _time_in_step(calls, budget_s, shared)
    start_time = time.perf_counter()
    race_from, deadline = start_time + budget_s / 4, start_time + budget_s
    samples: list[list[float]] = [[] for _ in calls]
    errors: list[Exception | None] = [None] * len(calls)
    sizes = [1] * len(calls)
    for i, call in enumerate(calls):
        try:
            sizes[i] = max(1, math.ceil(BLOCK_S / max(_estimate(call), 1e-9)))
        except Exception as err:
            errors[i] = err
    racing = [i for i in range(len(calls)) if errors[i] is None]
    gc.collect(1)  # the young generations only: a full collection costs long with engines loaded
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        for round_index in range(MAX_ROUNDS):
            if not racing:
                break
            start = round_index % len(racing)
            for i in racing[start:] + racing[:start]:
                try:
                    samples[i].append(_block(calls[i], sizes[i]))
                except Exception as err:
                    errors[i] = err
            racing = [i for i in racing if errors[i] is None]
            if round_index + 1 < MIN_ROUNDS or not racing:
                continue
            now = time.perf_counter()
            if now >= deadline or len(racing) == 1:
                break
            if now >= race_from:
                best = min(statistics.median(samples[i]) for i in racing)
                racing = [i for i in racing if min(samples[i]) <= RACE_FACTOR * best]
    finally:
        if was_enabled:
            gc.enable()
    return samples, errors


def _block(call: Callable[[], Any], count: int) -> float:
    """Per-call seconds of ``count`` back-to-back calls, after one untimed call: the
    engine that ran before may have let this one's worker threads sleep and its
    data leave the caches, a cost the caller's repeated calls never pay."""
    call()
    start = time.perf_counter()
    for _ in itertools.repeat(None, count):
        call()
    return (time.perf_counter() - start) / count


def _estimate(call: Callable[[], Any]) -> float:
    """A rough per-call time, from blocks grown until they last a quarter of :data:`BLOCK_S`."""
    count = 1
    while True:
        per_call = _block(call, count)
        if per_call * count >= BLOCK_S / 4 or count >= 1 << 16:
            return per_call
        count *= 4


def _time_in_step(
    calls: Sequence[Callable[[], Any]], budget_s: float, shared: Callable[[Any], Any]
) -> tuple[list[list[float]], list[Exception | None]]:
    """:func:`time_interleaved` for calls several processes make together: one
    timed call of each sets the block lengths and the number of rounds, both
    process 0's, so every process makes the same calls in the same order (a
    process calling a collective once more than another would wait forever)."""
    errors: list[Exception | None] = [None] * len(calls)
    estimates = []
    for i, call in enumerate(calls):
        try:
            estimates.append(_block(call, 1))
        except Exception as err:  # the same on every process: the calls are the same
            errors[i], estimates = err, [*estimates, math.inf]
    estimates = [float(t) for t in shared([t if math.isfinite(t) else -1.0 for t in estimates])]
    racing = [i for i, t in enumerate(estimates) if t >= 0 and errors[i] is None]
    sizes = [max(1, math.ceil(BLOCK_S / max(t, 1e-9))) for t in estimates]
    per_round = sum(2 * sizes[i] * estimates[i] for i in racing) or BLOCK_S
    rounds = max(MIN_ROUNDS, min(MAX_ROUNDS, int(budget_s / per_round)))
    samples: list[list[float]] = [[] for _ in calls]
    for round_index in range(rounds):
        start = round_index % max(len(racing), 1)
        for i in racing[start:] + racing[:start]:
            samples[i].append(_block(calls[i], sizes[i]))
    return samples, errors
