"""Values another engine traces: refused by name, at preparation and when a
prepared call fails."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from di.errors import InvalidInputError
from di.prep.traced import tracing

__all__ = ["refuse_foreign_traces"]


def refuse_foreign_traces(backend: Any, takes: Sequence[str], arguments: Sequence[tuple[str, Any]]) -> None:
    """Refuse values traced by another engine's transform (a tracer of ``jax.jit``
    given to a backend that computes in another family): ``backend``'s engine,
    which takes the values ``takes`` names (its family's, its engine's), would need
    their concrete values, which a trace does not have.

    Args:
        backend: the selector of the engine that would run (named by the error).
        takes: the array family it computes in and its engine's name.
        arguments: ``(name, value)`` of ``x``, the tangents and the context values.

    Raises:
        InvalidInputError: naming the argument, the transform and what to do.

    Examples:
        >>> import numpy as np, di
        >>> from di.prep.traces import refuse_foreign_traces
        >>> refuse_foreign_traces(di.AutoFiniteDiff(), ("numpy", ""), [("x", np.ones(2))])  # concrete: passes
    """
    for name, value in arguments:
        transform, owner = tracing(value)
        if transform and owner not in takes:
            raise InvalidInputError(
                f"{name} is traced by {transform}, and {backend!r} cannot run inside it: it computes with "
                f"concrete values, which a trace does not have. Inside {transform}, use a backend of the "
                f"engine that traces (its transforms then differentiate di's own programs), or call di outside "
                f"the transform."
            )
