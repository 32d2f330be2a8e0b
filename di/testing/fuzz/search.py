"""The fuzzer's loop: draw programs, call them everywhere, keep and shrink the
disagreements."""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

import di
from di.backends.selectors import AbstractBackend
from di.testing.fuzz.calls import DtypeMismatch, call, compare, inside_modes
from di.testing.fuzz.programs import DTYPES, FORMS, OPERATIONS, OUTPUTS, Program
from di.testing.fuzz.reference import CURVE_OPERATORS, OPERATORS, reference
from di.testing.matrix import engine_backends

__all__ = ["KINDS", "Finding", "Report", "disagreement", "fuzz", "shrink"]

KINDS = ("silent wrong", "raw error", "refusal", "noise")
"""What a finding is: a result off the reference by more than a hundred times what
is allowed (``silent wrong``), or by less (``noise``: a tolerance, or the
reference's own error, to look at); an exception that is not a :class:`di.DIError`
(``raw error``); a ``di`` error where the reference computes it (``refusal``)."""


@dataclass
class Finding:
    """One disagreement, shrunk.

    Attributes:
        kind: one of :data:`KINDS`.
        backend: the selector that disagreed.
        operator: the operator's name (``"gradient"``, ``"value_and_jacobian"``, ...).
        mode: how it was called (``"unprepared"``, ``"prepared"``, ``"sparse"``, or
            a transform: ``"jax.jit"``, ``"jax.vmap, unprepared"``).
        program: the shrunk program.
        detail: the error, or the largest difference.
    """

    kind: str
    backend: AbstractBackend
    operator: str
    mode: str
    program: Program
    detail: str

    @property
    def prepared(self) -> bool:
        """Whether a prep made at another point gave it."""
        return self.mode != "unprepared" and not self.mode.endswith("unprepared")

    def as_test(self) -> str:
        """A ready-to-paste pytest test reproducing the finding."""
        label = "".join(c if c.isalnum() else "_" for c in f"{type(self.backend).__name__}_{self.mode}".lower())
        name = f"test_fuzz_{self.operator}_{label}_{self.program.seed}"
        return (
            f"def {name}() -> None:\n"
            f"    # {self.kind}: {self.detail.splitlines()[0][:100] if self.detail else ''}\n"
            f"    import di\n"
            f"    from di.testing.fuzz import Program, check\n\n"
            f"    program = {self.program!r}\n"
            f"    check(program, {self.operator!r}, di.{self.backend!r}, {self.mode!r})\n"
        )


@dataclass
class Report:
    """What a run found: the programs tried, the calls compared, the findings."""

    programs: int = 0
    calls: int = 0
    doubtful: int = 0
    """Programs where every call disagreed with the reference alike (the
    reference's difference crossed a kink): set aside, not findings."""
    findings: list[Finding] = field(default_factory=list)

    def counts(self) -> dict[str, int]:
        """The findings by kind."""
        counts = dict.fromkeys(KINDS, 0)
        for finding in self.findings:
            counts[finding.kind] += 1
        return counts


@functools.lru_cache(maxsize=256)
def _reference(program: Program, operator: str) -> np.ndarray | None:
    try:
        with np.errstate(all="ignore"):
            expected = reference(program, operator)
    except Exception:  # the program itself fails on NumPy: nothing to compare with
        return None
    return expected if np.all(np.isfinite(expected)) else None


def disagreement(program: Program, operator: str, backend: AbstractBackend, mode: str) -> tuple[str, str] | None:
    """``(kind, detail)`` when ``backend`` in ``mode`` disagrees with the reference,
    else ``None``."""
    expected = _reference(program, operator)
    if expected is None:
        return None
    try:
        got = call(operator, program, backend, mode)
    except DtypeMismatch as error:
        return "silent wrong", str(error)
    except di.DIError as error:
        return "refusal", f"{type(error).__name__}: {error}"
    except Exception as error:
        return "raw error", f"{type(error).__name__}: {error}"
    worst, allowed = compare(got, expected, backend, operator, program.dtype)
    if worst <= allowed:
        return None
    if got.shape != expected.shape:
        return "silent wrong", f"shape {got.shape}, the reference's {expected.shape}"
    kind = "noise" if worst <= 100 * allowed else "silent wrong"
    return kind, f"largest difference {worst:.3g}, allowed {allowed:.3g}"


