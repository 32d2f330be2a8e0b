"""Dispatch from selector type to adapter, with lazy imports.

Built-in adapters are registered by module path, so importing ``di`` imports no
engine; the adapter module (and its engine) is imported on first use. Third
parties register their own selector type with :func:`register_backend`.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from di.backends.selectors import AbstractBackend
from di.errors import BackendNotInstalledError, InvalidInputError

if TYPE_CHECKING:
    from di.backends.protocol import Adapter

__all__ = ["get_adapter", "register_backend"]

_ADAPTER_PATHS: dict[type[AbstractBackend], str | type[Adapter]] = {}
"""Adapters registered with :func:`register_backend`; other selectors name theirs
(their ``adapter`` class attribute)."""
_ADAPTERS: dict[AbstractBackend, Adapter] = {}


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
        raise InvalidInputError(
            f"backend must be a backend selector such as di.AutoFiniteDiff() or di.backend('finitediff'), "
            f"not {type(backend).__name__}"
        )
    adapter_class = _load(backend)
    adapter = adapter_class(backend)
    _ADAPTERS[backend] = adapter
    return adapter


def _load(backend: AbstractBackend) -> type[Adapter]:
    for cls in type(backend).__mro__:
        target = _ADAPTER_PATHS.get(cls) or getattr(cls, "__dict__", {}).get("adapter")  # type: ignore[arg-type]
        if target:
            break
    else:
        raise InvalidInputError(
            f"no adapter is registered for {type(backend).__name__}; use di.backends.register_backend"
        )
    if not isinstance(target, str):
        return target
    if not backend.is_installed:
        raise _not_installed(backend)
    module_name, _, class_name = target.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as err:
        raise _not_installed(backend) from err
    adapter_class: type[Adapter] = getattr(module, class_name)
    return adapter_class


def _not_installed(backend: AbstractBackend) -> BackendNotInstalledError:
    return BackendNotInstalledError(
        f"{type(backend).__name__} needs {backend.engine_display}, which is not installed.\n"
        f"  pip install 'differentiation-interface[{backend.extra}]'"
    )
