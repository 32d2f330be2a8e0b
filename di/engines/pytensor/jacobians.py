"""The Jacobian's program, chosen at preparation (:func:`jacobian_programs`):
PyTensor's vectorized pullbacks (``jacobian(vectorize=True)``) or one pullback per
row in a scan (``jacobian(vectorize=False)``).

Which one is faster depends on ``f`` and on the size: on the CPU, float32, the
vectorized graph took 0.18-0.55 of the scan's time at n = 100 for every ``f``
tried, while at n = 1e3 the scan took 0.85 of its time for the coupled cubic
``x**3 - x sum(x**2) / n``, 0.70 for ``softmax``, 0.94 for ``sin(x) x``, and 4.6x
for ``cumsum(x**2)``. So from :data:`MEASURED_MIN_SIZE` elements both are
compiled and timed at the prepared ``x`` (:func:`di.backends.choosing.faster_of`);
the vectorized graph is kept unless the scan is clearly faster.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from di.backends.choosing import timed_choice
from di.backends.processes import processes_of
from di.backends.protocol import Programs
from di.pytrees import tree_flatten

__all__ = ["JACOBIAN_SPELLINGS", "MEASURED_MIN_SIZE", "SCAN_TIME_RATIO", "jacobian_programs"]

MEASURED_MIN_SIZE = 256
"""The least size of ``x`` whose Jacobian program is measured (both compiled and
timed at preparation); below it the vectorized graph was the faster for every
``f`` tried."""

SCAN_TIME_RATIO = 0.9
"""The scan is chosen when its best time is at most this fraction of the vectorized
graph's."""

JACOBIAN_SPELLINGS = {
    True: "pytensor.gradient.jacobian(vectorize=True) (vectorized pullbacks)",
    False: "pytensor.gradient.jacobian(vectorize=False) (one pullback per row, in a scan)",
}


def jacobian_programs(build: Callable[[bool], Programs], x: Any, values: Sequence[Any], has_aux: bool) -> Programs:
    """The Jacobian's programs: ``build(vectorize)`` makes one candidate (compiled,
    and run once at ``x``). For an ``x`` of at least :data:`MEASURED_MIN_SIZE`
    elements both are built and timed, unless ``f`` has an aux (recorded by the
    one evaluation of ``f`` its program makes) or the values span several
    processes; each program then names its spelling and how it was chosen (the
    prep's ``info``)."""
    vectorized = build(True)
    size = sum(math.prod(np.shape(leaf)) for leaf in tree_flatten(x)[0])  # (x of any family: a torch size is a method)
    if has_aux or size < MEASURED_MIN_SIZE or processes_of([x, *values]) is not None:
        return vectorized
    scanned = build(False)

    def run(programs: Programs) -> Callable[[], Any]:
        program = programs["jacobian"]
        return lambda: program(x, *values)

    return timed_choice(
        vectorized,
        scanned,
        run,
        SCAN_TIME_RATIO,
        lambda chosen_scan, ratio: (
            f"{JACOBIAN_SPELLINGS[not chosen_scan]}, chosen by timing both compiled programs at preparation (the "
            f"scan took {ratio:.2f} of the vectorized graph's time)"
        ),
    )
