"""What the implicit preparation cache (:mod:`di.operators.cache`) keeps: its
entries, the least-recently-used store of them, and ``f``'s weak stand-in."""

from __future__ import annotations

import itertools
import threading
import types
import weakref
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Any

from di.prep.base import Prep
from di.prep.runners import probe

__all__ = ["NO_MEMO", "Cache", "Entry", "WeakFunction", "identity"]


class WeakFunction:
    """``f``'s stand-in in a cached prep: calls ``f``, which it refers to weakly
    (a bound method through weak references to its object and its function), and
    reads ``f``'s attributes (what an engine asks of ``f``) as its own.

    Args:
        f: the function; it must support weak references.

    Raises:
        TypeError: ``f`` (or a bound method's object) takes no weak reference.

    Examples:
        >>> from di.operators.cache import WeakFunction
        >>> def square(x):
        ...     return x * x
        >>> stand_in = WeakFunction(square)
        >>> stand_in(3), stand_in.__name__
        (9, 'square')
    """

    __slots__ = ("__weakref__", "_function", "_self")

    def __init__(self, f: Callable[..., Any], on_free: Callable[[Any], None] | None = None) -> None:
        if type(f) is types.MethodType:
            self._self: Any = weakref.ref(f.__self__, on_free)
            self._function: Any = weakref.ref(f.__func__, on_free)
        else:
            self._self = None
            self._function = weakref.ref(f, on_free)

    def __call__(self, *args: Any) -> Any:
        # (engines call f with positional arguments only: no keywords' dict at each call)
        if self._self is None:
            return self._function()(*args)
        return self._function()(self._self(), *args)

    def target(self) -> Any:
        """``f``, or ``None`` once it is freed."""
        function = self._function()
        if self._self is None or function is None:
            return function
        owner = self._self()
        return None if owner is None else types.MethodType(function, owner)

    def __di_resolved__(self) -> Any:
        """``f`` itself while it lives (this stand-in once it is freed): what
        :func:`di.backends.protocol.resolved` gives an engine that calls ``f`` many
        times within one call."""
        target = self.target()
        return self if target is None else target

    def __getattr__(self, name: str) -> Any:
        # f's own attributes (what an engine asks of f: checked_program, ...) and its
        # names; no other dunder, which a compiler guarding on this object reads of it
        if name.startswith("__") and name not in ("__name__", "__qualname__"):
            raise AttributeError(name)
        return getattr(self.target(), name)

    def __repr__(self) -> str:
        return repr(self.target())


def identity(f: Any) -> tuple[int, int] | int:
    """The key of ``f`` in the cache: its ``id`` (a bound method's, that of its
    object and function: ``obj.method`` is a new object at each access)."""
    if type(f) is types.MethodType:
        return id(f.__self__), id(f.__func__)
    return id(f)


class Entry:
    """One cached prep: its eviction token, the prep, ``f``'s stand-in, and for
    each program the :func:`~di.prep.runners.probe` a cached call runs (the
    prep's comparison and program in one call). ``alive`` turns false when the
    entry leaves the cache (the last-hit memo of a call checks it)."""

    __slots__ = ("alive", "function", "prep", "probes", "stand_in", "token")

    def __init__(self, token: int, prep: Prep, stand_in: WeakFunction) -> None:
        self.token = token
        self.prep = prep
        self.stand_in = stand_in
        self.function = stand_in._function if stand_in._self is None else None  # (a weak reference to f)
        self.probes = {name: probe(prep, program) for name, program in prep.programs.items()}
        self.alive = True


def _dead() -> None:
    return None


NO_MEMO: tuple[Any, ...] = (object(), _dead, None, None, None, None)
"""A memo that no call fits (its selector is no object a call passes)."""


