"""The structured patterns of ``python -m bench.sparse``: di's colors beside the
optimum (banded Jacobians and Hessians, the 2-D Laplacian, a grid Hessian, an
arrowhead Jacobian with bicoloring, the Brusselator written with ``xp.stack`` and
with ``xp.concat`` on every engine). Each row is handed to ``on_row`` as soon as
it is measured.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

import di


def _banded(k: int) -> Callable[[Any], Any]:
    def f(x: Any) -> Any:
        xp = di.array_namespace(x)
        n = x.shape[0]
        zeros = x[:k] * 0
        padded = xp.concat([zeros, x, zeros])
        return sum(padded[k + s : k + s + n] * (s + k + 2) for s in range(-k, k + 1)) * x  # no band vanishes

    return f


def _banded_energy(half: int) -> Callable[[Any], Any]:
    def f(x: Any) -> Any:
        xp = di.array_namespace(x)
        return sum(xp.sum(x[s:] * x[:-s]) for s in range(1, half + 1)) + xp.sum(x**4)

    return f


def _laplacian(x: Any) -> Any:
    xp = di.array_namespace(x)
    k = math.isqrt(x.shape[0])
    g = xp.reshape(x, (k, k))
    zr, zc = g[:1, :] * 0, g[:, :1] * 0
    lap = (
        xp.concat([zr, g[:-1, :]], axis=0)
        + xp.concat([g[1:, :], zr], axis=0)
        + xp.concat([zc, g[:, :-1]], axis=1)
        + xp.concat([g[:, 1:], zc], axis=1)
        - 4 * g
    )
    return xp.reshape(lap + g**3, (-1,))


def _grid_energy(x: Any) -> Any:
    xp = di.array_namespace(x)
    k = math.isqrt(x.shape[0])
    g = xp.reshape(x, (k, k))
    return xp.sum((g[1:, :] - g[:-1, :]) ** 4) + xp.sum((g[:, 1:] - g[:, :-1]) ** 4) + xp.sum(xp.cos(g))


def _arrowhead(x: Any) -> Any:
    xp = di.array_namespace(x)
    return xp.concat([xp.reshape(xp.sum(x), (1,)), x[:1] * x[1:] + x[1:] ** 3])


def brusselator(u: Any, stacked: bool = True) -> Any:
    """The 2-D Brusselator right-hand side on a periodic N x N grid, written with
    ``xp.stack`` or ``xp.concat``."""
    xp = di.array_namespace(u)
    n = math.isqrt(u.shape[0] // 2)
    g = xp.reshape(u, (2, n, n))
    a, b = g[0], g[1]

    def lap(v: Any) -> Any:
        return xp.roll(v, 1, axis=0) + xp.roll(v, -1, axis=0) + xp.roll(v, 1, axis=1) + xp.roll(v, -1, axis=1) - 4 * v

    da = 1 + a * a * b - 4.4 * a + 3.4 * lap(a)
    db = 3.4 * a - a * a * b + 3.4 * lap(b)
    if stacked:
        return xp.reshape(xp.stack([da, db]), (-1,))
    return xp.concat([xp.reshape(da, (-1,)), xp.reshape(db, (-1,))])


def structured_rows(on_row: Callable[[list[dict[str, Any]]], None] | None = None) -> list[dict[str, Any]]:
    """Colors of di on patterns whose optimum is known (or, for the Brusselator, bounded);
    ``on_row(rows so far)`` after each one."""
    jax_jit = di.AutoJAX(jit=True)
    cases: list[tuple[str, Callable[[Any], Any], str, Any, int, Any]] = []
    for k in (1, 2, 3):
        cases.append((f"banded Jacobian, k = {k}", _banded(k), "jacobian", di.AutoSparse(jax_jit), 1000, 2 * k + 1))
    for rho in (2, 4, 6):
        half = rho // 2
        energy = _banded_energy(half)
        cases.append((f"banded Hessian, rho = {rho} (star)", energy, "hessian", di.AutoSparse(jax_jit), 1000, rho + 1))
        cases.append(
            (
                f"banded Hessian, rho = {rho} (acyclic)",
                energy,
                "hessian",
                di.AutoSparse(jax_jit, coloring="acyclic"),
                1000,
                half + 1,
            )
        )
    for m in (20, 30):
        cases.append((f"2-D Laplacian Jacobian, {m} x {m}", _laplacian, "jacobian", di.AutoSparse(jax_jit), m * m, 5))
        cases.append((f"grid Hessian, {m} x {m}", _grid_energy, "hessian", di.AutoSparse(jax_jit), m * m, 5))
    cases.append(
        (
            "arrowhead Jacobian (bidirectional)",
            _arrowhead,
            "jacobian",
            di.AutoSparse(jax_jit, mode="bidirectional"),
            1000,
            3,
        )
    )
    cases.append(
        ("arrowhead Jacobian (forward)", _arrowhead, "jacobian", di.AutoSparse(jax_jit, mode="forward"), 1000, 1000)
    )
    for stacked in (True, False):
        for dense in (jax_jit, di.AutoTorch(), di.AutoAutograd(), di.AutoFiniteDiff()):
            name = f"Brusselator N = 32 with {'stack' if stacked else 'concat'}, {type(dense).__name__}"
            cases.append(
                (name, lambda u, s=stacked: brusselator(u, s), "jacobian", di.AutoSparse(dense), 2 * 32 * 32, None)
            )
    for stacked in (True, False):
        for dense in (di.AutoTorch(), di.AutoFiniteDiff()):
            name = f"Brusselator N = 32 with {'stack' if stacked else 'concat'}, {type(dense).__name__}, array tracer"
            arrays = di.AutoSparse(dense, sparsity=di.TracerSparsity(method="arrays"))
            cases.append((name, lambda u, s=stacked: brusselator(u, s), "jacobian", arrays, 2 * 32 * 32, None))
    rows = []
    for name, function, operator, backend, n, optimum in cases:
        x = np.random.default_rng(n).uniform(0.5, 1.5, n)
        prep = getattr(di, f"prepare_{operator}")(function, backend, x)
        # Unknown optimum: the densest row bounds a column coloring from below.
        bound = f">= {int(np.diff(prep.sparsity.indptr).max())}"
        rows.append(
            {
                "name": name,
                "n": n,
                "nnz": prep.sparsity.nnz,
                "colors": prep.colors,
                "optimum": bound if optimum is None else optimum,
                "coloring": f"{prep.info.coloring} / {prep.info.order}",
                "notes": "; ".join(prep.info.notes) or "-",
            }
        )
        print(f"structured {name} done", flush=True)
        if on_row is not None:
            on_row(rows)
    return rows


def structured_markdown(rows: list[dict[str, Any]]) -> list[str]:
    lines = [
        "## Structured patterns: di's colors beside the optimum",
        "",
        "Float64 NumPy input; the default `AutoSparse` options unless the row says otherwise. Where the optimum is "
        "not known, `>= k` is the lower bound the densest row gives (every nonzero of a row needs its own color).",
        "",
        "| pattern | n | nonzeros | di colors | optimum | coloring / order | detection notes |",
        "| --- | ---: | ---: | ---: | ---: | --- | --- |",
    ]
    for row in rows:
        optimum = str(row["optimum"])
        lines.append(
            f"| {row['name']} | {row['n']} | {row['nnz']} | {row['colors']} | {optimum} | {row['coloring']} | "
            f"{row['notes']} |"
        )
    return [*lines, ""]
