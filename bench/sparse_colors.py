"""Colors of ``di``'s colorings against networkx's greedy strategies and asdex on a
fixed set of patterns, and preparation times against asdex and the pattern size
(``python -m bench.sparse_colors``; writes ``bench/sparse_colors_results.md``).

Jacobians: ``di``'s column coloring (``order="auto"``) against the best of
networkx's ``greedy_color`` strategies on the column intersection graph and
asdex's forward coloring. Hessians: ``di``'s star and acyclic colorings against
the best networkx strategy on the square of the adjacency graph (a distance-2
coloring, the star colorings networkx can give) and asdex's star coloring.
CUTEst patterns are detected by ``di``'s tracer from sif2jax's problems (the
Hessians of its unconstrained problems). networkx and asdex are bench-only
references (``pip install 'differentiation-interface[bench]'``).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse as sp

from di.sparse import coloring

RESULTS = Path(__file__).with_name("sparse_colors_results.md")
STRATEGIES = (
    "largest_first",
    "smallest_last",
    "independent_set",
    "connected_sequential_bfs",
    "connected_sequential_dfs",
    "saturation_largest_first",
)  # (random_sequential draws from an unseeded generator: not reproducible)
CUTEST_JACOBIANS = ("BRATU2DT",)
# (sif2jax 0.0.8 leaves BROYDN3D, BRYBNDNE, ARWHDNE, COATINGNE and CHNRSNBMNE out of its
# nonlinear_equations_problems, pending review: the table skipped them, so they left the set)
CUTEST_HESSIANS = ("COATING", "LUKSAN12LS", "LUKSAN16LS", "GENROSE", "EG2", "DIXMAANB", "DIXMAANE1")


# --- patterns -------------------------------------------------------------------------------------


def _csr(rows: list[int] | np.ndarray, cols: list[int] | np.ndarray, shape: tuple[int, int]) -> sp.csr_array:
    pattern = sp.csr_array((np.ones(len(rows), dtype=bool), (rows, cols)), shape=shape)
    pattern.sum_duplicates()
    return pattern


def stencil(shape: tuple[int, ...], offsets: list[tuple[int, ...]], periodic: bool = False) -> sp.csr_array:
    """The pattern of a stencil on a grid of ``shape``: each point coupled to the
    points at ``offsets`` (Dirichlet: offsets past the boundary dropped)."""
    points = np.indices(shape).reshape(len(shape), -1).T
    size = int(np.prod(shape))
    rows, cols = [], []
    for offset in offsets:
        moved = points + np.asarray(offset)
        if periodic:
            moved %= np.asarray(shape)
            keep = np.ones(size, dtype=bool)
        else:
            keep = np.all((moved >= 0) & (moved < np.asarray(shape)), axis=1)
        rows.append(np.flatnonzero(keep))
        cols.append(np.ravel_multi_index(tuple(moved[keep].T), shape))
    return _csr(np.concatenate(rows), np.concatenate(cols), (size, size))


FIVE = [(0, 0), (1, 0), (-1, 0), (0, 1), (0, -1)]
NINE = [(a, b) for a in (-1, 0, 1) for b in (-1, 0, 1)]
SEVEN = [(0, 0, 0), (1, 0, 0), (-1, 0, 0), (0, 1, 0), (0, -1, 0), (0, 0, 1), (0, 0, -1)]


def brusselator(k: int = 32, periodic: bool = False) -> sp.csr_array:
    """The Jacobian pattern of the 2-D Brusselator on a ``k x k`` grid: two species
    (all ``u`` then all ``v``), each diffusing by the 5-point stencil, coupled pointwise."""
    grid = stencil((k, k), FIVE, periodic)
    coupling = sp.eye_array(k * k, dtype=bool)
    return sp.csr_array(sp.block_array([[grid, coupling], [coupling, grid]]), dtype=bool)


def band(n: int, half: int) -> sp.csr_array:
    return sp.csr_array(
        sp.diags_array([np.ones(n - abs(k)) for k in range(-half, half + 1)], offsets=range(-half, half + 1)),
        dtype=bool,
    )


def arrowhead(n: int) -> sp.csr_array:
    rows = np.concatenate([np.arange(n), np.zeros(n - 1, dtype=int), np.arange(1, n)])
    cols = np.concatenate([np.arange(n), np.arange(1, n), np.zeros(n - 1, dtype=int)])
    return _csr(rows, cols, (n, n))


def random_sparse(m: int, n: int, per_row: int, seed: int) -> sp.csr_array:
    rng = np.random.default_rng(seed)
    rows = np.repeat(np.arange(m), per_row)
    return _csr(rows, rng.integers(0, n, rows.size), (m, n))


def cutest_hessian(name: str) -> sp.csr_array:
    """The Hessian pattern ``di``'s tracer finds for a sif2jax problem (its detection
    alone: the table needs no compiled program)."""
    import jax
    import sif2jax

    from di.sparse.jaxpr import traced_pattern
    from di.sparse.patterns import symmetrize

    problem = next(p for p in sif2jax.unconstrained_minimisation_problems if p.name == name)
    with jax.enable_x64(True):
        x = jax.device_put(np.asarray(problem.y0, dtype=np.float64))
        detection = traced_pattern("hessian", lambda y: problem.objective(y, problem.args), x, ())
    return sp.csr_array(symmetrize(detection.pattern), dtype=bool)  # as AutoSparse's preparation does


def cutest_jacobian(name: str) -> sp.csr_array:
    """The Jacobian pattern ``di``'s tracer finds for the equations of a sif2jax
    nonlinear-equations problem (its equality constraints; detection alone: BRATU2DT's
    4,900 equations are a Python loop of scalar operations, whose compiled program
    alone takes minutes)."""
    import jax
    import sif2jax

    from di.sparse.jaxpr import traced_pattern

    problem = next(p for p in sif2jax.nonlinear_equations_problems if p.name == name)
    with jax.enable_x64(True):
        x = jax.device_put(np.asarray(problem.y0, dtype=np.float64))
        detection = traced_pattern("jacobian", lambda y: problem.constraint(y)[0], x, ())
    return sp.csr_array(detection.pattern, dtype=bool)


def patterns(cutest: bool = True) -> list[tuple[str, str, Callable[[], sp.csr_array]]]:
    """``(name, "jacobian" | "hessian", pattern builder)`` of the table's fixed set."""
    rows: list[tuple[str, str, Callable[[], sp.csr_array]]] = [
        ("Brusselator 32x32, Dirichlet", "jacobian", lambda: brusselator(32)),
        ("Brusselator 32x32, periodic", "jacobian", lambda: brusselator(32, periodic=True)),
        ("2-D 5-point stencil 40x40", "jacobian", lambda: stencil((40, 40), FIVE)),
        ("2-D 9-point stencil 40x40", "jacobian", lambda: stencil((40, 40), NINE)),
        ("3-D 7-point stencil 12x12x12", "jacobian", lambda: stencil((12, 12, 12), SEVEN)),
        ("random 1000x1000, 4 per row", "jacobian", lambda: random_sparse(1000, 1000, 4, 0)),
        ("random 600x1000, 6 per row", "jacobian", lambda: random_sparse(600, 1000, 6, 1)),
        ("2-D 5-point grid Hessian 32x32", "hessian", lambda: stencil((32, 32), FIVE)),
        ("2-D 9-point grid Hessian 24x24", "hessian", lambda: stencil((24, 24), NINE)),
        ("3-D 7-point grid Hessian 10x10x10", "hessian", lambda: stencil((10, 10, 10), SEVEN)),
        ("banded Hessian, 2 bands each side, n=1000", "hessian", lambda: band(1000, 2)),
        ("banded Hessian, 5 bands each side, n=1000", "hessian", lambda: band(1000, 5)),
        ("arrowhead Hessian n=1000", "hessian", lambda: arrowhead(1000)),
        ("random symmetric 800, 3 per row", "hessian", lambda: _symmetric(random_sparse(800, 800, 3, 2))),
    ]
    if cutest:
        rows += [
            (f"CUTEst {name} Jacobian", "jacobian", lambda n=name: cutest_jacobian(n)) for name in CUTEST_JACOBIANS
        ]
        rows += [(f"CUTEst {name} Hessian", "hessian", lambda n=name: cutest_hessian(n)) for name in CUTEST_HESSIANS]
    return rows


