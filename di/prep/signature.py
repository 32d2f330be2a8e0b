"""Signatures of prepared arguments, their fast check, and the mismatch report.

A prep remembers, for ``x`` and each context, a *key*: a small tuple of the
argument's type, shape, dtype and (torch) device, computed by a key function
chosen once per argument at preparation. Checking a call is computing the same
keys and comparing tuples; only when they differ is the readable report built.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np

from di.contexts import Context
from di.errors import InvalidInputError, PreparationMismatchError, type_label
from di.families import dtype_kind, families, family_of, get_family, is_floating_dtype, spec_of
from di.pytrees import (
    Structure,
    check_flattens,
    check_floating_leaves,
    foreign_pytree,
    is_pytree,
    leaf_paths,
    traced_by,
    tree_flatten,
    tree_map,
)

__all__ = [
    "ArgumentCheck",
    "ArgumentsRejected",
    "checked_by_executable",
    "checks_arguments",
    "compiling_again",
    "TracedType",
    "check_array_kinds",
    "check_contexts_wrapped",
    "check_tangent_dtypes",
    "check_x",
    "check_x_leaves",
    "concrete",
    "key_function",
    "mismatch_error",
    "named_leaves",
    "one_family_matcher",
    "plain",
    "register_traced_type",
    "same_selector",
    "set_traced_type_loader",
    "traced_type",
    "tracing",
]

KeyFunction = Callable[[Any], Any]
Matcher = Callable[[Any], bool]


# --- programs that check their own arguments ------------------------------------------------


class ArgumentsRejected(Exception):
    """Raised by a program that checks its own arguments (an ahead-of-time compiled
    executable: it refuses another pytree structure, shape or dtype) when it
    refuses a call's. The prep's runner then builds the mismatch report of a strict
    prep, or runs the program again inside :func:`compiling_again`."""


_AGAIN = threading.local()


@contextlib.contextmanager
def compiling_again() -> Iterator[None]:
    """Within this block a program that checks its own arguments runs arguments it
    refuses through its compile-on-call function (a new compile) instead of raising
    :class:`ArgumentsRejected`: what a non-strict prep does with other arguments."""
    before = getattr(_AGAIN, "on", False)
    _AGAIN.on = True
    try:
        yield
    finally:
        _AGAIN.on = before


def checked_by_executable(executable: Callable[..., Any], function: Callable[..., Any]) -> Callable[..., Any]:
    """A program that calls ``executable`` (compiled for the prepared arguments,
    which refuses others with a ``TypeError``) and, for arguments it refuses,
    raises :class:`ArgumentsRejected`, or inside :func:`compiling_again` calls
    ``function`` (which compiles for them). Marked ``checks_arguments``, so a
    strict prep's runner leaves the comparison of ``x`` to it.

    Examples:
        >>> from di.prep.signature import ArgumentsRejected, checked_by_executable, compiling_again
        >>> def executable(x):
        ...     if not isinstance(x, int):
        ...         raise TypeError("compiled for int")
        ...     return x + 1
        >>> run = checked_by_executable(executable, lambda x: x + 0.5)
        >>> run(1)
        2
        >>> with compiling_again():
        ...     run(1.0)
        1.5
    """

    def run(*args: Any) -> Any:
        try:
            return executable(*args)
        except TypeError:
            if getattr(_AGAIN, "on", False):
                return function(*args)
            raise ArgumentsRejected() from None

    run.checks_arguments = True  # type: ignore[attr-defined]
    run.executable = executable  # type: ignore[attr-defined]
    return run


def checks_arguments(program: Callable[..., Any]) -> bool:
    """Whether ``program`` checks its own arguments (see :func:`checked_by_executable`)."""
    return bool(getattr(program, "checks_arguments", False))


# --- values an engine traces that are not arrays of a family ---------------------------------


class TracedType:
    """A class of values an engine traces in place of arrays, which is no array
    family's (autograd's boxes wrap NumPy arrays): registered by the engine's
    adapter (:func:`register_traced_type`), so that ``x`` may be one where that
    engine runs, a strict prep matches it by the array inside, and other engines
    refuse it up front.

    Args:
        cls: the class of the traced values.
        engine: the engine that can take them (a selector's ``engine``).
        transform: the transform that makes them, as a user writes it.
        value: the concrete array inside a traced value.
    """

    __slots__ = ("cls", "engine", "transform", "value")

    def __init__(self, cls: type, engine: str, transform: str, value: Callable[[Any], Any]) -> None:
        self.cls, self.engine, self.transform, self.value = cls, engine, transform, value


_TRACED_TYPES: dict[type, TracedType] = {}
_TRACER_LOADER: list[Callable[[str], None]] = []
"""The function importing the adapters that trace a top-level package's values
(set by the backend registry, a higher layer: :func:`set_traced_type_loader`)."""
_LOOKED_UP: set[str] = set()
"""The top-level packages the loader was asked about (each once)."""


def register_traced_type(traced: TracedType) -> None:
    """Make ``traced.cls`` known as an engine's traced values (an adapter does it
    when its module is imported)."""
    _TRACED_TYPES[traced.cls] = traced


def set_traced_type_loader(loader: Callable[[str], None]) -> None:
    """Set the function that, given a top-level package (``"mylib"``), imports the
    adapters of the engines tracing its values, which register their traced types
    as they are imported; packages already looked up are looked up again."""
    _TRACER_LOADER[:] = [loader]
    _LOOKED_UP.clear()


def traced_type(value: Any) -> TracedType | None:
    """The registered :class:`TracedType` of ``value``, or ``None``.

    A class nobody registered, of a package whose engine's adapter was not
    imported yet (an outer transform of that engine around a call of another
    backend), has that adapter imported, once per package, and is looked up
    again: this slow path runs only for values of no array family."""
    traced = _TRACED_TYPES.get(value.__class__)
    if traced is None and _TRACER_LOADER:
        return _discovered(value)
    return traced


def _discovered(value: Any) -> TracedType | None:
    cls = value.__class__
    package = str(getattr(cls, "__module__", None) or "").partition(".")[0]
    if not package or package in _LOOKED_UP or family_of(value) is not None:
        return None
    try:
        _TRACER_LOADER[0](package)
    finally:  # (after: another thread asking meanwhile imports too, which waits for this import)
        _LOOKED_UP.add(package)
    return _TRACED_TYPES.get(cls)


def concrete(value: Any) -> Any:
    """``value``, or the array inside a registered traced value, or a NumPy
    array of a subclass as a plain ``ndarray`` (:func:`plain`)."""
    traced = traced_type(value)
    return plain(value) if traced is None else traced.value(value)


def plain(value: Any) -> Any:
    """``value`` with its NumPy arrays of a subclass that NumPy's family takes as
    they are (``np.memmap``, not the masked arrays and matrices it refuses) seen
    as plain ``np.ndarray``s (views, no copy), a pytree's leaves too: a strict
    prep records and compares them so, as the arrays the engines compute with, so
    that a prep made with an ndarray serves a memmap of that shape and dtype, and
    the reverse. Anything else is returned as it is.

    Examples:
        >>> import numpy as np
        >>> from di.prep.signature import plain
        >>> class Tagged(np.ndarray):
        ...     pass
        >>> type(plain(np.zeros(2).view(Tagged))).__name__, type(plain({"w": np.zeros(2).view(Tagged)})["w"]).__name__
        ('ndarray', 'ndarray')
    """
    if value.__class__ is np.ndarray:
        return value
    if isinstance(value, np.ndarray):
        return value.view(np.ndarray) if _plain_subclass(value) else value
    try:
        if not (is_pytree(value) and any(_plain_subclass(leaf) for leaf in tree_flatten(value)[0])):
            return value
    except (RecursionError, ValueError, TypeError):  # (one that cannot be flattened: its own check says why)
        return value
    return tree_map(lambda leaf: leaf.view(np.ndarray) if _plain_subclass(leaf) else leaf, value)


def _plain_subclass(value: Any) -> bool:
    """Whether ``value`` is a NumPy array of a subclass that NumPy's own family
    takes as it is (no family of its own, no refusal)."""
    return (
        isinstance(value, np.ndarray)
        and value.__class__ is not np.ndarray
        and family_of(value) == "numpy"
        and not get_family("numpy").refusal(value, "x")
    )


def tracing(value: Any) -> tuple[str, str]:
    """``(transform, owner)`` for a value traced by an engine transform (or a
    pytree with such a leaf): the transform as a user writes it, and what can
    take the value, an array family's name (the engine computing in it) or a
    registered engine's; ``("", "")`` for concrete values."""
    traced = traced_type(value)
    if traced is not None:
        return traced.transform, traced.engine
    transform = traced_by(value)
    if not transform:
        return "", ""
    family = family_of(value)
    if family is None:
        family = next(family_of(leaf) for leaf in tree_flatten(value)[0] if family_of(leaf) is not None)
    return transform, str(family)


