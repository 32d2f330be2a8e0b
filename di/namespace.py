"""``di.array_namespace``: the array namespace to write ``f`` with, once for every engine.

For most values (NumPy arrays, torch tensors, JAX arrays and tracers) it is
array-api-compat's namespace. An engine whose traced values array-api-compat
maps to a namespace the engine cannot differentiate declares, in its record
(:class:`~di.backends.engine.NamespaceOverride`), the namespace ``di`` answers
instead (autograd's boxes get one whose functions autograd differentiates). The
records are read on the first call that may need them, importing no engine
(before any engine is registered, a value of a namespace no built-in engine
replaces is answered without them: a ``torch.compile`` trace cannot follow their
loading); the replacement namespace is built on first use, once its engine is
loaded (a traced value could not exist before).

Pytrees (a dict of parameters, a list of arrays, a dataclass registered with
``optree``) get the namespace of their array leaves.
"""

from __future__ import annotations

import importlib
import sys
from typing import TYPE_CHECKING, Any

from di.engines import BUILTIN_REPLACED_NAMESPACES
from di.errors import InvalidInputError, type_label

if TYPE_CHECKING:
    from di.backends.engine import Engine

__all__ = ["array_namespace"]

_PYTHON_SCALARS = (bool, int, float, complex, type(None))


class _Override:
    """The namespace ``di`` answers for one engine's traced values."""

    __slots__ = ("_build", "_built", "_traced", "_traced_class", "mixes_with")

    def __init__(self, build: str, traced: str, mixes_with: str) -> None:
        self._build, self._traced, self.mixes_with = build, traced, mixes_with
        self._built: Any = None
        self._traced_class: type | None = None

    def namespace(self) -> Any:
        if self._built is None:
            module, _, function = self._build.partition(":")
            self._built = getattr(importlib.import_module(module), function)()
        return self._built

    def is_traced(self, value: Any) -> bool:
        """Whether ``value`` is one of the engine's traced values (the engine is
        loaded whenever such a value exists: nothing is imported)."""
        traced_class = self._traced_class
        if traced_class is None:
            module_name, _, class_name = self._traced.partition(":")
            module = sys.modules.get(module_name)
            if module is None:
                return False
            traced_class = self._traced_class = getattr(module, class_name)
        return isinstance(value, traced_class)


_OVERRIDES: dict[str, _Override] = {}
"""The overrides by the name of the namespace each replaces; filled on the first
call (:func:`_overrides`) and on each registration of an engine since."""
_overrides_read = False


def _overrides() -> dict[str, _Override]:
    """:data:`_OVERRIDES`, reading the engines' records the first time."""
    global _overrides_read
    if not _overrides_read:
        from di.backends.selectors import engines, on_engine_registered

        for engine in engines():
            _add_override(engine)
        on_engine_registered(_add_override)
        _overrides_read = True
    return _OVERRIDES


def _overrides_if_registered() -> dict[str, _Override] | None:
    """:func:`_overrides` once an engine is registered, else ``None``: the records
    are loaded under a lock, which a ``torch.compile`` trace of ``f`` (dynamo)
    cannot follow, and until then no namespace but the built-in engines'
    (:data:`~di.engines.BUILTIN_REPLACED_NAMESPACES`) can be replaced."""
    from di.backends.selectors import builtin_loaded

    return _overrides() if builtin_loaded() else None


def _add_override(engine: Engine) -> None:
    override = engine.namespace
    if override is not None:
        _OVERRIDES[override.replaces] = _Override(override.build, override.traced, override.mixes_with)
        _BY_CLASS.clear()  # (a class met before may have the new engine's namespace)


