"""NumPy finite differences: central (default) or forward, evaluated in float64."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from di.backends.protocol import Adapter, Program, Programs, is_real_scalar, raise_bad_output
from di.backends.selectors import AutoFiniteDiff
from di.contexts import Cache, Context
from di.families import JAX, NUMPY, family_of

__all__ = ["FiniteDiffAdapter", "relative_step"]

_EPS = float(np.finfo(np.float64).eps)


def relative_step(selector: AutoFiniteDiff) -> float:
    """The relative step: the selector's, or eps**(1/3) (central) / eps**(1/2)
    (forward), which balance truncation and rounding error in float64."""
    if selector.step is not None:
        return float(selector.step)
    return _EPS ** (1 / 3) if selector.method == "central" else _EPS**0.5


class FiniteDiffAdapter(Adapter):
    """Adapter for :class:`di.AutoFiniteDiff`.

    ``f`` is evaluated on a float64 copy of ``x``; coordinate ``i`` moves by
    ``h_i = step * max(1, |x_i|)`` (rounded so that ``x_i + h_i`` is exact). Any
    ``f`` works: one evaluation per perturbed point, no batching assumptions.
    Results are cast back to ``x``'s dtype. ``Cache`` buffers are passed to ``f``
    as the caller's numpy memory (JAX caches as a writable copy).
    """

    family = NUMPY

    def prepare_value_and_gradient(self, f: Callable[..., Any], x: Any, contexts: Sequence[Context]) -> Program:
        return self._gradient_program(f, x, contexts, with_value=True)

    def prepare_gradient_programs(self, f: Callable[..., Any], x: Any, contexts: Sequence[Context]) -> Programs:
        return {
            "gradient": self._gradient_program(f, x, contexts, with_value=False),
            "value_and_gradient": self._gradient_program(f, x, contexts, with_value=True),
        }

    def _context_converters(self, contexts: Sequence[Context]) -> list[Callable[[Any], Any]]:
        converters = self.input_converters([c.value for c in contexts])
        for i, context in enumerate(contexts):
            if isinstance(context, Cache) and family_of(context.value) == JAX:
                converters[i] = lambda v: np.array(v, copy=True)
        return converters

    def _gradient_program(
        self, f: Callable[..., Any], x: Any, contexts: Sequence[Context], *, with_value: bool
    ) -> Program:
        assert isinstance(self.backend, AutoFiniteDiff)
        backend = self.backend
        central = backend.method == "central"
        step = relative_step(backend)
        to_numpy_x = self.input_converters([x])[0]
        convert_contexts = self._context_converters(contexts)

        def evaluate(point: Any, values: tuple[Any, ...]) -> float:
            y = f(point, *values)
            if not is_real_scalar(y):
                raise_bad_output(y, backend)
            return float(y)

        def run(x: Any, *values: Any) -> Any:
            caller = np.asarray(to_numpy_x(x))
            if values:
                values = tuple(convert(v) for convert, v in zip(convert_contexts, values))
            point = np.array(caller, dtype=np.float64, order="C")
            flat = point.reshape(-1)
            h = step * np.maximum(1.0, np.abs(flat))
            h = (flat + h) - flat  # exactly representable steps
            g = np.empty_like(flat)
            y0 = evaluate(point, values) if (with_value or not central) else 0.0
            for i in range(flat.size):
                xi = flat[i]
                flat[i] = xi + h[i]
                up = evaluate(point, values)
                if central:
                    flat[i] = xi - h[i]
                    down = evaluate(point, values)
                    g[i] = (up - down) / (2 * h[i])
                else:
                    g[i] = (up - y0) / h[i]
                flat[i] = xi
            if flat.size == 0 and not with_value and central:
                evaluate(point, values)  # still reject a bad f on empty x
            gradient = g.reshape(caller.shape).astype(caller.dtype, copy=False)
            if with_value:
                return np.asarray(y0, dtype=caller.dtype), gradient
            return gradient

        return run