def shrink(program: Program, operator: str, backend: AbstractBackend, mode: str, kind: str) -> tuple[Program, str]:
    """The simplest program and mode (fewer steps, a smaller size, an array ``x``, an
    unprepared call) that still disagree so."""
    changed = True
    while changed:
        changed = False
        candidates = [(smaller, mode) for smaller in program.smaller()]
        if mode != "unprepared":
            candidates.append((program, "unprepared"))
        for smaller, simpler in candidates:
            found = disagreement(smaller, operator, backend, simpler)
            if found is not None and found[0] == kind:
                program, mode, changed = smaller, simpler, True
                break
    return program, mode


def _draw(rng: np.random.Generator, seed: int) -> tuple[Program, str]:
    names = sorted(OPERATIONS)
    steps = tuple(str(names[int(i)]) for i in rng.integers(0, len(names), int(rng.integers(1, 6))))
    output = str(OUTPUTS[int(rng.integers(0, 2))])
    form = str(rng.choice(FORMS, p=[0.6, 0.25, 0.15]))
    # (the dtype from a generator of its own: the other draws of a seed stay as they were)
    dtype = DTYPES[int(np.random.default_rng((seed, 32)).integers(0, 4) == 0)]
    program = Program(steps, output, int(rng.choice([2, 4, 6])), seed, form, dtype)
    operators = CURVE_OPERATORS if form == "scalar" else OPERATORS[output]
    if form == "pytree":
        operators = tuple(operator for operator in operators if operator != "hessian")
    return program, str(operators[int(rng.integers(0, len(operators)))])


def _modes(rng: np.random.Generator, backend: AbstractBackend, program: Program, operator: str) -> list[str]:
    modes = ["unprepared", "prepared"]
    if operator in ("jacobian", "hessian") and program.form == "array":
        modes.append("sparse")
    transforms = inside_modes(backend, operator)
    if transforms:
        modes.append(transforms[int(rng.integers(0, len(transforms)))])
    return modes


def fuzz(
    seconds: float = 5.0,
    seed: int = 0,
    backends: Sequence[AbstractBackend] | None = None,
    log: Callable[[str], None] | None = None,
    compiled: bool = False,
) -> Report:
    """Draw and compare programs for about ``seconds``.

    Each program gets one operator of its output kind and input form; every
    backend computes it unprepared, prepared at another point, through
    :class:`di.AutoSparse` (jacobian, hessian) and inside one of its engine's
    transforms drawn at random (those its adapter declares with a ``run`` hook).

    Args:
        seconds: the time budget (the program in progress finishes).
        seed: the seed of the programs drawn (the same seed draws the same programs).
        backends: the selectors compared; by default every installed engine's
            default selector (:func:`di.testing.matrix.engine_backends`).
        log: called with each finding's report (a ready-to-paste test).
        compiled: with the default backends, the compiling selectors too.

    Returns:
        A :class:`Report`.

    Examples:
        >>> import di
        >>> from di.testing.fuzz import fuzz
        >>> report = fuzz(seconds=0.5, seed=1, backends=[di.AutoFiniteDiff()])
        >>> report.programs >= 1, report.counts()["silent wrong"]
        (True, 0)
    """
    rng = np.random.default_rng(seed)
    chosen = list(engine_backends(compiled=compiled) if backends is None else backends)
    report = Report()
    seen: set[tuple[Any, ...]] = set()
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        program, operator = _draw(rng, seed * 100_003 + report.programs)
        report.programs += 1
        results = []
        for backend in chosen:
            for mode in _modes(rng, backend, program, operator):
                report.calls += 1
                results.append((backend, mode, disagreement(program, operator, backend, mode)))
        numbers = [found for _, _, found in results if found is None or found[0] in ("silent wrong", "noise")]
        if len(chosen) > 1 and numbers and all(found is not None for found in numbers):
            report.doubtful += 1  # every engine agrees against the reference
            continue
        for backend, mode, found in results:
            if found is None:
                continue
            small, simple = shrink(program, operator, backend, mode, found[0])
            key = (found[0], repr(backend), operator, simple, small.steps, small.form)
            if key in seen:
                continue
            seen.add(key)
            again = disagreement(small, operator, backend, simple)
            report.findings.append(Finding(found[0], backend, operator, simple, small, (again or found)[1]))
            if log is not None:
                log(report.findings[-1].as_test())
    return report
