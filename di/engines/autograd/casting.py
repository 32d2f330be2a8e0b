"""A cast of autograd's boxes that autograd differentiates in both modes.

autograd's own ``astype`` has no forward-mode rule. :func:`cast` has both, and its
rules use the cast itself, so it nests (hvp, hessian). The array namespace ``f``
computes with (:mod:`.namespace`) answers it for ``astype``, and the adapter casts
a pytree's leaves with it when they are rebuilt in their own dtypes.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from autograd.extend import defjvp, defvjp, primitive
from autograd.tracer import getval

__all__ = ["astype", "cast"]


@primitive
def cast(x: Any, dtype: Any) -> Any:
    """``x`` (a box or an array) in ``dtype``, differentiably.

    Examples:
        >>> import numpy as np
        >>> from di.engines.autograd.casting import cast
        >>> cast(np.ones(2), np.float32).dtype
        dtype('float32')
    """
    return np.asarray(x).astype(dtype)


def _back(g: Any, x: Any) -> Any:
    """The cotangent of a cast of ``x``, in ``x``'s dtype: of a real ``x`` cast to
    complex, the real part (a cast would drop it with NumPy's ComplexWarning)."""
    dtype = np.result_type(x)
    if np.iscomplexobj(getval(g)) and not np.issubdtype(dtype, np.complexfloating):
        import autograd.numpy as anp

        g = anp.real(g)
    return cast(g, dtype)


defvjp(cast, lambda ans, x, dtype: lambda g: _back(g, x))
defjvp(cast, lambda g, ans, x, dtype: cast(g, dtype))


def astype(x: Any, dtype: Any, /, *, copy: bool = True, device: Any = None) -> Any:
    """The array API's ``astype`` over boxes: :func:`cast` for floating results;
    integer and boolean results carry no derivative.

    Examples:
        >>> import numpy as np
        >>> from di.engines.autograd.casting import astype
        >>> astype(np.array([1.5]), np.int64)
        array([1])
    """
    if not np.issubdtype(dtype, np.inexact):
        return np.asarray(getval(x)).astype(dtype)
    return cast(x, dtype)
