"""Values a prep sees through: an engine's traced values that are no array of a
family (autograd's boxes), compared by the array inside, and NumPy arrays of a
subclass, compared as the plain ``ndarray`` the engines compute with.

An engine registers the class of its traced values (:func:`register_traced_type`)
when its adapter is imported; a value of a class nobody registered has the adapters
of its top-level package imported through the loader the backend registry sets
(:func:`set_traced_type_loader`), once per package.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from di.families import family_of, get_family
from di.pytrees import is_pytree, traced_by, tree_flatten, tree_map

__all__ = [
    "TracedType",
    "concrete",
    "plain",
    "register_traced_type",
    "set_traced_type_loader",
    "traced_type",
    "tracing",
]


class TracedType:
    """A class of values an engine traces in place of arrays, which is no array
    family's (autograd's boxes wrap NumPy arrays): registered by the engine's
    adapter (:func:`register_traced_type`), so that ``x`` may be one where that
    engine runs, a strict prep matches it by the array inside, and other engines
    refuse it up front.

    Args:
        cls: the class of the traced values.
        engine: the name of the engine that can take them (its record's).
        transform: the transform that makes them, as a user writes it.
        value: the concrete array inside a traced value.
    """

    __slots__ = ("cls", "engine", "transform", "value")

    def __init__(self, cls: type, engine: str, transform: str, value: Callable[[Any], Any]) -> None:
        self.cls, self.engine, self.transform, self.value = cls, engine, transform, value


_TRACED_TYPES: dict[type, TracedType] = {}
_TRACER_LOADER: list[Callable[[str], None]] = []
"""The function importing the adapters that trace a top-level package's values
(set by the backend registry, a higher layer: :func:`set_traced_type_loader`)."""
_LOOKED_UP: set[str] = set()
"""The top-level packages the loader was asked about (each once)."""


def register_traced_type(traced: TracedType) -> None:
    """Make ``traced.cls`` known as an engine's traced values (an adapter does it
    when its module is imported)."""
    _TRACED_TYPES[traced.cls] = traced


def set_traced_type_loader(loader: Callable[[str], None]) -> None:
    """Set the function that, given a top-level package (``"mylib"``), imports the
    adapters of the engines tracing its values, which register their traced types
    as they are imported; packages already looked up are looked up again."""
    _TRACER_LOADER[:] = [loader]
    _LOOKED_UP.clear()


def traced_type(value: Any) -> TracedType | None:
    """The registered :class:`TracedType` of ``value``, or ``None``.

    A class nobody registered, of a package whose engine's adapter was not
    imported yet (an outer transform of that engine around a call of another
    backend), has that adapter imported, once per package, and is looked up
    again: this slow path runs only for values of no array family."""
    traced = _TRACED_TYPES.get(value.__class__)
    if traced is None and _TRACER_LOADER:
        return _discovered(value)
    return traced


def _discovered(value: Any) -> TracedType | None:
    cls = value.__class__
    package = str(getattr(cls, "__module__", None) or "").partition(".")[0]
    if not package or package in _LOOKED_UP or family_of(value) is not None:
        return None
    try:
        _TRACER_LOADER[0](package)
    finally:  # (after: another thread asking meanwhile imports too, which waits for this import)
        _LOOKED_UP.add(package)
    return _TRACED_TYPES.get(cls)


def concrete(value: Any) -> Any:
    """``value``, or the array inside a registered traced value, or a NumPy
    array of a subclass as a plain ``ndarray`` (:func:`plain`)."""
    traced = traced_type(value)
    return plain(value) if traced is None else traced.value(value)


def plain(value: Any) -> Any:
    """``value`` with its NumPy arrays of a subclass that NumPy's family takes as
    they are (``np.memmap``, not the masked arrays and matrices it refuses) seen
    as plain ``np.ndarray``s (views, no copy), a pytree's leaves too: a strict
    prep records and compares them so, as the arrays the engines compute with, so
    that a prep made with an ndarray serves a memmap of that shape and dtype, and
    the reverse. Anything else is returned as it is.

    Examples:
        >>> import numpy as np
        >>> from di.prep.traced import plain
        >>> class Tagged(np.ndarray):
        ...     pass
        >>> type(plain(np.zeros(2).view(Tagged))).__name__, type(plain({"w": np.zeros(2).view(Tagged)})["w"]).__name__
        ('ndarray', 'ndarray')
    """
    if value.__class__ is np.ndarray:
        return value
    if isinstance(value, np.ndarray):
        return value.view(np.ndarray) if _plain_subclass(value) else value
    try:
        if not (is_pytree(value) and any(_plain_subclass(leaf) for leaf in tree_flatten(value)[0])):
            return value
    except (RecursionError, ValueError, TypeError):  # (one that cannot be flattened: its own check says why)
        return value
    return tree_map(lambda leaf: leaf.view(np.ndarray) if _plain_subclass(leaf) else leaf, value)


def _plain_subclass(value: Any) -> bool:
    """Whether ``value`` is a NumPy array of a subclass that NumPy's own family
    takes as it is (no family of its own, no refusal)."""
    return (
        isinstance(value, np.ndarray)
        and value.__class__ is not np.ndarray
        and family_of(value) == "numpy"
        and not get_family("numpy").refusal(value, "x")
    )


def tracing(value: Any) -> tuple[str, str]:
    """``(transform, owner)`` for a value traced by an engine transform (or a
    pytree with such a leaf): the transform as a user writes it, and what can
    take the value, an array family's name (the engine computing in it) or a
    registered engine's; ``("", "")`` for concrete values."""
    traced = traced_type(value)
    if traced is not None:
        return traced.transform, traced.engine
    transform = traced_by(value)
    if not transform:
        return "", ""
    family = family_of(value)
    if family is None:
        family = next(family_of(leaf) for leaf in tree_flatten(value)[0] if family_of(leaf) is not None)
    return transform, str(family)
