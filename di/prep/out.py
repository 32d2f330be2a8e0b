"""``out=``: the caller's buffer checked against the result, and written."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from di.errors import OutBufferError
from di.families import ArraySpec, family_of, get_family, spec_of

if TYPE_CHECKING:
    from di.prep.base import Prep

__all__ = ["check_out", "write_out"]


def check_out(prep: Prep, out: Any, what: str, result: Any = None) -> None:
    """Refuse an ``out=`` buffer that cannot receive the result of a call on
    ``prep``: a ``result`` when given, else an array like ``x`` (the gradient).

    Args:
        prep: the prep of the call.
        out: the caller's buffer.
        what: the operator, for the message.
        result: the result to write, or ``None`` to check ``out`` against ``x``.

    Raises:
        OutBufferError: family, shape or dtype differ, ``out`` is read-only,
            or ``x`` is a JAX array.
    """
    if prep.info.sparse_result:
        raise OutBufferError(
            f"out does not fit the {what}: {prep.backend!r} returns a sparse matrix, which cannot be written "
            f"into a dense buffer. Call without out=, or use AutoSparse(..., dense_result=True)."
        )
    spec = prep.x_spec
    if spec is None and prep.x_is_float:  # results come back as NumPy float64 arrays
        spec = ArraySpec("numpy", (), np.dtype(np.float64), None)
    family = family_of(out)
    if spec is None:
        raise OutBufferError(
            f"out does not fit the {what}: out= takes the result of an array x, not of a pytree x (whose "
            f"result is a pytree); call without out= and use the returned pytree."
        )
    if not get_family(spec.family).mutable:
        raise OutBufferError(
            f"out does not fit the {what}: x is a {get_family(spec.family).display} array, whose results are "
            f"immutable; call without out= and use the returned array."
        )
    if family != spec.family:
        raise OutBufferError(
            f"out does not fit the {what}: it must be a {spec.family} array like x, not {family or type(out).__name__}."
        )
    refusal = get_family(family).read_only(out)
    if refusal:
        why = refusal if isinstance(refusal, str) else f"a {family} array that refuses writes"
        raise OutBufferError(
            f"out cannot receive the {what}: it is read-only ({why}); pass a "
            f"writable buffer, or call without out= and use the returned array."
        )
    out_spec = spec_of(out)
    like = "like x"
    if result is not None:
        spec, like = spec_of(result), "like the result"
    if out_spec.shape != spec.shape or out_spec.dtype != spec.dtype or out_spec.device != spec.device:
        raise OutBufferError(
            f"out does not fit the {what}: it must be {spec.describe()} {like}, not {out_spec.describe()}."
        )


def write_out(out: Any, result: Any) -> Any:
    """Copy ``result`` into the caller's buffer ``out`` and return it."""
    return get_family(family_of(out) or "numpy").write_out(out, result)