class Cache:
    """The preps of unprepared calls, least recently used first out.

    Each key (``f``'s identity, the operator family, ``has_aux``, the backend,
    the context classes) holds the entries of the signatures met with it, most
    recently used first; ``order`` ranks every entry of every key for eviction.

    Each program's unprepared call remembers its last hit in a memo (a one-item
    list, :data:`NO_MEMO` when empty): ``(selector, f's weak reference, has_aux,
    probe, token, entry)``, tried before any key is built. A memo is
    emptied as its entry leaves the cache, and whenever the cache is turned off,
    so that its call need not ask.
    """

    def __init__(self, maxsize: int) -> None:
        self.lock = threading.Lock()
        self.maxsize = maxsize
        self.enabled = True
        self.misses = 0
        # hits are counted by next(hit_count), atomic without the lock (a hit takes no
        # lock); reading the count advances it too, so the reads are counted apart, and
        # the count is never replaced (a memo's call holds its __next__): cleared, it
        # starts again from hit_base
        self.hit_count = itertools.count()
        self.hit_reads = self.hit_base = 0
        self.memos: list[list[tuple[Any, ...]]] = []
        # (read through the store: a weak reference's callback may empty memos at
        # interpreter exit, once this module's globals are gone)
        self.no_memo = NO_MEMO
        self.preps: dict[tuple[Any, ...], list[Entry]] = {}
        self.order: OrderedDict[int, tuple[Any, ...]] = OrderedDict()  # token -> key
        self.keys_of: dict[Any, set[tuple[Any, ...]]] = {}  # f's identity -> its keys
        self.pending: list[Any] = []  # identities freed while the lock was held
        self.preparing: dict[tuple[Any, ...], threading.RLock] = {}
        self.tokens = iter(range(1 << 62))

    def find(
        self, key: tuple[Any, ...], x: Any, tangents: Any, contexts: Sequence[Any], count_miss: bool = True
    ) -> Prep | None:
        """The cached prep of ``key`` that the arguments fit (a hit), or ``None``
        (a miss, counted when ``count_miss``)."""
        with self.lock:
            if self.pending:  # (entries of freed functions, whose ids new functions may have taken)
                self._purge()
            entries = self.preps.get(key)
            if entries is not None:
                for index, entry in enumerate(entries):
                    if entry.prep.matches(x, contexts, tangents):
                        next(self.hit_count)
                        self.order.move_to_end(entry.token)
                        if index:
                            entries.insert(0, entries.pop(index))
                        return entry.prep
            if count_miss:
                self.misses += 1
            return None

    def hit(self, entry: Entry, entries: list[Entry] | None = None) -> None:
        """Count a hit of ``entry`` and make it the most recently used (and the
        first of its key's ``entries``, when given). Without the lock: each step
        is one operation of a built-in container, and an entry evicted meanwhile
        has left ``order`` (and ``entries``) already."""
        next(self.hit_count)
        try:
            self.order.move_to_end(entry.token)
            if entries is not None and entries[0] is not entry:
                entries.remove(entry)
                entries.insert(0, entry)
        except (KeyError, ValueError, IndexError):
            pass

    def hits(self) -> int:
        """How many hits were counted (with the lock held)."""
        count = next(self.hit_count) - self.hit_reads - self.hit_base
        self.hit_reads += 1
        return count

    def remember(self, memo: list[tuple[Any, ...]], entry: Entry, backend: Any, has_aux: bool, name: str) -> None:
        """Make ``entry`` the last hit of a program's ``memo``; undone at once
        when the entry has left the cache, or the cache was turned off, meanwhile
        (their forgetting may have come before this memo was written)."""
        memo[0] = (backend, entry.function, has_aux, entry.probes[name], entry.token, entry)
        if not (entry.alive and self.enabled):
            memo[0] = self.no_memo

    def forget(self, entries: Any = None) -> None:
        """Empty the memos of ``entries`` (a container of entries; ``None``: every memo)."""
        for memo in self.memos:
            if entries is None or memo[0][5] in entries:
                memo[0] = self.no_memo

    def add(self, key: tuple[Any, ...], prep: Prep, stand_in: WeakFunction) -> None:
        """Keep ``prep`` under ``key``, evicting the least recently used beyond the size."""
        with self.lock:
            self._purge()
            if self.maxsize <= 0:
                return
            entry = Entry(next(self.tokens), prep, stand_in)
            self.preps.setdefault(key, []).insert(0, entry)
            self.order[entry.token] = key
            self.keys_of.setdefault(key[0], set()).add(key)
            while len(self.order) > self.maxsize:
                self._evict(*self.order.popitem(last=False))

    def _evict(self, token: int, key: tuple[Any, ...]) -> None:
        entries = self.preps[key]
        for entry in entries:
            if entry.token == token:
                entry.alive = False
                self.forget((entry,))
        entries[:] = [entry for entry in entries if entry.token != token]
        if not entries:
            del self.preps[key]
            keys = self.keys_of.get(key[0])
            if keys is not None:
                keys.discard(key)
                if not keys:
                    del self.keys_of[key[0]]

    def freed(self, identity: Any) -> None:
        """Drop the entries of a freed function (a weak reference's callback: it
        may come while this thread holds the lock, and then waits for the next use;
        its memos are emptied at once, whose weak reference now gives ``None``)."""
        for memo in self.memos:
            if memo[0][1]() is None:
                memo[0] = self.no_memo
        if self.lock.acquire(blocking=False):
            try:
                self._drop(identity)
            finally:
                self.lock.release()
        else:
            self.pending.append(identity)

    def _purge(self) -> None:
        while self.pending:
            self._drop(self.pending.pop())

    def _drop(self, identity: Any) -> None:
        for key in self.keys_of.pop(identity, ()):
            entries = self.preps.pop(key, ())
            for entry in entries:
                entry.alive = False
                self.order.pop(entry.token, None)
            self.forget(entries)
            self.preparing.pop(key, None)

    def clear(self) -> None:
        with self.lock:
            for entries in self.preps.values():
                for entry in entries:
                    entry.alive = False
            self.forget()
            self.preps.clear()
            self.order.clear()
            self.keys_of.clear()
            self.preparing.clear()
            self.pending.clear()
            self.misses = self.hit_reads = 0
            self.hit_base = next(self.hit_count) + 1

    def resize(self, maxsize: int) -> None:
        with self.lock:
            self.maxsize = maxsize
            while len(self.order) > max(maxsize, 0):
                self._evict(*self.order.popitem(last=False))

    def preparation_lock(self, key: tuple[Any, ...]) -> threading.RLock:
        """The lock one key's preparations take: threads missing the same key at
        once prepare once (reentrant: ``f`` may make unprepared calls itself)."""
        with self.lock:
            lock = self.preparing.get(key)
            if lock is None:
                lock = self.preparing[key] = threading.RLock()
            return lock