def array_namespace(*arrays: Any) -> Any:
    """The array-API namespace to compute with on ``arrays``, on every engine.

    Write ``f`` with it (``xp = di.array_namespace(x)``) and the same ``f`` runs,
    and is differentiated correctly, on NumPy arrays, torch tensors, JAX arrays and
    tracers, and autograd's traced values.

    Args:
        *arrays: the arrays ``f`` computes with (Python scalars are ignored), or
            pytrees of arrays (a dict of parameters): their array leaves count.
            autograd's traced values may be mixed with NumPy arrays.

    Returns:
        array-api-compat's namespace for NumPy, torch and JAX values; for autograd's
        traced values, a namespace over ``autograd.numpy`` with the array API's
        names, each mapped to a function autograd differentiates.

    Raises:
        TypeError: no array among ``arrays``, an object that is not an array, or
            arrays of different libraries (as ``array_api_compat.array_namespace``);
            :class:`di.InvalidInputError` (a ``TypeError``) for a pytree without
            array leaves or with leaves of several libraries.

    Examples:
        >>> import numpy as np, di
        >>> def f(x):
        ...     xp = di.array_namespace(x)
        ...     return xp.concat([xp.sin(x), x**2])
        >>> di.jacobian(f, di.AutoAutograd(), np.array([0.0, 1.0]))
        array([[1.        , 0.        ],
               [0.        , 0.54030231],
               [0.        , 0.        ],
               [0.        , 2.        ]])
        >>> di.array_namespace(np.zeros(2)).__name__
        'array_api_compat.numpy'
        >>> di.array_namespace({"w": np.zeros(2), "b": np.zeros(())}).__name__
        'array_api_compat.numpy'
    """
    if len(arrays) == 1:
        # One array's namespace by its class, once: array-api-compat's lookup goes through
        # functools.lru_cache'd helpers, which torch.compile warns about each time it traces
        # f (four "lru_cache" warnings a process); a dictionary lookup it traces silently.
        known = _BY_CLASS.get(arrays[0].__class__)
        if known is not None:
            return known
    import array_api_compat

    overrides = _OVERRIDES if _overrides_read else _overrides_if_registered()
    try:
        namespace = array_api_compat.array_namespace(*arrays)
    except TypeError:  # traced values beside NumPy arrays, a pytree, or no array at all
        for override in (_overrides() if overrides is None else overrides).values():
            if any(override.is_traced(value) for value in arrays):
                return _checked_mix(override, arrays)
        if any(_is_container(value) for value in arrays):
            return _tree_namespace(arrays)
        raise
    # Checked after the fact, so that most families pay one lookup, which
    # torch.compile and jax.jit trace for free.
    name = getattr(namespace, "__name__", "")
    unread = overrides is None  # no engine registered yet: only a built-in one's replacement could apply
    if overrides is None:
        overrides = _overrides() if name in BUILTIN_REPLACED_NAMESPACES else _OVERRIDES
    replaced = overrides.get(name)
    if replaced is not None:
        return _checked_mix(replaced, arrays)
    # (not remembered before the records are read: an engine registered later may replace it)
    if len(arrays) == 1 and not unread and len(_BY_CLASS) < 256 and not _is_container(arrays[0]):
        _BY_CLASS[arrays[0].__class__] = namespace
    return namespace


_BY_CLASS: dict[type, Any] = {}
"""The namespace of a single array of each class met (none whose namespace an engine
replaces: those are checked at every call)."""


def _checked_mix(override: _Override, arrays: tuple[Any, ...]) -> Any:
    """The override's namespace, once the values beside the traced ones are of
    the family they may be mixed with."""
    others = [a for a in arrays if not isinstance(a, _PYTHON_SCALARS) and not override.is_traced(a)]
    if others and override.mixes_with:
        from di.families import family_of, get_family

        if not all(family_of(a) == override.mixes_with for a in others):
            kinds = sorted({type_label(a) for a in others})
            raise TypeError(
                f"array_namespace: these traced values mix only with {get_family(override.mixes_with).display} "
                f"arrays, not {', '.join(kinds)}"
            )
    return override.namespace()


def _is_container(value: Any) -> bool:
    """Whether ``optree`` takes ``value`` as a container, whose leaves are then the
    arrays: a dict, list or tuple, or a namedtuple, dataclass or other class
    registered with ``optree`` (asked only once array-api-compat refused it)."""
    if isinstance(value, (dict, list, tuple)):
        return True
    if isinstance(value, _PYTHON_SCALARS):
        return False
    from di.pytrees import tree_flatten

    return not tree_flatten(value)[1].is_leaf()


def _tree_namespace(arrays: tuple[Any, ...]) -> Any:
    """The namespace of the array leaves of pytree arguments, all of one library."""
    from di.pytrees import tree_leaves

    leaves = [leaf for value in arrays for leaf in tree_leaves(value) if not isinstance(leaf, _PYTHON_SCALARS)]
    if not leaves:
        raise InvalidInputError(
            "array_namespace needs arrays, or pytrees (dicts, lists, tuples, dataclasses registered with optree) "
            "whose leaves are arrays; these hold no array. Pass x itself, or a container of its arrays."
        )
    try:
        return array_namespace(*leaves)
    except TypeError as err:
        kinds = sorted({type_label(leaf) for leaf in leaves})
        raise InvalidInputError(
            f"array_namespace: the leaves of a pytree must be arrays of one library; these are {', '.join(kinds)} "
            f"({err}). Convert them to one library, or call it on one array."
        ) from err
