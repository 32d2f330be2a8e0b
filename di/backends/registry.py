"""Dispatch from selector type to adapter, with lazy imports.

Built-in adapters are registered by module path, so importing ``di`` imports no
engine; the adapter module (and its engine) is imported on first use. Third
parties register their own selector type with :func:`register_backend`.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from di.backends.selectors import AbstractBackend
from di.errors import BackendNotInstalledError, InvalidInputError

if TYPE_CHECKING:
    from di.backends.protocol import Adapter
    from di.prep.strategy import Strategy

__all__ = ["get_adapter", "get_strategy", "register_backend"]

_ADAPTER_PATHS: dict[type[AbstractBackend], str | type[Adapter]] = {}
"""Adapters registered with :func:`register_backend`; other selectors name theirs
(their ``adapter`` class attribute)."""
_ADAPTERS: dict[AbstractBackend, Adapter] = {}
_STRATEGIES: dict[type[AbstractBackend], Strategy | None] = {}


def register_backend(selector_type: type[AbstractBackend], adapter: str | type[Adapter]) -> None:
    """Register the adapter class for a selector type.

    Args:
        selector_type: a frozen dataclass deriving from :class:`di.AbstractBackend`.
        adapter: the :class:`~di.backends.protocol.Adapter` subclass, or its
            ``"module:Class"`` path to import lazily.

    Returns:
        None. Selectors of ``selector_type`` (and of its subclasses without an
        adapter of their own) are then served by ``adapter``.

    Raises:
        Nothing: a wrong ``adapter`` path fails when a selector is first used.

    Examples:
        >>> import dataclasses, di
        >>> from di.backends.registry import register_backend
        >>> from di.backends.finitediff import FiniteDiffAdapter
        >>> @dataclasses.dataclass(frozen=True)
        ... class MyFD(di.AbstractBackend):
        ...     pass
        >>> register_backend(MyFD, FiniteDiffAdapter)
    """
    _ADAPTER_PATHS[selector_type] = adapter
    _STRATEGIES.clear()
    for backend in [b for b in _ADAPTERS if type(b) is selector_type]:
        del _ADAPTERS[backend]


def get_adapter(backend: AbstractBackend) -> Adapter:
    """The adapter for a selector, importing its engine on first use.

    Raises:
        InvalidInputError: ``backend`` is not a backend selector.
        BackendNotInstalledError: the engine is not installed.
    """
    try:
        return _ADAPTERS[backend]
    except (KeyError, TypeError):
        pass
    if not isinstance(backend, AbstractBackend):
        raise _not_a_selector(backend)
    adapter_class = _load(backend)
    adapter = adapter_class(backend)
    _ADAPTERS[backend] = adapter
    return adapter


def get_strategy(backend: AbstractBackend) -> Strategy | None:
    """The strategy of a selector that wraps other backends (its ``strategy``
    class attribute, imported on first use), or ``None`` for an engine's selector.

    Raises:
        InvalidInputError: ``backend`` is not a backend selector.
        BackendNotInstalledError: an engine the strategy needs is not installed.

    Examples:
        >>> import di
        >>> from di.backends.registry import get_strategy
        >>> get_strategy(di.AutoFiniteDiff()) is None, get_strategy(di.SecondOrder()) is not None
        (True, True)
    """
    cls = type(backend)
    try:
        strategy = _STRATEGIES[cls]
    except KeyError:
        if not isinstance(backend, AbstractBackend):
            raise _not_a_selector(backend) from None
        path = _declared(cls, "strategy")
        strategy = _STRATEGIES[cls] = None if not isinstance(path, str) else _imported(path, backend)()
    if strategy is not None and not backend.is_installed:
        raise _not_installed(backend)
    return strategy


def _declared(cls: type[AbstractBackend], attribute: str) -> str | type[Adapter] | None:
    """The adapter (or strategy) nearest in ``cls``'s MRO: registered with
    :func:`register_backend`, or named by the class itself."""
    for base in cls.__mro__:
        registered = _ADAPTER_PATHS.get(base)
        if registered is not None:
            return registered if attribute == "adapter" else None
        declared = base.__dict__.get(attribute)
        if declared:
            return declared  # type: ignore[no-any-return]
    return None


def _load(backend: AbstractBackend) -> type[Adapter]:
    target = _declared(type(backend), "adapter")
    if target is None:
        raise InvalidInputError(
            f"no adapter is registered for {type(backend).__name__}; register one with di.register_backend"
        )
    if not isinstance(target, str):
        return target
    if not backend.is_installed:
        raise _not_installed(backend)
    adapter_class: type[Adapter] = _imported(target, backend)
    return adapter_class


def _imported(path: str, backend: AbstractBackend) -> Any:
    """The object at ``"module:name"``, importing the module (and its engine)."""
    module_name, _, name = path.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as err:
        raise _not_installed(backend) from err
    return getattr(module, name)


def _not_a_selector(backend: Any) -> InvalidInputError:
    return InvalidInputError(
        f"backend must be a backend selector such as di.AutoFiniteDiff() or di.backend('finitediff'), "
        f"not {type(backend).__name__}"
    )


def _not_installed(backend: AbstractBackend) -> BackendNotInstalledError:
    return BackendNotInstalledError(
        f"{type(backend).__name__} needs {backend.engine_display}, which is not installed.\n"
        f"  pip install 'differentiation-interface[{backend.extra}]'"
    )
