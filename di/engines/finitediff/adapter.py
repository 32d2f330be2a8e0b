"""NumPy finite differences: central (default) or forward, evaluated in float64
(:class:`FiniteDiffAdapter`).

First order differences ``f`` at each coordinate's step (or along a tangent);
second order takes central differences of these gradients (never forward over
forward, which loses accuracy), with the larger step. Any ``f`` works: one
evaluation per perturbed point, with no assumption that ``f`` broadcasts over a
batch. The steps and the precision they follow are :mod:`.steps`; the
evaluations of ``f`` at the perturbed points, :mod:`.evaluation`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from di.backends.capabilities import AUX_FAMILIES, Capabilities
from di.backends.protocol import Adapter, Program, Programs, resolved
from di.contexts import Cache, Context
from di.engines.finitediff.evaluation import Evaluator, read_only, shape_changed, writable
from di.engines.finitediff.selector import AutoFiniteDiff
from di.engines.finitediff.steps import coordinate_steps, directional_step, largest_magnitude
from di.families import converter, family_of, get_family

__all__ = ["FiniteDiffAdapter"]


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
        self, evaluator: Evaluator, point: Any, values: Sequence[Any], y0: float | None, operator: str = "gradient"
    ) -> Any:
        """Gradient of the scalar ``f`` at ``point`` (float64, modified and restored);
        ``operator`` names the call in the error about an unusable output of ``f``."""
        central = self.selector.method == "central"
        if not central and y0 is None:
            y0 = evaluator.scalar(point, values, operator)
        # float64's steps until an output was coarser (no per-thread lookup before)
        precision = evaluator.precision if evaluator.adapting else None
        eps, step = evaluator.float64 if precision is None else (precision.eps, precision.first_step)
        flat = writable(point).reshape(-1)
        # Python floats: indexing lists is cheaper than numpy scalars, and the
        # arithmetic is the same IEEE double arithmetic, so results are identical.
        coordinates, steps = flat.tolist(), coordinate_steps(flat, step).tolist()
        g = [0.0] * flat.size
        f, values = resolved(evaluator.f), tuple(values)  # (a cached prep's stand-in: f itself)
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
        evaluator = Evaluator(self, f, x, contexts, has_aux=has_aux)
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

    def _directional(self, evaluator: Evaluator, operator: str = "pushforward") -> Callable[..., Any]:
        """``directional(point, values, t, y0)``: the directional derivative of ``f``
        at ``point`` along ``t`` (float64), with the step and method decided here.
        ``y0``, ``f(point)``, is ``None`` when the caller did not need it (central
        differences do not use it)."""
        central, array = self.selector.method == "central", evaluator.array

        def directional(point: Any, values: Sequence[Any], t: Any, y0: Any) -> Any:
            t = np.asarray(t if t.__class__ is np.ndarray else converter(family_of(t), "numpy")(t), dtype=np.float64)
            scale = largest_magnitude(t)
            if scale == 0.0:  # (f's output's shape, at a point f may not write into)
                return np.zeros_like(array(read_only(np.array(point)), values, operator) if y0 is None else y0)
            h = directional_step(evaluator.precision.first_step, point, t, scale)
            step = h * t  # (once for both points: the same products, one array operation fewer)
            # np.asarray: a 0-d point +- h*t would otherwise be a numpy scalar. The last
            # evaluation's output needs no copy (nothing runs f after it: a buffer f
            # returns keeps its value); the first one's does when another follows.
            up = array(read_only(point + step), values, operator, copy=central)
            other = array(read_only(point - step), values, operator, copy=False) if central else y0
            if up.shape != other.shape:
                raise shape_changed(self.backend, operator, other.shape, up.shape)
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
        evaluator = Evaluator(self, f, x, contexts, has_aux=has_aux, operator="pushforward")
        central = self.selector.method == "central"
        directional = self._directional(evaluator)

        def make(with_value: bool) -> Program:
            # Central differences need no value at x: f is evaluated there only for
            # the value or aux the call returns.
            at_point = with_value or not central or has_aux

            def run(x: Any, tx: Sequence[Any], *values: Any) -> Any:
                # f sees x itself only where it is evaluated there; else x is only read here
                caller, point, values = evaluator.inputs(x, values, seen=at_point)
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
        evaluator = Evaluator(self, f, x, contexts, has_aux=has_aux, operator=operator)
        central = self.selector.method == "central"

        def jacobian_with_value(x: Any, values: Sequence[Any], with_value: bool) -> Any:
            """``((y, jacobian), aux)``; central differences without the value or aux
            leave ``f(x)`` unevaluated (``y`` is then ``None``)."""
            caller, point, values = evaluator.inputs(x, values)
            flat = writable(point).reshape(-1)
            at_point = with_value or not central or has_aux or flat.size == 0
            y0, aux = evaluator.array_at_point(caller, point, values, operator) if at_point else (None, None)
            steps = coordinate_steps(flat, evaluator.precision.first_step).tolist()
            # One row (an output of f's shape) per coordinate: contiguous writes, transposed
            # once at the end. Every output must have the first one's shape: numpy would
            # broadcast a one-element output into the row without a word.
            y_shape: Any = None if y0 is None else y0.shape
            rows: Any = None if y_shape is None else np.empty((flat.size, *y_shape))
            f, checked = resolved(evaluator.f), evaluator.checked_array  # (evaluator.array, a call fewer)
            # Python floats for the coordinates and steps, as in the gradient; the
            # second evaluation is used before f runs again: no copy.
            for i, (xi, hi) in enumerate(zip(flat.tolist(), steps)):
                flat[i] = xi + hi
                up = checked(f(point, *values), operator, central)
                if up.shape != y_shape:
                    if y_shape is not None:
                        raise shape_changed(self.backend, operator, y_shape, up.shape)
                    y_shape = up.shape  # the first evaluation tells f's output shape
                    rows = np.empty((flat.size, *y_shape))
                if central:
                    flat[i] = xi - hi
                    down = checked(f(point, *values), operator, False)
                    if down.shape != y_shape:
                        raise shape_changed(self.backend, operator, y_shape, down.shape)
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
        evaluator = Evaluator(self, f, x, contexts, operator="hvp")

        def products(caller: Any, point: Any, values: Sequence[Any], tx: Sequence[Any]) -> tuple[Any, ...]:
            """Central differences of gradients along each tangent (the gradient at
            ``point`` itself is not needed)."""
            results, evaluated = [], False
            for t in tx:
                t = np.asarray(converter(family_of(t), "numpy")(t), dtype=np.float64)
                scale = largest_magnitude(t)
                if scale == 0.0:
                    results.append(np.zeros(point.shape, dtype=caller.dtype))
                    continue
                h = directional_step(evaluator.precision.second_step, point, t, scale)
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

        return evaluator.reading(evaluator.settled({"hvp": hvp, "gradient_and_hvp": gradient_and_hvp}))

    def prepare_hessian_programs(self, f: Callable[..., Any], x: Any, contexts: Sequence[Context]) -> Programs:
        evaluator = Evaluator(self, f, x, contexts, operator="hessian")

        def hessian_at(point: Any, values: Sequence[Any]) -> Any:
            """Central differences of gradients along each coordinate, symmetrised (float64)."""
            flat = writable(point).reshape(-1)
            h = coordinate_steps(flat, evaluator.precision.second_step)
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

        return evaluator.reading(
            evaluator.settled({"hessian": hessian, "value_gradient_and_hessian": value_gradient_and_hessian})
        )

    def prepare_second_derivative_programs(
        self, f: Callable[..., Any], x: Any, contexts: Sequence[Context]
    ) -> Programs:
        evaluator = Evaluator(self, f, x, contexts, operator="second_derivative")

        def value_derivative_and_second_derivative(x: Any, *values: Any) -> Any:
            caller, point, values = evaluator.inputs(x, values)
            x0 = float(point)
            y0 = evaluator.array(point, values, "second_derivative")
            precision = evaluator.precision
            h1 = float(coordinate_steps(np.array([x0]), precision.first_step)[0])
            h2 = float(coordinate_steps(np.array([x0]), precision.second_step)[0])
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
            h2 = float(coordinate_steps(np.array([x0]), evaluator.precision.second_step)[0])
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
