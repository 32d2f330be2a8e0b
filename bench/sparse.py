"""Sparse Jacobians and Hessians: ``di.AutoSparse`` against the dense operator of the
same backend and against ``sparsejac`` (JAX), on a tridiagonal function and a 2-D
Laplacian at n = 1e2, 1e3, 1e4, and Hessians (partially separable, arrowhead).

Run ``python -m bench.sparse [--sizes 100,1000,10000] [--sections classic,structured,cutest]
[--out bench/sparse_results.md]`` (needs the bench extra for sparsejac, asdex and sif2jax:
``pip install 'differentiation-interface[bench]'``). The structured patterns (colors against
the optimum) are in :mod:`bench.sparse_structured`, the CUTEst Hessians against asdex in
:mod:`bench.sparse_cutest` (one process per problem, rows written as they finish); the JAX
compressed program from one seed matrix per batch against one tangent per color, and asdex, in
:mod:`bench.sparse_stacked` (``python -m bench.sparse_stacked [PROBLEM ...]``, printed).

Each row: the number of colors, the preparation time (detection + coloring +
compilation, one run) and the median call time (prepared calls, results ready).
Dense Jacobians and Hessians of size 1e4 are 800 MB in float64: they are measured
once (one call after preparation), every other call time is a median.
"""

from __future__ import annotations

import argparse
import math
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

import di
from di.fastest.plan import format_seconds

TIME_BUDGET = 0.4  # seconds of repeated calls per row
DENSE_ONCE_FROM = 10_000  # sizes from which dense matrices are timed once (800 MB in float64)


def tridiagonal(x: Any) -> Any:
    """A 1-D diffusion residual with a reaction term: ``x[i-1] - 2 x[i] + x[i+1] + x[i]^2``."""
    xp = di.array_namespace(x)
    zero = x[:1] * 0
    padded = xp.concat([zero, x, zero])
    return padded[:-2] - 2 * padded[1:-1] + padded[2:] + x * x


def laplacian(x: Any) -> Any:
    """The five-point Laplacian of a square grid (flattened) plus ``x^3``."""
    xp = di.array_namespace(x)
    k = math.isqrt(x.shape[0])
    grid = xp.reshape(x, (k, k))
    zero_row, zero_col = grid[:1, :] * 0, grid[:, :1] * 0
    up = xp.concat([zero_row, grid[:-1, :]], axis=0)
    down = xp.concat([grid[1:, :], zero_row], axis=0)
    left = xp.concat([zero_col, grid[:, :-1]], axis=1)
    right = xp.concat([grid[:, 1:], zero_col], axis=1)
    return xp.reshape(up + down + left + right - 4 * grid + grid**3, (-1,))


def separable(x: Any) -> Any:
    """``sum (x_i - x_{i+1})^4 / 4 + cos(x_i)``: a tridiagonal Hessian."""
    xp = di.array_namespace(x)
    return xp.sum((x[:-1] - x[1:]) ** 4) / 4 + xp.sum(xp.cos(x))


def arrowhead(x: Any) -> Any:
    """``x_0 sum(x_i^2) + sum(x^4) / 12``: an arrowhead Hessian."""
    xp = di.array_namespace(x)
    return x[0] * xp.sum(x[1:] ** 2) + xp.sum(x**4) / 12


def _ready(result: Any) -> Any:
    data = getattr(result, "data", result)
    if hasattr(data, "block_until_ready"):
        data.block_until_ready()
    return result


def _time(call: Callable[[], Any], once: bool) -> float:
    """Median seconds per call (one call when ``once``)."""
    times: list[float] = []
    total = 0.0
    while not times or (not once and (len(times) < 3 or total < TIME_BUDGET) and len(times) < 200):
        start = time.perf_counter()
        _ready(call())
        elapsed = time.perf_counter() - start
        times.append(elapsed)
        total += elapsed
    return statistics.median(times)


def _point(n: int, family: str) -> Any:
    x = np.random.default_rng(n).uniform(-1, 1, n)
    if family == "torch":
        import torch

        return torch.from_numpy(x)
    if family == "jax":
        import jax

        with jax.enable_x64(True):
            return jax.device_put(x)
    return x


