"""``f`` evaluated at the perturbed points (:class:`Evaluator`): in float64 on
NumPy inputs, its output checked (one shape near ``x``, a real float), its
``aux`` kept from the evaluation at ``x``, and the precision of its output
learnt, so that each call's steps follow its own ``f``'s output: a call starts
from the precision last seen in its thread and computes again when its first
output has another.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from di.backends.aux import split_output, value_only
from di.backends.misuse import written_x_error
from di.backends.outputs import OutputRules, check_output, raise_bad_output
from di.backends.protocol import Adapter, Program, Programs
from di.contexts import Context
from di.engines.finitediff.selector import AutoFiniteDiff
from di.engines.finitediff.steps import EPS, FLOAT64, Precision, output_eps, relative_step
from di.errors import InvalidOutputError
from di.families import converter, family_of, identity, is_floating_dtype
from di.pytrees import tree_map

__all__ = ["Evaluator", "shape_changed"]


def shape_changed(backend: Any, operator: str, first: tuple[int, ...], later: tuple[int, ...]) -> InvalidOutputError:
    """The error for an ``f`` whose output changed shape between two evaluations
    near ``x`` (its shape depends on ``x``'s values)."""
    return InvalidOutputError(
        f"{backend!r}: {operator} needs f's output to keep one shape near x, and f returned shape {first} at "
        f"one evaluation and {later} at another. Finite differences compare f's outputs at nearby points: make "
        f"the output's shape independent of x's values (mask with where() rather than selecting elements)."
    )


class Evaluator:
    """Evaluates ``f`` in float64 on numpy inputs and checks what it returns."""

    def __init__(
        self,
        adapter: Adapter,
        f: Callable[..., Any],
        x: Any,
        contexts: Sequence[Context],
        *,
        has_aux: bool = False,
        operator: str = "gradient",
    ):
        self.backend = adapter.backend
        assert isinstance(self.backend, AutoFiniteDiff)  # (the adapter is a FiniteDiffAdapter)
        self.selector = self.backend
        self.precision = Precision(self.selector)
        # f's results are approximations themselves (another finite-difference
        # program, differentiated by SecondOrder): their error is its precision
        self.f_error: Callable[[], float] | None = getattr(f, "result_error", None)
        # whether any output seen (in any thread) was coarser than float64, or f's
        # results are approximations: until then a float64 output needs no question
        self.adapting = self.f_error is not None
        self.float64 = (EPS, relative_step(self.selector))  # (eps, first step) before that
        self.has_aux = has_aux
        self.operator = operator
        self.f_with_aux = f
        self.f = value_only(f, self.backend, operator) if has_aux else f
        self.to_numpy_x = adapter.input_converters([x])[0]
        self.convert_contexts = adapter.context_converters(contexts)
        self.convert_any = any(convert is not identity for convert in self.convert_contexts)
        self.number: Callable[[Any], float] = float

    def learn(self, y: Any) -> None:
        """Take the precision of ``f``'s output ``y`` into the steps when it differs
        from the one they follow (an ``f`` that computes in float32 or float16, or
        in float64 after one that did)."""
        eps, precision = output_eps(y), self.precision
        if self.f_error is not None:
            eps = max(eps, self.f_error())
        if eps != precision.eps:
            precision.set(eps)
            self.adapting = True

    def error(self) -> float:
        """The relative error of a first-order difference with this thread's steps:
        truncation (``step**2`` central, ``step`` forward) and rounding
        (``eps / step``)."""
        precision = self.precision
        step = precision.first_step
        truncation = step * step if self.selector.method == "central" else step
        return truncation + precision.eps / step

    def telling_error(self, programs: Programs) -> Programs:
        """``programs`` (first order), each carrying ``result_error`` (see
        :func:`di.backends.protocol.keeping_error`), and telling a write into ``x``
        (:meth:`Evaluator.reading`)."""
        programs = self.reading(programs)
        for program in programs.values():
            program.result_error = self.error  # type: ignore[attr-defined]
        return programs

    def reading(self, programs: Programs) -> Programs:
        """``programs``, a write of ``f`` into the read-only point (see
        :meth:`Evaluator.inputs`) raised as the ``di`` error for a write into ``x``, chained
        to NumPy's (one frame per call, none per evaluation of ``f``)."""
        backend, operator = self.backend, self.operator

        def reading(program: Program) -> Program:
            def run(*args: Any) -> Any:
                try:
                    return program(*args)
                except ValueError as error:
                    if "read-only" in str(error):
                        raise written_x_error(backend, operator) from error
                    raise

            return run

        return {name: reading(program) for name, program in programs.items()}

    def settled(self, programs: Programs) -> Programs:
        """``programs``, each computed again when ``f``'s output turned out to have
        another precision than the steps it used assumed."""

        def settling(program: Program) -> Program:
            def run(*args: Any) -> Any:
                if not self.adapting:  # float64 outputs so far: no precision to compare
                    result = program(*args)
                    return program(*args) if self.adapting else result
                precision = self.precision
                eps = precision.eps
                result = program(*args)
                return result if precision.eps == eps else program(*args)

            return run

        return {name: settling(program) for name, program in programs.items()}

    def inputs(self, x: Any, values: Sequence[Any], seen: bool = True) -> tuple[Any, Any, tuple[Any, ...]]:
        """(caller's x as numpy, a float64 C-contiguous copy of it, converted values).
        ``seen=False``: ``f`` never sees the point, nor do the steps write into it (a
        pushforward evaluates ``f`` only at new points): it is then ``x`` in float64,
        a copy only where ``x`` is not already a float64 array."""
        caller = x if x.__class__ is np.ndarray else np.asarray(self.to_numpy_x(x))
        if not seen:
            point = np.asarray(caller, dtype=np.float64)
            if self.convert_any:
                values = tuple(convert(v) for convert, v in zip(self.convert_contexts, values))
            return caller, point, tuple(values)
        # f reads the point through a read-only view: a write into x raises there (it
        # would be differentiated as part of f otherwise); the steps write through
        # writable(point)
        point = np.array(caller, dtype=np.float64, order="C").view()
        point.flags.writeable = False
        if self.convert_any:
            values = tuple(convert(v) for convert, v in zip(self.convert_contexts, values))
        return caller, point, tuple(values)

    def scalar(self, point: Any, values: Sequence[Any], operator: str = "gradient") -> float:
        """``f``'s value, checked to be a real scalar (once per operator call);
        :attr:`number` then reads the following outputs as floats."""
        y = self.f(point, *values)
        # (a float64 output asks nothing until one was coarser, or f's results are approximations)
        if self.adapting or (y.__class__ is not float and y.__class__ is not np.float64):
            self.learn(y)
        if _is_float_scalar(y):
            self.number = float  # the common case, told without the full check
            return float(y)
        self.number = float if getattr(y, "ndim", 0) == 0 else _number
        return float(check_output(y, point, self.backend, operator, _RULES))

    def scalar_at_point(
        self, caller: Any, point: Any, values: Sequence[Any], operator: str = "gradient"
    ) -> tuple[float, Any]:
        """``f``'s checked value at the unperturbed point, and its ``aux`` (see
        :meth:`aux_at`) when ``has_aux``, else ``None``."""
        if not self.has_aux:
            return self.scalar(point, values, operator), None
        y, aux = split_output(self.f_with_aux(point, *values), self.backend, operator)
        self.learn(y)
        return float(check_output(y, point, self.backend, operator, _RULES)), self.aux_at(
            caller, point, aux, values, operator
        )

    def array_at_point(self, caller: Any, point: Any, values: Sequence[Any], operator: str) -> tuple[Any, Any]:
        """``f``'s output at the unperturbed point (a float64 copy), and its ``aux``
        (see :meth:`aux_at`) when ``has_aux``, else ``None``."""
        if not self.has_aux:
            return self.array(point, values, operator), None
        y, aux = split_output(self.f_with_aux(point, *values), self.backend, operator)
        return self.checked_array(y, operator), self.aux_at(caller, point, aux, values, operator)

    def aux_at(self, caller: Any, point: Any, aux: Any, values: Sequence[Any], operator: str) -> Any:
        """``aux`` as ``f`` computes it at the caller's ``x`` (``caller``), copied
        (``point`` is perturbed in place afterwards, and an array leaf may be a
        view of it): ``aux`` itself, from ``f`` at the float64 ``point``, when ``x``
        is float64; else ``f``'s own at ``x`` in ``x``'s dtype, from one more
        evaluation there, as every other backend computes it (at the float64 point
        an ``aux`` echoing ``x``, or computed from it, would be float64 for a
        float32 ``x``)."""
        if caller.dtype == point.dtype:
            return _copied(aux)
        return _copied(split_output(self.f_with_aux(caller, *values), self.backend, operator)[1])

    def array(self, point: Any, values: Sequence[Any], operator: str, copy: bool = True) -> Any:
        """``f``'s output in float64: a copy, since ``point`` is perturbed in place
        afterwards and the output may be a view of it, unless ``copy=False`` (a
        point that is not reused)."""
        return self.checked_array(self.f(point, *values), operator, copy)

    def checked_array(self, y: Any, operator: str, copy: bool = True) -> Any:
        """``f``'s output ``y`` checked and in float64 (a copy unless ``copy=False``)."""
        if y.__class__ is np.ndarray and y.dtype is FLOAT64:  # the common case
            if self.adapting:  # float64 now, after a coarser output (or f's own error)
                self.learn(y)
            return np.array(y) if copy else y
        self.learn(y)
        if y.__class__ is np.ndarray and y.dtype.kind == "f":
            return np.array(y, dtype=np.float64)
        family = family_of(y)
        if not (isinstance(y, float) or (family is not None and is_floating_dtype(y.dtype))):
            raise_bad_output(y, self.backend, operator)
        return np.array(converter(family, "numpy")(y) if family else y, dtype=np.float64, copy=True)


def read_only(point: Any) -> Any:
    """A point made for ``f`` alone (``x`` moved along a direction), read only as
    :meth:`Evaluator.inputs` makes ``x`` (a 0-d result made an array)."""
    if point.__class__ is not np.ndarray:
        point = np.asarray(point)
    point.setflags(write=False)
    return point


def writable(point: Any) -> Any:
    """The float64 array behind a point :meth:`Evaluator.inputs` made, which the
    steps perturb in place (``f`` sees it read only)."""
    return point if point.flags.writeable else point.base


class _Rules(OutputRules):
    """Finite differences only evaluate ``f``: a Python float is a scalar like any other."""

    def scalar(self, y: Any) -> Any:
        return np.reshape(y, ())


_RULES = _Rules()


_FLOAT_SCALARS = frozenset({float, np.float64, np.float32, np.float16})


def _is_float_scalar(y: Any) -> bool:
    """A Python or NumPy float scalar, or a 0-d float array: the common output."""
    return y.__class__ in _FLOAT_SCALARS or (y.__class__ is np.ndarray and y.shape == () and y.dtype.kind == "f")


def _number(y: Any) -> float:
    """A checked scalar output of ``f`` (0-d, or one element) as a Python float."""
    return float(y) if getattr(y, "ndim", 0) == 0 else float(np.reshape(y, ()))


def _copied(aux: Any) -> Any:
    """``aux`` with its numpy arrays copied (they may be views of the point)."""
    return tree_map(lambda leaf: np.array(leaf, copy=True) if isinstance(leaf, np.ndarray) else leaf, aux)