def same_selector(given: Any, prepared: Any) -> bool:
    """Whether ``given`` is the selector ``prepared`` or equal to it (``==``); a
    value whose ``==`` answers no truth value (an array passed as the backend) is not."""
    if given is prepared:
        return True
    try:
        return bool(given == prepared)
    except Exception:  # an array's elementwise answer: no selector
        return False


def _type_key(value: Any) -> Any:
    return value.__class__


def _tuple_key(keys: Sequence[KeyFunction]) -> KeyFunction:
    """Key of a tuple (tangents, a tuple of static values): its length and the key
    of each element."""
    count = len(keys)

    def key(value: Any) -> Any:
        if value.__class__ is not tuple or len(value) != count:
            return (value.__class__, len(value) if isinstance(value, (tuple, list)) else None)
        return tuple(k(v) for k, v in zip(keys, value))

    return key


def _tree_key(structure: Structure, keys: Sequence[KeyFunction]) -> KeyFunction:
    """Key of a pytree: its structure and the key of each leaf."""

    def key(value: Any) -> Any:
        leaves = structure.leaves(value)
        if leaves is None:
            return ("structure", tree_flatten(value)[1])
        return tuple(k(leaf) for k, leaf in zip(keys, leaves))

    return key


def _tree_matcher(structure: Structure, leaves_match: Callable[[Sequence[Any]], bool]) -> Matcher:
    """A predicate recognising pytrees of ``structure`` whose leaves match, in plain
    Python (a compiler tracing a prepared call follows it)."""

    def matches(given: Any) -> bool:
        leaves = structure.leaves(given)
        return leaves is not None and leaves_match(leaves)

    return matches


