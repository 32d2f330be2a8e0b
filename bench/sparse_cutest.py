"""``di.AutoSparse`` against asdex on the CUTEst problems of sif2jax, and the
structured patterns with their optimal number of colors (part of
``python -m bench.sparse``; needs the bench extra: ``pip install
'differentiation-interface[bench]'`` for asdex and sif2jax).

For each unconstrained CUTEst problem with 50 <= n <= 3000: the Hessian's
detected nonzeros and colors for both, and the median prepared call, both on JAX
float64 input with a ``BCOO`` result: ``di.hessian`` with a prep of
``AutoSparse(AutoJAX(jit=True))`` against ``jax.jit(asdex.hessian_from_coloring(f,
coloring))``. Detection, coloring and compilation are not timed.
"""

from __future__ import annotations

import math
import statistics
import time
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np

import di

CALL_BUDGET = 0.3  # seconds of repeated calls per timing


def _median_call(call: Callable[[], Any]) -> float:
    call()
    times: list[float] = []
    while len(times) < 5 or (sum(times) < CALL_BUDGET and len(times) < 300):
        start = time.perf_counter()
        result = call()
        getattr(getattr(result, "data", result), "block_until_ready", lambda: None)()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def cutest_problems(low: int = 50, high: int = 3000) -> list[Any]:
    """The unconstrained sif2jax problems with ``low <= n <= high``."""
    import sif2jax

    chosen = []
    for problem in sif2jax.unconstrained_minimisation_problems:
        n = int(np.size(problem.y0))
        if low <= n <= high:
            chosen.append(problem)
    return chosen


def cutest_rows() -> list[dict[str, Any]]:
    """One row per problem: nonzeros, colors and call times of di and asdex."""
    import asdex
    import jax

    rows = []
    backend = di.AutoSparse(di.AutoJAX(jit=True))
    with jax.enable_x64(True), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for problem in cutest_problems():

            def f(y: Any, problem: Any = problem) -> Any:
                return problem.objective(y, problem.args)

            x = jax.device_put(np.asarray(problem.y0, dtype=np.float64))
            row: dict[str, Any] = {"name": problem.name, "n": int(x.size)}
            try:
                prep = di.prepare_hessian(f, backend, x)
                row.update(di_nnz=prep.sparsity.nnz, di_colors=prep.colors, di_order=prep.info.order)
                row["di_call"] = _median_call(lambda prep=prep, x=x, f=f: di.hessian(f, prep, backend, x))
                coloring = asdex.hessian_coloring(f, x)
                native = jax.jit(asdex.hessian_from_coloring(f, coloring))
                row.update(asdex_nnz=int(coloring.sparsity.nnz), asdex_colors=int(coloring.num_colors))
                row["asdex_call"] = _median_call(lambda native=native, x=x: native(x))
                reference = np.asarray(native(x).todense())
                ours = np.asarray(di.hessian(f, prep, backend, x).todense())
                scale = max(float(np.abs(reference).max(initial=0.0)), 1.0)
                row["agree"] = bool(np.abs(ours - reference).max(initial=0.0) <= 1e-9 * scale)
            except Exception as err:  # a problem either package cannot do is reported, not fatal
                row["error"] = f"{type(err).__name__}: {str(err).splitlines()[0][:80]}"
            rows.append(row)
            print(f"cutest {row['name']} done", flush=True)
    return rows


def _seconds(value: float) -> str:
    return f"{value * 1e6:.1f} us" if value < 1e-3 else f"{value * 1e3:.2f} ms"


