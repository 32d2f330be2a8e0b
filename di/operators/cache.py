"""The implicit preparation cache: what an unprepared call (``di.gradient(f,
backend, x)``) prepares is kept and reused by the next call like it.

An unprepared call looks for a prep made for the same ``f`` (the same object,
held weakly), operator family, ``has_aux``, backend (the same selector or an
equal one) and context classes, whose strict signature the call's ``x``,
contexts and tangents match (:meth:`di.prep.base.Prep.matches`: the comparison a
strict prepared call makes). Found, its program runs; not found, the call
prepares with ``strict=True`` and keeps the prep. The cache is a least recently
used list of at most :data:`DEFAULT_MAXSIZE` preps (:func:`set_cache`), shared
by all threads.

A cached prep holds ``f`` through a stand-in that refers to it weakly
(:class:`WeakFunction`), so a function nobody else holds is freed, and its
entries with it: a new lambda per call does not make the cache grow. A call
whose arguments an engine's transform traces (a JAX tracer, an autograd box) is
not cached: the outer transform traces it once already.

Semantics are those of a strict prep made at the first call: a
:class:`di.Constant`'s value is an argument of the compiled program (a new value
never compiles again), while a value ``f`` reads from its closure is baked into
a compiled program at the first call, as under ``jax.jit``: pass it as a
``Constant`` instead.
"""

from __future__ import annotations

import contextlib
import types
from collections.abc import Callable, Iterator, Sequence
from contextvars import ContextVar
from typing import Any, NamedTuple

from di.backends.selectors import AbstractBackend, check_flag
from di.errors import InvalidInputError, InvalidOptionError, InvalidOptionTypeError
from di.operators.cache_store import NO_MEMO, Cache, WeakFunction, identity
from di.operators.prepare import prepare_operator
from di.prep.base import Prep
from di.prep.runners import Missed
from di.prep.traced import tracing

__all__ = [
    "DEFAULT_MAXSIZE",
    "MISS",
    "CacheInfo",
    "UnpreparedCall",
    "WeakFunction",
    "cache_clear",
    "cache_info",
    "cached_prep",
    "caching",
    "set_cache",
    "unprepared_call",
]

DEFAULT_MAXSIZE = 128
"""How many preps the cache holds at most, unless :func:`set_cache` says otherwise."""


class CacheInfo(NamedTuple):
    """What :func:`di.cache_info` returns (as ``functools.lru_cache``'s ``cache_info``).

    Attributes:
        hits: unprepared calls served by a cached prep.
        misses: unprepared calls that prepared (and kept the prep, where cached).
        maxsize: how many preps the cache holds at most.
        currsize: how many it holds now.
        enabled: whether unprepared calls use it (outside a ``di.caching(False)`` block).
    """

    hits: int
    misses: int
    maxsize: int
    currsize: int
    enabled: bool


_CACHE = Cache(DEFAULT_MAXSIZE)
_SCOPED: ContextVar[bool] = ContextVar("di_caching", default=True)


