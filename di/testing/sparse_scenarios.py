"""Sparse scenarios: Jacobians and Hessians whose patterns are mostly zeros.

Each is tagged ``"sparse"``; the runners compute them with
``di.AutoSparse(backend)`` (see :func:`di.testing.runner.backend_for`) and compare
the sparse results, densified, with analytic float64 references. They cover the
usual shapes of sparsity: banded (tridiagonal), arrowhead, block diagonal, a 2-D
five-point stencil, a partially separable Hessian, an arrowhead Hessian, an
all-dense Jacobian (as many colors as columns) and a Jacobian with no columns.
Every function is written once with the array API, so the same code runs (and
is traced for its pattern) on every engine.
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["SPARSE_TAG", "expected_pattern", "sparse_scenario_arguments"]

SPARSE_TAG = "sparse"


def _xp(x: Any) -> Any:
    import di

    return di.array_namespace(x)


# --- the functions -------------------------------------------------------------------------


def tridiagonal(x: Any) -> Any:
    """``y_i = x_{i-1} - 2 x_i + x_{i+1} + x_i^2`` (zero boundary): a 1-D diffusion residual."""
    xp = _xp(x)
    zero = x[:1] * 0
    padded = xp.concat([zero, x, zero])
    return padded[:-2] - 2 * padded[1:-1] + padded[2:] + x * x


def arrowhead(x: Any) -> Any:
    """``y_0 = sum(x)``, ``y_i = x_0 x_i + x_i^3`` for ``i > 0``: a dense first row and column."""
    xp = _xp(x)
    rest = x[:1] * x[1:] + x[1:] ** 3
    return xp.concat([xp.reshape(xp.sum(x), (1,)), rest])


def block_diagonal(x: Any) -> Any:
    """Blocks of 3: ``y[b, i] = x[b, i] * sum_j sin(x[b, j])``."""
    xp = _xp(x)
    blocks = xp.reshape(x, (-1, 3))
    return xp.reshape(blocks * xp.sum(xp.sin(blocks), axis=1, keepdims=True), (-1,))


def laplacian_2d(x: Any) -> Any:
    """The five-point Laplacian of a 2-D grid ``x`` (zero boundary) plus ``x^3``."""
    xp = _xp(x)
    zero_row = x[:1, :] * 0
    zero_col = x[:, :1] * 0
    up = xp.concat([zero_row, x[:-1, :]], axis=0)
    down = xp.concat([x[1:, :], zero_row], axis=0)
    left = xp.concat([zero_col, x[:, :-1]], axis=1)
    right = xp.concat([x[:, 1:], zero_col], axis=1)
    return up + down + left + right - 4 * x + x**3


def partially_separable(x: Any) -> Any:
    """``sum_i (x_i - x_{i+1})^4 / 4 + cos(x_i)``: a tridiagonal Hessian."""
    xp = _xp(x)
    return xp.sum((x[:-1] - x[1:]) ** 4) / 4 + xp.sum(xp.cos(x))


def arrowhead_energy(x: Any) -> Any:
    """``x_0 sum(x_i^2, i > 0) + sum(x^4) / 12``: an arrowhead Hessian (2 colors)."""
    xp = _xp(x)
    return x[0] * xp.sum(x[1:] ** 2) + xp.sum(x**4) / 12


def all_dense(x: Any) -> Any:
    """``y = x * sum(x)``: every entry of the Jacobian is a nonzero."""
    xp = _xp(x)
    return x * xp.sum(x)


def no_columns(x: Any) -> Any:
    """``y = (sum(x), sum(x^2)) + 1`` of an empty ``x``: a Jacobian of shape (2, 0)."""
    xp = _xp(x)
    total = xp.reshape(xp.sum(x), (1,))
    return xp.concat([total, xp.reshape(xp.sum(x * x), (1,))]) + 1


# --- references -------------------------------------------------------------------------


def _tridiagonal_jacobian(x: np.ndarray) -> np.ndarray:
    n = x.size
    return np.eye(n, k=-1) + np.eye(n, k=1) + np.diag(-2 + 2 * x)


def _arrowhead_jacobian(x: np.ndarray) -> np.ndarray:
    n = x.size
    jac = np.zeros((n, n))
    jac[0, :] = 1
    jac[1:, 0] = x[1:]
    jac[np.arange(1, n), np.arange(1, n)] = x[0] + 3 * x[1:] ** 2
    return jac


def _block_diagonal_jacobian(x: np.ndarray) -> np.ndarray:
    blocks = x.reshape(-1, 3)
    jac = np.zeros((x.size, x.size))
    for b, block in enumerate(blocks):
        s = np.sin(block).sum()
        local = np.outer(block, np.cos(block)) + s * np.eye(3)
        jac[3 * b : 3 * b + 3, 3 * b : 3 * b + 3] = local
    return jac


def _laplacian_jacobian(x: np.ndarray) -> np.ndarray:
    rows, cols = x.shape
    n = x.size
    jac = np.zeros((n, n))
    for i in range(rows):
        for j in range(cols):
            k = i * cols + j
            jac[k, k] = -4 + 3 * x[i, j] ** 2
            for di_, dj in ((-1, 0), (1, 0), (0, -1), (0, 1)):
                if 0 <= i + di_ < rows and 0 <= j + dj < cols:
                    jac[k, (i + di_) * cols + j + dj] = 1
    return jac.reshape(rows, cols, rows, cols)


def _laplacian(x: np.ndarray) -> np.ndarray:
    padded = np.pad(x, 1)
    return padded[:-2, 1:-1] + padded[2:, 1:-1] + padded[1:-1, :-2] + padded[1:-1, 2:] - 4 * x + x**3


def _separable_gradient_and_hessian(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    d = x[:-1] - x[1:]
    g = -np.sin(x)
    g[:-1] += d**3
    g[1:] -= d**3
    h = np.diag(-np.cos(x))
    w = 3 * d**2
    idx = np.arange(x.size - 1)
    h[idx, idx] += w
    h[idx + 1, idx + 1] += w
    h[idx, idx + 1] -= w
    h[idx + 1, idx] -= w
    return g, h


def _arrowhead_gradient_and_hessian(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    g = x**3 / 3
    g[0] += np.sum(x[1:] ** 2)
    g[1:] += 2 * x[0] * x[1:]
    h = np.diag(x**2)
    h[np.arange(1, x.size), np.arange(1, x.size)] += 2 * x[0]
    h[0, 1:] = h[1:, 0] = 2 * x[1:]
    return g, h


def expected_pattern(scenario: Any) -> np.ndarray:
    """The true pattern of a sparse scenario's Jacobian (or Hessian), as a dense
    boolean ``(m, n)`` matrix: what exact detection must find (for tests)."""
    reference = scenario.res2 if scenario.operator == "hessian" else scenario.res1
    matrix = np.asarray(reference)
    x_ndim = np.ndim(scenario.x)
    m = int(np.prod(matrix.shape[: matrix.ndim - x_ndim]))
    return matrix.reshape(m, int(np.prod(np.shape(scenario.x)))) != 0


# --- the scenarios ------------------------------------------------------------------------


def _arguments(operator: str, f: Any, x: Any, **fields: Any) -> dict[str, Any]:
    return {"operator": operator, "f": f, "x": x, **fields}


def sparse_scenario_arguments(seed: int = 1) -> list[dict[str, Any]]:
    """The sparse scenarios (tagged ``"sparse"``), float64 and one float32, at random
    points, as the keyword arguments of :class:`~di.testing.Scenario`
    (:func:`~di.testing.default_scenarios` builds them; this module imports nothing
    from :mod:`di.testing.scenarios`, which imports it).

    Args:
        seed: seed of the random points.

    Returns:
        A list of ``Scenario(**arguments)`` arguments.

    Examples:
        >>> from di.testing.sparse_scenarios import sparse_scenario_arguments
        >>> sorted({arguments["operator"] for arguments in sparse_scenario_arguments()})
        ['hessian', 'jacobian']
    """
    rng = np.random.default_rng(seed)
    tag = {SPARSE_TAG, "float64"}
    out: list[dict[str, Any]] = []

    def vec(n: int) -> np.ndarray:
        return rng.uniform(-1, 1, n)

    x = vec(8)
    out.append(
        _arguments(
            "jacobian",
            tridiagonal,
            x,
            res1=_tridiagonal_jacobian(x),
            name="jacobian/sparse_tridiagonal/f64",
            tags=tag,
        )
    )
    x32 = vec(8).astype(np.float32)
    out.append(
        _arguments(
            "jacobian",
            tridiagonal,
            x32,
            res1=_tridiagonal_jacobian(x32.astype(np.float64)),
            name="jacobian/sparse_tridiagonal/f32",
            tags={SPARSE_TAG, "float32"},
        )
    )
    x = vec(7)
    out.append(
        _arguments(
            "jacobian", arrowhead, x, res1=_arrowhead_jacobian(x), name="jacobian/sparse_arrowhead/f64", tags=tag
        )
    )
    x = vec(9)
    out.append(
        _arguments(
            "jacobian",
            block_diagonal,
            x,
            res1=_block_diagonal_jacobian(x),
            name="jacobian/sparse_block_diagonal/f64",
            tags=tag,
        )
    )
    grid = rng.uniform(-1, 1, (4, 5))
    out.append(
        _arguments(
            "jacobian",
            laplacian_2d,
            grid,
            res1=_laplacian_jacobian(grid),
            y=_laplacian(grid),
            name="jacobian/sparse_laplacian_2d/f64",
            tags=tag | {"matrix"},
        )
    )
    x = vec(6)
    out.append(
        _arguments(
            "jacobian",
            all_dense,
            x,
            res1=np.diag(np.full(6, x.sum())) + np.outer(x, np.ones(6)),
            name="jacobian/sparse_all_dense/f64",
            tags=tag,
        )
    )
    out.append(
        _arguments(
            "jacobian",
            no_columns,
            np.zeros(0),
            res1=np.zeros((2, 0)),
            y=np.ones(2),
            name="jacobian/sparse_no_columns/f64",
            tags=tag | {"empty"},
        )
    )
    x = vec(8)
    g, h = _separable_gradient_and_hessian(x)
    out.append(
        _arguments(
            "hessian",
            partially_separable,
            x,
            res1=g,
            res2=h,
            name="hessian/sparse_partially_separable/f64",
            tags=tag,
        )
    )
    x = vec(7)
    g, h = _arrowhead_gradient_and_hessian(x)
    out.append(
        _arguments("hessian", arrowhead_energy, x, res1=g, res2=h, name="hessian/sparse_arrowhead/f64", tags=tag)
    )
    return out
