"""Where :class:`di.AutoSparse` gets its sparsity pattern from: three small selectors.

Like backend selectors (beside which they live, as ADTypes.jl keeps its sparsity
detectors beside its backend types) they are frozen and hashable (so
``AutoSparse`` stays a valid dictionary key), and building one imports no engine
and no scipy; :mod:`di.sparse` does the work they name.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from di.errors import InvalidOptionError

__all__ = ["DenseSparsity", "KnownSparsity", "LocalTracerSparsity", "SparsitySource", "TracerSparsity"]


class SparsitySource:
    """Base class of the sparsity sources of :class:`di.AutoSparse`.

    Examples:
        >>> import di
        >>> isinstance(di.TracerSparsity(), di.SparsitySource)
        True
    """


_TRACER_METHODS = ("auto", "program", "arrays")


@dataclass(frozen=True)
class TracerSparsity(SparsitySource):
    """The exact, global pattern, read from ``f``'s structure by tracing it.

    Two tracers, chosen by ``method``:

    - ``"program"``: ``f`` is traced once into a JAX program (``jax.make_jaxpr``,
      whatever the dense backend: an ``f`` written with the array API, ``xp =
      di.array_namespace(x)``, traces the same way) and the program is interpreted
      with index sets. Elementwise operations, ``dot_general`` (with the zero
      pattern of constant matrices), reductions, broadcasting, reshapes,
      transposes, slicing, ``gather``/``scatter`` with constant indices, ``stack``,
      ``unstack``, ``tile``, concatenation, padding, ``select``, cumulative sums,
      ``sort`` (dense in its axis), sub-programs (``jit``, ``custom_jvp``,
      ``custom_vjp``, ``cond``) and loops (``scan``, ``fori_loop``, ``while``:
      unrolled on the index sets, or bounded by a fixed point with a note) are
      followed. Hessian patterns are read from the program of ``f``'s gradient.
    - ``"arrays"``: ``f`` runs once on traced arrays whose namespace
      (``di.array_namespace``) has a rule for every function of the array API
      standard; needs no JAX. Hessians keep second-order sets (a sum couples no
      inputs, a product couples its factors' inputs). ``f`` may not branch on
      values of ``x`` (use :class:`LocalTracerSparsity`).
    - ``"auto"`` (default): ``"program"`` when JAX is installed, else ``"arrays"``.

    An operation a tracer does not know makes its outputs depend on all its
    inputs, and the prep's ``info.notes`` say which: the pattern may be denser
    than the truth, never sparser. The pattern holds for every ``x`` and every
    context value (contexts are treated as unknown values); values ``f`` closes
    over are read as constants.

    Args:
        method: ``"auto"``, ``"program"`` or ``"arrays"``.

    Raises:
        InvalidOptionError: an unknown ``method`` (a ``ValueError``).

    Examples:
        >>> import di
        >>> di.AutoSparse(di.AutoJAX(), sparsity=di.TracerSparsity()).sparsity
        TracerSparsity(method='auto')
    """

    method: str = "auto"

    def __post_init__(self) -> None:
        if self.method not in _TRACER_METHODS:
            raise InvalidOptionError(f"TracerSparsity(method={self.method!r}): method must be one of {_TRACER_METHODS}")


@dataclass(frozen=True)
class LocalTracerSparsity(SparsitySource):
    """The pattern at the preparation point: ``f`` runs once on traced arrays
    that carry their values, so Python branches on values of ``x`` (``if x[0] >
    0``, ``xp.where`` with a condition on ``x``) take the branch the point takes,
    and only that branch's dependencies count.

    The pattern is *local*: it holds at the preparation point and wherever ``f``
    takes the same branches; at a point where ``f`` branches otherwise the
    prepared sparse matrix misses the other branch's entries (prepare again
    there, or use :class:`TracerSparsity` when ``f`` has no such branches).
    Contexts are read at their preparation values too. Needs no JAX; Hessians
    keep second-order sets as with ``TracerSparsity(method="arrays")``.

    Examples:
        >>> import numpy as np, di
        >>> def f(x):
        ...     xp = di.array_namespace(x)
        ...     return xp.where(x > 0, x ** 2, x[::-1])
        >>> prep = di.prepare_jacobian(f, di.AutoSparse(di.AutoFiniteDiff(), sparsity=di.LocalTracerSparsity()),
        ...                            np.array([1.0, -1.0, 1.0]))
        >>> prep.sparsity.toarray().astype(int)
        array([[1, 0, 0],
               [0, 1, 0],
               [0, 0, 1]])
    """


@dataclass(frozen=True)
class DenseSparsity(SparsitySource):
    """The nonzeros of dense Jacobians (or Hessians) at a few random points.

    Cheap to write and works for any ``f`` any backend can differentiate, but
    *local*: an entry that happens to vanish at every sampled point is missed.
    Prefer :class:`TracerSparsity` when ``f`` traces with JAX, or
    :class:`KnownSparsity` when you know the pattern.

    Args:
        backend: the backend computing the dense matrices; ``None`` (default)
            uses the dense backend of the ``AutoSparse`` it is given to.
        points: how many random points (standard normal, seeded) to union over.
        atol: entries with ``|value| <= atol`` count as zeros.

    Raises:
        InvalidOptionError: ``points < 1`` or ``atol < 0`` (a ``ValueError``).

    Examples:
        >>> import di
        >>> di.DenseSparsity(di.AutoFiniteDiff(), points=3)
        DenseSparsity(backend=AutoFiniteDiff(method='central', step=None), points=3, atol=0.0)
    """

    backend: Any = None
    points: int = 2
    atol: float = 0.0

    def __post_init__(self) -> None:
        if not isinstance(self.points, int) or self.points < 1:
            raise InvalidOptionError(f"DenseSparsity(points={self.points!r}): points must be a positive int")
        if not (isinstance(self.atol, (int, float, np.number)) and self.atol >= 0):
            raise InvalidOptionError(f"DenseSparsity(atol={self.atol!r}): atol must be >= 0")
        object.__setattr__(self, "atol", float(self.atol))


class KnownSparsity(SparsitySource):
    """A pattern you know: a ``scipy.sparse`` matrix or array, or a boolean array,
    and optionally its coloring.

    Its shape must be ``(f(x).size, x.size)`` for Jacobians and ``(x.size,
    x.size)`` for Hessians (whose pattern is symmetrised). Every stored entry
    counts as a nonzero, whatever its value. The pattern is copied, so the
    selector stays hashable and immutable.

    Args:
        pattern: the pattern.
        colors: a coloring of its columns (like SciPy's ``(pattern, groups)``),
            one color ``0 .. k - 1`` per column: for Jacobians, no two columns of
            one color may share a row (one pushforward per color); for Hessians, a
            star coloring (or an acyclic one with ``coloring="acyclic"``). Checked
            at preparation; ``None`` (default): ``AutoSparse`` colors the pattern.

    Raises:
        InvalidOptionError: not two-dimensional; ``colors`` not a 1-D array of
            non-negative integers (a ``ValueError``).

    Examples:
        >>> import numpy as np, di
        >>> known = di.KnownSparsity(np.eye(3, dtype=bool))
        >>> known.shape, known.nnz
        ((3, 3), 3)
        >>> di.KnownSparsity(np.eye(3, dtype=bool), colors=[0, 0, 0]).colors
        array([0, 0, 0])
    """

    __slots__ = ("_hash", "colors", "cols", "rows", "shape")
    shape: tuple[int, int]
    rows: np.ndarray
    cols: np.ndarray
    colors: np.ndarray | None
    _hash: int

    def __init__(self, pattern: Any, colors: Any = None) -> None:
        if hasattr(pattern, "tocoo"):  # scipy.sparse, without importing scipy
            coo = pattern.tocoo()
            rows, cols, shape = np.asarray(coo.row), np.asarray(coo.col), tuple(int(s) for s in coo.shape)
        else:
            dense = np.asarray(pattern)
            if dense.ndim != 2:
                raise InvalidOptionError(f"KnownSparsity needs a 2-D pattern, not one of shape {dense.shape}")
            rows, cols = np.nonzero(dense)
            shape = tuple(int(s) for s in dense.shape)
        if len(shape) != 2:
            raise InvalidOptionError(f"KnownSparsity needs a 2-D pattern, not one of shape {shape}")
        order = np.lexsort((cols, rows))
        keys = np.unique(rows[order].astype(np.int64) * max(shape[1], 1) + cols[order])
        rows, cols = np.divmod(keys, max(shape[1], 1))
        self._hold(shape, rows, cols, None if colors is None else _colors(colors))

    def _hold(self, shape: tuple[int, int], rows: np.ndarray, cols: np.ndarray, colors: np.ndarray | None) -> None:
        """Set the fields once, from checked parts (``__init__``, and unpickling)."""
        for array in (rows, cols) if colors is None else (rows, cols, colors):
            array.setflags(write=False)
        object.__setattr__(self, "shape", shape)
        object.__setattr__(self, "rows", rows)
        object.__setattr__(self, "cols", cols)
        object.__setattr__(self, "colors", colors)
        color_bytes = b"" if colors is None else colors.tobytes()
        # computed, never carried over: the hash of bytes differs from one process to the next
        object.__setattr__(self, "_hash", hash((shape, rows.tobytes(), cols.tobytes(), color_bytes)))

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("KnownSparsity is immutable")

    def __reduce__(self) -> tuple[Any, ...]:
        # pickle's and copy's default would set the slots one by one, which __setattr__ refuses
        return (_rebuild_known, (self.shape, self.rows, self.cols, self.colors))

    @property
    def nnz(self) -> int:
        """The number of nonzeros."""
        return int(self.rows.size)

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, KnownSparsity)
            and self._hash == other._hash
            and self.shape == other.shape
            and np.array_equal(self.rows, other.rows)
            and np.array_equal(self.cols, other.cols)
            and (self.colors is None) == (other.colors is None)
            and (self.colors is None or other.colors is None or np.array_equal(self.colors, other.colors))
        )

    def __hash__(self) -> int:
        return self._hash

    def __repr__(self) -> str:
        colored = "" if self.colors is None else f", colors={int(self.colors.max(initial=-1)) + 1}"
        return f"KnownSparsity(shape={self.shape}, nnz={self.nnz}{colored})"


def _rebuild_known(
    shape: tuple[int, int], rows: np.ndarray, cols: np.ndarray, colors: np.ndarray | None
) -> KnownSparsity:
    """A :class:`KnownSparsity` from the parts ``__reduce__`` gave (pickle, ``copy``)."""
    known = KnownSparsity.__new__(KnownSparsity)
    # copies: an unpickled array may be writable, and a copied one may share memory with the original
    given = None if colors is None else np.array(colors)
    known._hold((int(shape[0]), int(shape[1])), np.array(rows), np.array(cols), given)
    return known


def _colors(colors: Any) -> np.ndarray:
    """A given coloring as a read-only int64 vector, checked for shape and values."""
    array = np.asarray(colors)
    if array.ndim != 1 or (array.size and not np.issubdtype(array.dtype, np.integer)) or np.any(array < 0):
        raise InvalidOptionError(
            "KnownSparsity(colors=...) must be a 1-D array of non-negative integers, one per column"
        )
    return np.array(array, dtype=np.int64)
