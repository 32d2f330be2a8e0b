"""Dispatch from selector type to adapter, with lazy imports.

Built-in adapters are registered by module path, so importing ``di`` imports no
engine; the adapter module (and its engine) is imported on first use. Third
parties register their own selector type with :func:`register_backend`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib
import importlib.util
import sys
from typing import TYPE_CHECKING, Any

from di.backends.selectors import AbstractBackend
from di.errors import BackendNotInstalledError, InvalidInputError, InvalidOptionError, InvalidOptionTypeError
from di.prep.signature import set_traced_type_loader

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
        InvalidOptionTypeError: ``selector_type`` is not a subclass of
            :class:`di.AbstractBackend`; ``adapter`` is neither an ``Adapter``
            subclass nor a ``"module:Class"`` string (an adapter instance, say).
        InvalidOptionError: when a selector is first used, a path whose module
            or class cannot be found, named with the path.

    Examples:
        >>> import dataclasses, di
        >>> from di.backends.registry import register_backend
        >>> from di.backends.finitediff import FiniteDiffAdapter
        >>> @dataclasses.dataclass(frozen=True)
        ... class MyFD(di.AbstractBackend):
        ...     pass
        >>> register_backend(MyFD, FiniteDiffAdapter)
    """
    from di.backends.protocol import Adapter  # here: the protocol imports the engines' shared helpers

    if not (isinstance(selector_type, type) and issubclass(selector_type, AbstractBackend)):
        raise InvalidOptionTypeError(
            f"register_backend(selector_type=...) takes a subclass of di.AbstractBackend (a frozen dataclass), "
            f"not {_describe(selector_type)}"
        )
    if isinstance(adapter, str):
        module_name, colon, name = adapter.partition(":")
        if not (colon and module_name and name.isidentifier()):
            raise InvalidOptionError(
                f"register_backend({selector_type.__name__}, {adapter!r}): an adapter path is 'module:Class', "
                f"such as 'mypackage.adapter:MyAdapter'"
            )
    elif not (isinstance(adapter, type) and issubclass(adapter, Adapter)):
        instead = " (pass the class itself, not an instance of it)" if isinstance(adapter, Adapter) else ""
        raise InvalidOptionTypeError(
            f"register_backend({selector_type.__name__}, ...) takes a subclass of "
            f"di.backends.protocol.Adapter or its 'module:Class' path, not {_describe(adapter)}{instead}"
        )
    _ADAPTER_PATHS[selector_type] = adapter
    set_traced_type_loader(_import_tracers)  # (the new adapter may trace a package looked up before)
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
    _check_family(adapter)
    _ADAPTERS[backend] = adapter
    return adapter


def _describe(value: Any) -> str:
    """What was given instead, for an error: a class by its name, an instance by its type."""
    if isinstance(value, type):
        return f"the class {value.__name__}"
    shown = repr(value)
    return (
        f"{type(value).__name__} {shown}"
        if len(shown) <= 40 and " object at 0x" not in shown
        else (f"an instance of {type(value).__name__}")
    )


def _check_family(adapter: Adapter) -> None:
    """Refuse, once per selector, an adapter computing in a family nobody registered
    (the first conversion would fail with a bare ``KeyError``)."""
    from di.families import families

    known = [family.name for family in families()]
    if adapter.family not in known:
        raise InvalidOptionError(
            f"{type(adapter).__name__} (the adapter of {type(adapter.backend).__name__}) computes in the array "
            f"family {adapter.family!r}, which is not registered; known families: {', '.join(known)}. "
            f"Register it with di.register_family first, or set the adapter's family to one of those."
        )


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
    from di.backends.protocol import Adapter

    adapter_class = _imported(target, backend, "adapter")
    if not (isinstance(adapter_class, type) and issubclass(adapter_class, Adapter)):
        raise InvalidOptionTypeError(
            f"the adapter path {target!r} of {type(backend).__name__} names {_describe(adapter_class)}, not a "
            f"subclass of di.backends.protocol.Adapter"
        )
    return adapter_class


def _imported(path: str, backend: AbstractBackend, what: str = "strategy") -> Any:
    """The object at ``"module:name"``, importing the module (and its engine).

    Raises:
        InvalidOptionError: the module or the name does not exist (the path is named).
        BackendNotInstalledError: the module exists but its engine is not installed,
            or its install is broken (:func:`_engine_missing`); an ImportError of
            ``di``'s own modules, or of a package the selector does not name,
            propagates as it is.
    """
    module_name, _, name = path.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as err:
        missing = err.name or ""
        if missing == module_name or module_name.startswith(missing + "."):
            raise InvalidOptionError(
                f"the {what} path {path!r} of {type(backend).__name__} names the module {module_name!r}, "
                f"which cannot be found ({err}); check the path given to di.register_backend or the "
                f"selector's {what} attribute"
            ) from err
        if not _engine_missing(err, backend):
            raise
        raise _not_installed(backend, missing) from err
    except ImportError as err:
        if not _engine_missing(err, backend):
            raise
        raise _not_installed(backend, module_name) from err
    try:
        return getattr(module, name)
    except AttributeError:
        raise InvalidOptionError(
            f"the {what} path {path!r} of {type(backend).__name__}: the module {module_name!r} has no {name!r}"
        ) from None


