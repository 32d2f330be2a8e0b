"""Backend selectors, and the table of the engines they name.

A selector is a small frozen dataclass naming an engine and its options:
building one imports nothing; the engine is imported when a prep is made with
it. Selectors are hashable and compare by value, so they can be dictionary keys,
defaults of function arguments, or read from a configuration file with
:func:`di.backend`.

What a selector's engine is (its name, the module that means "installed", its
adapter, its hooks) is its :class:`~di.backends.engine.Engine` record,
registered with :func:`register_engine` (public as :func:`di.register_engine`).
The built-in engines' records are listed in ``di/engines/__init__.py`` and
registered the first time the table is asked, through the same
:func:`register_engine`. The table lives here, beside :class:`AbstractBackend`,
because each needs the other: a selector reads its engine's record
(:attr:`AbstractBackend.is_installed`, its name), and the table checks that what
it registers are selectors.
"""

from __future__ import annotations

import importlib
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import Any, ClassVar

from di.backends.engine import Engine, load
from di.errors import InvalidOptionError, InvalidOptionTypeError

__all__ = [
    "AbstractBackend",
    "available_backends",
    "builtin_loaded",
    "builtin_selectors",
    "backend",
    "check_flag",
    "check_flags",
    "check_mode",
    "default_selector",
    "engine_of",
    "engines",
    "load_family",
    "not_a_selector",
    "on_engine_registered",
    "register_engine",
    "registered_for",
    "selector_classes",
    "selector_names",
]

_BY_NAME: dict[str, type[AbstractBackend]] = {}
"""Selector classes by name and alias (lower case): those of registered engines,
and those a class declares itself (``name = ...``) when it is defined."""
_ENGINES: dict[str | type, Engine] = {}
"""The registered engines by :attr:`~di.backends.engine.Engine.key`, the built-in ones first."""
_BY_SELECTOR: dict[type, Engine] = {}
"""The record of each selector class an engine names."""
_LISTENERS: list[Callable[[Engine], None]] = []
_BUILTIN_LOCK = threading.RLock()
_builtin_state = "unloaded"  # then "loading" (by the thread holding the lock), then "loaded"


class _EngineFact:
    """A class attribute of every selector read from its engine's record: ``AutoJAX.engine``
    is the ``module`` of JAX's record. A selector class registered with the
    :func:`di.register_backend` shorthand may declare the attribute itself instead."""

    def __init__(self, field: str, default: Any) -> None:
        self.field, self.default = field, default
        self.home: type | None = None

    def __set_name__(self, owner: type, name: str) -> None:
        self.home = owner

    def __get__(self, instance: Any, owner: type) -> Any:
        if owner is self.home:  # AbstractBackend itself (read by @dataclass as it is defined)
            return self.default
        record = engine_of(owner)
        return self.default if record is None else getattr(record, self.field)


def _engine_fact(field: str, default: Any) -> Any:
    return _EngineFact(field, default)


