"""Arrays handed from one engine to another (:func:`handover`), for reading only:
by DLPack between two libraries that speak it, as NumPy views where NumPy is the
target or the inner engine takes NumPy (:func:`numpy_view`), else through the
family hub."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from di.families import converter, family_of, get_family, identity
from di.pytrees import is_pytree, tree_map

__all__ = ["handover", "numpy_view", "to_family", "views"]


def handover(value: Any, family: str) -> Any:
    """An array of any family as an array of ``family``, for reading only: by
    DLPack between two libraries that speak it (zero-copy where they allow it),
    as a NumPy view when NumPy is the target, else through the family hub. The
    conversion is chosen once per class of ``value`` (it runs on every call).

    Examples:
        >>> import numpy as np
        >>> from di.mixing.calls import handover
        >>> a = np.ones(2)
        >>> handover(a, "numpy") is a
        True
    """
    key = (value.__class__, family)
    convert = _HANDOVERS.get(key)
    if convert is None:
        convert = _HANDOVERS[key] = _handover(family_of(value), family)
    return convert(value)


_HANDOVERS: dict[tuple[type, str], Callable[[Any], Any]] = {}


def _handover(source: str | None, family: str) -> Callable[[Any], Any]:
    if source is None or source == family:
        return identity
    hub = converter(source, family)
    if source == "numpy":
        return hub
    shared = get_family(source).dlpack_source
    if family == "numpy":

        def view(value: Any) -> Any:
            try:
                return np.asarray(shared(value))
            except (TypeError, RuntimeError):  # an array on an accelerator: the hub copies it to the host
                return hub(value)

        return view
    target = get_family(family)
    from_dlpack = target.namespace().from_dlpack

    def by_dlpack(value: Any) -> Any:
        try:
            with target.scope((value.dtype,)):  # JAX keeps 64-bit dtypes only inside its x64 scope
                return from_dlpack(shared(value))
        except (TypeError, ValueError, RuntimeError, BufferError, AttributeError):
            return hub(value)  # a library or a layout DLPack does not take: the hub copies

    return by_dlpack


def numpy_view(value: Any, family: str) -> Any:
    """An array as a zero-copy NumPy view where its library gives one (a CPU array),
    else as an array of ``family`` (:func:`handover`): what a host hands an inner
    engine whose linearization takes NumPy (:meth:`~di.mixing.core.Host.linearizes_numpy`).

    Examples:
        >>> import numpy as np
        >>> from di.mixing.calls import numpy_view
        >>> a = np.ones(2)
        >>> numpy_view(a, "numpy") is a
        True
    """
    if value.__class__ is np.ndarray:
        return value
    view = _VIEWS.get(value.__class__)
    if view is None:
        source = family_of(value)
        view = _VIEWS[value.__class__] = identity if source is None else _numpy_view(get_family(source).dlpack_source)
    result = view(value)
    return handover(value, family) if result is None else result


_VIEWS: dict[type, Callable[[Any], Any]] = {}


def _numpy_view(shared: Callable[[Any], Any]) -> Callable[[Any], Any]:
    def view(value: Any) -> Any:
        try:
            return np.asarray(shared(value))
        except (TypeError, RuntimeError, ValueError, BufferError):  # an accelerator's array, a dtype NumPy lacks
            return None

    return view


def to_family(value: Any, family: str) -> Any:
    """A context value for ``f``: arrays (and the array leaves of pytrees) in ``family``."""
    return _arrays_as(value, family, handover)


def views(value: Any, family: str) -> Any:
    """A context value for a linearization that takes NumPy: arrays (and the array
    leaves of pytrees) as :func:`numpy_view` gives them."""
    return _arrays_as(value, family, numpy_view)


def _arrays_as(value: Any, family: str, convert: Callable[[Any, str], Any]) -> Any:
    """``value`` with ``convert(array, family)`` for it, if an array, or for each array
    leaf of it, if a pytree."""
    if family_of(value) is not None:
        return convert(value, family)
    if is_pytree(value):
        return tree_map(lambda leaf: convert(leaf, family) if family_of(leaf) is not None else leaf, value)
    return value
