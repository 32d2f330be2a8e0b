"""``DifferentiateWith``: ``f`` written for one engine, differentiable inside another.

The engine-free core. ``g = DifferentiateWith(f, backend, *contexts)`` is a
callable with ``f``'s signature. When it is called, the values it receives say
which engine (if any) is tracing it: each *host* (an engine's, named by its
record's ``host``; a path is imported only once that engine is loaded)
recognises its engine's values. The host makes ``g`` a primitive of its engine whose derivatives come
from ``backend`` through ``di``'s prepared pullbacks and pushforwards
(:mod:`di.mixing.calls`). Called with NumPy arrays or Python floats, ``g`` is
``f`` itself, run on its engine's arrays; called by the engine ``f`` is written
for, ``g`` is ``f`` and that engine differentiates it natively.
"""

from __future__ import annotations

import contextlib
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any, ClassVar

import numpy as np

from di.backends.engine import Engine, load
from di.backends.selectors import AbstractBackend, engine_of, engines, on_engine_registered
from di.contexts import Constant, Context
from di.errors import DIError, InvalidInputError, type_label
from di.families import converter, families, family_of, get_family, spec_of
from di.mixing.calls import Call, Signature, Spec, engine_backend, engine_family, to_family
from di.prep.arguments import check_contexts_wrapped
from di.prep.description import describe_value
from di.pytrees import tree_flatten, tree_map, tree_unflatten

__all__ = ["DifferentiateWith", "Host", "host_of", "once"]


class Host:
    """What an engine offers to host ``g``: ``g`` as a primitive of that (outer) engine.

    An engine's record names its host (``host=HOST`` or
    ``host="mypackage.host:HOST"``, an instance of a subclass); a path is
    imported once the engine's module is loaded (a value of the engine cannot
    exist before), or when first needed for an engine that needs no library.
    Without one, ``g`` cannot be called inside the engine's transforms (on its
    values, ``g`` refuses them). Called by the engine ``f`` is written for (the
    engine of ``g``'s backend), ``g`` is ``f``: that engine's host is not asked.

    Attributes:
        display: the engine's name as people write it, for messages (by
            default the host's class name).
        classes: classes of the engine's values known when the host is imported
            (recognised from then on by a dictionary lookup, which a compiler
            tracing ``g`` follows without a guard on anything else).
    """

    display: ClassVar[str] = ""
    classes: tuple[type, ...] = ()

    def owns(self, value: Any) -> bool:
        """Whether ``value`` is one of this engine's values (traced or not)."""
        raise NotImplementedError

    def call(self, g: DifferentiateWith, x: Any, leaves: list[Any], treedef: Any, values: list[Any]) -> Any:
        """``g(x, *values)`` (``x`` flattened into ``leaves`` and ``treedef``) as this
        engine's primitive."""
        raise NotImplementedError

    # --- for an f written for this engine (g's inner side) ----------------------------------

    def linearize(
        self, f: Callable[..., Any], backend: AbstractBackend, x: Any, values: Sequence[Any]
    ) -> tuple[Any, Callable[[Any], Any] | None] | None:
        """``f(x, *values)`` and its pullback from that one evaluation, for an ``f``
        written for this engine and differentiated by ``backend`` (one of this
        engine's selectors, no strategy): what lets another engine's forward and
        backward pass run ``f`` once, so a stateful ``f`` (dropout, batch norm, a
        random draw) gives what this engine's own forward and backward give.

        Args:
            f: the function.
            backend: the inner backend.
            x: the point, in this engine's arrays.
            values: the context values, in this engine's arrays.

        Returns:
            ``None`` when this engine does not linearize (the caller evaluates
            and differentiates through ``backend``'s preps), else ``(y,
            pullback)``: ``pullback(cotangent)`` (a cotangent shaped like ``y``)
            returns the cotangent of ``x`` once, then ``None`` (its state is
            spent); ``pullback`` is ``None`` itself when ``y`` does not depend on
            ``x`` as the engine records it (the caller's preps decide).
        """
        return None

    def linearizes_numpy(self, backend: AbstractBackend) -> bool:
        """Whether :meth:`linearize` with ``backend`` takes NumPy arrays for ``x``, the
        context values and the cotangents as well as this engine's (a compiled
        program that takes NumPy input itself): the host of the outer engine then
        hands its CPU arrays over as NumPy views, where that is faster than making
        them this engine's arrays (the default: no)."""
        return False

    @contextlib.contextmanager
    def probing(self) -> Iterator[None]:
        """A scope in which evaluating an ``f`` of this engine leaves no trace: what
        it writes into the engine's arrays and the draws it takes from the engine's
        random stream are undone on exit. ``g``'s output is described so when an
        outer engine traces ``g`` before any real call (the default: no undoing)."""
        yield