def _di_row(
    what: str, function: Callable[..., Any], operator: str, backend: Any, n: int, family: str
) -> dict[str, Any]:
    x = _point(n, family)
    prepare, call = getattr(di, f"prepare_{operator}"), getattr(di, operator)
    start = time.perf_counter()
    prep = prepare(function, backend, x)
    _ready(call(function, prep, backend, x))
    prep_time = time.perf_counter() - start
    dense = not isinstance(backend, di.AutoSparse)
    seconds = _time(lambda: call(function, prep, backend, x), once=dense and n >= DENSE_ONCE_FROM)
    return {
        "what": what,
        "n": n,
        "colors": prep.colors if prep.colors is not None else n,
        "prep": prep_time,
        "call": seconds,
    }


def _sparsejac_row(function: Callable[..., Any], n: int, forward: bool) -> dict[str, Any]:
    import jax
    import sparsejac
    from jax.experimental import sparse as jsparse

    x = _point(n, "jax")
    with jax.enable_x64(True):
        start = time.perf_counter()
        # sparsejac takes the pattern from the caller: di's detection supplies it here, untimed.
        pattern = di.prepare_jacobian(function, di.AutoSparse(di.AutoTorch()), np.zeros(n)).sparsity
        detect = time.perf_counter() - start
        start = time.perf_counter()
        sparsity = jsparse.BCOO.fromdense(pattern.toarray()) if n <= 4000 else _bcoo(pattern)
        transform = sparsejac.jacfwd if forward else sparsejac.jacrev
        native = jax.jit(transform(function, sparsity=sparsity))
        _ready(native(x))
        prep_time = time.perf_counter() - start
        seconds = _time(lambda: native(x), once=False)
    del detect
    name = "sparsejac.jacfwd" if forward else "sparsejac.jacrev"
    return {"what": f"{name} (jit)", "n": n, "colors": "-", "prep": prep_time, "call": seconds}


def _bcoo(pattern: Any) -> Any:
    import jax.numpy as jnp
    from jax.experimental import sparse as jsparse

    coo = pattern.tocoo()
    indices = jnp.asarray(np.stack([coo.row, coo.col], axis=1))
    return jsparse.BCOO((jnp.ones(coo.nnz), indices), shape=pattern.shape)


def _rows(sizes: list[int]) -> list[tuple[str, list[dict[str, Any]]]]:
    jax_jit, torch_eager = di.AutoJAX(jit=True), di.AutoTorch()
    sections: list[tuple[str, list[dict[str, Any]]]] = []
    for label, function in (("tridiagonal", tridiagonal), ("2-D Laplacian", laplacian)):
        rows: list[dict[str, Any]] = []
        for requested in sizes:
            n = requested if function is tridiagonal else math.isqrt(requested) ** 2
            rows.append(
                _di_row("AutoSparse(AutoJAX(jit=True))", function, "jacobian", di.AutoSparse(jax_jit), n, "jax")
            )
            rows.append(_di_row("AutoJAX(jit=True), dense", function, "jacobian", jax_jit, n, "jax"))
            rows.append(_sparsejac_row(function, n, forward=True))
            rows.append(_sparsejac_row(function, n, forward=False))
            rows.append(
                _di_row("AutoSparse(AutoTorch())", function, "jacobian", di.AutoSparse(torch_eager), n, "torch")
            )
            rows.append(_di_row("AutoTorch(), dense", function, "jacobian", torch_eager, n, "torch"))
            print(f"{label} n={n} done", flush=True)
        sections.append((f"Jacobian of the {label} function", rows))
    for label, function in (("partially separable", separable), ("arrowhead", arrowhead)):
        rows = []
        for n in sizes:
            rows.append(_di_row("AutoSparse(AutoJAX(jit=True))", function, "hessian", di.AutoSparse(jax_jit), n, "jax"))
            rows.append(_di_row("AutoSparse(AutoTorch())", function, "hessian", di.AutoSparse(torch_eager), n, "torch"))
            if n <= 1000:
                rows.append(_di_row("AutoJAX(jit=True), dense", function, "hessian", jax_jit, n, "jax"))
            print(f"hessian {label} n={n} done", flush=True)
        sections.append((f"Hessian of the {label} function", rows))
    return sections


_seconds = format_seconds


