"""JAX's refusals to give Python a traced value's concrete value, as ``di`` errors.

Inside ``f``, ``bool()`` (an ``if``), ``float()``, ``int()``, ``.item()`` or an index
on a value JAX traces without a concrete value raises JAX's
``ConcretizationTypeError`` family, whose message points into ``di``'s own
programs. :func:`concretization_error` (asked by the JAX output rules'
``translate``) turns them into :class:`di.InvalidOutputError`
saying what ``f`` did, to which value (``x`` or a context: under ``jax.jit`` a
float or array context is traced too), and what to write instead.

Which value it was is read from JAX's message ("depends on the value of the
argument values[0]"), which names the arguments of the jitted function: every
program ``di`` jits is :func:`di.engines.jax.programs.named`, so that the names are always ``x``,
``tangents`` and ``values[i]`` (context ``i + 1``).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import jax

from di.backends.outputs import untraced_output_error
from di.backends.selectors import AbstractBackend
from di.errors import InvalidOutputError

__all__ = ["CONVERSIONS", "concretization_error", "conversion_of"]

CONVERSIONS = (
    ("`float` function", "float()"),
    ("item() method", ".item()"),
    ("tolist() method", ".tolist()"),
    ("`complex` function", "complex()"),
    ("`int` function", "int()"),
)
"""Markers of JAX's messages, and the conversion each says ``f`` made."""

_PROGRAM = "traced_program"
_ARGUMENTS = re.compile(r"depends on the values? of the arguments? (.+?)\.(?:\n|$)")
_CONTEXT = re.compile(r"values\[(\d+)\]")


def conversion_of(error: BaseException) -> str:
    """What JAX's ``error`` says ``f`` did to a traced value: ``"bool()"`` (an
    ``if``), ``"an index"``, a conversion such as ``"float()"``, or ``""``.

    Examples:
        >>> from di.engines.jax.concretization import conversion_of
        >>> conversion_of(ValueError("The problem arose with the `float` function."))
        'float()'
    """
    if isinstance(error, jax.errors.TracerBoolConversionError):
        return "bool()"
    if isinstance(error, jax.errors.TracerIntegerConversionError):
        return "an index"
    text = str(error)
    return next((name for marker, name in CONVERSIONS if marker in text), "")


def _origin(error: BaseException, values: Sequence[Any]) -> tuple[bool, tuple[int, ...]] | None:
    """What the refused value was computed from: ``(from x, the contexts' indices)``,
    or ``None`` when JAX's message does not say."""
    text = str(error)
    traced_contexts = any(isinstance(leaf, jax.core.Tracer) for leaf in jax.tree_util.tree_leaves(list(values)))
    if not traced_contexts:
        return True, ()  # eager (or only x traced): nothing else f receives has no concrete value
    if "The error occurred while tracing the function" not in text:
        return True, ()  # a tracer of JAX's transforms (jvp, vmap): only x is transformed
    match = _ARGUMENTS.search(text)
    if f"the function {_PROGRAM} at " not in text or match is None:
        return None  # a caller's own jax.jit, whose arguments di cannot map to f's
    names = re.split(r", and |, | and ", match.group(1))
    contexts = sorted({int(m.group(1)) for m in map(_CONTEXT.match, names) if m is not None})
    return any(not name.startswith("values[") for name in names), tuple(contexts)


def _what(conversion: str, subject: str) -> str:
    if conversion == "bool()":
        return f"f used {subject} in Python control flow (an if, a while, and/or, bool())"
    if conversion == "an index":
        return f"f used {subject} as a Python integer (an index, range(), a slice bound)"
    if conversion:
        return f"f turned {subject} into a Python number with {conversion}"
    return f"f needed the concrete value of {subject} (a shape, a size, a Python number)"


def concretization_error(
    error: BaseException, backend: AbstractBackend, operator: str, values: Sequence[Any]
) -> BaseException:
    """The ``di`` error for JAX's refusal ``error`` inside ``f``, or ``error``
    itself when it is not one ``di`` can explain."""
    conversion = conversion_of(error)
    origin = _origin(error, values)
    compiled = getattr(backend, "jit", False)
    eager = "use AutoJAX() (not compiled), which runs f's Python on every call"
    if origin is not None and origin[0]:
        if conversion == "bool()" or conversion == "an index":
            what = _what(conversion, "a value computed from x")
            fixes = [
                "write the choice with array operations (xp.where(condition, a, b) computes both and picks "
                "elementwise; xp = di.array_namespace(x))"
            ]
            if compiled:
                fixes.append(eager)
            return InvalidOutputError(
                f"{operator} cannot differentiate f with {backend!r}: {what}, whose value JAX does not know "
                f"while it traces f. To fix it, " + "; or ".join(fixes) + "."
            )
        if conversion:
            return untraced_output_error(None, backend, operator, conversion)
        return error
    if origin is None:
        number = "a context"
        what = _what(conversion, "a value JAX traces (computed from x or from a context)")
    else:
        numbers = [str(i + 1) for i in origin[1]]
        number = ("context " if len(numbers) == 1 else "contexts ") + " and ".join(numbers)
        what = _what(conversion, number)
    return InvalidOutputError(
        f"{operator} cannot differentiate f with {backend!r}: {what}, but jit traces a context that is an array or "
        f"a Python float (a new value runs the same program), so f sees no value there. To fix it, pass "
        f"{number} as a Python number with di.Constant(value, static=True), compiled in (one compile per distinct "
        f"value; f receives the Python value); or keep it an array in f (xp.where(a > 0.5, y, z) rather than "
        f"if a > 0.5, a * y rather than float(a) * y); or {eager}."
    )
