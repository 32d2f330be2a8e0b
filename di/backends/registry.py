"""Dispatch from a selector to its engine's adapter, or to its strategy, with lazy imports.

Each engine is described by one :class:`~di.backends.engine.Engine` record
(:func:`register_engine`; the table is :mod:`di.backends.selectors`); its
adapter is a ``"module:Class"`` path, so importing ``di`` imports no engine: the
adapter module (and its engine) is imported on first use.
:func:`register_backend` is the shorthand that builds a minimal record from a
selector class and an adapter. A selector that wraps other backends names its
strategy (its ``strategy`` attribute) instead.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib
import importlib.util
import sys
from typing import TYPE_CHECKING, Any

from di.backends.engine import Engine, TracedValues, load
from di.backends.selectors import (
    AbstractBackend,
    engine_of,
    engines,
    load_family,
    on_engine_registered,
    register_engine,
    registered_for,
)
from di.errors import BackendNotInstalledError, InvalidInputError, InvalidOptionError, InvalidOptionTypeError
from di.prep.traced import TracedType, register_traced_type, set_traced_type_loader
from di.pytrees.ravel import register_traced_leaves

if TYPE_CHECKING:
    from di.backends.protocol import Adapter
    from di.prep.strategy import Strategy

__all__ = ["get_adapter", "get_strategy", "register_backend"]

_ADAPTERS: dict[AbstractBackend, Adapter] = {}
_MOST_ADAPTERS = 256
"""The most adapters kept (one per distinct selector): a sweep over thousands of
selector options (``AutoFiniteDiff(step=...)``) keeps the latest ones; a prep holds
its own adapter, so one forgotten here is only made again when next asked for."""
_STRATEGIES: dict[type[AbstractBackend], Strategy | None] = {}
_TRACED: set[str | type] = set()
"""The engines (by record key) whose traced values are registered."""


def register_backend(selector_type: type[AbstractBackend], adapter: str | type[Adapter]) -> None:
    """Register the adapter class for a selector type: the shorthand of
    :func:`di.register_engine` for an engine with no hook.

    The record is made from the selector class's own attributes: its ``name``
    and ``aliases`` (when it declares them), and ``engine`` (the module that
    means "installed"), ``engine_display`` and ``extra``.

    Args:
        selector_type: a frozen dataclass deriving from :class:`di.AbstractBackend`.
        adapter: the :class:`~di.backends.protocol.Adapter` subclass, or its
            ``"module:Class"`` path to import lazily.

    Returns:
        None. Selectors of ``selector_type`` (and of its subclasses without an
        engine of their own) are then served by ``adapter``; a selector class
        with a ``name`` is listed by :func:`di.available_backends` and known by
        that name to :func:`di.backend` and the command line.

    Raises:
        InvalidOptionTypeError: ``selector_type`` is not a subclass of
            :class:`di.AbstractBackend`; ``adapter`` is neither an ``Adapter``
            subclass nor a ``"module:Class"`` string (an adapter instance, say).
        InvalidOptionError: when a selector is first used, a path whose module
            or class cannot be found, named with the path.

    Examples:
        >>> import dataclasses, di
        >>> from di.backends.registry import register_backend
        >>> from di.engines.finitediff.adapter import FiniteDiffAdapter
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
    own_name = selector_type.__dict__.get("name")
    register_engine(
        Engine(
            name=own_name if isinstance(own_name, str) else "",
            selectors=(selector_type,),
            adapter=adapter,
            display=selector_type.engine_display,
            aliases=tuple(selector_type.__dict__.get("aliases", ())),
            module=selector_type.engine,
            extra=selector_type.extra,
            distributions=tuple(selector_type.distributions),
        )
    )


def _forget(engine: Engine) -> None:
    """Drop what was derived from the records before ``engine`` was registered:
    the adapters of its selector types, the strategies, the packages looked up
    for traced values (the new engine may trace one of them)."""
    _STRATEGIES.clear()
    _TRACED.discard(engine.key)
    for backend in [b for b in _ADAPTERS if type(b) in engine.selectors]:
        del _ADAPTERS[backend]
    set_traced_type_loader(_import_tracers)


