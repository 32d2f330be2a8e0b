"""``di.array_namespace``: the array namespace to write ``f`` with, once for every engine.

For NumPy, torch and JAX values (JAX tracers and ``torch.func``-wrapped tensors
included) it is array-api-compat's namespace. For autograd's traced values
(``ArrayBox``) array-api-compat returns ``autograd.numpy``, whose array-API names
(``concat``, ``vecdot``, ``cumulative_sum``, ...) are NumPy's functions that
autograd never learned to differentiate: they drop the boxes, and autograd
silently returns zeros. ``di`` returns instead a namespace mapping each
array-API name to what autograd differentiates (see ``di/_autograd_namespace.py``).

Nothing is imported at ``import di``: array-api-compat on the first call, the
autograd table only once an autograd value is seen (autograd is then already
imported: the value could not exist otherwise).
"""

from __future__ import annotations

import sys
from typing import Any

__all__ = ["array_namespace"]

_PYTHON_SCALARS = (bool, int, float, complex, type(None))


def array_namespace(*arrays: Any) -> Any:
    """The array-API namespace to compute with on ``arrays``, on every engine.

    Write ``f`` with it (``xp = di.array_namespace(x)``) and the same ``f`` runs,
    and is differentiated correctly, on NumPy arrays, torch tensors, JAX arrays and
    tracers, and autograd's traced values.

    Args:
        *arrays: the arrays ``f`` computes with (Python scalars are ignored).
            autograd's traced values may be mixed with NumPy arrays.

    Returns:
        array-api-compat's namespace for NumPy, torch and JAX values; for autograd's
        traced values, a namespace over ``autograd.numpy`` with the array API's
        names, each mapped to a function autograd differentiates.

    Raises:
        TypeError: no array among ``arrays``, an object that is not an array, or
            arrays of different libraries (as ``array_api_compat.array_namespace``).

    Examples:
        >>> import numpy as np, di
        >>> def f(x):
        ...     xp = di.array_namespace(x)
        ...     return xp.concat([xp.sin(x), x**2])
        >>> di.jacobian(f, di.AutoAutograd(), np.array([0.0, 1.0]))
        array([[1.        , 0.        ],
               [0.        , 0.54030231],
               [0.        , 0.        ],
               [0.        , 2.        ]])
        >>> di.array_namespace(np.zeros(2)).__name__
        'array_api_compat.numpy'
    """
    import array_api_compat

    try:
        namespace = array_api_compat.array_namespace(*arrays)
    except TypeError:  # autograd's values beside NumPy arrays, or an autograd without __array_namespace__
        if any(_is_autograd_box(value) for value in arrays):
            return _autograd_namespace(arrays)
        raise
    # autograd's values name autograd.numpy as their namespace: checked after the fact, so other
    # families pay one string comparison, which torch.compile and jax.jit trace for free.
    if getattr(namespace, "__name__", None) == _AUTOGRAD_NUMPY:
        return _autograd_namespace(arrays)
    return namespace


_AUTOGRAD_NUMPY = "autograd.numpy.numpy_wrapper"


def _is_autograd_box(value: Any) -> bool:
    tracer = sys.modules.get("autograd.tracer")
    return tracer is not None and isinstance(value, tracer.Box)


_AUTOGRAD: list[Any] = []  # the namespace, built on first use


def _autograd_namespace(arrays: tuple[Any, ...]) -> Any:
    others = [a for a in arrays if not isinstance(a, _PYTHON_SCALARS) and not _is_autograd_box(a)]
    if others:
        import array_api_compat

        if not all(array_api_compat.is_numpy_array(a) for a in others):
            kinds = sorted({type(a).__module__.split(".")[0] + "." + type(a).__name__ for a in others})
            raise TypeError(
                f"array_namespace: autograd's traced values mix only with NumPy arrays, not {', '.join(kinds)}"
            )
    if not _AUTOGRAD:
        from di._autograd_namespace import build_namespace

        _AUTOGRAD.append(build_namespace())
    return _AUTOGRAD[0]
