"""Sparsity detection by running ``f`` on traced arrays of the array API
(:mod:`di.sparse.arrays.tracer`, :mod:`di.sparse.arrays.namespace`), without JAX:
the global pattern (``TracerSparsity(method="arrays")``, values of ``x`` unknown)
or the local one (:class:`di.LocalTracerSparsity`, at the preparation point).
Hessians keep second-order sets, so their patterns are exact for partially
separable functions.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import scipy.sparse as sp

from di.backends.compile import is_static_context
from di.contexts import Context
from di.errors import DIError, InvalidInputError
from di.families import converter, family_of
from di.sparse.arrays import extensions as _extensions  # noqa: F401 (sets the namespace and its extensions)
from di.sparse.arrays.tracer import Tape, Traced
from di.sparse.patterns import Detection, canonical, symmetrize

__all__ = ["array_pattern"]


def _to_numpy(value: Any) -> Any:
    family = family_of(value)
    return value if family in (None, "numpy") else converter(family, "numpy")(value)


def _input(x: Any, tape: Tape) -> Traced:
    value = np.asarray(_to_numpy(x))
    n = value.size
    identity = sp.csr_array(sp.identity(n, dtype=np.bool_, format="csr"))
    return Traced(value, identity, None, False, tape)


def _context(context: Context, tape: Tape) -> Any:
    """Static contexts as they are; the others (numbers and arrays) as values
    without dependencies, unknown to the global tracer (its pattern holds for
    every context value: an index among them reads the whole indexed array)."""
    value = context.value
    if is_static_context(context):
        return value
    array = _to_numpy(value)
    if isinstance(array, (int, float, np.ndarray, np.generic)):
        return Traced(np.asarray(array), None, None, tape.local, tape)
    return value


def array_pattern(
    operator: str, f: Callable[..., Any], x: Any, contexts: Sequence[Context], *, local: bool
) -> Detection:
    """The Jacobian (``(f(x).size, x.size)``) or Hessian (``(x.size, x.size)``)
    pattern of ``f`` at ``x`` by the array-API tracer.

    Args:
        operator: ``"jacobian"`` or ``"hessian"``.
        f: the function, written with ``xp = di.array_namespace(x)``.
        x: the point (its values matter only when ``local``).
        contexts: the contexts.
        local: the pattern at ``x`` (branches taken as at ``x``) rather than for every ``x``.

    Returns:
        The :class:`~di.sparse.patterns.Detection` (``output``: a NumPy array shaped
        and typed like ``f(x)``).

    Raises:
        InvalidInputError: ``f`` cannot be followed (a branch on values of ``x``
            for the global pattern, a write into an array, a NumPy function on ``x``).

    Examples:
        >>> import numpy as np, di
        >>> from di.sparse.arrays import array_pattern
        >>> def f(x):
        ...     xp = di.array_namespace(x)
        ...     return xp.sum(x[1:] * x[:-1]) + xp.sum(xp.sin(x[:2]))
        >>> array_pattern("hessian", f, np.ones(4), [], local=False).pattern.toarray().astype(int)
        array([[1, 1, 0, 0],
               [1, 1, 1, 0],
               [0, 1, 0, 1],
               [0, 0, 1, 0]])
    """
    n = math.prod(tuple(x.shape))
    tape = Tape(n, second_order=operator == "hessian", local=local)
    try:
        y = f(_input(x, tape), *[_context(c, tape) for c in contexts])
    except DIError:
        raise
    except Exception as err:
        reason = (str(err).strip().splitlines() or [""])[0]
        kind = "LocalTracerSparsity" if local else "TracerSparsity"
        raise InvalidInputError(
            f"{kind} could not follow f on traced arrays ({type(err).__name__}: {reason}). It needs f written with "
            f"the array API (xp = di.array_namespace(x)), without writes into arrays. Pass "
            f"sparsity=di.DenseSparsity() or di.KnownSparsity(pattern) to AutoSparse instead."
        ) from err
    if not isinstance(y, Traced):
        y = Traced(np.asarray(y), None, None, True, tape)
    output = np.zeros(y.shape, dtype=y.dtype)
    if operator == "hessian":
        pairs = sp.csr_array((1, n * n), dtype=np.bool_) if y.second is None else y.second
        columns = sp.csr_array(pairs).indices.astype(np.int64)
        rows, cols = np.divmod(columns, max(n, 1))
        data = np.ones(rows.size, dtype=np.bool_)
        pattern = canonical(sp.csr_array((data, (rows, cols)), shape=(n, n)))
        return Detection(symmetrize(pattern), list(tape.notes), output)
    first = sp.csr_array((y.size, n), dtype=np.bool_) if y.first is None else y.first
    return Detection(canonical(first), list(tape.notes), output)
