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
from di.contexts import Cache, Constant, Context
from di.errors import (
    BackendNotInstalledError,
    DIError,
    InvalidInputError,
    InvalidOptionError,
    InvalidOptionTypeError,
    InvalidOutputError,
    OutBufferError,
    PreparationMismatchError,
    RecompileLimitError,
    RecompileWarning,
    UnsupportedContextError,
    UnsupportedOperatorError,
)

if TYPE_CHECKING:
    from di.backends.registry import (
        register_backend,
    )
    from di.backends.selectors import (
        AbstractBackend,
        available_backends,
        backend,
        register_engine,
    )
    from di.engines.autograd.selector import AutoAutograd
    from di.engines.finitediff.selector import AutoFiniteDiff
    from di.engines.jax.selector import AutoJAX
    from di.engines.torch.selector import AutoTorch
    from di.families import (
        Family,
        register_family,
    )
    from di.fastest.selector import AutoFastest
    from di.mixing.core import (
        DifferentiateWith,
    )
    from di.namespace import (
        array_namespace,
    )
    from di.operators.derivative import (
        derivative,
        prepare_derivative,
        value_and_derivative,
    )
    from di.operators.gradient import (
        gradient,
        prepare_gradient,
        value_and_gradient,
    )
    from di.operators.hessian import (
        hessian,
        prepare_hessian,
        value_gradient_and_hessian,
    )
    from di.operators.hvp import (
        gradient_and_hvp,
        hvp,
        prepare_hvp,
        prepare_hvp_same_point,
    )
    from di.operators.jacobian import (
        jacobian,
        prepare_jacobian,
        value_and_jacobian,
    )
    from di.operators.pullback import (
        prepare_pullback,
        prepare_pullback_same_point,
        pullback,
        value_and_pullback,
    )
    from di.operators.pushforward import (
        prepare_pushforward,
        pushforward,
        value_and_pushforward,
    )
    from di.operators.second_derivative import (
        prepare_second_derivative,
        second_derivative,
        value_derivative_and_second_derivative,
    )
    from di.prep.base import (
        Prep,
    )
    from di.second_order.selector import SecondOrder
    from di.sparse.selector import AutoSparse
    from di.sparse.sources import (
        DenseSparsity,
        KnownSparsity,
        LocalTracerSparsity,
        SparsitySource,
        TracerSparsity,
    )

__version__ = "0.1.0"


def _register_engines() -> None:
    """Register the engines and the array families they bring: what the family
    registry, a lower layer, asks for before it first answers (:mod:`di.loaders`)."""
    from di.backends.registry import register_engine_families

    register_engine_families()


loaders.set_engine_loader(_register_engines)

_LAZY: dict[str, str] = {
    "register_backend": "di.backends.registry",
    "register_engine": "di.backends.selectors",
    "AbstractBackend": "di.backends.selectors",
    "AutoFastest": "di.fastest.selector",
    "AutoSparse": "di.sparse.selector",
    "SecondOrder": "di.second_order.selector",
    # the built-in engines' selectors: one line each, the one place outside an engine's folder naming it
    "AutoAutograd": "di.engines.autograd.selector",
    "AutoFiniteDiff": "di.engines.finitediff.selector",
    "AutoJAX": "di.engines.jax.selector",
    "AutoTorch": "di.engines.torch.selector",
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
costs next to nothing (and imports no engine)."""

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
    "DifferentiateWith",
    "Family",
    "InvalidInputError",
    "InvalidOptionError",
    "InvalidOptionTypeError",
    "InvalidOutputError",
    "KnownSparsity",
    "LocalTracerSparsity",
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
    "pullback",
    "pushforward",
    "register_backend",
    "register_engine",
    "register_family",
    "second_derivative",
    "value_and_derivative",
    "value_and_gradient",
    "value_and_jacobian",
    "value_and_pullback",
    "value_and_pushforward",
    "value_derivative_and_second_derivative",
    "value_gradient_and_hessian",
]


def __getattr__(name: str) -> Any:
    """A public name (or a subpackage) of ``di``, imported on its first use."""
    module = _LAZY.get(name)
    if module is None:
        try:
            return importlib.import_module(f"{__name__}.{name}")
        except ModuleNotFoundError:
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later lookups find it directly
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