def once(pullback: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """``pullback`` that runs on its first call only and returns ``None`` after, as
    :meth:`Host.linearize` promises (the state it differentiates from is spent).

    Examples:
        >>> from di.mixing.core import once
        >>> twice = once(lambda cotangent: 2 * cotangent)
        >>> twice(3.0), twice(3.0)
        (6.0, None)
    """
    spent = False

    def first_call(cotangent: Any) -> Any:
        nonlocal spent
        if spent:
            return None
        spent = True
        return pullback(cotangent)

    return first_call


_HOST_BY_CLASS: dict[type, Host | None] = {}
_HOSTS: dict[Any, Host] = {}
"""The hosts loaded so far, by what records name them with (a path, or the instance)."""


def _forget_classes(engine: Any) -> None:
    _HOST_BY_CLASS.clear()  # a class seen before may be the new engine's


on_engine_registered(_forget_classes)


def hosting_engines() -> list[str]:
    """The names of the engines that host :class:`DifferentiateWith` (their
    records name a ``host``), in alphabetical order.

    Examples:
        >>> from di.mixing.core import hosting_engines
        >>> hosting_engines()[:2], "torch" in hosting_engines()
        (['autograd', 'jax'], True)
    """
    return sorted(engine.name for engine in engines() if engine.host)


def host_of(value: Any) -> Host | None:
    """The host whose engine ``value`` belongs to, or ``None`` (NumPy arrays, Python
    numbers, other objects). A host module is imported only once its engine is
    loaded: a value of an engine cannot exist before.

    Examples:
        >>> import numpy as np
        >>> from di.mixing.core import host_of
        >>> host_of(np.ones(2)) is None
        True
    """
    cls = type(value)
    try:
        return _HOST_BY_CLASS[cls]
    except KeyError:
        pass
    found = None
    for host in loaded_hosts():
        if host.owns(value):
            found = host
            break
    if len(_HOST_BY_CLASS) < 1024:
        _HOST_BY_CLASS[cls] = found
    return found


def loaded_hosts() -> list[Host]:
    """The hosts of the engines loaded so far, importing their modules the first
    time (a compiler tracing a call finds them already imported, by
    :class:`DifferentiateWith` or an earlier call)."""
    hosts = []
    for engine in engines():
        if engine.host and (not engine.module or engine.module.partition(".")[0] in sys.modules):
            hosts.append(_loaded(engine))
    return hosts


def _loaded(engine: Engine) -> Host:
    """The host ``engine``'s record names, imported (or taken as it is) once."""
    host = _HOSTS.get(engine.host)
    if host is None:
        host = _HOSTS[engine.host] = load(engine.host) if isinstance(engine.host, str) else engine.host
        for cls in host.classes:
            _HOST_BY_CLASS[cls] = host
    return host


def _display(host: Host) -> str:
    return host.display or type(host).__name__


class DifferentiateWith:
    """``f`` made differentiable by any engine, with derivatives from ``backend``.

    ``g = di.DifferentiateWith(f, backend, *contexts)`` is a callable with ``f``'s
    signature, ``g(x, *context_values)``. On NumPy arrays and Python floats it is
    ``f`` (run on the arrays of ``backend``'s engine, the result converted back).
    Called by another engine's transforms, it is a primitive of that engine: JAX
    (``jax.jit``, ``grad``, ``jacfwd``/``jacrev``, ``vmap``, ``lax.scan``), torch
    (``.backward()``, ``torch.autograd.grad``, forward-mode AD, ``torch.func``
    transforms, ``torch.compile`` as one opaque op) and autograd, each asking
    ``backend`` for pullbacks and pushforwards prepared once per input signature
    and reused. Called by the engine ``f`` is written for, ``g`` is ``f``, which
    that engine differentiates natively. See the "Mixing engines" guide.

    Args:
        f: the function, called as ``f(x, *context_values)``; ``x`` an array or a
            pytree of arrays of ``backend``'s engine, the output an array or (on
            backends that take them) a pytree of arrays.
        backend: the backend computing ``f``'s derivatives: any selector
            (``di.AutoFiniteDiff()`` makes a NumPy black box differentiable;
            ``di.AutoSparse`` serves the Jacobian-shaped uses, such as
            ``jax.jacfwd``, with one sparse Jacobian).
        *contexts: :class:`di.Constant` (or :class:`di.Cache`) wrappers of the
            arguments after ``x``. Their values are used when ``g`` is called
            with ``x`` alone; a call may pass new values instead, one per context
            (arrays of the outer engine are then handed across, traced). Contexts
            are not differentiated. Without declared contexts, any arguments after
            ``x`` count as Constants.

    Raises:
        InvalidInputError: ``f`` is not callable, ``backend`` is not a selector, a
            context is not wrapped; at a call, arguments ``g`` cannot take.
        DIError: at a call, values of an engine ``di`` cannot host ``g`` in, or
            of two engines at once.

    Examples:
        >>> import numpy as np, di
        >>> def black_box(x):  # NumPy only: no engine can trace it
        ...     return np.sin(x).sum()
        >>> g = di.DifferentiateWith(black_box, di.AutoFiniteDiff())
        >>> float(g(np.zeros(3)))
        0.0
        >>> di.gradient(g, di.AutoAutograd(), np.zeros(3)).round(6)
        array([1., 1., 1.])
    """

    def __init__(self, f: Callable[..., Any], backend: AbstractBackend, *contexts: Context) -> None:
        if not callable(f):
            raise InvalidInputError(f"DifferentiateWith needs a callable f, not {type(f).__name__}")
        if not isinstance(backend, AbstractBackend):
            raise InvalidInputError(
                f"DifferentiateWith needs a backend selector such as di.AutoFiniteDiff(), not {type(backend).__name__}"
            )
        check_contexts_wrapped(contexts)
        self.f, self.backend, self.contexts = f, backend, tuple(contexts)
        self._kinds = tuple((type(c), getattr(c, "static", None)) for c in contexts)
        self.family = engine_family(backend)  # the array family f computes in (imports its engine)
        engine = engine_backend(backend)
        record = None if engine is None else engine_of(engine)
        loaded_hosts()
        # f's own engine (loaded above, as f's family was found) differentiates f natively
        self._own_host = _loaded(record) if record is not None and record.host else None
        self._signatures: dict[Any, Signature] = {}
        self._lock = threading.Lock()
        self.__wrapped__ = f
        self.__name__ = getattr(f, "__name__", type(f).__name__)
        self.__doc__ = getattr(f, "__doc__", None)

    def __repr__(self) -> str:
        contexts = "".join(f", {type(c).__name__}({describe_value(c.value)})" for c in self.contexts)
        return f"DifferentiateWith({self.__name__}, {self.backend!r}{contexts})"

    # --- a call -------------------------------------------------------------------------------

    def __call__(self, x: Any, *given: Any) -> Any:
        values = self._values(given)
        leaves, treedef = tree_flatten(x)
        if not leaves:
            raise InvalidInputError(f"{self!r} was called with an x holding no array: {type(x).__name__}")
        host = self._host(leaves, values)
        if host is None:
            return self._evaluate(x, leaves, treedef, values)
        if host is self._own_host:  # f's own engine differentiates it natively
            return self.f(x, *values)
        return host.call(self, x, leaves, treedef, values)

    def _values(self, values: tuple[Any, ...]) -> list[Any]:
        if not values:
            return [c.value for c in self.contexts]
        if not self.contexts:
            return list(values)
        if len(values) != len(self.contexts):
            raise InvalidInputError(
                f"{self!r} takes x and {len(self.contexts)} context value(s), as f does (or x alone, for the "
                f"declared values); it was given {len(values)}."
            )
        return list(values)

    def _kinds_of(self, count: int) -> tuple[tuple[type[Context], bool | None], ...]:
        """Each context's class and ``static`` option: as declared, or, without
        declared contexts, ``count`` Constants."""
        return self._kinds if self.contexts else ((Constant, None),) * count

    def _host(self, leaves: Sequence[Any], values: Sequence[Any]) -> Host | None:
        """The host of the engine tracing this call: the one ``x``'s leaves belong to
        (all the same); without one, the engine of a context value other than
        ``f``'s own (an outer engine passing traced data)."""
        host: Host | None = None
        for leaf in leaves:
            found = host_of(leaf)
            if found is None:
                family = family_of(leaf)
                if family not in (None, "numpy") and family != self.family:
                    hosts = ", ".join(hosting_engines())
                    raise DIError(
                        f"{self!r} was called with {get_family(family).display} arrays, an engine di cannot host it in "
                        f"(it hosts {hosts}). Call it with NumPy arrays, or differentiate f with di "
                        f"directly: di.gradient(f, {self.backend!r}, x)."
                    )
            elif host is not None and found is not host:
                raise DIError(
                    f"{self!r} was called with an x holding values of two engines, {_display(host)} and "
                    f"{_display(found)}: give it the values of the engine that differentiates it, and convert the "
                    f"others."
                )
            else:
                host = found
        if host is None:
            for value in values:
                found = host_of(value)
                if found is not None and found is not self._own_host:
                    return found
        return host

    def _evaluate(self, x: Any, leaves: list[Any], treedef: Any, values: list[Any]) -> Any:
        """``f`` on concrete values no engine traces: on arrays of ``f``'s own family,
        ``f`` itself; on NumPy arrays or Python numbers, ``f`` on its engine's
        arrays, the result brought back to NumPy."""
        family = self.family
        if all(family_of(leaf) == family for leaf in leaves):
            return self.f(x, *values)
        for index, leaf in enumerate(leaves):
            if family_of(leaf) is None and not isinstance(leaf, (float, int)):
                raise InvalidInputError(
                    f"{self!r}: leaf {index} of x ({type_label(leaf)}) is neither a number nor an array "
                    f"of a family di knows ({', '.join(f.name for f in families())}): convert it, e.g. with np.asarray."
                )
        into = converter("numpy", family)
        inputs = [into(np.asarray(leaf) if isinstance(leaf, (float, int)) else leaf) for leaf in leaves]
        arguments = [to_family(v, family) for v in values]
        with get_family(family).scope([getattr(leaf, "dtype", None) for leaf in inputs]):
            y = self.f(tree_unflatten(treedef, inputs), *arguments)
        return tree_map(lambda leaf: converter(family_of(leaf), "numpy")(leaf) if family_of(leaf) else leaf, y)

    # --- what hosts ask -----------------------------------------------------------------------

    def call_for(
        self, treedef: Any, x_specs: Sequence[Spec], values: Sequence[Any], operand_specs: dict[int, Spec]
    ) -> Call:
        """The :class:`~di.mixing.calls.Call` of one call: its signature (made the first
        time these specs are seen) and the captured context values.

        Args:
            treedef: ``x``'s structure.
            x_specs: the shape and dtype name of each leaf of ``x``.
            values: the context values.
            operand_specs: the specs of the context values the host passes as
                operands, by position (the others are captured).
        """
        contexts = (
            ("operand", operand_specs[i]) if i in operand_specs else _captured_key(v) for i, v in enumerate(values)
        )
        key = (treedef, tuple(x_specs), tuple(contexts))
        signature = self._signatures.get(key)
        if signature is None:
            with self._lock:
                signature = self._signatures.get(key)
                if signature is None:
                    kinds = self._kinds_of(len(values))
                    signature = Signature(
                        self.f, self.backend, kinds, treedef, x_specs, operand_specs, inner=self._own_host
                    )
                    self._signatures[key] = signature
        captured = [None if i in operand_specs else v for i, v in enumerate(values)]
        return Call(signature, captured, sorted(operand_specs))

    def operand_positions(self, host: Host, values: Sequence[Any]) -> list[int]:
        """The context positions a host passes as operands: non-static Constants
        whose value is one of the host engine's arrays."""
        return [
            i
            for i, ((kind, static), value) in enumerate(zip(self._kinds_of(len(values)), values))
            if kind is Constant and static is not True and host.owns(value)
        ]


def _captured_key(value: Any) -> Any:
    """How a captured context value counts in a signature: arrays by spec, other
    values by class (a new float is the same signature; the prep decides)."""
    return ("captured", spec_of(value) if family_of(value) is not None else type(value))
