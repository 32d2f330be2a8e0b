"""64-bit dtypes on JAX: a scope per call, and NumPy constants kept per scope.

JAX turns 64-bit inputs into 32-bit ones unless x64 is enabled. ``di`` never
touches the global flag: programs whose inputs are 64-bit run inside a scoped
``jax.enable_x64(True)`` (none is entered when the caller's scope already
enables it), so float64 stays float64 and float32 stays float32 in one process.

Mixing the two scopes walks into a JAX cache: JAX canonicalizes a NumPy array
that ``f`` closes over (indices for ``take``, a matrix) into the dtype of the
current scope and caches the result by the array alone, for as long as the
result lives, which is as long as a prep holding a program traced with it. A
float32 prep traced after a float64 one then met the int64 (or float64) copy:
programs failed to lower or to run (``expected s32[5] ... got s64[5]``) or mixed
dtypes. :func:`keep_constants_per_scope` registers a canonicalization of NumPy
arrays cached per array *and* scope, the same result JAX computes.
"""

from __future__ import annotations

import contextlib
import functools
import weakref
from collections.abc import Callable, Sequence
from typing import Any

import jax
import numpy as np

try:
    from jax._src import dtypes as _dtypes
    from jax._src import literals as _literals
except ImportError:  # pragma: no cover - another JAX layout
    _dtypes = _literals = None  # type: ignore[assignment]

from di.families import family_of, is_64_bit

__all__ = ["in_x64", "keep_constants_per_scope", "needs_x64", "x64_scope"]

_X64 = jax.enable_x64  # the x64 state: ``_X64.value`` reads it, ``_X64(True)`` scopes it


def needs_x64(values: Sequence[Any]) -> bool:
    """Whether any value (or pytree leaf) is a 64-bit array (float64 only exists
    in JAX inside ``jax.enable_x64``)."""
    for value in jax.tree_util.tree_leaves(list(values)):
        if family_of(value) is not None and is_64_bit(value.dtype):
            return True
    return False


def x64_scope() -> contextlib.AbstractContextManager[Any]:
    """``enable_x64(True)``, or nothing when the caller's scope already enables it
    (entering a nested scope costs a jitted call about 4 us)."""
    return contextlib.nullcontext() if _X64.value else _X64(True)  # type: ignore[no-any-return]


def in_x64(program: Callable[..., Any]) -> Callable[..., Any]:
    """``program`` run inside ``jax.enable_x64(True)`` (conversions included: a
    float64 torch tensor only stays float64 in JAX there), entering no scope when
    the caller's already enables x64."""

    def run_in_x64(*args: Any) -> Any:
        state = _X64
        if state.value:
            return program(*args)
        with state(True):
            return program(*args)

    return run_in_x64


# --- NumPy constants, canonicalized per scope ------------------------------------------------

_CANONICAL: dict[tuple[int, bool], tuple[weakref.ref[Any], weakref.ref[Any]]] = {}


def _forget(key: tuple[int, bool], source: weakref.ref[Any]) -> None:
    """Drop the entry of an array that died (unless the key is another array's now)."""
    entry = _CANONICAL.get(key)
    if entry is not None and entry[0] is source:
        del _CANONICAL[key]


def _canonical_ndarray(array: np.ndarray) -> Any:
    """``array`` as JAX canonicalizes it in the current x64 scope, one result per
    array and scope, kept while both live (JAX keeps one per array)."""
    key = (id(array), bool(_X64.value))
    entry = _CANONICAL.get(key)
    if entry is not None:
        source, result = entry[0](), entry[1]()
        if source is array and result is not None:
            return result
    _dtypes.check_valid_dtype(array.dtype)
    result = _literals.TypedNdArray(np.asarray(array, _dtypes.canonicalize_dtype(array.dtype)))
    _CANONICAL[key] = (weakref.ref(array, functools.partial(_forget, key)), weakref.ref(result))
    return result


@functools.cache
def keep_constants_per_scope() -> bool:
    """Register :func:`_canonical_ndarray` as JAX's canonicalization of NumPy
    arrays (once per process); ``False`` where this JAX has no such hook."""
    register = getattr(_dtypes, "register_canonicalize_value_handler", None)
    if register is None or not hasattr(_literals, "TypedNdArray") or not hasattr(_dtypes, "check_valid_dtype"):
        return False  # pragma: no cover - a JAX without the cache
    register(np.ndarray, _canonical_ndarray)
    return True