def _symmetric(pattern: sp.csr_array) -> sp.csr_array:
    return sp.csr_array(pattern + pattern.T + sp.eye_array(pattern.shape[0], dtype=bool), dtype=bool)


# --- the references -------------------------------------------------------------------------------


NETWORKX_BUDGET = 300.0
"""Seconds each networkx strategy may take on one pattern of the table (its own
process, stopped when over): ``independent_set`` and ``saturation_largest_first``
are quadratic or worse in networkx (``independent_set`` takes the minimum degree
over every remaining vertex at each pick; DSATUR walks every colored vertex's
neighbors at each step), so on BRATU2DT's 5,184 columns they ran for over 30
minutes. A strategy that runs out is named in the table, not dropped silently."""


def networkx_colors(graph: sp.csr_array, strategy: str) -> int:
    """The colors of networkx's ``greedy_color`` with ``strategy`` on ``graph``."""
    import networkx as nx

    found = nx.greedy_color(nx.from_scipy_sparse_array(graph), strategy=strategy)
    return max(found.values(), default=-1) + 1


def networkx_runs(graph: sp.csr_array, budget: float | None = None) -> dict[str, tuple[int | None, float]]:
    """``{strategy: (colors, seconds)}`` of each of :data:`STRATEGIES` on ``graph``;
    with a ``budget``, each runs in a child process stopped after ``budget``
    seconds (its colors then ``None``)."""
    runs: dict[str, tuple[int | None, float]] = {}
    for strategy in STRATEGIES:
        start = time.perf_counter()
        if budget is None:
            runs[strategy] = (networkx_colors(graph, strategy), time.perf_counter() - start)
            continue
        message = json.dumps({"indptr": graph.indptr.tolist(), "indices": graph.indices.tolist(), "n": graph.shape[0]})
        command = [sys.executable, "-m", "bench.sparse_colors", "--networkx-strategy", strategy]
        try:
            done = subprocess.run(command, input=message, capture_output=True, text=True, timeout=budget, check=True)
        except subprocess.TimeoutExpired:
            runs[strategy] = (None, time.perf_counter() - start)
            continue
        answer = json.loads(done.stdout.strip().splitlines()[-1])
        runs[strategy] = (int(answer["colors"]), float(answer["seconds"]))
    return runs


