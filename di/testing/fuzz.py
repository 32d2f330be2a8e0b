"""A differential fuzzer: random array-API programs through every installed engine.

:func:`fuzz` draws programs, each a chain of array-API operations on a vector
(elementwise functions, reductions, slicing and concatenation, reshapes, stacks,
``where`` with a constant mask, a matrix product with a :class:`di.Constant`,
norms, cumulative sums), with inputs drawn away from singularities; it
differentiates each with every installed engine's selectors (read from the
engine registry: engines added later join without a change here), unprepared and
prepared at another point, and compares every result with a high-accuracy finite
difference computed here (Richardson-extrapolated central differences of the
program run on NumPy). A disagreement is shrunk to the shortest chain that still
shows it and reported as a ready-to-paste test, with its kind: ``silent wrong``
(a result off the reference), ``raw error`` (an exception that is not a
:class:`di.DIError`) or ``refusal`` (a ``di`` error where the reference and other
engines compute it).

Run it from the command line with ``python -m di fuzz --minutes N --seed S``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

import di
from di.backends.selectors import AbstractBackend
from di.testing.matrix import engine_backends

__all__ = ["OPERATIONS", "Finding", "Program", "fuzz", "run_program"]

Operation = Callable[[Any, Any, Any], Any]
"""``(xp, v, matrix) -> v``: one step of a program on a vector of the program's size."""


def _half_sum(xp: Any, v: Any, a: Any) -> Any:
    half = v.shape[0] // 2
    return xp.concat([v[:half] + v[half : 2 * half], v[half:]])


def _stacked(xp: Any, v: Any, a: Any) -> Any:
    rows = xp.stack([v, v * 0.5 + 1.0])
    return xp.sum(rows, axis=0) * 0.5