@dataclass(frozen=True)
class AbstractBackend:
    """Base class of every backend selector.

    An engine's selectors are named by its record (:func:`di.register_engine`),
    from which a selector reads ``name`` (what :func:`di.backend` and the command
    line know it by), ``aliases``, ``engine`` (the module that means "installed"),
    ``engine_display``, ``extra`` (the pip extra installing it) and
    ``distributions``. A selector class registered with the
    :func:`di.register_backend` shorthand may declare those as class attributes
    instead; a selector that wraps other backends names its ``strategy`` (a
    ``"module:Class"`` path imported on first use).

    A ``name`` (or alias) another selector class has is refused when the class is
    defined (:class:`di.InvalidOptionError`); the same class defined again (its
    module reloaded) takes its own name back.

    Examples:
        >>> import di
        >>> isinstance(di.AutoJAX(), di.AbstractBackend), di.AutoJAX.name, di.AutoTorch().engine_display
        (True, 'jax', 'PyTorch')
    """

    name: ClassVar[str] = _engine_fact("name", "")
    aliases: ClassVar[tuple[str, ...]] = _engine_fact("aliases", ())
    engine: ClassVar[str] = _engine_fact("module", "")
    engine_display: ClassVar[str] = _engine_fact("display", "")
    extra: ClassVar[str] = _engine_fact("extra", "")
    distributions: ClassVar[tuple[str, ...]] = _engine_fact("distributions", ())
    """The installed distributions whose versions a cached plan depends on (by
    default the ``engine`` module's own)."""
    strategy: ClassVar[str] = ""
    sparse: ClassVar[bool] = False
    """Whether the selector's Jacobians and Hessians are colored sparse ones
    (:class:`di.AutoSparse`'s): nothing wraps it in another ``AutoSparse``."""
    prepared_only: ClassVar[str] = ""
    """Non-empty for a selector that serves prepared calls only: why an
    unprepared call (``di.gradient(f, backend, x)``) is refused."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        # its own name only: a subclass naming itself does not inherit (and take over) its parent's
        own = cls.__dict__.get("name")
        if isinstance(own, str) and own:
            _load_builtin()  # the built-in names are taken first
            _claim(cls, (own, *cls.__dict__.get("aliases", ())))

    def __str__(self) -> str:
        return repr(self)

    @property
    def is_installed(self) -> bool:
        """Whether this selector's engine can be imported (checked without importing it)."""
        if not self.engine:
            return True
        import importlib.util  # here, not at the top: ``import di`` stays light

        try:
            # the top-level package: finding a submodule would import its parent
            return importlib.util.find_spec(self.engine.partition(".")[0]) is not None
        except (ImportError, ValueError):  # blocked (``sys.modules[name] = None``) or a broken entry
            return False


def _claim(cls: type[AbstractBackend], names: tuple[str, ...]) -> None:
    """Make ``di.backend(name)`` build ``cls`` for each of ``names``, all checked
    before any is taken."""
    keys = [key.lower() for key in names]
    for key in keys:
        taken = _BY_NAME.get(key)
        if taken is not None and taken is not cls and not _redefines(cls, taken):
            raise InvalidOptionError(
                f"{cls.__qualname__}: the backend name {key!r} is taken by {taken.__module__}.{taken.__qualname__}"
                f" (di.backend({key!r}) builds it); give {cls.__qualname__} a name of its own"
            )
    for key in keys:
        _BY_NAME[key] = cls


def _redefines(cls: type, taken: type) -> bool:
    """Whether ``cls`` is ``taken`` defined again (its module reloaded, or one
    out-of-tree class run from two places, a page and its test), which may take
    its name over; another class may not, and nothing takes a name of ``di``'s own."""
    if cls.__qualname__ != taken.__qualname__:
        return False
    return cls.__module__ == taken.__module__ or taken.__module__.split(".")[0] != "di"


# --- the engine table ----------------------------------------------------------------------------


