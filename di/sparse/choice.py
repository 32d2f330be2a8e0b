"""Which coloring an :class:`di.AutoSparse` prep uses: columns, rows or both for
Jacobians, star or acyclic for Hessians, or the one its :class:`di.KnownSparsity`
gives (checked here, at preparation).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from di.errors import InvalidInputError
from di.sparse import coloring
from di.sparse.decompression import (
    Decompression,
    acyclic_decompression,
    bidirectional_decompression,
    column_decompression,
    row_decompression,
    star_decompression,
    star_decompression_one_color_each,
)

__all__ = ["Choice", "hessian_decompression", "jacobian_decompression"]


@dataclass(frozen=True, eq=False)
class Choice:
    """A decompression and how its coloring was found.

    Attributes:
        decompression: the :class:`~di.sparse.decompression.Decompression`.
        coloring: ``"column"``, ``"row"``, ``"bidirectional"``, ``"star"``,
            ``"acyclic"``, or ``"given"`` (from :class:`di.KnownSparsity`).
        order: the vertex order that gave it (``"given"`` for a given coloring).
        tried: ``(order, colors)`` of each candidate the search ran.
    """

    decompression: Decompression
    coloring: str
    order: str
    tried: tuple[tuple[str, int], ...] = ()


def _complete(pattern: sp.csr_array) -> bool:
    """Whether every entry is a nonzero: then every column needs its own color,
    and no order is searched (a greedy search costs ``n**3`` on such a graph:
    minutes at n = 1000)."""
    return bool(pattern.nnz == pattern.shape[0] * pattern.shape[1] and pattern.nnz > 0)


def _columns(pattern: sp.csr_array, order: str, seed: int) -> Choice:
    if _complete(pattern):
        return Choice(column_decompression(pattern, np.arange(pattern.shape[1])), "column", "dense")
    found = coloring.column_coloring_of(pattern, order, seed)
    return Choice(column_decompression(pattern, _needed(found.colors, pattern)), "column", found.order, found.tried)


def _rows(pattern: sp.csr_array, order: str, seed: int) -> Choice:
    if _complete(pattern):
        return Choice(row_decompression(pattern, np.arange(pattern.shape[0])), "row", "dense")
    found = coloring.column_coloring_of(sp.csr_array(pattern.T), order, seed)
    return Choice(row_decompression(pattern, _needed(found.colors, pattern)), "row", found.order, found.tried)


def _needed(colors: np.ndarray, pattern: sp.csr_array) -> np.ndarray:
    """The colors, or none (every vertex neutral) for a pattern without nonzeros:
    no product is needed, as in a bidirectional or star coloring."""
    return colors if pattern.nnz else np.full_like(colors, -1)


def _both(pattern: sp.csr_array, order: str, seed: int) -> Choice:
    found = coloring.bicoloring_of(pattern, order, seed)
    return Choice(bidirectional_decompression(pattern, found.colors), "bidirectional", found.order, found.tried)


def jacobian_decompression(
    pattern: sp.csr_array,
    mode: str,
    order: str,
    seed: int,
    *,
    can_forward: bool,
    can_reverse: bool,
    given: np.ndarray | None = None,
    backend: object = None,
) -> Choice:
    """The coloring of a Jacobian pattern for ``mode`` (``"auto"``: the fewest
    products among the modes the dense backend can run).

    Args:
        pattern: the ``(m, n)`` pattern.
        mode: ``"auto"``, ``"forward"``, ``"reverse"`` or ``"bidirectional"``.
        order: the vertex order (or ``"auto"``).
        seed: the seed of the ``"random"`` order.
        can_forward: the dense backend computes pushforwards itself.
        can_reverse: the dense backend computes pullbacks itself.
        given: a column coloring given with the pattern (checked).
        backend: the selector, for messages.

    Raises:
        InvalidInputError: a given coloring of the wrong length, or under which two
            columns of one color share a row.
    """
    if given is not None:
        if given.shape != (pattern.shape[1],):
            raise InvalidInputError(
                f"{backend!r}: KnownSparsity(colors=...) has {given.size} colors, but the Jacobian has "
                f"{pattern.shape[1]} columns (one color per column)."
            )
        try:
            return Choice(column_decompression(pattern, given), "given", "given")
        except ValueError:
            raise InvalidInputError(
                f"{backend!r}: the KnownSparsity coloring puts two columns that share a row in one color: their "
                f"sum would mix two nonzeros. Give colors under which no row has two nonzeros of one color "
                f"(di.sparse.coloring.is_structurally_orthogonal checks it), or omit colors."
            ) from None
    if mode == "forward" or (not can_reverse and mode != "bidirectional"):
        return _columns(pattern, order, seed)
    if mode == "reverse" or not can_forward:
        return _rows(pattern, order, seed)
    if mode == "bidirectional":
        return _both(pattern, order, seed)
    if _complete(pattern):  # one product per column or per row: whichever is fewer
        return _columns(pattern, order, seed) if pattern.shape[1] <= pattern.shape[0] else _rows(pattern, order, seed)
    candidates = [_columns(pattern, order, seed), _rows(pattern, order, seed), _both(pattern, order, seed)]
    # Fewest products; on a tie, one direction (one program) before both.
    return min(candidates, key=lambda choice: (choice.decompression.n_colors, choice.coloring == "bidirectional"))


def hessian_decompression(
    pattern: sp.csr_array,
    method: str,
    order: str,
    seed: int,
    *,
    given: np.ndarray | None = None,
    backend: object = None,
) -> Choice:
    """The star (``method="greedy"``) or acyclic coloring of a symmetric pattern,
    or a given one, checked. An acyclic search that finds a star coloring with as
    few colors returns it as ``"star"``: read directly, without substitution.

    Raises:
        InvalidInputError: a given coloring of the wrong length, or one under which
            some nonzero cannot be recovered.
    """
    if given is not None:
        if given.shape != (pattern.shape[0],):
            raise InvalidInputError(
                f"{backend!r}: KnownSparsity(colors=...) has {given.size} colors, but the Hessian has "
                f"{pattern.shape[0]} columns (one color per column)."
            )
        decompose = acyclic_decompression if method == "acyclic" else star_decompression
        try:
            return Choice(decompose(pattern, given), "given", "given")
        except ValueError:
            kind = "an acyclic" if method == "acyclic" else "a star"
            raise InvalidInputError(
                f"{backend!r}: the KnownSparsity colors are not {kind} coloring of the Hessian pattern: some "
                f"nonzero cannot be recovered from the compressed hvps. Give {kind} coloring, or omit colors."
            ) from None
    if _complete(pattern):
        return Choice(star_decompression_one_color_each(pattern), "star", "dense")
    if method == "acyclic":
        found = coloring.acyclic_coloring_of(pattern, order, seed)
        if found.order.startswith("star:"):  # as few colors as acyclic, read directly (no substitution)
            return Choice(star_decompression(pattern, found.colors), "star", found.order, found.tried)
        return Choice(acyclic_decompression(pattern, found.colors), "acyclic", found.order, found.tried)
    found = coloring.star_coloring_of(pattern, order, seed)
    return Choice(star_decompression(pattern, found.colors), "star", found.order, found.tried)