on_engine_registered(_forget)


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
    record = engine_of(backend)
    adapter_class = _load(backend, record)
    adapter = adapter_class(backend)
    _check_family(adapter)
    if record is not None:
        _register_traced(record)  # values its engine traces are then known by class, as the adapter runs
    _ADAPTERS[backend] = adapter
    if len(_ADAPTERS) > _MOST_ADAPTERS:
        del _ADAPTERS[next(iter(_ADAPTERS))]  # the oldest first
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
    family = adapter.capabilities.family
    if family not in known:
        raise InvalidOptionError(
            f"{type(adapter).__name__} (the adapter of {type(adapter.backend).__name__}) computes in the array "
            f"family {family!r}, which is not registered; known families: {', '.join(known)}. "
            f"Register it with di.register_family first, or set the family of the adapter's capabilities to one "
            f"of those."
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
        path = _declared_strategy(cls)
        strategy = _STRATEGIES[cls] = None if not isinstance(path, str) else _imported(path, backend)()
    if strategy is not None and not backend.is_installed:
        raise _not_installed(backend)
    return strategy


def _declared_strategy(cls: type[AbstractBackend]) -> str | None:
    """The strategy nearest in ``cls``'s MRO: named by a class, unless an engine's
    record names a class before it (a subclass of a strategy's selector
    registered as an engine is that engine's)."""
    for base in cls.__mro__:
        if registered_for(base) is not None:
            return None
        declared = base.__dict__.get("strategy")
        if declared:
            return declared  # type: ignore[no-any-return]
    return None


def _load(backend: AbstractBackend, record: Engine | None) -> type[Adapter]:
    if record is None:
        raise InvalidInputError(
            f"no adapter is registered for {type(backend).__name__}; register one with di.register_backend"
        )
    from di.backends.protocol import Adapter

    target = record.adapter
    if isinstance(target, str):
        if not backend.is_installed:
            raise _not_installed(backend)
        adapter_class = _imported(target, backend, "adapter")
    else:
        adapter_class = target
    if not (isinstance(adapter_class, type) and issubclass(adapter_class, Adapter)):
        raise InvalidOptionTypeError(
            f"the adapter {target!r} of {type(backend).__name__} names {_describe(adapter_class)}, not a "
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
    named = _engines(backend)
    if isinstance(err, ModuleNotFoundError):
        if top in named:
            return True
        return bool(top) and (not named or not backend.is_installed) and _not_found(top)
    return (not name or top in named) and any(engine not in sys.modules for engine in named)


def _import_tracers(package: str) -> None:
    """Register the traced values of every engine whose module is the top-level
    ``package`` (:attr:`~di.backends.engine.Engine.traced`), which other backends
    then refuse by name; an engine whose hook fails to import registers nothing."""
    for record in engines():
        if record.traced and record.module.partition(".")[0] == package:
            with contextlib.suppress(ImportError):
                _register_traced(record)


def _register_traced(record: Engine) -> None:
    """Register, once, the classes of values ``record``'s engine traces in place of
    arrays, with how to read, cast and reshape them."""
    if not record.traced or record.key in _TRACED:
        return
    hook = load(record.traced) if isinstance(record.traced, str) else record.traced
    found: list[TracedValues] = list(hook())
    for traced in found:
        register_traced_type(TracedType(traced.cls, record.name, traced.transform, traced.value))
        register_traced_leaves(traced.cls, traced.cast, traced.reshape)
    _TRACED.add(record.key)


def register_engine_families() -> None:
    """Register the family of every engine that brings one and that is not
    registered yet (an engine registered before the family registry was imported
    registered none: importing it would import NumPy for a selector). The family
    registry asks for it, through :mod:`di.loaders`, before it first answers.

    Examples:
        >>> from di.backends.registry import register_engine_families
        >>> register_engine_families()
    """
    from di.families.registry import add_engine_family, registered_names

    for engine in engines():
        family = load_family(engine)
        if family is not None and family.name not in registered_names():  # (else replaced from outside)
            add_engine_family(family)


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