def one_family_matcher(values: Sequence[Any]) -> Callable[[Sequence[Any]], bool] | None:
    """A predicate recognising sequences of arrays like ``values`` in one loop of
    their family (:meth:`di.Family.leaves_matcher`), when they are arrays of one
    family; else ``None``."""
    names = {family_of(value) for value in values}
    if len(names) == 1 and None not in names:
        return get_family(names.pop()).leaves_matcher(values)  # type: ignore[arg-type]
    return None


def _leaves_matcher(leaves: Sequence[Any]) -> Callable[[Sequence[Any]], bool]:
    """A predicate recognising sequences of leaves like ``leaves``: their family's
    one loop when they are arrays of one family (the common pytree ``x``), else
    each leaf's matcher."""
    same_family = one_family_matcher(leaves)
    if same_family is not None:
        return same_family
    matchers = [matcher_for(leaf, key_function(leaf)) for leaf in leaves]

    def matches(given: Sequence[Any]) -> bool:
        return all(match(leaf) for match, leaf in zip(matchers, given))

    return matches


def key_function(value: Any) -> KeyFunction:
    """The key function for an argument like ``value``.

    Arrays are keyed as their family says (class, shape, dtype, and device where
    it has several); any other value by its class only, so a new Python float or
    a new static value is accepted (compiled backends then decide whether that
    means a new compile).
    """
    if value.__class__ is tuple:
        return _tuple_key([key_function(item) for item in value])
    if is_pytree(value):
        leaves, spec = tree_flatten(value)
        if not spec.is_leaf():  # (a JAX-only node is keyed by its class)
            return _tree_key(Structure(value), [key_function(leaf) for leaf in leaves])
    family = family_of(value)
    if family is not None:
        return get_family(family).key
    return _type_key


def matcher_for(value: Any, key: KeyFunction) -> Matcher:
    """A predicate recognising arguments like ``value``: for arrays, the family's
    field-by-field matcher, which builds no key tuple (the hot path of a strict
    prepared call); otherwise it compares keys."""
    family = family_of(value)
    if family is None:
        if is_pytree(value):
            leaves, spec = tree_flatten(value)
            if not spec.is_leaf():
                return _tree_matcher(Structure(value), _leaves_matcher(leaves))
        expected = key(value)
        return lambda given: bool(key(given) == expected)
    return get_family(family).matcher(value)