def cached_prep(
    family: str,
    name: str,
    f: Callable[..., Any],
    backend: Any,
    x: Any,
    tangents: Any,
    contexts: Sequence[Any],
    has_aux: bool,
) -> Prep:
    """The prep an unprepared call of program ``name`` of operator ``family``
    runs: a cached one its arguments fit, else a new strict prep (kept, when the
    cache is on and ``f`` can be referred to weakly).

    Raises:
        InvalidInputError: the cache is off and ``backend`` serves prepared calls
            only; and what preparation raises.
    """
    cache = _CACHE
    if not (cache.enabled and _SCOPED.get()) or cache.maxsize <= 0:
        _refuse_prepared_only(family, name, backend)
        return prepare_operator(family, f, backend, x, tangents, contexts, False, has_aux=has_aux)
    try:
        key = (identity(f), family, has_aux, backend, *[context.__class__ for context in contexts])
        prep = cache.find(key, x, tangents, contexts, count_miss=False)
    except TypeError:  # an unhashable selector: prepared at each call
        return prepare_operator(family, f, backend, x, tangents, contexts, False, has_aux=has_aux)
    if prep is not None:
        return prep
    with cache.preparation_lock(key):
        # (another thread may have prepared it meanwhile: a hit; else the one miss of this call)
        prep = cache.find(key, x, tangents, contexts)
        if prep is not None:
            return prep
        try:
            # (a non-callable f is refused by preparation, which must see f itself)
            stand_in = WeakFunction(f, lambda _: cache.freed(key[0])) if callable(f) else None
        except TypeError:  # no weak reference to f: prepared at each call
            stand_in = None
        try:
            uncached = stand_in is None or _traced(x, tangents, contexts)
        except Exception:  # an argument that cannot be looked into (one that holds itself): preparation says why
            uncached = True
        if uncached or stand_in is None:
            return prepare_operator(family, f, backend, x, tangents, contexts, False, has_aux=has_aux)
        prep = prepare_operator(family, stand_in, backend, x, tangents, contexts, True, has_aux=has_aux)
        cache.add(key, prep, stand_in)
        return prep


MISS: Any = object()
"""What :class:`UnpreparedCall`'s ``keyed`` returns when no cached prep serves the call."""


class UnpreparedCall(NamedTuple):
    """What an operator's dispatcher (:func:`di.operators.call.operator_function`)
    runs for an unprepared call of program ``name``, ``(f, args, has_aux)`` with
    ``args`` = ``backend, x, [tangents,] *contexts``: first the last hit, inline
    in the dispatcher (a Python frame fewer than a function of this module would
    cost), then ``keyed``.

    Attributes:
        memo: the program's last hit, a one-item list (:class:`~di.operators.
            cache_store.Cache`: ``(selector, f's weak reference, has_aux, probe,
            token, entry)``); it serves a call whose selector is that object, whose
            ``f`` is that function and ``has_aux`` that flag, while ``scoped()``;
            the probe then compares the arguments and runs the program, or raises
            :class:`~di.prep.runners.Missed`.
        scoped: whether the cache is on in this context (``di.caching``).
        count_hit: counts a hit.
        used: ``used(token)`` ranks the hit's entry most recently used (``KeyError``:
            evicted meanwhile).
        failed: ``failed(entry, args, error)``, on the failure path of a hit:
            raises the error a traced argument explains, chained to ``error``.
        keyed: ``keyed(f, args, has_aux)``: the result of a cached prep found by
            its key, else of ``slow(f, args, None, has_aux)`` (which prepares or
            explains).
    """

    memo: list[tuple[Any, ...]]
    scoped: Callable[[], bool]
    count_hit: Callable[[], int]
    used: Callable[[int], None]
    failed: Callable[[Any, tuple[Any, ...], BaseException], None]
    keyed: Callable[[Any, tuple[Any, ...], bool], Any]


