"""The record that describes one engine: what every registry of ``di`` reads.

An engine is one package (``di/engines/<name>/`` in tree, any package out of
tree) and one :class:`Engine` record registered with :func:`di.register_engine`:
its selectors, its adapter, the module that means "installed", and the optional
hooks through which ``di`` reaches what is specific to it. The built-in engines
are registered exactly so (``di/engines/__init__.py`` lists their records), the
first time a registry is asked.

The hooks, each optional, and what ``di`` does without one:

* ``labels``: the labelled selectors the engine offers (``"jax"`` ->
  ``AutoJAX()``, ``"jax-jit"`` -> ``AutoJAX(jit=True)``). The first is its
  default selector, the one :func:`di.available_backends` lists. Default: the
  engine's ``name`` for its first selector class built without options (none
  when the engine has no name, or that class needs options).
* ``fastest`` (and ``compiled`` among them): the labels :class:`di.AutoFastest`
  measures when given no candidates (the compiled ones only with
  ``include_compiled``). Default: none.
* ``default_for``: the options of other selectors whose default is this
  engine's default selector (``"SecondOrder.outer"``, ``"AutoSparse.dense"``).
  Default: none.
* ``family``: the :class:`di.Family` of the arrays the engine brings, a
  ``"module:NAME"`` path to the instance (imported when the engine is
  registered: a family module imports no library) or the instance. Default:
  none (the engine computes in a family registered otherwise, NumPy's say).
* ``host``: the :class:`di.mixing.core.Host` that makes
  :class:`di.DifferentiateWith` a primitive of this engine: the instance, or its
  ``"module:NAME"`` path, imported once ``module`` is loaded (at once for an
  engine that needs no library). Default: none (``DifferentiateWith`` cannot be
  called inside this engine's transforms).
* ``namespace``: a :class:`NamespaceOverride`, the namespace
  :func:`di.array_namespace` answers for the engine's traced values where
  array-api-compat's would not be differentiated. Default: none
  (array-api-compat's namespace).
* ``traced``: the function returning the :class:`TracedValues` of the engine
  (or its ``"module:function"`` path): classes of values it traces that belong to
  no array family (boxes around NumPy arrays), with how to read, cast and
  reshape them. Called (imported) when the adapter is loaded or, for an engine
  with a ``module``, when such a value of that module is first met. Default:
  none (every value the engine traces is an array of its family).
* ``tolerances``: ``(selector, order) -> (rtol, atol)``, the error an engine
  that approximates (finite differences) makes at derivative order ``order``,
  which :func:`di.testing.default_tolerances` allows on top of rounding.
  Default: none (exact up to rounding).
* ``processes``: ``(values) -> Processes | None`` (or its ``"module:function"``
  path, imported once ``module`` is loaded), the
  :class:`~di.backends.processes.Processes` that the call's values span when the
  engine's distributed runtime shares them between processes, so that decisions
  made at preparation (:class:`di.AutoFastest`'s choice, colorings) agree across
  them. Default: none (values live in one process).

Error translation needs no hook of its own: an engine's errors inside ``f`` are
turned into ``di`` errors by its adapter's
:class:`~di.backends.outputs.OutputRules` (``conversion_errors``,
``translate``), which :func:`di.backends.outputs.checking` applies around its
programs.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from di.errors import InvalidOptionError, InvalidOptionTypeError

__all__ = ["Engine", "NamespaceOverride", "TracedValues", "load"]


@dataclass(frozen=True)
class NamespaceOverride:
    """The namespace :func:`di.array_namespace` answers for an engine's traced values.

    Args:
        replaces: the name of array-api-compat's namespace for those values
            (``"autograd.numpy.numpy_wrapper"``), whose functions the engine
            cannot differentiate.
        build: the ``"module:function"`` building ``di``'s namespace instead,
            called once, on first use (the engine is then loaded).
        traced: the ``"module:Class"`` of the traced values, recognised even
            where array-api-compat refuses them beside other arrays (looked up
            only once the module is loaded: nothing is imported).
        mixes_with: the array family whose arrays may be mixed with the traced
            values in one call (``""``: any).

    Examples:
        >>> from di.backends.engine import NamespaceOverride
        >>> NamespaceOverride("mylib.numpy", "mylib_di.namespace:build", "mylib.tracer:Box").mixes_with
        ''
    """

    replaces: str
    build: str
    traced: str
    mixes_with: str = ""

    def __post_init__(self) -> None:
        for option in ("build", "traced"):
            _check_path(f"NamespaceOverride({option}=...)", getattr(self, option))


@dataclass(frozen=True)
class TracedValues:
    """A class of values an engine traces that belongs to no array family.

    Args:
        cls: the class of the traced values (autograd's ``ArrayBox``).
        transform: the engine's transform that makes them, as a user writes it
            (``"autograd.grad"``), for messages.
        value: the concrete array inside a traced value (a strict prep matches
            ``x`` by it; other engines refuse the traced value by name).
        cast: ``(value, dtype_name) -> value``, a cast the engine differentiates
            in every mode, used when a pytree ``x``'s leaves are rebuilt in
            their own dtypes; ``None``: the value's own ``astype``.
        reshape: ``(value, shape) -> value``, used when a pytree ``x`` is rebuilt
            from one traced vector; ``None``: the value's own ``reshape``
            method.

    Examples:
        >>> from di.backends.engine import TracedValues
        >>> class Box:
        ...     def __init__(self, value):
        ...         self.value = value
        >>> TracedValues(Box, "mylib.grad", lambda box: box.value).reshape is None
        True
    """

    cls: type
    transform: str
    value: Callable[[Any], Any]
    cast: Callable[[Any, str], Any] | None = None
    reshape: Callable[[Any, tuple[int, ...]], Any] | None = None


_UNSET: Mapping[str, Any] = MappingProxyType({})


@dataclass(frozen=True, eq=False)
class Engine:
    """One engine, described completely: registered with :func:`di.register_engine`.

    Building a record imports nothing but the selector classes it names (which
    import no engine): the adapter, family, host, namespace and traced values are
    ``"module:NAME"`` paths, imported when first needed. The module docstring
    lists every optional hook and its default.

    Args:
        name: the engine's name (``"jax"``): what :func:`di.backend` and the
            command line know its first selector class by, the head of its
            labels, its folder's name in tree. ``""`` for an engine registered
            without a name (:func:`di.register_backend` on a selector class that
            declares none): usable through its selectors, not by name.
        selectors: the engine's selector classes (one class or a tuple), each
            deriving from :class:`di.AbstractBackend`; the adapter serves them all
            (and their subclasses without a record of their own).
        adapter: the :class:`~di.backends.protocol.Adapter` subclass, or its
            ``"module:Class"`` path, imported when a selector is first used.
        display: the engine's name as people write it (``"JAX"``), for messages;
            by default ``name``.
        aliases: other names :func:`di.backend` takes (``"pytorch"``).
        labels: the labelled selectors the engine offers, in order, the first
            its default selector.
        fastest: the labels :class:`di.AutoFastest` measures by default.
        compiled: those of ``fastest`` that compile at preparation.
        default_for: the options of other selectors this engine's default
            selector is the default of (``"SecondOrder.outer"``).
        module: the importable module that means "installed" (found without
            importing it); ``""`` for an engine that needs no library.
        extra: the pip extra installing it (``differentiation-interface[extra]``).
        distributions: the installed distributions whose versions a cached plan
            depends on; by default ``module``'s top-level package.
        family: its array family, if it brings one (a path or the instance).
        host: its ``DifferentiateWith`` host (the instance or its
            ``"module:NAME"`` path).
        namespace: its :class:`NamespaceOverride`.
        traced: its function returning :class:`TracedValues` (or the
            function's ``"module:function"`` path).
        tolerances: ``(selector, order) -> (rtol, atol)`` for an approximating
            engine.
        processes: its function returning the processes a call's values span
            (or the function's ``"module:function"`` path).

    Raises:
        InvalidOptionTypeError: a selector that is not a class, an adapter that
            is neither a class nor a path, a host without ``owns`` and ``call``,
            a ``traced`` that is neither callable nor a path (a ``TypeError``).
        InvalidOptionError: a malformed path, or ``fastest``/``compiled``
            naming a label the engine does not offer (a ``ValueError``).

    Examples:
        >>> import dataclasses, di
        >>> from di.backends.engine import Engine
        >>> @dataclasses.dataclass(frozen=True)
        ... class AutoMine(di.AbstractBackend):
        ...     pass
        >>> record = Engine("mine", AutoMine, "mypackage.adapter:MineAdapter", display="Mine")
        >>> [cls.__name__ for cls in record.selectors], dict(record.labels), record.default
        (['AutoMine'], {'mine': AutoMine()}, AutoMine())
    """

    name: str
    selectors: tuple[type, ...]
    adapter: str | type
    display: str = ""
    aliases: tuple[str, ...] = ()
    labels: Mapping[str, Any] = field(default_factory=lambda: _UNSET)
    fastest: tuple[str, ...] = ()
    compiled: tuple[str, ...] = ()
    default_for: tuple[str, ...] = ()
    module: str = ""
    extra: str = ""
    distributions: tuple[str, ...] = ()
    family: Any = None
    host: Any = ""
    namespace: NamespaceOverride | None = None
    traced: str | Callable[[], Iterable[TracedValues]] = ""
    tolerances: Callable[[Any, int], tuple[float, float]] | None = None
    processes: str | Callable[[Any], Any] = ""

    def __post_init__(self) -> None:
        selectors = self.selectors if isinstance(self.selectors, tuple) else (self.selectors,)
        if not selectors or not all(isinstance(cls, type) for cls in selectors):
            raise InvalidOptionTypeError(
                f"Engine({self.name!r}): selectors takes a selector class or a tuple of them, not {self.selectors!r}"
            )
        object.__setattr__(self, "selectors", selectors)
        if isinstance(self.adapter, str):
            _check_path(f"Engine({self.name!r}, adapter=...)", self.adapter)
        elif not isinstance(self.adapter, type):
            raise InvalidOptionTypeError(
                f"Engine({self.name!r}): adapter takes an Adapter subclass or its 'module:Class' path, not "
                f"{type(self.adapter).__name__}"
            )
        for option in ("host", "traced", "processes"):
            if isinstance(getattr(self, option), str) and getattr(self, option):
                _check_path(f"Engine({self.name!r}, {option}=...)", getattr(self, option))
        if not isinstance(self.host, str) and not all(callable(getattr(self.host, m, None)) for m in ("owns", "call")):
            raise InvalidOptionTypeError(
                f"Engine({self.name!r}): host takes a di.mixing.core.Host instance or its 'module:NAME' path, not "
                f"{type(self.host).__name__}"
            )
        if not isinstance(self.traced, str) and not callable(self.traced):
            raise InvalidOptionTypeError(
                f"Engine({self.name!r}): traced takes a function returning TracedValues or its 'module:function' "
                f"path, not {type(self.traced).__name__}"
            )
        if isinstance(self.family, str):
            _check_path(f"Engine({self.name!r}, family=...)", self.family)
        object.__setattr__(self, "display", self.display or self.name)
        object.__setattr__(self, "aliases", tuple(self.aliases))
        if not self.distributions and self.module:
            object.__setattr__(self, "distributions", (self.module.partition(".")[0],))
        labels = _default_labels(self.name, selectors[0]) if self.labels is _UNSET else dict(self.labels)
        object.__setattr__(self, "labels", MappingProxyType(labels))
        for option in ("fastest", "compiled"):
            unknown = [label for label in getattr(self, option) if label not in labels]
            if unknown:
                raise InvalidOptionError(
                    f"Engine({self.name!r}, {option}=...) names {', '.join(map(repr, unknown))}, which are not among "
                    f"its labels ({', '.join(map(repr, labels)) or 'none'})"
                )

    @property
    def default(self) -> Any:
        """The engine's default selector (its first label's), or ``None``."""
        return next(iter(self.labels.values()), None)

    @property
    def key(self) -> str | type:
        """What the registry knows the record by: its name, or for an engine
        without one its first selector class."""
        return self.name or self.selectors[0]

    def is_installed(self) -> bool:
        """Whether :attr:`module` can be imported (found without importing it).

        A dotted module (``mlx.core``) is looked for in its parents' folders, so that
        neither a parent is imported nor a missing parent raises.
        """
        if not self.module:
            return True
        import importlib.machinery
        import importlib.util

        top, *rest = self.module.split(".")
        spec = importlib.util.find_spec(top)
        name = top
        for part in rest:
            if spec is None or spec.submodule_search_locations is None:
                return False
            name = f"{name}.{part}"
            spec = importlib.machinery.PathFinder.find_spec(name, list(spec.submodule_search_locations))
        return spec is not None


def _default_labels(name: str, selector: type) -> dict[str, Any]:
    """``{name: selector()}``, or nothing when the engine has no name or its
    selector needs options."""
    if not name:
        return {}
    try:
        return {name: selector()}
    except Exception:  # a selector with required options offers no default
        return {}


def _check_path(owner: str, path: Any) -> None:
    module, colon, name = path.partition(":") if isinstance(path, str) else ("", "", "")
    if not (colon and module and name.isidentifier()):
        raise InvalidOptionError(f"{owner}: {path!r} is not a 'module:name' path, such as 'mypackage.adapter:Adapter'")


def load(path: str) -> Any:
    """The object at ``"module:name"``, importing the module.

    Args:
        path: a ``"module:name"`` path, as the hooks of :class:`Engine` give them.

    Returns:
        The object.

    Raises:
        InvalidOptionError: the module or the name does not exist (the path is
            named); an ``ImportError`` raised inside the module propagates.

    Examples:
        >>> from di.backends.engine import load
        >>> load("di.backends.engine:Engine").__name__
        'Engine'
    """
    module_name, _, name = path.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as err:
        if err.name and (err.name == module_name or module_name.startswith(err.name + ".")):
            raise InvalidOptionError(
                f"the path {path!r} names the module {module_name!r}, which cannot be found"
            ) from err
        raise
    try:
        return getattr(module, name)
    except AttributeError:
        raise InvalidOptionError(f"the path {path!r}: the module {module_name!r} has no {name!r}") from None
