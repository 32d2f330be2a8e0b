"""di.to_scipy and di.from_scipy: every family's AutoSparse results to scipy.sparse and back
(a family without a sparse matrix type: its dense results, and from_scipy's refusal), and
the refusals of what is no matrix."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import scipy.sparse as sp
from conftest import BACKENDS, FAMILIES, approximates, as_family, backend_params, engine_family

import di
from di.families import get_family
from di.families.family import Family


def _has_sparse_type(family: str) -> bool:
    """Whether the family builds sparse matrices (else it keeps the refusing builder)."""
    return type(get_family(family)).sparse_matrix is not Family.sparse_matrix


def _residual(x: Any) -> Any:
    xp = di.array_namespace(x)
    return x * x + xp.concat([x[1:], x[:1] * 0]) - 2 * xp.concat([x[:1] * 0, x[:-1]])


def _energy(x: Any) -> Any:
    xp = di.array_namespace(x)
    return xp.sum(x[1:] * x[:-1] * x[0]) + xp.sum(x**3)


@pytest.mark.parametrize("dense", backend_params(BACKENDS))
def test_to_scipy_converts_every_familys_sparse_results(dense: di.AbstractBackend) -> None:
    x = np.linspace(0.5, 1.5, 7)
    family = engine_family(dense)
    xf = as_family(x, family)
    backend = di.AutoSparse(dense)
    expected_jac = np.diag(2 * x) + np.eye(7, k=1) - 2 * np.eye(7, k=-1)
    reference = np.asarray(di.hessian(_energy, di.AutoTorch(), x))  # exact (AD)
    tolerance = 1e-5 if approximates(dense) else 1e-10
    dense_result = di.jacobian(_residual, di.AutoSparse(dense, dense_result=True), xf)
    np.testing.assert_allclose(di.to_scipy(dense_result).toarray(), expected_jac, rtol=tolerance, atol=tolerance)
    if not _has_sparse_type(family):  # dense results only, and the refusal names the remedy
        with pytest.raises(di.UnsupportedOperatorError, match="dense_result=True"):
            di.jacobian(_residual, backend, xf)
        return
    jac = di.jacobian(_residual, backend, xf)
    hess = di.hessian(_energy, backend, xf)
    for result, expected in ((jac, expected_jac), (hess, reference)):
        converted = di.to_scipy(result)
        assert isinstance(converted, sp.csr_array)
        np.testing.assert_allclose(converted.toarray(), expected, rtol=tolerance, atol=tolerance)
        back = di.from_scipy(converted, family)
        assert type(back) is type(result)
        np.testing.assert_array_equal(di.to_scipy(back).toarray(), converted.toarray())


def test_to_scipy_refuses_what_is_no_matrix() -> None:
    with pytest.raises(di.InvalidInputError, match="to_scipy"):
        di.to_scipy({"a": np.ones(2)})
    with pytest.raises(di.InvalidInputError, match="from_scipy"):
        di.from_scipy(np.eye(2), "numpy")
    with pytest.raises(di.InvalidInputError, match="no such family"):
        di.from_scipy(sp.eye_array(2), "abacus")


@pytest.mark.parametrize("family", FAMILIES)
def test_from_scipy_and_to_scipy_round_trip_on_every_family(family: str) -> None:
    matrix = sp.csr_array(
        (np.array([1.5, -2.0, 3.25, 0.5]), np.array([0, 2, 2, 1]), np.array([0, 2, 2, 4])), shape=(3, 4)
    )
    if not _has_sparse_type(family):  # dense results only: to_scipy reads a 2-D array, from_scipy refuses
        with pytest.raises(di.UnsupportedOperatorError, match="dense_result=True"):
            di.from_scipy(matrix, family)
        converted = di.to_scipy(as_family(matrix.toarray(), family))
    else:
        built = di.from_scipy(matrix, family)
        assert get_family(family).sparse_to_scipy(built) is not None  # the family's own sparse matrix
        converted = di.to_scipy(built)
    assert isinstance(converted, sp.csr_array) and converted.shape == (3, 4)
    np.testing.assert_array_equal(converted.toarray(), matrix.toarray())
    assert converted.nnz == 4
