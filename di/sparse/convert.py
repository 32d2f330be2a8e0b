"""Sparse results to ``scipy.sparse`` and back: :func:`di.to_scipy` and
:func:`di.from_scipy`.

An ``AutoSparse`` result is a sparse matrix of the caller's family (a
``scipy.sparse.csr_array`` for NumPy, a ``torch.sparse_csr`` tensor, a JAX
``BCOO``, a TensorFlow ``SparseTensor``). SciPy's solvers and optimizers
(``spsolve``, ``trust-constr``) take ``scipy.sparse`` matrices; each family
converts its own matrices (:meth:`di.Family.sparse_to_scipy` and
:meth:`di.Family.sparse_from_scipy`), so this module asks the registered
families and names none.
"""

from __future__ import annotations

import sys
from typing import Any

from di.errors import InvalidInputError
from di.families import families, family_of, get_family

__all__ = ["from_scipy", "to_scipy"]


def to_scipy(result: Any) -> Any:
    """A sparse (or 2-D dense) matrix of any family as a ``scipy.sparse.csr_array``
    of its values (a copy: the result's index arrays are not shared).

    Args:
        result: a sparse ``jacobian`` or ``hessian`` result (SciPy sparse,
            ``torch.sparse_csr`` or ``sparse_coo``, JAX ``BCOO``, TensorFlow
            ``SparseTensor``), or a 2-D dense array of any family
            (``AutoSparse(..., dense_result=True)``).

    Returns:
        A ``scipy.sparse.csr_array`` (float values, the result's stored entries).

    Raises:
        InvalidInputError: ``result`` is neither a sparse matrix of a registered
            family nor a 2-D array.

    Examples:
        >>> import numpy as np, di
        >>> def f(x):
        ...     return x * x
        >>> backend = di.AutoSparse(di.AutoFiniteDiff())
        >>> jac = di.jacobian(f, backend, np.arange(3.0))
        >>> m = di.to_scipy(jac)
        >>> type(m).__name__, m.nnz, m.diagonal().round(6).tolist()
        ('csr_array', 3, [0.0, 2.0, 4.0])
    """
    for family in families():
        if family.module and family.module not in sys.modules:
            continue  # no matrix of a library not imported can exist
        converted = family.sparse_to_scipy(result)
        if converted is not None:
            return converted
    name = family_of(result)
    if name is not None and len(getattr(result, "shape", ())) == 2:
        import scipy.sparse as sp

        return sp.csr_array(get_family(name).to_numpy(result))
    raise InvalidInputError(
        f"di.to_scipy(result): {type(result).__name__} is not a sparse matrix of a registered family (scipy.sparse, "
        f"torch sparse tensors, JAX BCOO, TensorFlow SparseTensor) nor a 2-D array; pass a jacobian or hessian "
        f"result of AutoSparse."
    )


def from_scipy(matrix: Any, family: str) -> Any:
    """A ``scipy.sparse`` matrix as a sparse matrix of ``family``, as an ``AutoSparse``
    result of that family is (``"numpy"``: a ``csr_array``; ``"torch"``: a
    ``sparse_csr`` tensor; ``"jax"``: a ``BCOO``; ``"tensorflow"``: a ``SparseTensor``).

    Args:
        matrix: a 2-D ``scipy.sparse`` matrix or array.
        family: the name of a registered family (:func:`di.families.family_of`
            names an array's).

    Returns:
        The family's sparse matrix with ``matrix``'s stored entries.

    Raises:
        InvalidInputError: ``matrix`` is not a ``scipy.sparse`` matrix, or no
            family is named ``family``.
        UnsupportedOperatorError: the family has no sparse matrix type.

    Examples:
        >>> import numpy as np, scipy.sparse as sp, di
        >>> di.from_scipy(sp.eye_array(3), "numpy").nnz
        3
    """
    scipy_sparse = sys.modules.get("scipy.sparse")
    if scipy_sparse is None or not scipy_sparse.issparse(matrix) or len(matrix.shape) != 2:
        raise InvalidInputError(
            f"di.from_scipy(matrix): {type(matrix).__name__} is not a 2-D scipy.sparse matrix; build one with "
            f"scipy.sparse.csr_array."
        )
    try:
        target = get_family(family)
    except KeyError:
        known = ", ".join(repr(f.name) for f in families())
        raise InvalidInputError(f"di.from_scipy(family={family!r}): no such family; use one of {known}.") from None
    return target.sparse_from_scipy(matrix)
