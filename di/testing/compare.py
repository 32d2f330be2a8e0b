"""Comparing a backend's results with a scenario's references.

A result must match its reference within the tolerances and, unless types are
not checked, come back in ``x``'s array family and dtype (a sparse matrix of that
family for :class:`di.AutoSparse`), detached from any graph. Families are asked
through their records (:mod:`di.testing.arrays`), never by name.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from di.families import family_of, get_family
from di.fastest.agreement import finite_entry_difference
from di.testing.arrays import dtype_name, pytree_leaves, records_graph, sparse_to_numpy, to_numpy

__all__ = ["compare", "max_error", "same"]


def _host_family() -> str:
    """The family of NumPy arrays: what a Python float ``x`` gets back."""
    return family_of(np.empty(0)) or ""


def _display(family: str) -> str:
    return get_family(family).display or family


def expected_family_and_dtype(x: Any) -> tuple[str, str]:
    """The family and dtype name results must have for this ``x`` (its first leaf's)."""
    leaves = pytree_leaves(x)
    leaf = leaves[0] if leaves else x
    if isinstance(leaf, float):
        return _host_family(), "float64"
    return family_of(leaf) or _host_family(), dtype_name(leaf.dtype)


def max_error(a: float, b: float) -> float:
    """The larger of two errors, ignoring ``nan`` (nothing compared)."""
    if math.isnan(b):
        return a
    if math.isnan(a):
        return b
    return max(a, b)


def same(a: Any, b: Any) -> bool:
    """Whether two values (arrays of any family, numbers, pytrees) are identical."""
    if isinstance(a, dict) or isinstance(b, dict):
        return isinstance(a, dict) and isinstance(b, dict) and a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(same(p, q) for p, q in zip(a, b))
    if family_of(a) is not None and family_of(b) is not None:
        a_np, b_np = to_numpy(a), to_numpy(b)
        return bool(a_np.shape == b_np.shape and np.array_equal(a_np, b_np, equal_nan=a_np.dtype.kind == "f"))
    try:
        return bool(a == b) or (isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b))
    except Exception:
        return a is b


def _type_problems(label: str, value: Any, family: str, dtype: str, is_value: bool) -> list[str]:
    """What is wrong with a dense result's family, dtype and graph."""
    problems = []
    got_family = family_of(value)
    if got_family != family:
        problems.append(f"{label}: expected a {family} array like x, got {got_family or type(value).__name__}")
    elif not is_value and dtype_name(value.dtype) != dtype:
        problems.append(f"{label}: expected dtype {dtype} like x, got {dtype_name(value.dtype)}")
    if got_family is not None and records_graph(value):
        problems.append(f"{label}: the {_display(got_family)} result is still attached to a differentiation graph")
    return problems


def _sparse_problems(label: str, value: Any, sparse_family: str, family: str, dtype: str) -> list[str]:
    if sparse_family != family:
        return [
            f"{label}: expected a {_display(family)} sparse matrix for a {family} x, "
            f"got a {_display(sparse_family)} one"
        ]
    if dtype_name(value.dtype) != dtype:
        return [f"{label}: expected dtype {dtype} like x, got {dtype_name(value.dtype)}"]
    return []


def _compare_container(
    label: str, value: Any, reference: Any, rtol: float, atol: float, x: Any, check_types: bool, is_value: bool
) -> tuple[float, float, list[str]]:
    problems: list[str] = []
    worst_abs, worst_rel = 0.0, 0.0
    if isinstance(reference, tuple):
        if not isinstance(value, (tuple, list)) or len(value) != len(reference):
            kind = type(value).__name__
            size = f" of length {len(value)}" if isinstance(value, (tuple, list)) else ""
            return math.nan, math.nan, [f"{label}: expected a tuple of {len(reference)}, got a {kind}{size}"]
        x_items = list(x) if isinstance(x, (tuple, list)) and len(x) == len(reference) else [x] * len(reference)
        items = [(f"{label}[{i}]", *parts) for i, parts in enumerate(zip(value, reference, x_items))]
    else:
        if not isinstance(value, dict) or set(value) != set(reference):
            keys = sorted(value) if isinstance(value, dict) else type(value).__name__
            return math.nan, math.nan, [f"{label}: expected a dict with keys {sorted(reference)}, got {keys}"]
        x_tree = x if isinstance(x, dict) else {}
        items = [(f"{label}[{key!r}]", value[key], reference[key], x_tree.get(key, x)) for key in sorted(reference)]
    for item_label, item, ref, item_x in items:
        a, r, p = compare(item_label, item, ref, rtol, atol, item_x, check_types, is_value)
        worst_abs, worst_rel = max_error(worst_abs, a), max_error(worst_rel, r)
        problems += p
    return worst_abs, worst_rel, problems