def unprepared_call(
    family: str, name: str, with_tangents: bool, takes_aux: bool, slow: Callable[..., Any]
) -> UnpreparedCall:
    """The unprepared call of program ``name``, for the operator's dispatcher
    (:class:`UnpreparedCall`). ``takes_aux``: whether the operator takes
    ``has_aux`` (a call that gives it otherwise takes the slow path, which
    refuses it).

    The last hit is tried first, before any key is built: the same selector
    object, ``f`` (held weakly) and ``has_aux``; its probe (:func:`~di.prep.runners.
    probe`) compares the arguments as the prep's runner does and runs the
    program. Otherwise the key (whose hash hashes the selector) finds the entries
    to probe, and a hit becomes the last hit."""
    cache = _CACHE
    memo: list[tuple[Any, ...]] = [NO_MEMO]
    cache.memos.append(memo)

    def failed(entry: Any, args: tuple[Any, ...], error: BaseException) -> None:
        tangents, contexts = (args[2], args[3:]) if with_tangents else (None, args[2:])
        entry.prep.refuse_foreign_traces(args[1], tangents, contexts, error)

    def keyed(f: Any, args: tuple[Any, ...], has_aux: bool) -> Any:
        result = found(f, args, has_aux)
        return slow(f, args, None, has_aux) if result is MISS else result

    def found(f: Any, args: tuple[Any, ...], has_aux: bool) -> Any:
        if not (cache.enabled and _SCOPED.get()) or not (has_aux is False or (has_aux is True and takes_aux)):
            return MISS
        backend, x = args[0], args[1]
        if with_tangents:
            tangents, contexts = args[2], args[3:]
            if tangents.__class__ is not tuple:
                return MISS
        else:
            tangents, contexts = None, args[2:]
        identity = id(f) if f.__class__ is not types.MethodType else (id(f.__self__), id(f.__func__))
        if contexts:
            key = (identity, family, has_aux, backend, *[context.__class__ for context in contexts])
        else:
            key = (identity, family, has_aux, backend)
        if cache.pending:
            return MISS
        try:
            entries = cache.preps.get(key)
        except TypeError:  # an unhashable selector (or x where the backend goes)
            return MISS
        if not entries:
            return MISS
        candidates = tuple(entries)
        for entry in candidates:
            run = entry.probes[name]
            try:
                result = run(x, tangents, contexts) if with_tangents else run(x, contexts)
            except Missed:
                continue
            except Exception as error:
                entry.prep.refuse_foreign_traces(x, tangents, contexts, error)
                raise
            cache.hit(entry, entries)
            if entry.function is not None:  # (a bound method is a new object at each access)
                cache.remember(memo, entry, backend, has_aux, name)
            return result
        for entry in candidates:
            # arguments the prep takes as something else (a memmap as its ndarray, an
            # autograd box by its array): its runner's own slow path runs them so
            if entry.prep.matches(x, contexts, tangents):
                cache.hit(entry, entries)
                run = entry.prep.runners[name]
                try:
                    if with_tangents:
                        return run(entry.stand_in, backend, x, tangents, contexts)
                    return run(entry.stand_in, backend, x, contexts)
                except Exception as error:
                    entry.prep.refuse_foreign_traces(x, tangents, contexts, error)
                    raise
        return MISS

    # (bound once: the store never replaces its counter, order or context variable)
    return UnpreparedCall(memo, _SCOPED.get, cache.hit_count.__next__, cache.order.move_to_end, failed, keyed)


def _traced(x: Any, tangents: Any, contexts: Sequence[Any]) -> bool:
    """Whether an argument is traced by an engine's transform."""
    values = [x, *(tangents or ()), *[getattr(context, "value", None) for context in contexts]]
    return any(tracing(value)[0] for value in values)


def _refuse_prepared_only(family: str, name: str, backend: Any) -> None:
    """Refuse an unprepared call, the cache being off, on a backend that serves
    prepared calls only (:class:`di.AutoFastest` would measure its candidates at
    every call).

    Raises:
        InvalidInputError: saying to prepare, or to turn the cache on.
    """
    if isinstance(backend, AbstractBackend) and backend.prepared_only:
        from di.operators.table import OPERATORS

        label = OPERATORS[family].tangents
        arguments = f"x, {label}, *contexts" if label else "x, *contexts"
        raise InvalidInputError(
            f"{backend!r} serves unprepared calls only through di's preparation cache, which is off: "
            f"{backend.prepared_only}. Prepare once with prep = di.prepare_{family}(f, backend, {arguments}), then "
            f"call di.{name}(f, prep, backend, {arguments}); or turn the cache on (di.set_cache(enabled=True))."
        )


