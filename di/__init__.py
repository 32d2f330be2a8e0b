"""di: one interface to automatic differentiation over JAX, PyTorch, autograd and
finite differences.

Examples:
    >>> import numpy as np, di
    >>> f = lambda x: (x ** 2).sum()
    >>> backend = di.AutoFiniteDiff()
    >>> prep = di.prepare_gradient(f, backend, np.zeros(3))
    >>> di.gradient(f, prep, backend, np.array([1.0, 2.0, 3.0])).round(6)
    array([2., 4., 6.])
"""

from di.backends.registry import register_backend
from di.backends.selectors import (
    AbstractBackend,
    AutoAutograd,
    AutoFastest,
    AutoFiniteDiff,
    AutoJAX,
    AutoSparse,
    AutoTorch,
    SecondOrder,
    available_backends,
    backend,
)
from di.backends.sparsity import DenseSparsity, KnownSparsity, SparsitySource, TracerSparsity
from di.contexts import Cache, Constant, Context
from di.errors import (
    BackendNotInstalledError,
    DIError,
    InvalidInputError,
    InvalidOutputError,
    OutBufferError,
    PreparationMismatchError,
    RecompileLimitError,
    RecompileWarning,
    UnsupportedContextError,
    UnsupportedOperatorError,
)
from di.families import Family, register_family
from di.namespace import array_namespace
from di.operators.derivative import derivative, prepare_derivative, value_and_derivative
from di.operators.gradient import gradient, prepare_gradient, value_and_gradient
from di.operators.hessian import hessian, prepare_hessian, value_gradient_and_hessian
from di.operators.hvp import gradient_and_hvp, hvp, prepare_hvp, prepare_hvp_same_point
from di.operators.jacobian import jacobian, prepare_jacobian, value_and_jacobian
from di.operators.pullback import prepare_pullback, prepare_pullback_same_point, pullback, value_and_pullback
from di.operators.pushforward import prepare_pushforward, pushforward, value_and_pushforward
from di.operators.second_derivative import (
    prepare_second_derivative,
    second_derivative,
    value_derivative_and_second_derivative,
)
from di.prep.base import Prep

__version__ = "0.1.0"

__all__ = [
    "AbstractBackend",
    "AutoAutograd",
    "AutoFastest",
    "AutoFiniteDiff",
    "AutoJAX",
    "AutoSparse",
    "AutoTorch",
    "BackendNotInstalledError",
    "Cache",
    "Constant",
    "Context",
    "DIError",
    "DenseSparsity",
    "Family",
    "InvalidInputError",
    "InvalidOutputError",
    "KnownSparsity",
    "OutBufferError",
    "Prep",
    "PreparationMismatchError",
    "RecompileLimitError",
    "RecompileWarning",
    "SecondOrder",
    "SparsitySource",
    "TracerSparsity",
    "UnsupportedContextError",
    "UnsupportedOperatorError",
    "array_namespace",
    "available_backends",
    "backend",
    "derivative",
    "gradient",
    "gradient_and_hvp",
    "hessian",
    "hvp",
    "jacobian",
    "prepare_derivative",
    "prepare_gradient",
    "prepare_hessian",
    "prepare_hvp",
    "prepare_hvp_same_point",
    "prepare_jacobian",
    "prepare_pullback",
    "prepare_pullback_same_point",
    "prepare_pushforward",
    "prepare_second_derivative",
    "register_backend",
    "register_family",
    "pullback",
    "pushforward",
    "second_derivative",
    "value_and_derivative",
    "value_and_gradient",
    "value_and_jacobian",
    "value_and_pullback",
    "value_and_pushforward",
    "value_derivative_and_second_derivative",
    "value_gradient_and_hessian",
]