def best_run(runs: dict[str, tuple[int | None, float]]) -> tuple[int, str]:
    """The fewest colors among the strategies that finished, and which (``(0, "")``: none did)."""
    finished = [(colors, strategy) for strategy, (colors, _) in runs.items() if colors is not None]
    return min(finished) if finished else (0, "")


def networkx_best(graph: sp.csr_array) -> tuple[int, str]:
    """The fewest colors among networkx's greedy strategies on ``graph``, and which."""
    return best_run(networkx_runs(graph))


def _networkx_child(strategy: str) -> None:
    """A budgeted strategy's process: the graph as JSON on stdin, its colors and seconds on stdout."""
    message = json.loads(sys.stdin.read())
    n = int(message["n"])
    indptr, indices = np.asarray(message["indptr"]), np.asarray(message["indices"])
    graph = sp.csr_array((np.ones(indices.size, dtype=bool), indices, indptr), shape=(n, n))
    start = time.perf_counter()
    colors = networkx_colors(graph, strategy)
    print(json.dumps({"colors": colors, "seconds": time.perf_counter() - start}), flush=True)


def _square(graph: sp.csr_array) -> sp.csr_array:
    """Vertices at distance 1 or 2 adjacent (a distance-2 coloring of ``graph`` is a
    distance-1 coloring of it)."""
    one = sp.csr_array(graph, dtype=np.int32) + sp.eye_array(graph.shape[0], dtype=np.int32)
    return coloring.adjacency(sp.csr_array(one @ one, dtype=bool))


def asdex_colors(pattern: sp.csr_array, kind: str) -> int:
    import asdex

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if kind == "jacobian":
            return int(asdex.jacobian_coloring_from_sparsity(pattern.toarray(), mode="fwd").num_colors)
        return int(asdex.hessian_coloring_from_sparsity(pattern.toarray()).num_colors)


