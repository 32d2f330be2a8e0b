"""di: one interface to automatic differentiation over JAX, PyTorch, autograd and
finite differences.

Example:
    >>> import numpy as np, di
    >>> f = lambda x: (x ** 2).sum()
    >>> backend = di.AutoFiniteDiff()
    >>> prep = di.prepare_gradient(f, backend, np.zeros(3))
    >>> di.gradient(f, prep, backend, np.array([1.0, 2.0, 3.0])).round(6)
    array([2., 4., 6.])
"""

from di.backends.selectors import (
    AbstractBackend,
    AutoAutograd,
    AutoFiniteDiff,
    AutoJAX,
    AutoTorch,
    available_backends,
    backend,
)
from di.contexts import Cache, Constant, Context
from di.errors import (
    BackendNotInstalledError,
    DIError,
    InvalidInputError,
    InvalidOutputError,
    OutBufferError,
    PreparationMismatchError,
    RecompileWarning,
    UnsupportedContextError,
    UnsupportedOperatorError,
)
from di.operators.gradient import gradient, prepare_gradient, value_and_gradient
from di.prep.base import Prep

__version__ = "0.1.0"

__all__ = [
    "AbstractBackend",
    "AutoAutograd",
    "AutoFiniteDiff",
    "AutoJAX",
    "AutoTorch",
    "BackendNotInstalledError",
    "Cache",
    "Constant",
    "Context",
    "DIError",
    "InvalidInputError",
    "InvalidOutputError",
    "OutBufferError",
    "Prep",
    "PreparationMismatchError",
    "RecompileWarning",
    "UnsupportedContextError",
    "UnsupportedOperatorError",
    "available_backends",
    "backend",
    "gradient",
    "prepare_gradient",
    "value_and_gradient",
]
