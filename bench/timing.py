"""Interleaved timing of two zero-argument callables.

Each side is timed in *blocks* of ``k`` back-to-back calls (the same ``k`` for
both sides), so a per-call time of a few microseconds is resolved far above the
clock's resolution and the loop overhead is amortised. Blocks alternate between
the sides (A B, B A, A B, ...) so drift (frequency scaling, a neighbour's load)
hits both alike. Blocks are short (a quarter of a millisecond by default) so that
most of them escape preemption on a loaded machine. The results are the median
per-call time of each side and the median (and quartiles) of the per-pair ratios
``b / a``: each pair's two blocks run back to back under the same load, so the
paired ratio is the estimate that best survives a machine whose load drifts.
"""

from __future__ import annotations

import gc
import itertools
import math
import statistics
from collections.abc import Callable
from dataclasses import dataclass
from time import perf_counter_ns

__all__ = ["Settings", "Timing", "compare"]


@dataclass(frozen=True)
class Settings:
    """How long to measure.

    Args:
        block_ns: target duration of one block of calls (sets ``k``).
        budget_s: time budget for one comparison (both sides together).
        min_pairs: pairs of blocks measured at least, whatever the budget.
        max_pairs: pairs of blocks measured at most.
    """

    block_ns: float = 2.5e5
    budget_s: float = 2.0
    min_pairs: int = 5
    max_pairs: int = 201

    def scaled(self, factor: float) -> Settings:
        """The same settings with ``factor`` times the budget."""
        return Settings(self.block_ns, self.budget_s * factor, self.min_pairs, self.max_pairs)


@dataclass(frozen=True)
class Timing:
    """Result of :func:`compare`: median per-call nanoseconds of each side.

    Attributes:
        a_ns: median per-call time of the first callable (the native call).
        b_ns: median per-call time of the second callable (``di``).
        ratio: median of the per-pair ratios ``b / a``.
        diff_ns: median of the per-pair differences ``b - a`` (per call).
        ratio_q1: first quartile of the per-pair ratios ``b / a``.
        ratio_q3: third quartile of the per-pair ratios.
        block: calls per block.
        pairs: pairs of blocks measured.
    """

    a_ns: float
    b_ns: float
    ratio: float
    diff_ns: float
    ratio_q1: float
    ratio_q3: float
    block: int
    pairs: int

    @property
    def diff_uncertainty_ns(self) -> float:
        """About one standard error of :attr:`diff_ns`: the per-pair spread (the
        ratios' interquartile range, in nanoseconds of the native call) over the
        square root of the pairs. A difference within two of these is not resolved."""
        return (self.ratio_q3 - self.ratio_q1) * self.a_ns / max(self.pairs, 1) ** 0.5


def _block(fn: Callable[[], object], k: int) -> float:
    """Per-call nanoseconds of ``k`` back-to-back calls."""
    start = perf_counter_ns()
    for _ in itertools.repeat(None, k):
        fn()
    return (perf_counter_ns() - start) / k


def _estimate(fn: Callable[[], object], block_ns: float) -> float:
    """A rough per-call time, from blocks grown until they last ``block_ns / 4``."""
    k = 1
    while True:
        per_call = _block(fn, k)
        if per_call * k >= block_ns / 4 or k >= 1 << 20:
            return per_call
        k *= 4


def _quartiles(values: list[float]) -> tuple[float, float]:
    if len(values) < 2:
        return values[0], values[0]
    q = statistics.quantiles(values, n=4, method="inclusive")
    return q[0], q[2]


def compare(a: Callable[[], object], b: Callable[[], object], settings: Settings, warmup: int = 2) -> Timing:
    """Time ``a`` (native) against ``b`` (``di``), interleaved.

    Args:
        a: zero-argument callable doing the native work (must block until done).
        b: zero-argument callable doing the same work through ``di``.
        settings: block length and budget.
        warmup: calls of each before timing (compilation, caches, allocator).

    Returns:
        A :class:`Timing`.
    """
    for _ in range(warmup):
        a()
        b()
    estimate = max(_estimate(a, settings.block_ns), _estimate(b, settings.block_ns))
    k = max(1, math.ceil(settings.block_ns / max(estimate, 1.0)))
    pairs = int(settings.budget_s * 1e9 / (2 * k * max(estimate, 1.0)))
    pairs = max(settings.min_pairs, min(settings.max_pairs, pairs))
    a_times: list[float] = []
    b_times: list[float] = []
    ratios: list[float] = []
    diffs: list[float] = []
    gc.collect(1)  # the young generations: a full collection costs ~0.2 s with jax and torch loaded
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        for i in range(pairs):
            if i % 2 == 0:
                ta = _block(a, k)
                tb = _block(b, k)
            else:
                tb = _block(b, k)
                ta = _block(a, k)
            a_times.append(ta)
            b_times.append(tb)
            ratios.append(tb / ta)
            diffs.append(tb - ta)
    finally:
        if was_enabled:
            gc.enable()
    a_ns = statistics.median(a_times)
    b_ns = statistics.median(b_times)
    q1, q3 = _quartiles(ratios)
    return Timing(a_ns, b_ns, statistics.median(ratios), statistics.median(diffs), q1, q3, k, pairs)
