"""A differential fuzzer: random array-API programs through every installed engine.

:func:`fuzz` draws programs (:mod:`~di.testing.fuzz.programs`), each a chain of
array-API operations on a vector (elementwise functions, reductions, slicing,
strided and integer indexing, concatenation, reshapes, stacks, ``where`` with a
mask, a matrix product with a :class:`di.Constant`, vector and matrix norms,
cumulative sums), with ``x`` an array, a pytree or a scalar, two contexts, and
inputs drawn away from singularities. It differentiates each with every installed
engine's selectors (read from the engine registry: engines added later join
without a change here) with every operator that fits the program, unprepared,
prepared at another point, through :class:`di.AutoSparse`, and inside the
engine's own transforms (``jit``, ``vmap``, ...: those its adapter declares with a
``run`` hook, :class:`di.backends.transforms.Composition`), and compares every
result with a high-accuracy finite difference computed here
(:mod:`~di.testing.fuzz.reference`: Richardson-extrapolated central differences
of the program run on NumPy). A disagreement is shrunk to the simplest program
and call that still show it and reported as a ready-to-paste test, with its kind
(:data:`~di.testing.fuzz.search.KINDS`).

Run it from the command line with ``python -m di fuzz --minutes N --seed S``.
"""

from __future__ import annotations

from di.testing.fuzz.calls import call, check, inside_modes
from di.testing.fuzz.programs import DTYPES, FORMS, OPERATIONS, Inputs, Program, run_program
from di.testing.fuzz.reference import flat, reference
from di.testing.fuzz.search import KINDS, Finding, Report, disagreement, fuzz, shrink

__all__ = [
    "DTYPES",
    "FORMS",
    "KINDS",
    "OPERATIONS",
    "Finding",
    "Inputs",
    "Program",
    "Report",
    "call",
    "check",
    "disagreement",
    "flat",
    "fuzz",
    "inside_modes",
    "reference",
    "run_program",
    "shrink",
]
