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

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from di import loaders
from di.contexts import Cache as Cache
from di.contexts import Constant as Constant
from di.contexts import Context as Context
from di.errors import BackendNotInstalledError as BackendNotInstalledError
from di.errors import DIError as DIError
from di.errors import DistributedError as DistributedError
from di.errors import InvalidInputError as InvalidInputError
from di.errors import InvalidOptionError as InvalidOptionError
from di.errors import InvalidOptionTypeError as InvalidOptionTypeError
from di.errors import InvalidOutputError as InvalidOutputError
from di.errors import OutBufferError as OutBufferError
from di.errors import PreparationMismatchError as PreparationMismatchError
from di.errors import RecompileLimitError as RecompileLimitError
from di.errors import RecompileWarning as RecompileWarning
from di.errors import UnsupportedContextError as UnsupportedContextError
from di.errors import UnsupportedOperatorError as UnsupportedOperatorError

# For type checkers, every other public name (the redundant alias marks a re-export). At run time
# each is imported on first use (_LAZY), and a built-in engine's selector is found through its
# engine's record: its one line here is, with its record's path in di/engines/__init__.py, the
# only mention of a built-in engine outside its folder.
if TYPE_CHECKING:
    from di.backends.registry import register_backend as register_backend
    from di.backends.selectors import AbstractBackend as AbstractBackend
    from di.backends.selectors import available_backends as available_backends
    from di.backends.selectors import backend as backend
    from di.backends.selectors import register_engine as register_engine
    from di.engines.autograd.selector import AutoAutograd as AutoAutograd
    from di.engines.finitediff.selector import AutoFiniteDiff as AutoFiniteDiff
    from di.engines.jax.selector import AutoJAX as AutoJAX
    from di.engines.mlx.selector import AutoMLX as AutoMLX
    from di.engines.pytensor.selector import AutoPyTensor as AutoPyTensor
    from di.engines.tensorflow.selector import AutoTensorFlow as AutoTensorFlow
    from di.engines.torch.selector import AutoTorch as AutoTorch
    from di.families import Family as Family
    from di.families import register_family as register_family
    from di.fastest.selector import AutoFastest as AutoFastest
    from di.mixing.core import DifferentiateWith as DifferentiateWith
    from di.namespace import array_namespace as array_namespace
    from di.operators.cache import cache_clear as cache_clear
    from di.operators.cache import cache_info as cache_info
    from di.operators.cache import caching as caching
    from di.operators.cache import set_cache as set_cache
    from di.operators.derivative import derivative as derivative
    from di.operators.derivative import prepare_derivative as prepare_derivative
    from di.operators.derivative import value_and_derivative as value_and_derivative
    from di.operators.gradient import gradient as gradient
    from di.operators.gradient import prepare_gradient as prepare_gradient
    from di.operators.gradient import value_and_gradient as value_and_gradient
    from di.operators.hessian import hessian as hessian
    from di.operators.hessian import prepare_hessian as prepare_hessian
    from di.operators.hessian import value_gradient_and_hessian as value_gradient_and_hessian
    from di.operators.hvp import gradient_and_hvp as gradient_and_hvp
    from di.operators.hvp import hvp as hvp
    from di.operators.hvp import prepare_hvp as prepare_hvp
    from di.operators.hvp import prepare_hvp_same_point as prepare_hvp_same_point
    from di.operators.jacobian import jacobian as jacobian
    from di.operators.jacobian import prepare_jacobian as prepare_jacobian
    from di.operators.jacobian import value_and_jacobian as value_and_jacobian
    from di.operators.pullback import prepare_pullback as prepare_pullback
    from di.operators.pullback import prepare_pullback_same_point as prepare_pullback_same_point
    from di.operators.pullback import pullback as pullback
    from di.operators.pullback import value_and_pullback as value_and_pullback
    from di.operators.pushforward import prepare_pushforward as prepare_pushforward
    from di.operators.pushforward import pushforward as pushforward
    from di.operators.pushforward import value_and_pushforward as value_and_pushforward
    from di.operators.second_derivative import prepare_second_derivative as prepare_second_derivative
    from di.operators.second_derivative import second_derivative as second_derivative
    from di.operators.second_derivative import (
        value_derivative_and_second_derivative as value_derivative_and_second_derivative,
    )
    from di.prep.base import Prep as Prep
    from di.second_order.selector import SecondOrder as SecondOrder
    from di.sparse.convert import from_scipy as from_scipy
    from di.sparse.convert import to_scipy as to_scipy
    from di.sparse.selector import AutoSparse as AutoSparse
    from di.sparse.sources import DenseSparsity as DenseSparsity
    from di.sparse.sources import KnownSparsity as KnownSparsity
    from di.sparse.sources import LocalTracerSparsity as LocalTracerSparsity
    from di.sparse.sources import SparsitySource as SparsitySource
    from di.sparse.sources import TracerSparsity as TracerSparsity