def color_row(name: str, kind: str, pattern: sp.csr_array, budget: float = NETWORKX_BUDGET) -> dict[str, Any]:
    """One row of the colors table (each networkx strategy within ``budget`` seconds)."""
    row: dict[str, Any] = {"name": name, "kind": kind, "n": pattern.shape[1], "nnz": int(pattern.nnz)}
    start = time.perf_counter()
    if kind == "jacobian":
        found = coloring.column_coloring_of(pattern)
        row.update(di=found.n_colors, di_order=found.order)
        graph = coloring._intersection_graph(pattern)
        assert graph is not None
        assert coloring.is_structurally_orthogonal(pattern, found.colors)
    else:
        found = coloring.star_coloring_of(pattern)
        row.update(di=found.n_colors, di_order=found.order)
        assert coloring.is_star_coloring(pattern, found.colors)
        acyclic = coloring.acyclic_coloring_of(pattern)
        assert coloring.is_acyclic_coloring(pattern, acyclic.colors)
        row.update(di_acyclic=acyclic.n_colors, di_acyclic_order=acyclic.order)
        graph = _square(coloring.adjacency(pattern))
    row["di_time"] = time.perf_counter() - start
    runs = networkx_runs(graph, budget)
    row["networkx"], row["networkx_strategy"] = best_run(runs)
    row["networkx_runs"] = {
        strategy: {"colors": colors, "seconds": seconds} for strategy, (colors, seconds) in runs.items()
    }
    try:
        row["asdex"] = asdex_colors(pattern, kind)
    except Exception as err:  # pragma: no cover - a reference failing is reported, not fatal
        row["asdex"] = f"{type(err).__name__}"
    return row


# --- preparation times ----------------------------------------------------------------------------


def _tridiagonal(x: Any) -> Any:
    import di

    xp = di.array_namespace(x)
    zero = x[:1] * 0
    padded = xp.concat([zero, x, zero])
    return padded[:-2] - 2 * padded[1:-1] + padded[2:] + x * x


def _arrowhead_energy(x: Any) -> Any:
    import di

    xp = di.array_namespace(x)
    return xp.sum(x * x) * x[0] + xp.sum(xp.sin(x))


def preparation_rows(sizes: tuple[int, ...] = (1_000, 10_000, 100_000)) -> list[dict[str, Any]]:
    """Preparation of ``AutoSparse(AutoJAX(jit=True))`` (detection, coloring, and the
    rest: compilation, first call) and asdex's (``jacobian_coloring`` then the
    jitted ``jacobian_from_coloring``, first call), against ``n``."""
    import asdex
    import jax

    import di

    rows = []
    cases: list[tuple[str, str, Callable[[Any], Any], tuple[int, ...], str]] = [
        ("tridiagonal Jacobian", "jacobian", _tridiagonal, sizes, "greedy"),
        ("tridiagonal Jacobian (more n)", "jacobian", _tridiagonal, (20_000, 200_000), "greedy"),
        ("arrowhead Hessian, acyclic", "hessian", _arrowhead_energy, (1_000, 10_000), "acyclic"),
    ]
    for name, operator, f, ns, method in cases:
        for n in ns:
            with jax.enable_x64(True), warnings.catch_warnings():
                warnings.simplefilter("ignore")
                x = jax.device_put(np.linspace(0.1, 1.0, n))
                backend = di.AutoSparse(di.AutoJAX(jit=True), coloring=method)
                prepare = di.prepare_jacobian if operator == "jacobian" else di.prepare_hessian
                run = di.jacobian if operator == "jacobian" else di.hessian
                start = time.perf_counter()
                prep = prepare(f, backend, x)
                jax.block_until_ready(run(f, prep, backend, x).data)
                total = time.perf_counter() - start
                row = {
                    "name": name,
                    "n": n,
                    "colors": prep.colors,
                    "coloring": prep.info.coloring,
                    "detection": prep.info.detection_time,
                    "coloring_time": prep.info.coloring_time,
                    "di_prep": total,
                }
                start = time.perf_counter()
                if operator == "jacobian":
                    colored = asdex.jacobian_coloring(f, x)
                    native = jax.jit(asdex.jacobian_from_coloring(f, colored))
                else:
                    colored = asdex.hessian_coloring(f, x)
                    native = jax.jit(asdex.hessian_from_coloring(f, colored))
                jax.block_until_ready(native(x).data)
                row.update(asdex_prep=time.perf_counter() - start, asdex_colors=int(colored.num_colors))
            rows.append(row)
            print(json.dumps(row), flush=True)
    return rows


# --- the report -----------------------------------------------------------------------------------


def _seconds(value: float) -> str:
    return f"{value:.2f} s" if value >= 1 else f"{value * 1e3:.1f} ms"