def register_engine(engine: Engine) -> Engine:
    """Register an engine: its selectors, adapter and hooks, as one record.

    The built-in engines are registered by this function too, from the records
    ``di/engines/__init__.py`` lists, before any other. Registering a record
    whose ``name`` (or, unnamed, first selector class) is registered already
    replaces that record.

    Args:
        engine: the :class:`~di.backends.engine.Engine` record.

    Returns:
        ``engine``: its selectors are served by its adapter, its default
        selector is listed by :func:`di.available_backends`, its names are
        known to :func:`di.backend` and the command line, and its family, host,
        namespace and traced values are found by the registries that need them.

    Raises:
        InvalidOptionTypeError: ``engine`` is not an ``Engine``, or names a
            selector class that does not derive from :class:`di.AbstractBackend`
            (a ``TypeError``).
        InvalidOptionError: a name or alias another selector class has (a
            ``ValueError``).

    Examples:
        >>> import dataclasses, di
        >>> from di.backends.engine import Engine
        >>> @dataclasses.dataclass(frozen=True)
        ... class AutoSquares(di.AbstractBackend):
        ...     pass
        >>> adapter = "di.engines.finitediff.adapter:FiniteDiffAdapter"
        >>> record = di.register_engine(Engine("di_doc_squares", AutoSquares, adapter))
        >>> di.backend("di_doc_squares"), AutoSquares() in di.available_backends()
        (AutoSquares(), True)
    """
    if not isinstance(engine, Engine):
        raise InvalidOptionTypeError(
            f"register_engine takes a di.backends.engine.Engine record, not {type(engine).__name__}"
        )
    refused = [cls for cls in engine.selectors if not issubclass(cls, AbstractBackend)]
    if refused:
        raise InvalidOptionTypeError(
            f"register_engine(Engine({engine.name!r}, ...)): its selectors must derive from di.AbstractBackend, "
            f"not {', '.join(cls.__name__ for cls in refused)}"
        )
    _load_builtin()
    if engine.name:
        _claim(engine.selectors[0], (engine.name, *engine.aliases))
    families = sys.modules.get("di.families.registry")
    if engine.family is not None and families is not None:  # else registered when families are first asked
        families.add_engine_family(load_family(engine))
    previous = _ENGINES.pop(engine.key, None)
    if previous is not None:
        for cls in previous.selectors:
            if _BY_SELECTOR.get(cls) is previous:
                del _BY_SELECTOR[cls]
    _ENGINES[engine.key] = engine
    for cls in engine.selectors:
        _BY_SELECTOR[cls] = engine
    for listener in list(_LISTENERS):
        listener(engine)
    return engine


def load_family(engine: Engine) -> Any:
    """The :class:`di.Family` an engine brings (its record's ``family``, imported
    from its path: a family module imports no library), or ``None``.

    Examples:
        >>> import di
        >>> from di.backends.selectors import engine_of, load_family
        >>> load_family(engine_of(di.AutoTorch())).name, load_family(engine_of(di.AutoFiniteDiff()))
        ('torch', None)
    """
    if engine.family is None:
        return None
    return load(engine.family) if isinstance(engine.family, str) else engine.family


def on_engine_registered(listener: Callable[[Engine], None]) -> None:
    """Call ``listener(engine)`` after each registration (a registry dropping what
    it derived from the records before)."""
    _LISTENERS.append(listener)


def _load_builtin() -> None:
    """Register the built-in engines' records, once, before anything else is asked
    of the table (a thread asking meanwhile waits; the loading thread's own
    questions, from the records it imports, find the table as far as it got)."""
    global _builtin_state
    if _builtin_state == "loaded":
        return
    with _BUILTIN_LOCK:
        if _builtin_state != "unloaded":
            return
        _builtin_state = "loading"
        try:
            for path in importlib.import_module("di.engines").BUILTIN_ENGINES:
                register_engine(load(path))
        except BaseException:
            _builtin_state = "unloaded"
            raise
        _builtin_state = "loaded"


def builtin_loaded() -> bool:
    """Whether the built-in engines' records are registered (every registration
    registers them first: before, no engine is).

    Examples:
        >>> from di.backends.selectors import builtin_loaded, engines
        >>> _ = engines()
        >>> builtin_loaded()
        True
    """
    return _builtin_state == "loaded"


def builtin_selectors() -> dict[str, type[AbstractBackend]]:
    """The selector classes of the built-in engines (the records
    ``di/engines/__init__.py`` lists), by class name: the names ``di`` exports
    them under. Reads the records only (no engine, no registration).

    Examples:
        >>> import di
        >>> from di.backends.selectors import builtin_selectors
        >>> builtin_selectors()["AutoFiniteDiff"] is di.AutoFiniteDiff
        True
    """
    records = [load(path) for path in importlib.import_module("di.engines").BUILTIN_ENGINES]
    return {cls.__name__: cls for record in records for cls in record.selectors}


def engines() -> tuple[Engine, ...]:
    """Every registered engine's record, the built-in ones first, in registration order.

    Examples:
        >>> from di.backends.selectors import engines
        >>> names = [engine.name for engine in engines()]  # then any registered after them
        >>> names[:3], "finitediff" in names
        (['jax', 'torch', 'autograd'], True)
    """
    _load_builtin()
    return tuple(_ENGINES.values())


