"""Sparsity detection by tracing ``f`` with JAX (:class:`di.TracerSparsity`):
``f``, or its gradient, is traced once into a jaxpr, which
:mod:`di.sparse.jaxpr.interpreter` interprets with index sets.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from di.backends.compile import is_static_context
from di.contexts import Context
from di.errors import BackendNotInstalledError, InvalidInputError
from di.sparse.jaxpr.interpreter import interpret
from di.sparse.patterns import Detection, symmetrize

__all__ = ["hessian_pattern", "installed", "jacobian_pattern", "traced_pattern"]


def installed() -> bool:
    """Whether JAX, which this tracer reads programs with, is installed (nothing is imported)."""
    import importlib.util

    return importlib.util.find_spec("jax") is not None


def _traced(
    f: Callable[..., Any], x: Any, values: Sequence[Any], static: Sequence[bool], gradient: bool
) -> tuple[Any, int]:
    """``make_jaxpr`` of ``f`` (or of its gradient) with abstract ``x`` and contexts
    (static ones closed over), inside ``enable_x64`` when ``x`` is 64-bit."""
    import jax

    from di.families import is_64_bit

    x_dtype = np.float64 if is_64_bit(x.dtype) else np.float32
    shape = tuple(x.shape)
    traced_positions = [i for i, is_static in enumerate(static) if not is_static]

    def call(x: Any, *traced: Any) -> Any:
        arguments = list(values)
        for position, value in zip(traced_positions, traced):
            arguments[position] = value
        return f(x, *arguments)

    function = jax.grad(call) if gradient else call
    abstract = [jax.ShapeDtypeStruct(shape, x_dtype)]
    for position in traced_positions:
        abstract.append(_abstract(values[position], x_dtype))
    with jax.enable_x64(x_dtype == np.float64):
        return jax.make_jaxpr(function)(*abstract), math.prod(shape)


def _abstract(value: Any, x_dtype: Any) -> Any:
    import jax

    if isinstance(value, float):
        return jax.ShapeDtypeStruct((), x_dtype)
    if isinstance(value, bool):
        return jax.ShapeDtypeStruct((), np.bool_)
    if isinstance(value, int):
        return jax.ShapeDtypeStruct((), np.int64 if x_dtype == np.float64 else np.int32)
    name = str(getattr(value.dtype, "name", value.dtype)).rsplit(".", 1)[-1]  # without a library's prefix
    dtype = np.dtype(name.replace("bfloat16", "float32"))
    return jax.tree_util.tree_map(lambda leaf: jax.ShapeDtypeStruct(tuple(leaf.shape), dtype), value)


def jacobian_pattern(f: Callable[..., Any], x: Any, values: Sequence[Any], static: Sequence[bool]) -> Detection:
    """The Jacobian pattern of ``f(x, *values)``, ``(f(x).size, x.size)``.

    Args:
        f: the function.
        x: an array like the ones ``f`` will be called with (only its shape and
            dtype are used).
        values: the context values; the ``static`` ones are passed as they are,
            the others as abstract values.
        static: for each context, whether it is static (compiled in).

    Returns:
        The :class:`Detection`.

    Examples:
        >>> import numpy as np
        >>> from di.sparse.jaxpr import jacobian_pattern
        >>> f = lambda x: x[1:] * x[:-1]
        >>> jacobian_pattern(f, np.zeros(4), [], []).pattern.toarray().astype(int)
        array([[1, 1, 0, 0],
               [0, 1, 1, 0],
               [0, 0, 1, 1]])
    """
    closed, n = _traced(f, x, values, static, gradient=False)
    return interpret(closed, n)


def hessian_pattern(f: Callable[..., Any], x: Any, values: Sequence[Any], static: Sequence[bool]) -> Detection:
    """The Hessian pattern of a scalar ``f``: the Jacobian pattern of its gradient's
    program (``jax.grad``), made symmetric.

    Examples:
        >>> import numpy as np
        >>> from di.sparse.jaxpr import hessian_pattern
        >>> f = lambda x: (x[1:] * x[:-1]).sum() + (x ** 3).sum()
        >>> hessian_pattern(f, np.zeros(3), [], []).pattern.toarray().astype(int)
        array([[1, 1, 0],
               [1, 1, 1],
               [0, 1, 1]])
    """
    closed, n = _traced(f, x, values, static, gradient=True)
    detection = interpret(closed, n)
    return Detection(symmetrize(detection.pattern), detection.notes)


def traced_pattern(operator: str, f: Callable[..., Any], x: Any, contexts: Sequence[Context]) -> Detection:
    """:class:`di.TracerSparsity`: trace ``f`` through JAX, whatever the dense backend."""
    import importlib.util

    if importlib.util.find_spec("jax") is None:
        raise BackendNotInstalledError(
            "TracerSparsity reads f's pattern by tracing it with JAX, which is not installed.\n"
            "  pip install 'differentiation-interface[jax]'\n"
            "or pass sparsity=di.DenseSparsity() or di.KnownSparsity(pattern) to AutoSparse."
        )
    values = [c.value for c in contexts]
    static = [is_static_context(c) for c in contexts]
    detect = hessian_pattern if operator == "hessian" else jacobian_pattern
    try:
        return detect(f, x, values, static)
    except Exception as err:
        reason = (str(err).strip().splitlines() or [""])[0]
        raise InvalidInputError(
            f"TracerSparsity could not trace f with JAX ({type(err).__name__}: {reason}). It needs f written with "
            f"the array API (xp = di.array_namespace(x)) or jax.numpy, without writes into arrays or Python "
            f"branches on values. Pass sparsity=di.DenseSparsity() (nonzeros of dense {operator}s at random points) "
            f"or di.KnownSparsity(pattern) to AutoSparse instead."
        ) from err
