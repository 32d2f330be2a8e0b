"""Late binding: what a lower layer asks for and a higher layer provides.

The array-family registry (a low layer) must know the families the engines bring
before it first answers, but it may not import the engines (a higher layer).
``di/__init__.py``, which runs before any other module of ``di``, installs here the
function registering the engines and their families (:func:`set_engine_loader`);
the family registry calls it (:func:`load_engines`) once, the first time it is
asked. Nothing here imports anything.
"""

from __future__ import annotations

from collections.abc import Callable

__all__ = ["load_engines", "set_engine_loader"]

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
