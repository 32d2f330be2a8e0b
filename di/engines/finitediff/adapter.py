"""NumPy finite differences: central (default) or forward, evaluated in float64.

First order: coordinate ``i`` moves by ``h_i = step * max(1, |x_i|)``, rounded so
that ``x_i + h_i`` is exact; a pushforward along ``t`` moves by ``h * t``, with ``h``
such that the coordinate ``t`` weighs most in (``|t_i| max(1, |x_i|)`` largest)
moves as it would alone (:func:`_directional_step`). Second order takes central differences of
these gradients (never forward over forward, which loses accuracy), with the
larger step ``eps**(1/4)``. Any ``f`` works: one evaluation per perturbed point,
with no assumption that ``f`` broadcasts over a batch.

``eps`` is float64's unless ``f`` returns a coarser float (an ``f`` that computes
in float32 or float16): the steps then follow its output's precision, since a
float64 step would difference away all of float32's digits. Each call's steps
follow the precision of its own ``f``'s output: a call starts from the precision
last seen in its thread and computes again when its first output has another.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from di.backends.aux import split_output, value_only
from di.backends.capabilities import AUX_FAMILIES, Capabilities
from di.backends.outputs import OutputRules, check_output, raise_bad_output
from di.backends.protocol import Adapter, Program, Programs
from di.contexts import Cache, Context
from di.engines.finitediff.selector import AutoFiniteDiff
from di.errors import InvalidOutputError
from di.families import converter, family_of, get_family, identity, is_floating_dtype
from di.pytrees import tree_map

__all__ = ["FiniteDiffAdapter", "relative_step"]

_EPS = float(np.finfo(np.float64).eps)
_COARSER_EPS = {"float32": 2.0**-23, "float16": 2.0**-10, "bfloat16": 2.0**-7}
"""Machine epsilon of the float dtypes coarser than float64, by name (the same in
every family: ``float32``, ``torch.float32``)."""
_FLOAT64 = np.dtype(np.float64)


def relative_step(selector: AutoFiniteDiff, eps: float = _EPS) -> float:
    """The relative step: the selector's, or eps**(1/3) (central) / eps**(1/2)
    (forward), which balance truncation and rounding error for outputs of
    precision ``eps`` (float64's by default)."""
    if selector.step is not None:
        return float(selector.step)
    return eps ** (1 / 3) if selector.method == "central" else eps**0.5


def output_eps(y: Any) -> float:
    """The machine epsilon of ``f``'s output ``y``: its float dtype's when coarser
    than float64 (float32, float16, bfloat16 of any family), else float64's."""
    dtype = getattr(y, "dtype", None)
    if dtype is None or dtype is _FLOAT64:
        return _EPS
    return _COARSER_EPS.get(str(dtype).rsplit(".", 1)[-1], _EPS)


def _steps(flat: Any, step: float) -> Any:
    h = step * np.maximum(1.0, np.abs(flat))
    return (flat + h) - flat  # exactly representable


def _directional_step(step: float, point: Any, t: Any, t_scale: float) -> float:
    """The step ``h`` of a difference along ``t`` (``point`` moves by ``h * t``):
    the coordinate ``t`` weighs most in, by ``|t_i| max(1, |x_i|)``, moves by
    ``step * max(1, |x_i|)`` (by ``t_scale = max|t|`` when ``t`` weighs all
    coordinates alike), as it would along its own axis; so a tangent along one
    coordinate takes that coordinate's step, whatever the scale of the others.
    ``|t_i| max(1, |x_i|)`` is ``max(|t_i|, |x_i t_i|)``, whose largest is
    ``max(t_scale, max|x t|)``: two array operations fewer on the hot path."""
    return step * max(t_scale, float(np.abs(point * t).max())) / (t_scale * t_scale)


def _largest_magnitude(a: Any) -> float:
    """``max(|a|)`` as a float, 0 for an empty array (NaN propagates). The
    method, not ``np.max``: a microsecond less per call, which is most of it at
    n = 1e3."""
    return float(np.abs(a).max()) if a.size else 0.0


def _shape_changed(backend: Any, operator: str, first: tuple[int, ...], later: tuple[int, ...]) -> InvalidOutputError:
    """The error for an ``f`` whose output changed shape between two evaluations
    near ``x`` (its shape depends on ``x``'s values)."""
    return InvalidOutputError(
        f"{backend!r}: {operator} needs f's output to keep one shape near x, and f returned shape {first} at "
        f"one evaluation and {later} at another. Finite differences compare f's outputs at nearby points: make "
        f"the output's shape independent of x's values (mask with where() rather than selecting elements)."
    )


class _Precision(threading.local):
    """The precision of ``f``'s output as last seen in this thread (``eps``) and the
    steps it calls for. Per thread: one call's steps never come from another's."""

    def __init__(self, selector: AutoFiniteDiff) -> None:
        self.selector = selector
        self.set(_EPS)

    def set(self, eps: float) -> None:
        self.eps = eps
        self.first_step, self.second_step = relative_step(self.selector, eps), eps**0.25


class _Evaluator:
    """Evaluates ``f`` in float64 on numpy inputs and checks what it returns."""

    def __init__(
        self,
        adapter: FiniteDiffAdapter,
        f: Callable[..., Any],
        x: Any,
        contexts: Sequence[Context],
        *,
        has_aux: bool = False,
        operator: str = "gradient",
    ):
        self.backend = adapter.backend
        self.selector = adapter.selector
        self.precision = _Precision(self.selector)
        # f's results are approximations themselves (another finite-difference
        # program, differentiated by SecondOrder): their error is its precision
        self.f_error: Callable[[], float] | None = getattr(f, "result_error", None)
        # whether any output seen (in any thread) was coarser than float64, or f's
        # results are approximations: until then a float64 output needs no question
        self.adapting = self.f_error is not None
        self.float64 = (_EPS, relative_step(self.selector))  # (eps, first step) before that
        self.has_aux = has_aux
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
        :func:`di.backends.protocol.keeping_error`)."""
        for program in programs.values():
            program.result_error = self.error  # type: ignore[attr-defined]
        return programs

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

    def inputs(self, x: Any, values: Sequence[Any]) -> tuple[Any, Any, tuple[Any, ...]]:
        """(caller's x as numpy, a float64 C-contiguous copy of it, converted values)."""
        caller = x if x.__class__ is np.ndarray else np.asarray(self.to_numpy_x(x))
        point = np.array(caller, dtype=np.float64, order="C")
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
        if y.__class__ is np.ndarray and y.dtype is _FLOAT64:  # the common case
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


class FiniteDiffAdapter(Adapter):
    """Adapter for :class:`di.AutoFiniteDiff`.

    Native: gradient, pushforward (hence derivative), jacobian, hvp, hessian,
    second derivative; pullback comes from the jacobian. Results are cast back to
    ``x``'s dtype. ``Cache`` buffers are passed to ``f`` as the caller's numpy
    memory (JAX caches as a writable copy).
    """

    capabilities = Capabilities(
        float64=True,
        aux=AUX_FAMILIES,
        differentiates="any",
        cache_note="f receives numpy buffers as the caller's memory (immutable arrays as writable copies).",
    )

    @property
    def selector(self) -> AutoFiniteDiff:
        assert isinstance(self.backend, AutoFiniteDiff)
        return self.backend

    def context_converters(self, contexts: Sequence[Context]) -> list[Callable[[Any], Any]]:
        """numpy views of array contexts; JAX caches as writable copies."""
        converters = self.input_converters([c.value for c in contexts])
        for i, context in enumerate(contexts):
            if isinstance(context, Cache) and not _mutable(context.value):
                converters[i] = lambda v: np.array(v, copy=True)
        return converters

    # --- first order ----------------------------------------------------------------

    def _gradient(
        self, evaluator: _Evaluator, point: Any, values: Sequence[Any], y0: float | None, operator: str = "gradient"
    ) -> Any:
        """Gradient of the scalar ``f`` at ``point`` (float64, modified and restored);
        ``operator`` names the call in the error about an unusable output of ``f``."""
        central = self.selector.method == "central"
        if not central and y0 is None:
            y0 = evaluator.scalar(point, values, operator)
        # float64's steps until an output was coarser (no per-thread lookup before)
        precision = evaluator.precision if evaluator.adapting else None
        eps, step = evaluator.float64 if precision is None else (precision.eps, precision.first_step)
        flat = point.reshape(-1)
        # Python floats: indexing lists is cheaper than numpy scalars, and the
        # arithmetic is the same IEEE double arithmetic, so results are identical.
        coordinates, steps = flat.tolist(), _steps(flat, step).tolist()
        g = [0.0] * flat.size
        f, values = evaluator.f, tuple(values)
        for i, (xi, hi) in enumerate(zip(coordinates, steps)):
            flat[i] = xi + hi
            if i == 0:  # the first evaluation checks f's output; the rest are read as it was
                up, number = evaluator.scalar(point, values, operator), evaluator.number
                if evaluator.adapting and evaluator.precision.eps != eps:  # other steps: again, with them
                    flat[i] = xi
                    return self._gradient(evaluator, point, values, y0, operator)
            else:
                up = number(f(point, *values))
            if central:
                flat[i] = xi - hi
                g[i] = (up - number(f(point, *values))) / (2 * hi)
            else:
                g[i] = (up - y0) / hi  # type: ignore[operator]
            flat[i] = xi
        return np.array(g).reshape(point.shape)

    def prepare_gradient_programs(
        self, f: Callable[..., Any], x: Any, contexts: Sequence[Context], *, has_aux: bool = False
    ) -> Programs:
        evaluator = _Evaluator(self, f, x, contexts, has_aux=has_aux)
        central = self.selector.method == "central"

        def make(with_value: bool) -> Program:
            # Central differences need no value at x: f is evaluated there only for
            # the value or aux the call returns.
            at_point = with_value or not central or has_aux

            def run(x: Any, *values: Any) -> Any:
                caller, point, values = evaluator.inputs(x, values)
                y0, aux = (
                    evaluator.scalar_at_point(caller, point, values) if (at_point or point.size == 0) else (None, None)
                )
                g = self._gradient(evaluator, point, values, y0).astype(caller.dtype, copy=False)
                result = (np.asarray(y0, dtype=caller.dtype), g) if with_value else g
                return (result, aux) if has_aux else result

            return run

        return evaluator.telling_error({"gradient": make(False), "value_and_gradient": make(True)})

    def _directional(self, evaluator: _Evaluator, operator: str = "pushforward") -> Callable[..., Any]:
        """``directional(point, values, t, y0)``: the directional derivative of ``f``
        at ``point`` along ``t`` (float64), with the step and method decided here.
        ``y0``, ``f(point)``, is ``None`` when the caller did not need it (central
        differences do not use it)."""
        central, array = self.selector.method == "central", evaluator.array

        def directional(point: Any, values: Sequence[Any], t: Any, y0: Any) -> Any:
            t = np.asarray(t if t.__class__ is np.ndarray else converter(family_of(t), "numpy")(t), dtype=np.float64)
            scale = _largest_magnitude(t)
            if scale == 0.0:
                return np.zeros_like(array(point, values, operator) if y0 is None else y0)
            h = _directional_step(evaluator.precision.first_step, point, t, scale)
            # np.asarray: a 0-d point +- h*t would otherwise be a numpy scalar. The last
            # evaluation's output needs no copy (nothing runs f after it: a buffer f
            # returns keeps its value); the first one's does when another follows.
            up = array(np.asarray(point + h * t), values, operator, copy=central)
            other = array(np.asarray(point - h * t), values, operator, copy=False) if central else y0
            if up.shape != other.shape:
                raise _shape_changed(self.backend, operator, other.shape, up.shape)
            return (up - other) / (2 * h if central else h)

        return directional

    def prepare_pushforward_programs(
        self,
        f: Callable[..., Any],
        x: Any,
        tx: Sequence[Any],
        contexts: Sequence[Context],
        *,
        has_aux: bool = False,
    ) -> Programs:
        evaluator = _Evaluator(self, f, x, contexts, has_aux=has_aux, operator="pushforward")
        central = self.selector.method == "central"
        directional = self._directional(evaluator)

        def make(with_value: bool) -> Program:
            # Central differences need no value at x: f is evaluated there only for
            # the value or aux the call returns.
            at_point = with_value or not central or has_aux

            def run(x: Any, tx: Sequence[Any], *values: Any) -> Any:
                caller, point, values = evaluator.inputs(x, values)
                y0, aux = evaluator.array_at_point(caller, point, values, "pushforward") if at_point else (None, None)
                dtype = caller.dtype
                # (a list: a StopIteration f raises inside a generator would become RuntimeError)
                products = tuple([np.asarray(directional(point, values, t, y0), dtype=dtype) for t in tx])
                result = (np.asarray(y0, dtype=dtype), products) if with_value else products
                return (result, aux) if has_aux else result

            return run

        return evaluator.telling_error(
            evaluator.settled({"pushforward": make(False), "value_and_pushforward": make(True)})
        )

    def prepare_jacobian_programs(
        self,
        f: Callable[..., Any],
        x: Any,
        contexts: Sequence[Context],
        operator: str = "jacobian",
        *,
        has_aux: bool = False,
    ) -> Programs:
        evaluator = _Evaluator(self, f, x, contexts, has_aux=has_aux, operator=operator)
        central = self.selector.method == "central"

        def jacobian_with_value(x: Any, values: Sequence[Any], with_value: bool) -> Any:
            """``((y, jacobian), aux)``; central differences without the value or aux
            leave ``f(x)`` unevaluated (``y`` is then ``None``)."""
            caller, point, values = evaluator.inputs(x, values)
            flat = point.reshape(-1)
            at_point = with_value or not central or has_aux or flat.size == 0
            y0, aux = evaluator.array_at_point(caller, point, values, operator) if at_point else (None, None)
            steps = _steps(flat, evaluator.precision.first_step).tolist()
            # One row (an output of f's shape) per coordinate: contiguous writes, transposed
            # once at the end. Every output must have the first one's shape: numpy would
            # broadcast a one-element output into the row without a word.
            y_shape: Any = None if y0 is None else y0.shape
            rows: Any = None if y_shape is None else np.empty((flat.size, *y_shape))
            f, checked = evaluator.f, evaluator.checked_array  # (evaluator.array, a call fewer)
            # Python floats for the coordinates and steps, as in the gradient; the
            # second evaluation is used before f runs again: no copy.
            for i, (xi, hi) in enumerate(zip(flat.tolist(), steps)):
                flat[i] = xi + hi
                up = checked(f(point, *values), operator, central)
                if up.shape != y_shape:
                    if y_shape is not None:
                        raise _shape_changed(self.backend, operator, y_shape, up.shape)
                    y_shape = up.shape  # the first evaluation tells f's output shape
                    rows = np.empty((flat.size, *y_shape))
                if central:
                    flat[i] = xi - hi
                    down = checked(f(point, *values), operator, False)
                    if down.shape != y_shape:
                        raise _shape_changed(self.backend, operator, y_shape, down.shape)
                    rows[i] = (up - down) / (2 * hi)
                else:
                    rows[i] = (up - y0) / hi
                flat[i] = xi
            jac = rows.reshape(flat.size, math.prod(y_shape)).T.astype(caller.dtype, order="C")
            jac = jac.reshape(y_shape + point.shape)
            return (None if y0 is None else np.asarray(y0, dtype=caller.dtype), jac), aux

        def value_and_jacobian(x: Any, *values: Any) -> Any:
            result, aux = jacobian_with_value(x, values, True)
            return (result, aux) if has_aux else result

        def jacobian(x: Any, *values: Any) -> Any:
            (_, jac), aux = jacobian_with_value(x, values, False)
            return (jac, aux) if has_aux else jac

        return evaluator.telling_error(
            evaluator.settled({"jacobian": jacobian, "value_and_jacobian": value_and_jacobian})
        )

    def prepare_pullback_programs(
        self,
        f: Callable[..., Any],
        x: Any,
        ty: Sequence[Any],
        contexts: Sequence[Context],
        *,
        has_aux: bool = False,
    ) -> Programs:
        """Cotangents contracted with the finite-difference jacobian (errors about
        ``f``'s output name pullback)."""
        jacobians = self.prepare_jacobian_programs(f, x, contexts, "pullback", has_aux=has_aux)
        x_shape = np.shape(x)
        x_size = math.prod(x_shape)

        def make(with_value: bool) -> Program:
            # the plain pullback contracts the plain jacobian: no f(x) with central differences
            jacobian = jacobians["value_and_jacobian" if with_value else "jacobian"]

            def run(x: Any, ty: Sequence[Any], *values: Any) -> Any:
                output = jacobian(x, *values)
                output, aux = output if has_aux else (output, None)
                y, jac = output if with_value else (None, output)
                cotangents = [np.asarray(converter(family_of(t), "numpy")(t), dtype=jac.dtype) for t in ty]
                # the contraction over y's axes as one matrix product (np.tensordot does the
                # same reshapes, with 4 us of Python around them)
                rows = jac.reshape(math.prod(jac.shape[: jac.ndim - len(x_shape)]), x_size)
                products = tuple((t.reshape(-1) @ rows).reshape(x_shape) for t in cotangents)
                result = (y, products) if with_value else products
                return (result, aux) if has_aux else result

            return run

        return {"pullback": make(False), "value_and_pullback": make(True)}

    # --- second order: central differences of gradients --------------------------------

    def prepare_hvp_programs(
        self, f: Callable[..., Any], x: Any, tx: Sequence[Any], contexts: Sequence[Context]
    ) -> Programs:
        evaluator = _Evaluator(self, f, x, contexts)

        def products(caller: Any, point: Any, values: Sequence[Any], tx: Sequence[Any]) -> tuple[Any, ...]:
            """Central differences of gradients along each tangent (the gradient at
            ``point`` itself is not needed)."""
            results, evaluated = [], False
            for t in tx:
                t = np.asarray(converter(family_of(t), "numpy")(t), dtype=np.float64)
                scale = _largest_magnitude(t)
                if scale == 0.0:
                    results.append(np.zeros(point.shape, dtype=caller.dtype))
                    continue
                h = _directional_step(evaluator.precision.second_step, point, t, scale)
                # np.array: a 0-d point +- h*t would otherwise be a numpy scalar, not a view-able array
                up = self._gradient(evaluator, np.array(point + h * t), values, None, "hvp")
                down = self._gradient(evaluator, np.array(point - h * t), values, None, "hvp")
                results.append(np.asarray((up - down) / (2 * h), dtype=caller.dtype))
                evaluated = evaluated or point.size > 0
            if not evaluated:
                evaluator.scalar(point, values, "hvp")  # f was not evaluated: check its output once
            return tuple(results)

        def gradient_and_hvp(x: Any, tx: Sequence[Any], *values: Any) -> Any:
            caller, point, values = evaluator.inputs(x, values)
            y0 = evaluator.scalar(point, values, "hvp")
            g = self._gradient(evaluator, point, values, y0)
            return g.astype(caller.dtype), products(caller, point, values, tx)

        def hvp(x: Any, tx: Sequence[Any], *values: Any) -> Any:
            caller, point, values = evaluator.inputs(x, values)
            return products(caller, point, values, tx)

        return evaluator.settled({"hvp": hvp, "gradient_and_hvp": gradient_and_hvp})

    def prepare_hessian_programs(self, f: Callable[..., Any], x: Any, contexts: Sequence[Context]) -> Programs:
        evaluator = _Evaluator(self, f, x, contexts)

        def hessian_at(point: Any, values: Sequence[Any]) -> Any:
            """Central differences of gradients along each coordinate, symmetrised (float64)."""
            flat = point.reshape(-1)
            h = _steps(flat, evaluator.precision.second_step)
            hessian = np.empty((flat.size, flat.size))
            for i in range(flat.size):
                xi = flat[i]
                flat[i] = xi + h[i]
                up = self._gradient(evaluator, point, values, None, "hessian").reshape(-1)
                flat[i] = xi - h[i]
                down = self._gradient(evaluator, point, values, None, "hessian").reshape(-1)
                flat[i] = xi
                hessian[:, i] = (up - down) / (2 * h[i])
            hessian = (hessian + hessian.T) / 2  # the exact Hessian is symmetric
            return hessian.reshape(point.shape + point.shape)

        def value_gradient_and_hessian(x: Any, *values: Any) -> Any:
            caller, point, values = evaluator.inputs(x, values)
            y0 = evaluator.scalar(point, values, "hessian")
            g = self._gradient(evaluator, point, values, y0)
            dtype = caller.dtype
            return np.asarray(y0, dtype=dtype), g.astype(dtype), hessian_at(point, values).astype(dtype)

        def hessian(x: Any, *values: Any) -> Any:
            caller, point, values = evaluator.inputs(x, values)
            if point.size == 0:
                evaluator.scalar(point, values, "hessian")  # no gradient evaluates f: check its output once
            return hessian_at(point, values).astype(caller.dtype)  # neither f(x) nor the gradient at x

        return evaluator.settled({"hessian": hessian, "value_gradient_and_hessian": value_gradient_and_hessian})

    def prepare_second_derivative_programs(
        self, f: Callable[..., Any], x: Any, contexts: Sequence[Context]
    ) -> Programs:
        evaluator = _Evaluator(self, f, x, contexts)

        def value_derivative_and_second_derivative(x: Any, *values: Any) -> Any:
            caller, point, values = evaluator.inputs(x, values)
            x0 = float(point)
            y0 = evaluator.array(point, values, "second_derivative")
            precision = evaluator.precision
            h1 = float(_steps(np.array([x0]), precision.first_step)[0])
            h2 = float(_steps(np.array([x0]), precision.second_step)[0])
            up1 = evaluator.array(np.asarray(x0 + h1), values, "second_derivative")
            down1 = evaluator.array(np.asarray(x0 - h1), values, "second_derivative")
            up2 = evaluator.array(np.asarray(x0 + h2), values, "second_derivative")
            down2 = evaluator.array(np.asarray(x0 - h2), values, "second_derivative")
            dtype = caller.dtype
            return (
                np.asarray(y0, dtype=dtype),
                np.asarray((up1 - down1) / (2 * h1), dtype=dtype),
                np.asarray((up2 - 2 * y0 + down2) / (h2 * h2), dtype=dtype),
            )

        def second_derivative(x: Any, *values: Any) -> Any:
            caller, point, values = evaluator.inputs(x, values)
            x0 = float(point)
            y0 = evaluator.array(point, values, "second_derivative")
            h2 = float(_steps(np.array([x0]), evaluator.precision.second_step)[0])
            up2 = evaluator.array(np.asarray(x0 + h2), values, "second_derivative")
            down2 = evaluator.array(np.asarray(x0 - h2), values, "second_derivative")
            return np.asarray((up2 - 2 * y0 + down2) / (h2 * h2), dtype=caller.dtype)  # no first derivative

        return evaluator.settled(
            {
                "second_derivative": second_derivative,
                "value_derivative_and_second_derivative": value_derivative_and_second_derivative,
            }
        )


def _mutable(value: Any) -> bool:
    """Whether ``value`` is an array the family lets ``f`` write into."""
    family = family_of(value)
    return family is None or get_family(family).mutable
