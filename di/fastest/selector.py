"""The selector of :class:`AutoFastest`, beside its strategy. Building one imports nothing."""

from __future__ import annotations

import numbers
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import ClassVar

from di.backends.selectors import AbstractBackend, check_flags, engines, not_a_selector
from di.errors import InvalidOptionError, InvalidOptionTypeError

__all__ = ["AutoFastest"]


@dataclass(frozen=True)
class AutoFastest(AbstractBackend):
    """Measure the candidate backends at preparation and keep the fastest correct one.

    ``prepare_<operator>(f, di.AutoFastest(), x, *contexts)`` prepares the operator
    on every candidate, runs each once on the given arguments, drops the ones that
    fail or whose result differs from the majority's beyond ``rtol``, times the
    others (whole prepared calls, conversions to and from the caller's array
    family included; interleaved rounds, median), and returns the fastest one's
    prep. Its calls then cost exactly what that backend's prepared calls cost.
    ``prep.plan`` (a :class:`di.fastest.plan.Plan`) tells which candidate won and why the
    others did not. Prepare on a representative ``x``: the candidates are checked
    and timed there. Unprepared calls are refused (they would measure every time).

    Args:
        candidates: the selectors to choose among; ``None`` means
            ``AutoJAX(jit=True)`` (when ``include_compiled``), ``AutoJAX()``,
            ``AutoTorch()`` and ``AutoAutograd()``, those installed.
            ``AutoTorch(compile=True)`` (seconds of compilation) and finite
            differences (approximate, and ``2n`` evaluations of ``f`` per
            gradient) are candidates only when listed.
        budget_s: seconds spent timing the candidates (their preparation and
            first call come on top). Each candidate gets at least three rounds.
        rtol: how far, relative to the largest entry of the result, a
            candidate's result may differ from the majority's; ``None`` picks it
            from the result's dtype (1e-5 for float64, 1e-3 for float32, 3e-2 for
            16-bit floats).
        atol: an absolute allowance added to ``rtol`` times the largest entry,
            so rounding noise around a zero result (a gradient at a minimum)
            agrees; ``None``: 1e-8 for float64, 1e-4 for float32, 1e-2 for
            16-bit floats.
        include_compiled: whether the default candidates include ``AutoJAX(jit=True)``.
        cache: a JSON file remembering plans by function (module and qualified
            name, and a hash of its bytecode), operator, signature, candidates
            and installed engine versions: a later process with the same ones
            prepares the remembered winner without measuring.

    Raises:
        InvalidOptionError: an empty candidate list, a non-positive budget or
            ``rtol`` (a ``ValueError``).
        InvalidOptionTypeError: one selector instead of a list of them; a
            candidate that is not a backend selector, or an AutoFastest (a
            ``TypeError``).

    Examples:
        >>> import numpy as np, di
        >>> f = lambda x: (x * x).sum()
        >>> backend = di.AutoFastest([di.AutoFiniteDiff(), di.AutoFiniteDiff(method="forward")], budget_s=0.01)
        >>> prep = di.prepare_gradient(f, backend, np.ones(3))
        >>> di.gradient(f, prep, backend, np.array([1.0, 2.0, 3.0])).round(4)
        array([2., 4., 6.])
        >>> prep.plan.chosen in backend.candidates
        True
    """

    candidates: Sequence[AbstractBackend] | None = None
    budget_s: float = field(default=1.0, kw_only=True)
    rtol: float | None = field(default=None, kw_only=True)
    atol: float | None = field(default=None, kw_only=True)
    include_compiled: bool = field(default=True, kw_only=True)
    cache: str | os.PathLike[str] | None = field(default=None, kw_only=True)
    engine_display: ClassVar[str] = "its candidates"
    strategy: ClassVar[str] = "di.fastest.strategy:FastestStrategy"
    prepared_only: ClassVar[str] = (
        "it chooses a backend by measuring every candidate, which an unprepared call would repeat every time"
    )

    def __post_init__(self) -> None:
        if self.candidates is not None:
            given = self.candidates
            if isinstance(given, (AbstractBackend, str)) or not isinstance(given, Iterable):
                raise InvalidOptionTypeError(
                    f"AutoFastest(candidates=...) takes a list of backend selectors, not one {type(given).__name__}: "
                    f"pass AutoFastest([{given!r}]), or several to choose among"
                )
            candidates = tuple(dict.fromkeys(given))  # in order, without repeats
            if not candidates:
                raise InvalidOptionError(
                    "AutoFastest(candidates=...) needs at least one candidate (None: the default ones)"
                )
            for candidate in candidates:
                if not isinstance(candidate, AbstractBackend) or isinstance(candidate, AutoFastest):
                    raise InvalidOptionTypeError(
                        f"AutoFastest candidates must be backend selectors such as di.AutoJAX(jit=True), other than "
                        f"AutoFastest, not {not_a_selector(candidate)}"
                    )
            object.__setattr__(self, "candidates", candidates)
        if not (isinstance(self.budget_s, (int, float)) and 0 < self.budget_s < float("inf")):
            raise InvalidOptionError(
                f"AutoFastest(budget_s={self.budget_s!r}): budget_s must be a positive number of seconds"
            )
        if self.rtol is not None and not (isinstance(self.rtol, numbers.Real) and self.rtol > 0):
            raise InvalidOptionError(
                f"AutoFastest(rtol={self.rtol!r}): rtol must be positive, or None to pick it by dtype"
            )
        if self.atol is not None and not (isinstance(self.atol, numbers.Real) and self.atol >= 0):
            raise InvalidOptionError(f"AutoFastest(atol={self.atol!r}): atol must be >= 0, or None to pick it by dtype")
        check_flags(self, "include_compiled")
        if self.cache is not None and not isinstance(self.cache, str):
            object.__setattr__(self, "cache", os.fspath(self.cache))

    def default_candidates(self) -> tuple[AbstractBackend, ...]:
        """The candidates when none are given: the selectors the installed engines'
        records offer for it (their ``fastest`` labels), the compiled ones only
        with ``include_compiled``.

        Examples:
            >>> import di
            >>> di.AutoFastest(include_compiled=False).default_candidates()[0] == di.AutoJAX(jit=True)
            False
        """
        defaults = [
            engine.labels[label]
            for engine in engines()
            for label in engine.fastest
            if self.include_compiled or label not in engine.compiled
        ]
        return tuple(candidate for candidate in defaults if candidate.is_installed)
