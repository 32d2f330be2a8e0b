"""The report of a prep called with other arguments than it was made for."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from di.errors import PreparationMismatchError
from di.prep.description import describe_value
from di.prep.matching import same_selector
from di.prep.signature import ArgumentCheck

__all__ = ["mismatch_error"]


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
