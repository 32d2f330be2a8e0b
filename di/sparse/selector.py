"""The selector of :class:`AutoSparse`, beside its strategy. Building one imports no engine and no scipy."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

from di.backends.selectors import AbstractBackend, check_flags, default_selector, not_a_selector
from di.errors import InvalidOptionError, InvalidOptionTypeError

__all__ = ["ORDERS", "AutoSparse"]


@dataclass(frozen=True)
class AutoSparse(AbstractBackend):
    """Sparse Jacobians and Hessians: a dense backend, colored.

    ``jacobian`` and ``hessian`` (and their ``value_and_*`` forms) detect the
    sparsity pattern at preparation, color it, and compute one batched
    pushforward (or pullback, or hvp) per color with the ``dense`` backend, then
    read every nonzero out of the compressed result: a banded Jacobian of size
    ``n`` costs about its bandwidth instead of ``n`` pushforwards. Every other
    operator is the dense backend's. The prep's ``sparsity`` (a boolean
    ``scipy.sparse.csr_array``), ``colors`` (their number) and ``info``
    (coloring, order, mode) show what was found. A prep serves the pattern it
    was made for: an ``x`` or context at which ``f`` has another pattern is the
    caller's responsibility (``python -m di check ... --sparse`` tests it).

    Args:
        dense: the backend computing the compressed products: an engine's
            selector, eager or compiled (not ``AutoSparse``; ``AutoFastest``,
            and ``SecondOrder`` for jacobians and hessians, are refused at
            preparation).
        sparsity: where the pattern comes from: :class:`di.TracerSparsity`
            (default: exact, read from ``f``'s structure: its JAX program, or
            traced arrays without JAX),
            :class:`di.LocalTracerSparsity` (at the preparation point),
            :class:`di.DenseSparsity` (nonzeros of dense matrices at random
            points) or :class:`di.KnownSparsity` (given, optionally with its coloring).
        coloring: ``"greedy"`` (default: structurally orthogonal columns or rows
            for Jacobians, a star coloring for Hessians, each nonzero read
            directly) or ``"acyclic"`` (Hessians: an acyclic coloring, fewer colors,
            nonzeros found by substitution; Jacobians as ``"greedy"``).
        order: the vertex order of the greedy coloring: ``"auto"`` (default: the
            fewest colors among every order of :data:`di.sparse.selector.ORDERS`
            (``natural``, ``largest_first``, ``smallest_last``,
            ``incidence_degree``, ``dynamic_largest_first``, ``saturation``
            (DSATUR), ``independent_set``, ``breadth_first``, ``depth_first``,
            ``random``, and the dynamic ones with ties to the lowest vertex), with
            seeded tie-breaks, then recolored by color classes while that helps,
            within a work budget; ``prep.info.tried`` lists what ran), or one of those.
        seed: the seed of the ``"random"`` order and of the search's tie-breaks
            (the same seed gives the same coloring on every machine).
        mode: Jacobians only: ``"auto"`` (default: the dense backend's ``mode``
            when it has one, else the fewest products among pushforwards by
            columns, pullbacks by rows, and both, among the primitives the dense
            backend implements itself), ``"forward"``, ``"reverse"`` or
            ``"bidirectional"`` (rows and columns colored together: an arrowhead
            takes three products instead of ``n``).
        chunk_size: at most this many colors per batched product (bounds the
            memory of the compressed matrix; ``None``: all at once).
        dense_result: return dense arrays of the caller's family (shaped
            ``f(x).shape + x.shape``) instead of sparse matrices. Sparse results
            are 2-D ``(f(x).size, x.size)``: ``scipy.sparse.csr_array`` for numpy
            callers, ``torch.sparse_csr`` tensors for torch callers,
            ``jax.experimental.sparse.BCOO`` for JAX callers.

    Raises:
        InvalidOptionTypeError: ``dense`` is not a selector, or is an
            ``AutoSparse``; a ``sparsity`` that is not a sparsity source (a
            ``TypeError``).
        InvalidOptionError: an unknown ``coloring``, ``order`` or ``mode``; a
            ``chunk_size`` below 1 (a ``ValueError``).

    Examples:
        >>> import numpy as np, di
        >>> backend = di.AutoSparse(di.AutoFiniteDiff(), sparsity=di.KnownSparsity(np.eye(3, dtype=bool)))
        >>> f = lambda x: x ** 2
        >>> prep = di.prepare_jacobian(f, backend, np.zeros(3))
        >>> prep.colors
        1
        >>> di.jacobian(f, prep, backend, np.array([1.0, 2.0, 3.0])).toarray().round(6)
        array([[2., 0., 0.],
               [0., 4., 0.],
               [0., 0., 6.]])
    """

    dense: AbstractBackend = field(default_factory=lambda: default_selector("AutoSparse.dense"))
    strategy: ClassVar[str] = "di.sparse.strategy:SparseStrategy"
    sparse: ClassVar[bool] = True
    sparsity: Any = field(default=None, kw_only=True)
    coloring: str = field(default="greedy", kw_only=True)
    order: str = field(default="auto", kw_only=True)
    dense_result: bool = field(default=False, kw_only=True)
    mode: str = field(default="auto", kw_only=True)
    seed: int = field(default=0, kw_only=True)
    chunk_size: int | None = field(default=None, kw_only=True)

    def __post_init__(self) -> None:
        from di.sparse.sources import SparsitySource, TracerSparsity

        if not isinstance(self.dense, AbstractBackend) or isinstance(self.dense, AutoSparse):
            raise InvalidOptionTypeError(
                f"AutoSparse(dense=...) must be a dense backend selector such as di.AutoJAX(), not "
                f"{not_a_selector(self.dense)}"
            )
        if self.sparsity is None:
            object.__setattr__(self, "sparsity", TracerSparsity())
        elif not isinstance(self.sparsity, SparsitySource):
            raise InvalidOptionTypeError(
                f"AutoSparse(sparsity=...) must be di.TracerSparsity(), di.LocalTracerSparsity(), "
                f"di.DenseSparsity(...) or di.KnownSparsity(pattern), not {type(self.sparsity).__name__}"
            )
        check_flags(self, "dense_result")
        _check_choice("coloring", self.coloring, _SPARSE_COLORINGS)
        _check_choice("order", self.order, _SPARSE_ORDERS)
        _check_choice("mode", self.mode, _SPARSE_MODES)
        if self.chunk_size is not None and (not isinstance(self.chunk_size, int) or self.chunk_size < 1):
            raise InvalidOptionError(
                f"AutoSparse(chunk_size={self.chunk_size!r}): chunk_size must be a positive int or None"
            )

    @property
    def is_installed(self) -> bool:
        """Whether the dense engine and scipy are installed."""
        import importlib.util

        return self.dense.is_installed and importlib.util.find_spec("scipy") is not None

    @property  # type: ignore[misc]
    def engine_display(self) -> str:  # type: ignore[override]
        """What is missing when it is not installed: the dense engine, or scipy."""
        return self.dense.engine_display if not self.dense.is_installed else "scipy"

    @property  # type: ignore[misc]
    def extra(self) -> str:  # type: ignore[override]
        """The pip extra installing what is missing."""
        return self.dense.extra if not self.dense.is_installed else "sparse"


_SPARSE_COLORINGS = ("greedy", "acyclic")
ORDERS = (
    "natural",
    "largest_first",
    "smallest_last",
    "incidence_degree",
    "dynamic_largest_first",
    "saturation",
    "independent_set",
    "breadth_first",
    "depth_first",
    "random",
    "smallest_last:lowest",
    "incidence_degree:lowest",
    "dynamic_largest_first:lowest",
)
"""Every vertex order a coloring can be asked for (or ``"auto"``: the best of them); here,
beside the option it checks, as :mod:`di.sparse.orders` imports scipy (not at ``import di``)."""
_SPARSE_ORDERS = ("auto", *ORDERS)
_SPARSE_MODES = ("auto", "forward", "reverse", "bidirectional")


def _check_choice(argument: str, value: Any, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise InvalidOptionError(
            f"AutoSparse({argument}={value!r}): {argument} must be one of {', '.join(map(repr, choices))}"
        )