__version__ = "0.1.0"


def _register_engines() -> None:
    """Register the engines and the array families they bring: what the family
    registry, a lower layer, asks for before it first answers (:mod:`di.loaders`)."""
    from di.backends.registry import register_engine_families

    register_engine_families()


loaders.set_engine_loader(_register_engines)


def _array_namespace(*values: Any) -> Any:
    """``di.array_namespace``, imported when first asked: what the complex numbers'
    real view, a lower layer, computes on the engines' values with (:mod:`di.loaders`)."""
    from di.namespace import array_namespace

    return array_namespace(*values)


loaders.set_array_namespace(_array_namespace)

_LAZY: dict[str, str] = {
    "register_backend": "di.backends.registry",
    "register_engine": "di.backends.selectors",
    "AbstractBackend": "di.backends.selectors",
    "AutoFastest": "di.fastest.selector",
    "AutoSparse": "di.sparse.selector",
    "to_scipy": "di.sparse.convert",
    "from_scipy": "di.sparse.convert",
    "SecondOrder": "di.second_order.selector",
    "available_backends": "di.backends.selectors",
    "backend": "di.backends.selectors",
    "DenseSparsity": "di.sparse.sources",
    "KnownSparsity": "di.sparse.sources",
    "LocalTracerSparsity": "di.sparse.sources",
    "SparsitySource": "di.sparse.sources",
    "TracerSparsity": "di.sparse.sources",
    "Family": "di.families",
    "register_family": "di.families",
    "DifferentiateWith": "di.mixing.core",
    "array_namespace": "di.namespace",
    "cache_clear": "di.operators.cache",
    "cache_info": "di.operators.cache",
    "caching": "di.operators.cache",
    "set_cache": "di.operators.cache",
    "derivative": "di.operators.derivative",
    "prepare_derivative": "di.operators.derivative",
    "value_and_derivative": "di.operators.derivative",
    "gradient": "di.operators.gradient",
    "prepare_gradient": "di.operators.gradient",
    "value_and_gradient": "di.operators.gradient",
    "hessian": "di.operators.hessian",
    "prepare_hessian": "di.operators.hessian",
    "value_gradient_and_hessian": "di.operators.hessian",
    "gradient_and_hvp": "di.operators.hvp",
    "hvp": "di.operators.hvp",
    "prepare_hvp": "di.operators.hvp",
    "prepare_hvp_same_point": "di.operators.hvp",
    "jacobian": "di.operators.jacobian",
    "prepare_jacobian": "di.operators.jacobian",
    "value_and_jacobian": "di.operators.jacobian",
    "prepare_pullback": "di.operators.pullback",
    "prepare_pullback_same_point": "di.operators.pullback",
    "pullback": "di.operators.pullback",
    "value_and_pullback": "di.operators.pullback",
    "prepare_pushforward": "di.operators.pushforward",
    "pushforward": "di.operators.pushforward",
    "value_and_pushforward": "di.operators.pushforward",
    "prepare_second_derivative": "di.operators.second_derivative",
    "second_derivative": "di.operators.second_derivative",
    "value_derivative_and_second_derivative": "di.operators.second_derivative",
    "Prep": "di.prep.base",
}
"""Where each public name is defined: imported on first use, so that ``import di``
costs next to nothing (and imports no engine). The built-in engines' selectors are
not here: their records name them (:func:`di.backends.selectors.builtin_selectors`)."""


def _public_names() -> list[str]:
    """``di.__all__``: the errors and contexts imported above, the names of
    :data:`_LAZY` and the built-in engines' selectors (found when first asked, so
    that ``import di`` reads no engine record)."""
    from di.backends.selectors import builtin_selectors

    eager = [
        name
        for name, value in globals().items()
        if not name.startswith("_") and getattr(value, "__module__", None) in ("di.errors", "di.contexts")
    ]
    return sorted({*eager, *_LAZY, *builtin_selectors()})


def __getattr__(name: str) -> Any:
    """A public name (or a subpackage) of ``di``, imported on its first use."""
    module = _LAZY.get(name)
    if module is not None:
        value = getattr(importlib.import_module(module), name)
    elif name == "__all__":
        value = _public_names()
    elif name.startswith("__"):
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    else:
        try:
            return importlib.import_module(f"{__name__}.{name}")
        except ModuleNotFoundError:
            pass
        from di.backends.selectors import builtin_selectors

        value = builtin_selectors().get(name)
        if value is None:
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
    globals()[name] = value  # later lookups find it directly
    return value


def __dir__() -> list[str]:
    """``dir(di)``: what the module holds and every public name, imported or not
    (documentation tools list a module's members so)."""
    public = globals().get("__all__") or __getattr__("__all__")
    return sorted({*globals(), "__all__", *public})