def describe_value(value: Any) -> str:
    """One-line description of an argument for reports."""
    family = family_of(value)
    if family is not None:
        annotation = get_family(family).annotation(value)
        return f"{spec_of(value).describe()} ({annotation})" if annotation else spec_of(value).describe()
    traced = traced_type(value)
    if traced is not None:
        return f"{describe_value(traced.value(value))} (traced by {traced.transform})"
    if isinstance(value, Context):
        return f"{type(value).__name__} {describe_value(value.value)}"
    if isinstance(value, tuple) and value.__class__ is tuple and any(family_of(item) is not None for item in value):
        return "(" + ", ".join(describe_value(item) for item in value) + ")"
    if is_pytree(value):
        leaves, _ = tree_flatten(value)
        if len(leaves) == 1 and leaves[0] is value:
            return f"{type(value).__name__} (a {foreign_pytree(value)} pytree)"
        return f"{type(value).__name__} pytree of {len(leaves)} arrays"
    text = repr(value)
    if len(text) > 40:
        text = text[:37] + "..."
    return f"{type(value).__name__} {text}"


class ArgumentCheck:
    """How one prepared argument is recognised on later calls.

    Args:
        label: ``"x"`` or ``"context 1"``, ...
        wrapper: the context class (``Constant``/``Cache``), ``None`` for ``x``.
        key: the key function.
        expected: the key at preparation.
        description: the human description at preparation.
    """

    __slots__ = ("description", "expected", "key", "label", "leaves", "matcher", "wrapper")

    def __init__(self, label: str, wrapper: type | None, key: KeyFunction, expected: Any, description: str) -> None:
        self.label = label
        self.wrapper = wrapper
        self.key = key
        self.expected = expected
        self.description = description
        self.leaves: tuple[Any, list[tuple[KeyFunction, Any, str]]] | None = None
        self.matcher: Matcher = lambda given: bool(key(given) == expected)

    @classmethod
    def of(cls, label: str, value: Any, wrapper: type | None = None) -> ArgumentCheck:
        """Record ``value`` (the bare value, not its context wrapper), its NumPy
        arrays of a subclass as plain ndarrays (:func:`plain`)."""
        value = plain(value)
        key = key_function(value)
        described = describe_value(value)
        if wrapper is not None:
            described = f"{wrapper.__name__} {described}"
        check = cls(label, wrapper, key, key(value), described)
        check.matcher = matcher_for(value, key)
        if is_pytree(value):
            leaves, spec = tree_flatten(value)
            check.leaves = (
                spec,
                [(key_function(leaf), key_function(leaf)(leaf), describe_value(leaf)) for leaf in leaves],
            )
        return check

    def explain(self, value: Any) -> str:
        """Why ``value`` differs, naming the first differing leaf of a pytree, such
        as ``x['weights'][1]``."""
        inner = value.value if isinstance(value, Context) and value.__class__ is self.wrapper else value
        if self.leaves is not None and is_pytree(inner):
            value = inner
            spec, expected_leaves = self.leaves
            leaves, given_spec = tree_flatten(value)
            if given_spec != spec:
                return f"prepared structure {spec}   given {given_spec}"
            root = "x" if self.label == "x" else self.label.replace(" ", "")
            for path, leaf, (key, expected, description) in zip(leaf_paths(value, root), leaves, expected_leaves):
                try:
                    same = key(leaf) == expected
                except Exception:
                    same = False
                if not same:
                    return f"{path} differs: prepared {description}   given {describe_value(leaf)}"
        return f"prepared {self.description}   given {describe_value(value)}"

    def matches(self, value: Any) -> bool:
        """Whether ``value`` (a bare value, or a context for contexts) fits."""
        try:
            if self.wrapper is not None:
                if value.__class__ is not self.wrapper:
                    return False
                value = value.value  # type: ignore[attr-defined]
            return bool(self.key(value) == self.expected or self.key(plain(value)) == self.expected)
        except Exception:
            return False