_OWN_PACKAGE = __name__.partition(".")[0]


def _wrapped(backend: AbstractBackend) -> list[AbstractBackend]:
    """The backends ``backend`` wraps: its options that are selectors, or tuples or
    lists of them (``SecondOrder``'s outer and inner, ``AutoSparse``'s dense one)."""
    found: list[AbstractBackend] = []
    for option in dataclasses.fields(backend) if dataclasses.is_dataclass(backend) else ():
        value = getattr(backend, option.name)
        parts = value if isinstance(value, (tuple, list)) else (value,)
        found.extend(part for part in parts if isinstance(part, AbstractBackend))
    return found


def _engines(backend: AbstractBackend) -> set[str]:
    """The top-level packages of the engines ``backend`` names (its ``engine``, and
    those of the backends it wraps, nested as deep as they go)."""
    found = {backend.engine.partition(".")[0]} if backend.engine else set()
    for part in _wrapped(backend):
        found |= _engines(part)
    return found


def _not_found(package: str) -> bool:
    """Whether ``package`` (a top-level name) cannot be imported at all."""
    try:
        return importlib.util.find_spec(package) is None
    except (ImportError, ValueError):  # (a name find_spec cannot look up)
        return False


def _engine_missing(err: ImportError, backend: AbstractBackend) -> bool:
    """Whether ``err``, raised while importing ``backend``'s adapter or strategy,
    says that its engine is not installed (or that its install is broken), rather
    than that one of ``di``'s own modules failed to import (a circular import, a
    name one of them lacks), which is a bug to report as it is, not a pip hint.

    A ``ModuleNotFoundError`` means it for a package of an engine the selector (or
    a backend it wraps) names, or for a package not installed at all when the
    selector names no engine (a plug-in's) or says it is not installed (AutoSparse
    without scipy). Any other ``ImportError`` means it only while one of those
    engines could not be imported (its own ``__init__`` failed)."""
    name = err.name or ""
    top = name.partition(".")[0]
    if top == _OWN_PACKAGE:
        return False
    engines = _engines(backend)
    if isinstance(err, ModuleNotFoundError):
        if top in engines:
            return True
        return bool(top) and (not engines or not backend.is_installed) and _not_found(top)
    return (not name or top in engines) and any(engine not in sys.modules for engine in engines)


def _selector_types(cls: type[AbstractBackend] = AbstractBackend) -> list[type[AbstractBackend]]:
    """``cls`` and every selector type deriving from it, defined so far."""
    found = [cls]
    for subclass in cls.__subclasses__():
        found.extend(_selector_types(subclass))
    return found


def _import_tracers(package: str) -> None:
    """Import the adapter module of every selector whose engine is the top-level
    ``package``: an adapter registers, as it is imported, the classes of the values
    its engine traces (:func:`di.prep.signature.register_traced_type`), which other
    backends then refuse by name. An adapter that fails to import registers nothing."""
    for cls in _selector_types():
        if cls.engine.partition(".")[0] != package:
            continue
        target = _declared(cls, "adapter")
        if isinstance(target, str):
            with contextlib.suppress(ImportError):
                importlib.import_module(target.partition(":")[0])


set_traced_type_loader(_import_tracers)


def _not_a_selector(backend: Any) -> InvalidInputError:
    return InvalidInputError(
        f"backend must be a backend selector such as di.AutoFiniteDiff() or di.backend('finitediff'), "
        f"not {type(backend).__name__}"
    )


def _missing_part(backend: AbstractBackend) -> AbstractBackend:
    """The selector whose engine is missing: ``backend``, or the backend it wraps
    (``SecondOrder``'s outer or inner one, nested as deep as they go) that is not
    installed, so that the error names that engine and its extra."""
    for part in _wrapped(backend):
        if not part.is_installed:
            return _missing_part(part)
    return backend


def _not_installed(backend: AbstractBackend, missing: str = "") -> BackendNotInstalledError:
    """The error for a selector whose engine is missing: its own ``engine_display`` and
    ``extra`` (or those of the backend it wraps that is missing) when it declares
    them, else the module that failed to import."""
    part = _missing_part(backend)
    engine, extra = part.engine_display or missing or part.engine, part.extra
    remedy = f"pip install 'differentiation-interface[{extra}]'" if extra else f"install {engine}"
    return BackendNotInstalledError(f"{type(backend).__name__} needs {engine}, which is not installed.\n  {remedy}")
