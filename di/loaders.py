"""Late binding: what a lower layer asks for and a higher layer provides.

The array-family registry (a low layer) must know the families the engines bring
before it first answers, but it may not import the engines (a higher layer).
``di/__init__.py``, which runs before any other module of ``di``, installs here the
function registering the engines and their families (:func:`set_engine_loader`);
the family registry calls it (:func:`load_engines`) once, the first time it is
asked. Likewise it installs ``di.array_namespace`` (:func:`set_array_namespace`),
with which the complex numbers' real view computes on the engines' values.
Nothing here imports anything.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["array_namespace", "load_engines", "set_array_namespace", "set_engine_loader"]

_ENGINE_LOADER: list[Callable[[], None]] = []


def set_engine_loader(loader: Callable[[], None]) -> None:
    """Make ``loader`` the function that registers the engines and the array
    families they bring.

    Args:
        loader: called with no argument by :func:`load_engines`.

    Returns:
        None.

    Raises:
        Nothing.

    Examples:
        >>> from di import loaders
        >>> previous = list(loaders._ENGINE_LOADER)
        >>> loaders.set_engine_loader(lambda: None)
        >>> loaders._ENGINE_LOADER[:] = previous
    """
    _ENGINE_LOADER[:] = [loader]


def load_engines() -> None:
    """Register the engines and their families, through the installed loader (none
    installed: nothing to do).

    Returns:
        None.

    Raises:
        Whatever the loader raises (a broken engine record).

    Examples:
        >>> from di import loaders
        >>> loaders.load_engines()
    """
    for loader in _ENGINE_LOADER:
        loader()


_NAMESPACE: list[Callable[..., Any]] = []


def set_array_namespace(function: Callable[..., Any]) -> None:
    """Make ``function`` (:func:`di.array_namespace`, a public name) the one that
    :func:`array_namespace` calls: the complex numbers' real view
    (:mod:`di.complex`), a lower layer, computes on the engines' traced values with it.

    Args:
        function: ``di.array_namespace``.

    Returns:
        None.

    Raises:
        Nothing.

    Examples:
        >>> import di
        >>> from di import loaders
        >>> loaders.set_array_namespace(di.array_namespace)
    """
    _NAMESPACE[:] = [function]


def array_namespace(*values: Any) -> Any:
    """The array namespace of ``values`` through the installed function
    (:func:`set_array_namespace`; ``di/__init__.py`` installs ``di.array_namespace``).

    Returns:
        The namespace to compute on ``values`` with.

    Raises:
        RuntimeError: none installed (``di`` itself was not imported).

    Examples:
        >>> import numpy as np, di
        >>> from di import loaders
        >>> loaders.array_namespace(np.zeros(2)).__name__
        'array_api_compat.numpy'
    """
    if not _NAMESPACE:
        raise RuntimeError("di.array_namespace is not installed: import di first")
    return _NAMESPACE[0](*values)