def cutest_markdown(rows: list[dict[str, Any]]) -> list[str]:
    lines = [
        "## Hessians of the sif2jax CUTEst problems (50 <= n <= 3000): di against asdex",
        "",
        "`AutoSparse(AutoJAX(jit=True))` (default: star coloring, best of several orders) against "
        "`jax.jit(asdex.hessian_from_coloring(f, asdex.hessian_coloring(f, x)))`; JAX float64 input, `BCOO` "
        "output, median prepared call. asdex leaves out entries its detection proves zero at every point (a "
        "zero diagonal), di keeps the diagonal: its nonzeros may exceed asdex's by up to n.",
        "",
        "| problem | n | di nnz | asdex nnz | di colors | asdex colors | di call | asdex call | di / asdex | agree |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |",
    ]
    ratios, worse = [], []
    for row in rows:
        if "error" in row:
            lines.append(f"| {row['name']} | {row['n']} | {row['error']} | | | | | | | |")
            continue
        ratio = row["di_call"] / row["asdex_call"]
        ratios.append(ratio)
        if row["di_colors"] > row["asdex_colors"]:
            worse.append(row["name"])
        lines.append(
            f"| {row['name']} | {row['n']} | {row['di_nnz']} | {row['asdex_nnz']} | {row['di_colors']} | "
            f"{row['asdex_colors']} | {_seconds(row['di_call'])} | {_seconds(row['asdex_call'])} | {ratio:.2f} | "
            f"{'yes' if row['agree'] else 'NO'} |"
        )
    if ratios:
        geomean = math.exp(sum(math.log(r) for r in ratios) / len(ratios))
        lines += [
            "",
            f"- geometric mean of di / asdex call time over {len(ratios)} problems: {geomean:.2f} (target <= 1.0)",
            f"- problems where di needs more colors than asdex: {', '.join(worse) if worse else 'none'}",
        ]
    return [*lines, ""]


# --- structured patterns: colors against the optimum -----------------------------------------


def _banded(k: int) -> Callable[[Any], Any]:
    def f(x: Any) -> Any:
        xp = di.array_namespace(x)
        n = x.shape[0]
        zeros = x[:k] * 0
        padded = xp.concat([zeros, x, zeros])
        return sum(padded[k + s : k + s + n] * (s + 2) for s in range(-k, k + 1)) * x

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


def structured_rows() -> list[dict[str, Any]]:
    """Colors of di on patterns whose optimum is known (or, for the Brusselator, bounded)."""
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
        ("arrowhead Jacobian (forward)", _arrowhead, "jacobian", di.AutoSparse(jax_jit, mode="forward"), 1000, None)
    )
    for stacked in (True, False):
        for dense in (jax_jit, di.AutoTorch(), di.AutoAutograd(), di.AutoFiniteDiff()):
            name = f"Brusselator N = 32 with {'stack' if stacked else 'concat'}, {type(dense).__name__}"
            cases.append(
                (name, lambda u, s=stacked: brusselator(u, s), "jacobian", di.AutoSparse(dense), 2 * 32 * 32, None)
            )
    rows = []
    for name, function, operator, backend, n, optimum in cases:
        x = np.random.default_rng(n).uniform(0.5, 1.5, n)
        prep = getattr(di, f"prepare_{operator}")(function, backend, x)
        rows.append(
            {
                "name": name,
                "n": n,
                "nnz": prep.sparsity.nnz,
                "colors": prep.colors,
                "optimum": optimum,
                "coloring": f"{prep.info.coloring} / {prep.info.order}",
                "notes": "; ".join(prep.info.notes) or "-",
            }
        )
        print(f"structured {name} done", flush=True)
    return rows


def structured_markdown(rows: list[dict[str, Any]]) -> list[str]:
    lines = [
        "## Structured patterns: di's colors beside the optimum",
        "",
        "| pattern | n | nonzeros | di colors | optimum | coloring / order | detection notes |",
        "| --- | ---: | ---: | ---: | ---: | --- | --- |",
    ]
    for row in rows:
        optimum = "-" if row["optimum"] is None else str(row["optimum"])
        lines.append(
            f"| {row['name']} | {row['n']} | {row['nnz']} | {row['colors']} | {optimum} | {row['coloring']} | "
            f"{row['notes']} |"
        )
    return [*lines, ""]
