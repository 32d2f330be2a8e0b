"""Which tracer reads the pattern: JAX's program (:mod:`di.sparse.jaxpr`) or the
array-API tracer (:mod:`di.sparse.arrays`), as the sparsity source says."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from di.contexts import Context
from di.errors import InvalidInputError
from di.families import family_of, get_family
from di.sparse.arrays import array_pattern
from di.sparse.jaxpr import installed as program_tracer_installed
from di.sparse.patterns import Detection
from di.sparse.sources import LocalTracerSparsity, SparsitySource, TracerSparsity

__all__ = ["TRACED", "traced", "tracer_method"]

TRACED = (TracerSparsity, LocalTracerSparsity)


def tracer_method(source: SparsitySource) -> str:
    """``"program"``, ``"arrays"`` or ``"local"``: what reads the pattern for ``source``.

    Examples:
        >>> import di
        >>> from di.sparse.detection import tracer_method
        >>> tracer_method(di.LocalTracerSparsity()), tracer_method(di.TracerSparsity(method="arrays"))
        ('local', 'arrays')
    """
    if isinstance(source, LocalTracerSparsity):
        return "local"
    assert isinstance(source, TracerSparsity)
    if source.method == "auto":
        return "program" if program_tracer_installed() else "arrays"
    return source.method


def traced(
    source: SparsitySource,
    operator: str,
    f: Callable[..., Any],
    x: Any,
    contexts: Sequence[Context],
    backend: Any = None,
) -> Detection:
    """The pattern of ``operator`` (``"jacobian"`` or ``"hessian"``) read by the tracer ``source`` names.

    Args:
        source: the tracer's sparsity source.
        operator: ``"jacobian"`` or ``"hessian"``.
        f: the function.
        x: the point (an array).
        contexts: the contexts.
        backend: the :class:`di.AutoSparse` selector, which the tracer's refusal names.

    Raises:
        InvalidInputError: the tracer cannot follow ``f``, which computes on the
            concrete arguments (the error names ``backend`` and suggests the other
            sparsity sources).
        Exception: whatever ``f`` raises on the concrete arguments, unchanged,
            when the tracer failed on it: ``f``'s own error, not the tracer's.
    """
    method = tracer_method(source)
    try:
        if method == "program":
            from di.sparse.jaxpr import traced_pattern

            return traced_pattern(operator, f, x, contexts)
        return array_pattern(operator, f, x, contexts, local=method == "local")
    except InvalidInputError as err:
        _raise_own_error(f, x, contexts)
        if backend is None:
            raise
        raise InvalidInputError(f"{backend!r}: {err}") from err


def _raise_own_error(f: Callable[..., Any], x: Any, contexts: Sequence[Context]) -> None:
    """Evaluate ``f`` on the concrete arguments, so that an exception ``f`` raises
    itself reaches the caller with its own type (as it does from every backend),
    rather than as the tracer's refusal. Returns when ``f`` computes. ``f`` runs on
    a copy of ``x``: an ``f`` that writes into its argument (which the tracers
    refuse) must not change the caller's array."""
    family = family_of(x)
    f(get_family(family).copy(x) if family is not None else x, *[c.value for c in contexts])