def engine_of(selector: type | Any) -> Engine | None:
    """The record of a selector class (or of a selector's class): its own, or
    else the nearest base class's in its MRO; ``None`` for a selector no engine
    names (a strategy's, or one nobody registered).

    Examples:
        >>> import di
        >>> from di.backends.selectors import engine_of
        >>> engine_of(di.AutoTorch()).display, engine_of(di.SecondOrder) is None
        ('PyTorch', True)
    """
    _load_builtin()
    cls = selector if isinstance(selector, type) else type(selector)
    for base in cls.__mro__:
        record = _BY_SELECTOR.get(base)
        if record is not None:
            return record
    return None


def registered_for(cls: type) -> Engine | None:
    """The record naming ``cls`` itself (not a base class), or ``None``."""
    _load_builtin()
    return _BY_SELECTOR.get(cls)


def available_backends() -> list[AbstractBackend]:
    """The default selector of every engine that is installed, importing none.

    Returns:
        A list such as ``[AutoJAX(), AutoTorch(), AutoAutograd(), AutoFiniteDiff()]``:
        the built-in engines in that order, then the engines registered with a
        name since (:func:`di.register_engine`, :func:`di.register_backend`),
        with the selectors whose engine is missing left out.

    Raises:
        Nothing: a missing engine is left out, not an error.

    Examples:
        >>> import di
        >>> di.AutoFiniteDiff() in di.available_backends()
        True
    """
    defaults = (engine.default for engine in engines() if engine.default is not None)
    return [selector for selector in defaults if selector.is_installed]


def default_selector(option: str) -> AbstractBackend:
    """The default of another selector's ``option`` (``"SecondOrder.outer"``): the
    default selector of the first engine whose record says it is
    (:attr:`~di.backends.engine.Engine.default_for`).

    Raises:
        InvalidOptionError: no registered engine is the default of ``option``.

    Examples:
        >>> from di.backends.selectors import default_selector
        >>> default_selector("SecondOrder.outer")
        AutoFiniteDiff(method='central', step=None)
    """
    for engine in engines():
        if option in engine.default_for and engine.default is not None:
            return engine.default  # type: ignore[no-any-return]
    raise InvalidOptionError(f"no registered engine is the default of {option}: pass {option.split('.')[-1]}=...")


def selector_classes() -> tuple[type[AbstractBackend], ...]:
    """Every selector class known by name (the registered engines' and those
    defined out of tree with a ``name``), the built-in ones first.

    Examples:
        >>> import di
        >>> from di.backends.selectors import selector_classes
        >>> di.AutoFiniteDiff in selector_classes()
        True
    """
    _load_builtin()
    return tuple(dict.fromkeys(_BY_NAME.values()))


def selector_names() -> dict[str, type[AbstractBackend]]:
    """Every name and alias :func:`di.backend` knows (lower case), with its
    selector class, the built-in ones first.

    Examples:
        >>> import di
        >>> from di.backends.selectors import selector_names
        >>> selector_names()["pytorch"] is di.AutoTorch
        True
    """
    _load_builtin()
    return dict(_BY_NAME)


def backend(name: str, **options: Any) -> AbstractBackend:
    """Build a backend selector from its name, for configuration files and CLIs.

    Args:
        name: an engine's name or one of its aliases, case-insensitive:
            ``"jax"``, ``"torch"``, ``"autograd"``, ``"finitediff"``, or the
            name of a selector defined out of tree.
        **options: the selector's options, for example ``jit=True``.

    Returns:
        The selector, e.g. ``AutoJAX(jit=True)``.

    Raises:
        InvalidOptionError: unknown name (a ``ValueError``).
        InvalidOptionTypeError: an option the selector does not have (a
            ``TypeError``); a value the selector refuses raises its own error.

    Examples:
        >>> import di
        >>> di.backend("jax", jit=True)
        AutoJAX(jit=True, mode=None)
    """
    names = selector_names()
    cls = names.get(name.lower()) if isinstance(name, str) else None
    if cls is None:
        known = ", ".join(repr(known.name) for known in dict.fromkeys(names.values()))
        raise InvalidOptionError(f"unknown backend {name!r}; known backends: {known}")
    accepted = [f.name for f in fields(cls) if f.init] if hasattr(cls, "__dataclass_fields__") else None
    unknown = [option for option in options if accepted is not None and option not in accepted]
    if unknown:
        takes = f"its options are {', '.join(accepted)}" if accepted else "it takes no options"
        raise InvalidOptionTypeError(f"di.backend({name!r}): {cls.__name__} has no option {unknown[0]!r}; {takes}")
    return cls(**options)