def compare(
    label: str, value: Any, reference: Any, rtol: float, atol: float, x: Any, check_types: bool, is_value: bool
) -> tuple[float, float, list[str]]:
    """Compare one result with its reference.

    References that are not numbers or arrays (strings, ``None``, ints of an
    ``aux``) must be returned as they are; tuples and dicts are compared item by
    item.

    Args:
        label: what the result is, for the messages (``"gradient"``).
        value: the result.
        reference: the reference (NumPy, a tuple or dict of them, or a plain value).
        rtol: relative tolerance, times the largest finite ``|reference|``
            (non-finite entries must be returned as they are: ``inf`` where
            the reference has ``inf``, ``nan`` where it has ``nan``).
        atol: absolute tolerance.
        x: the scenario's ``x`` (results come back in its family and dtype).
        check_types: check family, dtype, shape and graph.
        is_value: the result is ``f``'s value (its dtype is ``f``'s business).

    Returns:
        ``(max abs error, max rel error, problems)``; the errors are ``nan``
        when nothing numeric was compared.

    Examples:
        >>> import numpy as np
        >>> from di.testing.compare import compare
        >>> compare("gradient", np.ones(2), np.ones(2), 1e-9, 0.0, np.zeros(2), True, False)
        (0.0, 0.0, [])
    """
    if reference is None or isinstance(reference, (str, bytes, int)):
        if type(value) is not type(reference) or value != reference:
            return math.nan, math.nan, [f"{label}: expected {reference!r}, got {value!r}"]
        return 0.0, 0.0, []
    if isinstance(reference, (tuple, dict)):
        return _compare_container(label, value, reference, rtol, atol, x, check_types, is_value)
    family, dtype = expected_family_and_dtype(x)
    complex_reference = np.iscomplexobj(reference)
    if dtype.startswith("complex") and not complex_reference:  # a real result at a complex x (a Hessian, the
        dtype = "float32" if dtype == "complex64" else "float64"  # pushforward of a real f): x's real precision
    problems: list[str] = []
    sparse = sparse_to_numpy(value)
    if sparse is not None:
        if check_types:
            problems += _sparse_problems(label, value, sparse[0], family, dtype)
        shape = np.shape(reference)
        dense = sparse[1]
        value = dense.reshape(shape) if dense.size == int(np.prod(shape)) else dense
    elif check_types:
        problems += _type_problems(label, value, family, dtype, is_value)
    number = np.complex128 if complex_reference else np.float64
    try:
        got = to_numpy(value)
        if np.iscomplexobj(got) and not complex_reference:
            return math.nan, math.nan, [*problems, f"{label}: expected real numbers, got {got.dtype}"]
        got = np.asarray(got, dtype=number)
    except Exception as err:
        return math.nan, math.nan, [*problems, f"{label}: not an array of numbers ({type(value).__name__}: {err})"]
    ref = np.asarray(reference, dtype=number)
    if got.shape != ref.shape:
        if check_types or got.size != ref.size:
            return math.nan, math.nan, [*problems, f"{label}: expected shape {ref.shape}, got {got.shape}"]
        got = got.reshape(ref.shape)
    compared = finite_entry_difference(got, ref)
    if compared is None:
        return math.inf, math.inf, [*problems, f"{label}: its NaN or infinite entries differ from the reference's"]
    abs_error, _, scale = compared
    rel_error = abs_error / scale if scale > 0 else (0.0 if abs_error == 0 else math.inf)
    if not abs_error <= atol + rtol * scale:
        problems.append(
            f"{label}: max abs error {abs_error:.3g} (rel {rel_error:.3g}) exceeds atol {atol:.3g} + "
            f"rtol {rtol:.3g} x max|finite reference| {scale:.3g}"
        )
    return abs_error, rel_error, problems