def mismatch_error(
    operator: str,
    checks: Sequence[ArgumentCheck],
    prepared: dict[str, Any],
    given_f: Any,
    given_backend: Any,
    given: Sequence[Any],
    strict: bool = True,
) -> PreparationMismatchError:
    """Build the report for a prep used with other arguments.

    Args:
        operator: the operator the prep is for (for the fix line).
        checks: the prepared ``x`` and context checks, in order.
        prepared: ``{"f": ..., "backend": ...}`` as prepared.
        given_f: the ``f`` of the call.
        given_backend: the backend of the call.
        given: ``x`` then the contexts of the call.
        strict: whether the prep is strict (a ``strict=False`` prep checks only
            ``f`` and the backend, and its fix line says so).
    """
    rows: list[tuple[str, str, str]] = []
    f_ok = given_f is prepared["f"]
    rows.append(("f", "ok" if f_ok else "differs", "" if f_ok else "another function than the prepared one"))
    b_ok = same_selector(given_backend, prepared["backend"])
    rows.append(
        (
            "backend",
            "ok" if b_ok else "differs",
            repr(prepared["backend"]) if b_ok else f"prepared {prepared['backend']!r}   given {given_backend!r}",
        )
    )
    for index, check in enumerate(checks):
        if index < len(given):
            value = given[index]
            ok = check.matches(value)
            detail = check.description if ok else check.explain(value)
        else:
            ok, detail = False, f"prepared {check.description}   given nothing"
        rows.append((check.label, "ok" if ok else "differs", detail))
    for index in range(len(checks), len(given)):
        rows.append((f"context {index}", "differs", f"prepared nothing   given {describe_value(given[index])}"))
    width = max(len(label) for label, _, _ in rows)
    lines = ["this prep was made for other arguments."]
    lines += [f"  {label.ljust(width)}  {status.ljust(7)}  {detail}".rstrip() for label, status, detail in rows]
    if strict:
        fix = f"Prepare again for the new arguments (di.prepare_{operator}), or pass strict=False to skip this check."
    else:
        fix = f"Prepare again for this f and backend (di.prepare_{operator}): a strict=False prep still checks both."
    lines.append(fix)
    return PreparationMismatchError("\n".join(lines))


def check_x(x: Any, operator: str) -> None:
    """Refuse an ``x`` that cannot be differentiated.

    Raises:
        InvalidInputError: ``x`` is not an array or Python float, or its dtype is
            not real floating point.
    """
    if isinstance(x, float):
        return
    family = family_of(x)
    if family is None and traced_type(x) is not None:
        x = concrete(x)  # which backends take it is the operator layer's to check
        family = family_of(x)
    if family is None:
        if not isinstance(x, (list, tuple)) or any(isinstance(item, dict) for item in x):
            leaves, spec = tree_flatten(x)  # a container of no arrays ({"a": 1.0}): its first leaf named,
            if leaves and not spec.is_leaf():  # as for a pytree with an array leaf (a list: the hint below)
                check_floating_leaves(leaves, leaf_paths(x))
        hint = ""
        if isinstance(x, (list, tuple)):
            hint = " Convert it first, e.g. np.asarray(x, dtype=float)."
        elif isinstance(x, (bool, int, complex)):
            hint = " Pass a float array, e.g. np.asarray(x, dtype=float)."
        elif hasattr(x, "shape") and hasattr(x, "dtype"):
            hint = (
                " di knows no array family of that library: convert it (np.asarray(x)), or register its family "
                "(di.families.register_family)."
            )
        raise InvalidInputError(
            f"x must be a real floating-point array ({_family_names()}) for {operator}, not {type_label(x)}.{hint}"
        )
    dtype = x.dtype
    name = get_family(family).describe_dtype(dtype)
    _refuse_storage_format(family, name, "x", operator)
    if not is_floating_dtype(dtype):
        if "complex" in name:
            fix = "differentiate the real and imaginary parts as separate real arrays"
        else:
            fix = "convert it to a floating-point dtype, e.g. x.astype(float)"
        raise InvalidInputError(
            f"x must be a real floating-point array for {operator}: got a {family} array of dtype {name}; {fix}."
        )


def check_array_kinds(value: Any, name: str) -> None:
    """Refuse an argument that is, or holds, an array its family refuses
    (:meth:`di.Family.refusal`: NumPy's masked arrays and matrices), which the
    engines would read otherwise than ``f`` does.

    Args:
        value: ``x``, a context's value or a tangent (an array, a pytree, anything).
        name: how the error names it (``"x"``, ``"context 1"``, ``"tx[0]"``).

    Raises:
        InvalidInputError: naming the argument (or the pytree leaf's path), what
            it is and what to pass instead.
    """
    for path, leaf in named_leaves(value, name):
        family = family_of(leaf)
        reason = get_family(family).refusal(leaf, path) if family is not None else ""
        if reason:
            raise InvalidInputError(reason)


