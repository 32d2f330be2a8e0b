"""``AutoSparse(dense)``: sparse Jacobians and Hessians from a dense backend's
batched pushforwards, pullbacks or hvps, one per color (a strategy).

:class:`SparseStrategy` is the preparation hook: ``jacobian`` and ``hessian``
get the colored programs of :mod:`di.sparse.colored`, every other operator is
the dense backend's prep. The result is built in the caller's family (its
record's sparse-matrix builder, 2-D ``(f(x).size, x.size)``), or dense, shaped
``f(x).shape + x.shape``, with ``dense_result=True``.

The engine adapters know nothing of this package: it uses them only through the
adapter protocol.
"""

from __future__ import annotations

from di.backends.capabilities import OPERATOR_FAMILIES
from di.backends.registry import get_strategy
from di.backends.selectors import AbstractBackend
from di.errors import UnsupportedOperatorError
from di.prep.base import Prep
from di.prep.strategy import Preparer, PrepareRequest, Strategy
from di.sparse.colored import SparseSource
from di.sparse.selector import AutoSparse

__all__ = ["SparseStrategy"]


class SparseStrategy(Strategy):
    """The preparation hook of :class:`di.AutoSparse`: colored ``jacobian`` and
    ``hessian``, the dense backend's prep for everything else.

    Examples:
        >>> import numpy as np, di
        >>> backend = di.AutoSparse(di.AutoFiniteDiff(), sparsity=di.KnownSparsity(np.eye(2, dtype=bool)))
        >>> di.prepare_jacobian(lambda x: x ** 2, backend, np.zeros(2)).colors
        1
    """

    def engine(self, backend: AbstractBackend) -> AbstractBackend | None:
        assert isinstance(backend, AutoSparse)
        return backend.dense

    def products_as_jacobian(self, backend: AbstractBackend) -> bool:
        return True  # several products at one point: one colored Jacobian

    def support(self, backend: AbstractBackend) -> dict[str, str]:
        colored = {
            "jacobian": "sparse (colored pushforwards, pullbacks or both)",
            "hessian": "sparse (star- or acyclic-colored hvps)",
        }
        return {family: colored.get(family, "as the dense backend") for family in OPERATOR_FAMILIES}

    def prepare(self, backend: AbstractBackend, request: PrepareRequest, preparer: Preparer) -> Prep:
        """The colored prep for ``jacobian`` and ``hessian``, the dense backend's otherwise.

        Raises:
            UnsupportedOperatorError: the dense backend chooses among whole preps
                (:class:`di.AutoFastest`) and has no programs to color; for
                ``jacobian`` and ``hessian``, a :class:`di.SecondOrder`, which
                combines two engines' programs.
        """
        assert isinstance(backend, AutoSparse)
        dense_strategy = get_strategy(backend.dense)
        if dense_strategy is not None and dense_strategy.engine(backend.dense) is None:  # chooses per argument
            raise UnsupportedOperatorError(
                f"{backend!r}: {backend.dense!r} cannot be a part of AutoSparse, because it chooses among whole "
                f"preps and has no programs of its own to color. Put AutoSparse backends among its candidates "
                f"instead, e.g. AutoFastest(candidates=[AutoSparse(AutoJAX()), AutoJAX()])."
            )
        if request.operator not in ("jacobian", "hessian") or request.same_point:
            return preparer.with_backend(backend.dense).with_backend(backend)
        if dense_strategy is not None:  # SecondOrder: two engines' programs, no one adapter
            raise UnsupportedOperatorError(
                f"{backend!r}: {backend.dense!r} cannot be AutoSparse's dense backend, because AutoSparse colors "
                f"the products (pushforwards, pullbacks, hvps) of one engine's programs and {backend.dense!r} "
                f"combines two engines. Use an engine's backend: AutoSparse(AutoJAX()) computes its hvps as forward "
                f"over reverse, AutoSparse(AutoFiniteDiff()) as differences of gradients."
            )
        source = SparseSource(backend)
        prep = preparer.with_source(source, backend)
        assert source.info is not None  # set by the programs the prep was made from
        return prep.with_backend(backend, source.info)
