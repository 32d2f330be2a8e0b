"""The checks of a preparation's arguments that no prep's signature makes: ``x``
differentiable, tangents of real numbers, every argument after ``x`` a context,
no array of a kind the engines read otherwise than ``f`` does."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from di.contexts import Context
from di.errors import InvalidInputError, type_label
from di.families import dtype_kind, families, family_of, get_family, is_floating_dtype
from di.prep.description import describe_value
from di.prep.facts import Facts
from di.prep.traced import concrete, traced_type
from di.pytrees import check_flattens, leaf_paths, tree_flatten
from di.pytrees.ravel import check_floating_leaves

__all__ = [
    "check_array_kinds",
    "check_contexts_wrapped",
    "check_tangent_dtypes",
    "check_x",
    "check_x_leaves",
    "named_leaves",
    "refuse_array_kinds",
    "refuse_storage_leaves",
    "refuse_x",
    "wrapped_values",
]


def check_x(x: Any, operator: str) -> None:
    """Refuse an ``x`` that cannot be differentiated.

    Raises:
        InvalidInputError: ``x`` is not an array or Python float, or its dtype is
            not real floating point.
    """
    refuse_x(Facts("x", x), operator)


def refuse_x(facts: Facts, operator: str, complex_ok: bool = False) -> bool:
    """:func:`check_x` of ``x``'s :class:`~di.prep.facts.Facts`; with
    ``complex_ok``, a complex array passes too.

    Returns:
        Whether ``x`` is a complex array (only with ``complex_ok``).

    Raises:
        InvalidInputError: ``x`` is not an array or Python float, or its dtype is
            not floating point (real, or with ``complex_ok`` complex).
    """
    x, family = facts.value, facts.family
    if isinstance(x, float):
        return False
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
        elif isinstance(x, complex):
            hint = " Pass a complex array, e.g. np.asarray(x)."
        elif isinstance(x, (bool, int)):
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
            if complex_ok:
                return True
            fix = "differentiate the real and imaginary parts as separate real arrays"
        else:
            fix = "convert it to a floating-point dtype, e.g. x.astype(float)"
        raise InvalidInputError(
            f"x must be a real floating-point array for {operator}: got a {family} array of dtype {name}; {fix}."
        )
    return False


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
    refuse_array_kinds(Facts(name, value))


def refuse_array_kinds(facts: Facts) -> None:
    """:func:`check_array_kinds` of an argument's :class:`~di.prep.facts.Facts`.

    Raises:
        InvalidInputError: naming the argument (or the pytree leaf's path), what
            it is and what to pass instead.
    """
    for path, leaf, family in facts.leaves:
        reason = get_family(family).refusal(leaf, path) if family is not None else ""
        if reason:
            raise InvalidInputError(reason)


def named_leaves(value: Any, name: str) -> list[tuple[str, Any]]:
    """``(path, array)`` for an array ``value`` (its ``name``) or each leaf of a
    pytree (``name`` and the leaf's path); nothing for other values.

    Examples:
        >>> import numpy as np
        >>> from di.prep.arguments import named_leaves
        >>> [path for path, _ in named_leaves({"w": np.ones(2), "b": [np.ones(1)]}, "x")]
        ["x['b'][0]", "x['w']"]
        >>> named_leaves(2.0, "context 1")
        []
    """
    return [(path, leaf) for path, leaf, _ in Facts(name, value).leaves]


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
    refuse_storage_leaves(Facts("x", x), operator)


def refuse_storage_leaves(facts: Facts, operator: str) -> None:
    """:func:`check_x_leaves` of ``x``'s :class:`~di.prep.facts.Facts`.

    Raises:
        InvalidInputError: naming the leaf, its dtype and the cast to make.
    """
    for path, leaf, family in facts.leaves:
        if family is not None:
            _refuse_storage_format(family, get_family(family).describe_dtype(leaf.dtype), path, operator)


def check_tangent_dtypes(tangents: Sequence[Any], label: str, complex_ok: bool = False) -> None:
    """Refuse tangents (``tx``) or cotangents (``ty``) whose arrays hold no real
    numbers: every engine drops a complex tangent's imaginary part without a
    word, and object or string arrays reach the engines as their own errors (or
    as results). Integer and boolean tangents are real numbers: they pass.

    Args:
        tangents: the tuple of tangents, each an array or a pytree of arrays.
        label: ``"tx"`` or ``"ty"``, for the message.
        complex_ok: complex tangents pass too (those of a complex ``x``).

    Raises:
        InvalidInputError: naming the tangent (and the leaf of a pytree), its
            dtype and what to pass instead.
    """
    word = "cotangents" if label == "ty" else "tangents"
    for index, tangent in enumerate(tangents):
        facts = Facts(f"{label}[{index}]", tangent)
        refuse_array_kinds(facts)
        for path, leaf, family in facts.leaves:
            if family is None:
                continue
            kind = dtype_kind(leaf.dtype)
            dtype = get_family(family).describe_dtype(leaf.dtype)
            _refuse_storage_format(family, dtype, path, f"the {word}")
            if kind in ("float", "int", "bool") or (complex_ok and kind == "complex"):
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
    wrapped_values(contexts)


def wrapped_values(contexts: Sequence[Any]) -> tuple[Facts, ...]:
    """:func:`check_contexts_wrapped`, answering the
    :class:`~di.prep.facts.Facts` of the contexts' values (``"context 1"``, ...).

    Raises:
        InvalidInputError: a raw value where a ``Constant`` or ``Cache`` is expected,
            or a value that holds itself.
    """
    values = []
    for index, context in enumerate(contexts, start=1):
        if not isinstance(context, Context):
            raise InvalidInputError(
                f"context {index} is {describe_value(context)}, not a context: wrap every argument after x "
                f"as di.Constant(value) (read-only) or di.Cache(value) (scratch)."
            )
        check_flattens(context.value, f"context {index}")
        facts = Facts(f"context {index}", context.value)
        refuse_array_kinds(facts)
        values.append(facts)
    return tuple(values)
