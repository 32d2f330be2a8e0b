"""The report of a prep called with other arguments than it was made for."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NoReturn

from di.errors import PreparationMismatchError
from di.prep.arguments import check_array_kinds, check_contexts_wrapped, check_tangent_dtypes
from di.prep.description import describe_value
from di.prep.matching import same_selector
from di.prep.signature import ArgumentCheck
from di.pytrees import check_flattens

__all__ = ["has_aux_error", "mismatch_error", "other_point_error", "refuse_arguments", "refuse_tangents"]


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
            ``f``, the backend and that every prepared context is given: its other
            rows say ``unchecked`` where they differ, and its fix line says what
            it checks).
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
    counted = len(given) >= len(checks) if not strict else True  # what a strict=False prep checks of them
    for index, check in enumerate(checks):
        if index < len(given):
            value = given[index]
            ok = check.matches(value)
            detail = check.description if ok else check.explain(value)
            # a strict=False prep compares neither x nor the contexts: a difference there
            # did not make this report, and the prep would have run with it
            status = "ok" if ok else "differs" if strict else "unchecked"
        else:
            status, detail = "differs", f"prepared {check.description}   given nothing"
        rows.append((check.label, status, detail))
    for index in range(len(checks), len(given)):
        status = "differs" if strict else "unchecked"
        rows.append((f"context {index}", status, f"prepared nothing   given {describe_value(given[index])}"))
    width = max(len(label) for label, _, _ in rows)
    lines = ["this prep was made for other arguments."]
    lines += [f"  {label.ljust(width)}  {status.ljust(7)}  {detail}".rstrip() for label, status, detail in rows]
    if strict:
        fix = f"Prepare again for the new arguments (di.prepare_{operator}), or pass strict=False to skip this check."
    elif not counted:
        fix = (
            f"Pass every context the prep was made with, or prepare again for these arguments "
            f"(di.prepare_{operator}): a strict=False prep still checks f, the backend and that each context is given."
        )
    else:
        fix = f"Prepare again for this f and backend (di.prepare_{operator}): a strict=False prep still checks both."
    lines.append(fix)
    return PreparationMismatchError("\n".join(lines))


def refuse_arguments(
    operator: str,
    checks: Sequence[ArgumentCheck],
    prepared: dict[str, Any],
    strict: bool,
    f: Any,
    backend: Any,
    x: Any,
    contexts: Sequence[Any],
) -> NoReturn:
    """Raise the error saying why a call's ``f``, ``backend``, ``x`` and contexts do
    not fit a prep (its strict check said no): what makes an argument unusable
    (one that does not flatten, an array of a kind no engine reads as ``f`` does,
    a raw value where a context is due), else the report.

    Args:
        operator: the prep's operator family.
        checks: its ``x`` and context checks.
        prepared: ``{"f": ..., "backend": ...}`` as prepared.
        strict: whether the prep is strict.
        f: the call's ``f``.
        backend: the call's backend.
        x: the call's ``x``.
        contexts: the call's contexts.

    Raises:
        InvalidInputError: an argument no prep could take.
        PreparationMismatchError: the report, one line per argument.
    """
    check_flattens(x, "x")  # (the report flattens what it describes)
    check_array_kinds(x, "x")  # a masked array or matrix: why, not just "differs"
    check_contexts_wrapped(contexts)
    raise mismatch_error(operator, checks, prepared, f, backend, (x, *contexts), strict)


def refuse_tangents(operator: str, check: ArgumentCheck, prepared: dict[str, Any], tangents: Any) -> NoReturn:
    """Raise the error saying why a call's tangents (or cotangents) do not fit the
    prepared ones (``check``): one holding complex numbers or no numbers, else the
    report.

    Raises:
        InvalidInputError: a tangent of no real numbers, or one that does not flatten.
        PreparationMismatchError: their number, family, shape or dtype differ.
    """
    for index, tangent in enumerate(tangents):
        check_flattens(tangent, f"{check.label}[{index}]")
    check_tangent_dtypes(tangents, check.label)  # a complex one: say so, not just "differs"
    raise mismatch_error(operator, (check,), prepared, prepared["f"], prepared["backend"], (tangents,))


def other_point_error(operator: str) -> PreparationMismatchError:
    """The error for a same-point prep called at another point."""
    return PreparationMismatchError(
        f"this prep was made by prepare_{operator}_same_point at one point, and this call gives "
        f"another x or other Constant values. Prepare again at the new point "
        f"(di.prepare_{operator}_same_point), or use di.prepare_{operator} for a prep that "
        f"serves every point."
    )


def has_aux_error(operator: str, prepared: bool, given: bool) -> PreparationMismatchError:
    """The report for a call whose ``has_aux`` differs from the prepared one."""
    return PreparationMismatchError(
        "this prep was made for other arguments.\n"
        f"  has_aux  differs  prepared {prepared}   given {given}\n"
        f"Prepare again with has_aux={given} (di.prepare_{operator}), or call with "
        f"has_aux={prepared}."
    )