def _markdown(sections: list[tuple[str, list[dict[str, Any]]]]) -> str:
    lines = [
        "# Sparse Jacobians and Hessians: benchmark",
        "",
        "Written by `python -m bench.sparse` (float64, CPU, results ready; `prep` = detection + coloring + "
        "compilation + first call, once; `call` = median prepared call, except dense matrices of size 1e4, "
        "800 MB each, timed once). JAX rows take JAX arrays and return `BCOO`; torch rows take tensors and "
        "return `sparse_csr` tensors. sparsejac is given the pattern di detected (its detection is not timed).",
        "",
    ]
    for title, rows in sections:
        lines += [f"## {title}", "", "| n | backend | colors | prep | call |", "| ---: | --- | ---: | ---: | ---: |"]
        for row in rows:
            lines.append(
                f"| {row['n']} | {row['what']} | {row['colors']} | {_seconds(row['prep'])} | {_seconds(row['call'])} |"
            )
        lines.append("")
    lines += ["## Targets", ""]
    for title, rows in sections:
        if not title.startswith("Jacobian of the tridiagonal"):
            continue
        n = max(row["n"] for row in rows)
        by_name = {row["what"]: row for row in rows if row["n"] == n}
        sparse, dense = by_name["AutoSparse(AutoJAX(jit=True))"], by_name["AutoJAX(jit=True), dense"]
        native = min(by_name["sparsejac.jacfwd (jit)"]["call"], by_name["sparsejac.jacrev (jit)"]["call"])
        lines.append(
            f"- tridiagonal Jacobian, n = {n}: dense / AutoSparse = {dense['call'] / sparse['call']:.0f}x "
            f"(target >= 100x); AutoSparse / best sparsejac = {sparse['call'] / native:.2f} (target <= 1.2)."
        )
        torch_rows = {row["what"]: row for row in rows if row["n"] == n}
        lines.append(
            f"- torch, n = {n}: dense / AutoSparse = "
            f"{torch_rows['AutoTorch(), dense']['call'] / torch_rows['AutoSparse(AutoTorch())']['call']:.0f}x."
        )
    for title, rows in sections:
        if title.startswith("Hessian of the arrowhead"):
            colors = sorted({row["colors"] for row in rows if str(row["what"]).startswith("AutoSparse")})
            lines.append(f"- arrowhead Hessian colors: {colors} (target <= 3; a column coloring needs n).")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    """Run the sparse benchmark and write its Markdown report."""
    parser = argparse.ArgumentParser(prog="python -m bench.sparse", description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="100,1000,10000", help="comma-separated n (default: 100,1000,10000)")
    parser.add_argument("--out", default="bench/sparse_results.md", help="the Markdown report to write")
    parser.add_argument(
        "--sections",
        default="classic,structured,cutest",
        help="which parts to run: classic (timings against dense and sparsejac), structured (colors against the "
        "optimum), cutest (Hessians against asdex); parts not run keep their text from --out",
    )
    parser.add_argument(
        "--cutest-log",
        default="bench/sparse_cutest.jsonl",
        help="the CUTEst rows as JSON lines, appended as they finish; problems already there are not rerun",
    )
    parser.add_argument(
        "--problem-timeout", type=float, default=300.0, help="seconds per CUTEst problem (own process) before skipping"
    )
    args = parser.parse_args(argv)
    import torch

    from bench import sparse_cutest, sparse_structured

    torch.set_num_threads(1)
    sections = set(args.sections.split(","))
    out = Path(args.out)
    old = out.read_text() if out.exists() else ""
    marker_structured, marker_cutest = "## Structured patterns", "## Hessians of the sif2jax"
    kept = {
        "classic": old.split(marker_structured)[0].split(marker_cutest)[0],
        "structured": (marker_structured + old.split(marker_structured, 1)[1].split(marker_cutest)[0])
        if marker_structured in old
        else "",
        "cutest": (marker_cutest + old.split(marker_cutest, 1)[1]) if marker_cutest in old else "",
    }

    def write() -> None:
        # Rewritten after every row, so a stopped run leaves what it measured.
        out.write_text("\n".join(part.rstrip("\n") + "\n" for part in kept.values() if part))

    def structured(rows: list[dict[str, Any]]) -> None:
        kept["structured"] = "\n".join(sparse_structured.structured_markdown(rows))
        write()

    def cutest(rows: list[dict[str, Any]]) -> None:
        kept["cutest"] = "\n".join(sparse_cutest.cutest_markdown(rows, args.problem_timeout))
        write()

    if "classic" in sections:
        kept["classic"] = _markdown(_rows([int(float(s)) for s in args.sizes.split(",")]))
        write()
    if "structured" in sections:
        sparse_structured.structured_rows(structured)
    if "cutest" in sections:
        cutest(sparse_cutest.cutest_rows(Path(args.cutest_log), args.problem_timeout, cutest))
    print(out.read_text())


if __name__ == "__main__":
    main()
