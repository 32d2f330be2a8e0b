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


defvjp(cast, lambda ans, x, dtype: lambda g: cast(g, np.result_type(x)))
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