def named_leaves(value: Any, name: str) -> list[tuple[str, Any]]:
    """``(path, array)`` for an array ``value`` (its ``name``) or each leaf of a
    pytree (``name`` and the leaf's path); nothing for other values.

    Examples:
        >>> import numpy as np
        >>> from di.prep.signature import named_leaves
        >>> [path for path, _ in named_leaves({"w": np.ones(2), "b": [np.ones(1)]}, "x")]
        ["x['b'][0]", "x['w']"]
        >>> named_leaves(2.0, "context 1")
        []
    """
    if family_of(value) is not None:
        return [(name, value)]
    if is_pytree(value):
        return list(zip(leaf_paths(value, name), tree_flatten(value)[0]))
    return []


def _refuse_storage_format(family: str, name: str, path: str, operator: str) -> None:
    """Refuse an array of a storage-only float dtype (float8, float6, float4), in
    which no engine computes: each engine would raise its own error.

    Raises:
        InvalidInputError: naming ``path``, the dtype and the cast to make.
    """
    if name.startswith(("float8_", "float6_", "float4_")):
        raise InvalidInputError(
            f"{path} must be an array of a computing floating-point dtype for {operator}: got a {family} array of "
            f"dtype {name}, a storage format no backend differentiates in. Cast it to float32 (or float16, "
            f"bfloat16) first, e.g. {path}.astype(np.float32), or {path}.to(float32) for a tensor, and cast the "
            f"result back."
        )


def check_x_leaves(x: Any, operator: str) -> None:
    """Refuse a pytree ``x`` with a leaf of a storage-only float dtype (float8, ...),
    naming the leaf's path, as :func:`check_x` refuses such an array ``x``.

    Raises:
        InvalidInputError: naming the leaf, its dtype and the cast to make.
    """
    for path, leaf in named_leaves(x, "x"):
        family = family_of(leaf)
        if family is not None:
            _refuse_storage_format(family, get_family(family).describe_dtype(leaf.dtype), path, operator)


def check_tangent_dtypes(tangents: Sequence[Any], label: str) -> None:
    """Refuse tangents (``tx``) or cotangents (``ty``) whose arrays hold no real
    numbers: every engine drops a complex tangent's imaginary part without a
    word, and object or string arrays reach the engines as their own errors (or
    as results). Integer and boolean tangents are real numbers: they pass.

    Args:
        tangents: the tuple of tangents, each an array or a pytree of arrays.
        label: ``"tx"`` or ``"ty"``, for the message.

    Raises:
        InvalidInputError: naming the tangent (and the leaf of a pytree), its
            dtype and what to pass instead.
    """
    word = "cotangents" if label == "ty" else "tangents"
    for index, tangent in enumerate(tangents):
        name = f"{label}[{index}]"
        check_array_kinds(tangent, name)
        for path, leaf in named_leaves(tangent, name):
            family = family_of(leaf)
            if family is None:
                continue
            kind = dtype_kind(leaf.dtype)
            dtype = get_family(family).describe_dtype(leaf.dtype)
            _refuse_storage_format(family, dtype, path, f"the {word}")
            if kind in ("float", "int", "bool"):
                continue
            if kind == "complex":
                raise InvalidInputError(
                    f"{path} is a complex {family} array ({dtype}): tangents and cotangents must be real, and "
                    f"an engine would drop the imaginary part. Pass the real and imaginary parts as two "
                    f"{word}, e.g. (t.real, t.imag), and combine the two results as r0 + 1j * r1."
                )
            raise InvalidInputError(
                f"{path} is a {family} array of dtype {dtype}, which holds no real numbers: tangents and "
                f"cotangents must be arrays of real numbers; convert it, e.g. np.asarray(t, dtype=float)."
            )


def _family_names() -> str:
    """The registered families, for messages: ``"numpy, torch or jax"``."""
    names = [family.name for family in families()]
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " or " + names[-1]


def check_contexts_wrapped(contexts: Sequence[Any]) -> None:
    """Refuse positional arguments after ``x`` that are not contexts.

    Raises:
        InvalidInputError: a raw value where a ``Constant`` or ``Cache`` is expected,
            or a value that holds itself.
    """
    for index, context in enumerate(contexts, start=1):
        if not isinstance(context, Context):
            raise InvalidInputError(
                f"context {index} is {describe_value(context)}, not a context: wrap every argument after x "
                f"as di.Constant(value) (read-only) or di.Cache(value) (scratch)."
            )
        check_flattens(context.value, f"context {index}")
        check_array_kinds(context.value, f"context {index}")