def _reshaped(xp: Any, v: Any, a: Any) -> Any:
    n = v.shape[0]
    return xp.reshape(xp.flip(xp.reshape(v, (2, n // 2)), axis=1), (n,))


OPERATIONS: dict[str, Operation] = {
    "sin": lambda xp, v, a: xp.sin(v),
    "tanh": lambda xp, v, a: xp.tanh(v),
    "exp": lambda xp, v, a: xp.exp(v * 0.3),
    "square": lambda xp, v, a: v * v * 0.5,
    "softplus": lambda xp, v, a: xp.log(1.0 + xp.exp(v * 0.5)),
    "hypot": lambda xp, v, a: xp.sqrt(v * v + 1.0),
    "cube": lambda xp, v, a: v**3 * 0.1,
    "scaled_sum": lambda xp, v, a: v + xp.sum(v) * 0.1,
    "mean": lambda xp, v, a: v - xp.mean(v),
    "prod": lambda xp, v, a: v * xp.prod(xp.tanh(v) * 0.2 + 1.0),
    "max": lambda xp, v, a: v + xp.max(v) * 0.1,
    "roll": lambda xp, v, a: xp.concat([v[1:], v[:1]]),
    "flip": lambda xp, v, a: xp.flip(v),
    "half_sum": _half_sum,
    "stack": _stacked,
    "reshape": _reshaped,
    "where": lambda xp, v, a: xp.where(xp.arange(v.shape[0]) % 2 == 0, v * 2.0, v),
    "matmul": lambda xp, v, a: a @ v,
    "normalize": lambda xp, v, a: v / xp.sqrt(xp.sum(v * v) + 1.0),
    "vector_norm": lambda xp, v, a: v * (xp.linalg.vector_norm(v) * 0.1 + 1.0),
    "cumulative_sum": lambda xp, v, a: xp.cumulative_sum(v) * 0.3,
}
"""Every operation a program draws from, by name."""

_OUTPUTS = ("scalar", "vector")


@dataclass(frozen=True)
class Program:
    """One random program: its operations, output kind, size and seed of its data.

    Attributes:
        steps: the operations' names, applied in order.
        output: ``"scalar"`` (``sum(v ** 2) / n``: gradient, hvp) or
            ``"vector"`` (``v``: jacobian).
        size: the length of ``x`` (even).
        seed: the seed of ``x`` and of the constant matrix.
    """

    steps: tuple[str, ...]
    output: str
    size: int
    seed: int

    def __call__(self, x: Any, matrix: Any) -> Any:
        """The program, on any engine's arrays (``xp = di.array_namespace(x)``)."""
        return run_program(self.steps, self.output, x, matrix)

    def inputs(self) -> tuple[np.ndarray, np.ndarray]:
        """``(x, matrix)``: ``x`` in [0.2, 1.2] (away from zero, where no step of a
        program is singular), a well-conditioned matrix."""
        rng = np.random.default_rng(self.seed)
        x = rng.uniform(0.2, 1.2, self.size)
        matrix = np.eye(self.size) * 0.5 + rng.normal(0.0, 0.2, (self.size, self.size))
        return x, matrix


def run_program(steps: Sequence[str], output: str, x: Any, matrix: Any) -> Any:
    """Run ``steps`` on ``x`` (with ``matrix`` as the constant), returning a scalar
    or the vector."""
    xp = di.array_namespace(x, matrix)
    v = x
    for step in steps:
        v = OPERATIONS[step](xp, v, matrix)
    if output == "scalar":
        return xp.sum(v * v) / v.shape[0]
    return v


@dataclass
class Finding:
    """One disagreement, shrunk.

    Attributes:
        kind: ``"silent wrong"``, ``"raw error"`` or ``"refusal"``.
        backend: the selector that disagreed.
        operator: ``"gradient"``, ``"jacobian"`` or ``"hvp"``.
        prepared: whether a prep made at another point gave it.
        program: the shrunk program.
        detail: the error, or the largest relative difference.
    """

    kind: str
    backend: AbstractBackend
    operator: str
    prepared: bool
    program: Program
    detail: str

    def as_test(self) -> str:
        """A ready-to-paste pytest test reproducing the finding."""
        name = f"test_fuzz_{self.operator}_{type(self.backend).__name__.lower()}_{self.program.seed}"
        return (
            f"def {name}() -> None:\n"
            f"    # {self.kind}: {self.detail.splitlines()[0][:100]}\n"
            f"    import numpy as np, di\n"
            f"    from di.testing.fuzz import Program, reference\n"
            f"    program = Program({self.program.steps!r}, {self.program.output!r}, {self.program.size}, "
            f"{self.program.seed})\n"
            f"    x, matrix = program.inputs()\n"
            f"    expected = reference(program, {self.operator!r}, x, matrix)\n"
            f"    got = di.{self.operator}(program, di.{self.backend!r}, x, *{_extra(self.operator)}, "
            f"di.Constant(matrix))\n"
            f"    np.testing.assert_allclose(np.asarray(got), expected, rtol=1e-5, atol=1e-7)\n"
        )


def _extra(operator: str) -> str:
    return "[(np.ones_like(x),)]" if operator == "hvp" else "()"


@dataclass
class Report:
    """What a run found: the programs tried, the calls compared, the findings."""

    programs: int = 0
    calls: int = 0
    doubtful: int = 0
    """Comparisons where every engine agreed with the others and not with the
    reference (the reference's difference crossed a kink): not findings."""
    findings: list[Finding] = field(default_factory=list)

    def counts(self) -> dict[str, int]:
        """The findings by kind."""
        counts = {"silent wrong": 0, "raw error": 0, "refusal": 0}
        for finding in self.findings:
            counts[finding.kind] += 1
        return counts


def _richardson(function: Callable[[np.ndarray], np.ndarray], x: np.ndarray) -> np.ndarray:
    """Jacobian of ``function`` at ``x`` by central differences extrapolated twice
    (error about h**6): rows of the output's flattened entries, one column per x."""
    columns = []
    for i in range(x.size):

        def difference(h: float, i: int = i) -> np.ndarray:
            up, down = x.copy(), x.copy()
            up[i] += h
            down[i] -= h
            return (np.asarray(function(up), dtype=np.float64) - np.asarray(function(down), dtype=np.float64)) / (2 * h)

        h = 1e-3  # small: a step across a kink (max at two close entries) would make the reference wrong
        d1, d2, d3 = difference(h), difference(h / 2), difference(h / 4)
        r1, r2 = (4 * d2 - d1) / 3, (4 * d3 - d2) / 3
        columns.append(((16 * r2 - r1) / 15).reshape(-1))
    return np.stack(columns, axis=-1)


def reference(program: Program, operator: str, x: np.ndarray, matrix: np.ndarray) -> np.ndarray:
    """The high-accuracy finite-difference result of ``operator`` (``gradient``,
    ``jacobian``, or ``hvp`` along ones) for ``program`` at ``x``."""
    if operator == "hvp":
        gradient = lambda x: _richardson(lambda z: program(z, matrix), x).reshape(-1)
        return _richardson(gradient, x) @ np.ones_like(x)
    jacobian = _richardson(lambda z: program(z, matrix), x)
    return jacobian.reshape(-1) if operator == "gradient" else jacobian


def _call(
    operator: str, program: Program, backend: AbstractBackend, x: np.ndarray, matrix: np.ndarray, prepared: bool
) -> Any:
    constant = di.Constant(matrix)
    extra: tuple[Any, ...] = ((np.ones_like(x),),) if operator == "hvp" else ()
    if not prepared:
        result = getattr(di, operator)(program, backend, x, *extra, constant)
    else:
        prepare = getattr(di, f"prepare_{operator}")
        prep = prepare(program, backend, x * 0.5 + 0.3, *extra, di.Constant(matrix * 0.9))
        result = getattr(di, operator)(program, prep, backend, x, *extra, constant)
    if operator == "hvp":
        result = result[0]
    return np.asarray(result, dtype=np.float64)


def _tolerance(backend: AbstractBackend, operator: str) -> tuple[float, float]:
    rtol, atol = di.testing.default_tolerances(backend, np.float64, order=2 if operator == "hvp" else 1)
    return max(rtol, 1e-6), max(atol, 1e-7)


def _disagreement(program: Program, operator: str, backend: AbstractBackend, prepared: bool) -> tuple[str, str] | None:
    """``(kind, detail)`` when ``backend`` disagrees with the reference, else ``None``."""
    x, matrix = program.inputs()
    try:
        with np.errstate(all="ignore"):
            expected = reference(program, operator, x, matrix)
    except Exception:  # the program itself fails on NumPy: not a finding
        return None
    if not np.all(np.isfinite(expected)):
        return None
    try:
        got = _call(operator, program, backend, x, matrix, prepared)
    except di.DIError as error:
        return "refusal", f"{type(error).__name__}: {error}"
    except Exception as error:
        return "raw error", f"{type(error).__name__}: {error}"
    rtol, atol = _tolerance(backend, operator)
    got = got.reshape(expected.shape) if got.size == expected.size else got
    # di's rule (di.testing.default_tolerances), over the whole result, on the problem's
    # scale (x and its data are of order one: a result near zero, as a Hessian along a
    # direction f does not change in, is compared with that scale, not with itself)
    scale = max(float(np.max(np.abs(expected), initial=0.0)), 1.0)
    if got.shape != expected.shape:
        return "silent wrong", f"shape {got.shape}, the reference's {expected.shape}"
    worst = float(np.max(np.abs(got - expected), initial=0.0))
    if not worst <= atol + rtol * scale:
        return (
            "silent wrong",
            f"largest difference {worst:.3g} on a scale of {scale:.3g} (rtol {rtol:g}, atol {atol:g})",
        )
    return None


def _shrink(program: Program, operator: str, backend: AbstractBackend, prepared: bool, kind: str) -> Program:
    """The shortest program (dropping one step at a time) that still disagrees so."""
    changed = True
    while changed and program.steps:
        changed = False
        for index in range(len(program.steps)):
            smaller = Program(
                program.steps[:index] + program.steps[index + 1 :], program.output, program.size, program.seed
            )
            found = _disagreement(smaller, operator, backend, prepared)
            if found is not None and found[0] == kind:
                program, changed = smaller, True
                break
    return program


def _draw(rng: np.random.Generator, seed: int) -> Program:
    names = sorted(OPERATIONS)
    length = int(rng.integers(1, 6))
    steps = tuple(str(names[int(i)]) for i in rng.integers(0, len(names), length))
    return Program(steps, str(_OUTPUTS[int(rng.integers(0, 2))]), int(rng.choice([2, 4, 6])), seed)


def fuzz(
    seconds: float = 5.0,
    seed: int = 0,
    backends: Sequence[AbstractBackend] | None = None,
    log: Callable[[str], None] | None = None,
    compiled: bool = False,
) -> Report:
    """Draw and compare programs for about ``seconds``.

    Args:
        seconds: the time budget (the program in progress finishes).
        seed: the seed of the programs drawn (the same seed draws the same programs).
        backends: the selectors compared; by default every installed engine's
            default selector (:func:`di.testing.matrix.engine_backends`).
        log: called with each finding's report (a ready-to-paste test).
        compiled: with the default backends, the compiling selectors too (each
            program is then compiled: seconds per program with torch.compile).

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
        program = _draw(rng, seed * 100_003 + report.programs)
        report.programs += 1
        operators = ("gradient", "hvp") if program.output == "scalar" else ("jacobian",)
        for operator in operators:
            for prepared in (False, True):
                results = {}
                for backend in chosen:
                    report.calls += 1
                    results[backend] = _disagreement(program, operator, backend, prepared)
                wrong = [found for found in results.values() if found is not None and found[0] == "silent wrong"]
                if len(chosen) > 1 and len(wrong) == len(chosen):  # every engine agrees against the reference
                    report.doubtful += 1
                    continue
                for backend, found in results.items():
                    if found is None:
                        continue
                    kind = found[0]
                    small = _shrink(program, operator, backend, prepared, kind)
                    key = (kind, repr(backend), operator, small.steps)
                    if key in seen:
                        continue
                    seen.add(key)
                    again = _disagreement(small, operator, backend, prepared)
                    finding = Finding(kind, backend, operator, prepared, small, (again or found)[1])
                    report.findings.append(finding)
                    if log is not None:
                        log(finding.as_test())
    return report