def markdown(
    colors: list[dict[str, Any]], preparation: list[dict[str, Any]], budget: float = NETWORKX_BUDGET
) -> list[str]:
    lines = [
        "# Sparse colorings: di against networkx's greedy strategies and asdex",
        "",
        'Written by `python -m bench.sparse_colors`. `di`: `order="auto"` (every classic order, seeded ties, '
        "iterated greedy, within a work budget). Jacobians: column colorings; networkx: the best of "
        f"{', '.join(STRATEGIES)} on the column intersection graph (each in its own process, stopped after "
        f"{_seconds(budget)}: a strategy that ran out is named beside the best of those that finished); asdex: "
        '`jacobian_coloring_from_sparsity(mode="fwd")`. '
        "Hessians: di's star and acyclic colorings; networkx: its best strategy on the square of the adjacency graph "
        "(a distance-2 coloring, a star coloring); asdex: `hessian_coloring_from_sparsity` (star). `time`: di's "
        "coloring time (star and acyclic together for Hessians; includes Numba compiles on the first rows).",
        "",
        "## Colors",
        "",
        "| pattern | n | nnz | di | di acyclic | networkx best | asdex | di order | time |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | --- | ---: |",
    ]
    for row in colors:
        acyclic = row.get("di_acyclic", "-")
        over = [name for name, run in row.get("networkx_runs", {}).items() if run["colors"] is None]
        out_of_time = f"; over {_seconds(budget)}: {', '.join(over)}" if over else ""
        lines.append(
            f"| {row['name']} | {row['n']} | {row['nnz']} | {row['di']} | {acyclic} | {row['networkx']} "
            f"({row['networkx_strategy']}{out_of_time}) | {row['asdex']} | {row['di_order']} | "
            f"{_seconds(row['di_time'])} |"
        )
    worse = [row["name"] for row in colors if row["networkx"] and row["di"] > row["networkx"]]
    lines += ["", f"di uses more colors than networkx's best greedy strategy on: {', '.join(worse) or 'none'}."]
    if preparation:
        lines += [
            "",
            "## Preparation time against n",
            "",
            "`AutoSparse(AutoJAX(jit=True))`: `prepare` then the first call (detection and coloring as `prep.info` "
            "records them); asdex: its coloring (detection included), `jax.jit` of `*_from_coloring` and its first "
            "call. float64 on CPU.",
            "",
            "| case | n | colors | asdex colors | detection | coloring | di prep | asdex prep |",
            "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
        ]
        for row in preparation:
            lines.append(
                f"| {row['name']} | {row['n']} | {row['colors']} ({row['coloring']}) | {row['asdex_colors']} | "
                f"{_seconds(row['detection'])} | {_seconds(row['coloring_time'])} | {_seconds(row['di_prep'])} | "
                f"{_seconds(row['asdex_prep'])} |"
            )
        growth = {row["n"]: row["di_prep"] for row in preparation if row["name"] == "tridiagonal Jacobian (more n)"}
        if 20_000 in growth and 200_000 in growth:
            ratio = growth[200_000] / growth[20_000]
            lines += ["", f"Tridiagonal preparation from n = 2e4 to 2e5: {ratio:.1f}x for 10x the size."]
    return lines


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--no-cutest", action="store_true", help="skip the CUTEst patterns (sif2jax imports slowly)")
    parser.add_argument("--no-preparation", action="store_true", help="skip the preparation timings")
    parser.add_argument("--output", type=Path, default=RESULTS)
    parser.add_argument("--only", help="the patterns whose name contains this text (default: all)")
    parser.add_argument(
        "--networkx-budget", type=float, default=NETWORKX_BUDGET, help="seconds each networkx strategy may take"
    )
    parser.add_argument("--networkx-strategy", help=argparse.SUPPRESS)  # a budgeted strategy's own process
    args = parser.parse_args(argv)
    if args.networkx_strategy:
        _networkx_child(args.networkx_strategy)
        return
    colors = []
    for name, kind, build in patterns(cutest=not args.no_cutest):
        if args.only and args.only not in name:
            continue
        try:
            pattern = build()
        except Exception as err:  # a problem missing from this sif2jax, or one its tracer refuses
            print(json.dumps({"name": name, "skipped": f"{type(err).__name__}: {err}"[:200]}), flush=True)
            continue
        row = color_row(name, kind, pattern, args.networkx_budget)
        colors.append(row)
        print(json.dumps(row), flush=True)
    preparation = [] if args.no_preparation else preparation_rows()
    args.output.write_text("\n".join(markdown(colors, preparation, args.networkx_budget)) + "\n")


if __name__ == "__main__":
    main()