# --- checks the selectors share --------------------------------------------------------------


def check_flag(owner: str, option: str, value: Any) -> bool:
    """``value`` as a ``bool``, refusing anything but ``True`` and ``False``.

    Truthiness is not enough: ``jit="False"`` or ``compile="no"`` are true
    strings, and would quietly do the opposite of what was meant.

    Args:
        owner: what takes the option, as the message names it (``"AutoJAX"``).
        option: the option's name.
        value: what was given: a Python ``bool`` or a ``numpy.bool_``.

    Returns:
        ``value`` as a Python ``bool``.

    Raises:
        InvalidOptionTypeError: any other value (a ``TypeError``).

    Examples:
        >>> from di.backends.selectors import check_flag
        >>> check_flag("AutoJAX", "jit", True)
        True
        >>> check_flag("AutoJAX", "jit", "no")
        Traceback (most recent call last):
        ...
        di.errors.InvalidOptionTypeError: AutoJAX(jit='no'): jit takes True or False (a Python bool ...), not str
    """
    if value is True or value is False:
        return value
    numpy = sys.modules.get("numpy")  # a numpy.bool_ exists only once numpy is imported: ``import di`` stays light
    if numpy is not None and isinstance(value, numpy.bool_):
        return bool(value)
    raise InvalidOptionTypeError(
        f"{owner}({option}={value!r}): {option} takes True or False (a Python bool or numpy.bool_), "
        f"not {type(value).__name__}"
    )


def check_flags(selector: AbstractBackend, *options: str) -> None:
    """Check a selector's boolean options (:func:`check_flag`), storing each as a
    Python ``bool``; for a selector's ``__post_init__``.

    Raises:
        InvalidOptionTypeError: an option that is not ``True`` or ``False``.

    Examples:
        >>> import di
        >>> di.AutoJAX(jit=1)
        Traceback (most recent call last):
        ...
        di.errors.InvalidOptionTypeError: AutoJAX(jit=1): jit takes True or False (a Python bool ...), not int
    """
    for option in options:
        object.__setattr__(selector, option, check_flag(type(selector).__name__, option, getattr(selector, option)))


def check_mode(owner: str, mode: str | None) -> None:
    """Refuse a Jacobian ``mode`` other than ``None``, ``"forward"`` and ``"reverse"``.

    Raises:
        InvalidOptionError: another value (a ``ValueError``).

    Examples:
        >>> from di.backends.selectors import check_mode
        >>> check_mode("AutoJAX", "forward")
    """
    if mode not in (None, "forward", "reverse"):
        raise InvalidOptionError(f"{owner}(mode={mode!r}): mode must be None, 'forward' or 'reverse'")


def not_a_selector(value: Any) -> str:
    """How to make a selector of ``value``, for the messages refusing it.

    Examples:
        >>> import di
        >>> from di.backends.selectors import not_a_selector
        >>> not_a_selector(di.AutoJAX)
        'the class AutoJAX itself: call it, di.AutoJAX()'
    """
    if isinstance(value, type) and issubclass(value, AbstractBackend):
        return f"the class {value.__name__} itself: call it, di.{value.__name__}()"
    if isinstance(value, str):
        return f"the name {value!r}: di.backend({value!r}) builds its selector"
    return f"{value!r}"