def cache_info() -> CacheInfo:
    """What the implicit preparation cache of unprepared calls holds and did.

    Returns:
        A :class:`CacheInfo` ``(hits, misses, maxsize, currsize, enabled)``.

    Raises:
        Nothing: it only reads the counts.

    Examples:
        >>> import numpy as np, di
        >>> di.cache_clear()
        >>> f = lambda x: (x * x).sum()
        >>> for value in (1.0, 2.0, 3.0):
        ...     g = di.gradient(f, di.AutoFiniteDiff(), np.full(3, value))
        >>> info = di.cache_info()
        >>> info.hits, info.misses, info.currsize
        (2, 1, 1)
    """
    cache = _CACHE
    with cache.lock:
        cache._purge()
        return CacheInfo(cache.hits(), cache.misses, cache.maxsize, len(cache.order), cache.enabled and _SCOPED.get())


def cache_clear() -> None:
    """Empty the implicit preparation cache and reset its counts.

    The programs it held are freed (compiled ones too) once no prep handed out
    holds them; the next unprepared call of each ``f`` prepares again.

    Returns:
        ``None``.

    Raises:
        Nothing: an empty cache is cleared as well.

    Examples:
        >>> import numpy as np, di
        >>> _ = di.gradient(lambda x: (x * x).sum(), di.AutoFiniteDiff(), np.ones(2))
        >>> di.cache_clear()
        >>> di.cache_info().currsize
        0
    """
    _CACHE.clear()


def set_cache(*, enabled: bool | None = None, maxsize: int | None = None) -> CacheInfo:
    """Turn the implicit preparation cache on or off, or resize it, for the whole
    process (:func:`caching` does it for a block of code).

    Args:
        enabled: whether unprepared calls use the cache (off: each prepares, as
            ``prepare_<operator>`` then the call would). ``None`` leaves it.
        maxsize: how many preps it holds at most (the least recently used go
            first); ``0`` keeps none. ``None`` leaves it; the default is
            :data:`DEFAULT_MAXSIZE`.

    Returns:
        The :class:`CacheInfo` after the change.

    Raises:
        InvalidOptionTypeError: ``enabled`` not a bool, ``maxsize`` not an int.
        InvalidOptionError: ``maxsize`` negative.

    Examples:
        >>> import di
        >>> di.set_cache(maxsize=16).maxsize
        16
        >>> di.set_cache(maxsize=128).maxsize  # (the default)
        128
    """
    if enabled is not None:
        enabled = check_flag("di.set_cache", "enabled", enabled)
    if maxsize is not None:
        if isinstance(maxsize, bool) or not isinstance(maxsize, int):
            raise InvalidOptionTypeError(f"di.set_cache(maxsize=...) takes an int, not {type(maxsize).__name__}")
        if maxsize < 0:
            raise InvalidOptionError(f"di.set_cache(maxsize=...) takes 0 or more, not {maxsize}")
        _CACHE.resize(maxsize)
    if enabled is not None:
        _CACHE.enabled = enabled
        if not enabled:
            _CACHE.forget()  # (after the switch: a memo written meanwhile undoes itself)
    return cache_info()


@contextlib.contextmanager
def caching(enabled: bool) -> Iterator[None]:
    """Turn the implicit preparation cache on or off for the unprepared calls
    made in a block (in this thread, or this task under ``asyncio``); the
    process-wide switch is :func:`set_cache`.

    Args:
        enabled: ``False``: each unprepared call in the block prepares afresh and
            keeps nothing. ``True``: calls use the cache (when it is on).

    Yields:
        Nothing: the block runs with the cache on or off.

    Raises:
        InvalidOptionTypeError: ``enabled`` is not a bool.

    Examples:
        >>> import numpy as np, di
        >>> di.cache_clear()
        >>> with di.caching(False):
        ...     _ = di.gradient(lambda x: (x * x).sum(), di.AutoFiniteDiff(), np.ones(2))
        >>> di.cache_info().currsize
        0
    """
    token = _SCOPED.set(check_flag("di.caching", "enabled", enabled))
    try:
        yield
    finally:
        _SCOPED.reset(token)
