"""AutoSparse, second round: orders, acyclic and bidirectional colorings, exact
decompression in every mode, optimal colors on structured patterns, given colorings,
chunks, pytrees, and the wrappers around AutoSparse (AutoFastest, di plan, di check)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import scipy.sparse as sp
from conftest import AD_BACKENDS, BACKENDS, backend_params
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import di
from di.cli import main
from di.cli.common import EXIT_OK
from di.sparse import coloring, decompression, kernels
from di.testing import default_tolerances
from di.testing.sparse_scenarios import arrowhead, arrowhead_energy, laplacian_2d, tridiagonal

ALL_ORDERS = (*coloring.ORDERS, "auto")
FAST = settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def patterns(draw: Any, symmetric: bool = False) -> sp.csr_array:
    m = draw(st.integers(1, 12))
    n = m if symmetric else draw(st.integers(1, 12))
    density = draw(st.floats(0.0, 0.6))
    dense = np.random.default_rng(draw(st.integers(0, 2**31 - 1))).random((m, n)) < density
    if symmetric:
        dense = dense | dense.T | np.eye(n, dtype=bool)
    return sp.csr_array(dense)


def _values(pattern: sp.csr_array, seed: int) -> np.ndarray:
    return pattern.toarray() * np.random.default_rng(seed).uniform(1, 2, pattern.shape)


def _rebuilt(d: decompression.Decompression, data: np.ndarray) -> np.ndarray:
    return sp.csr_array((data, d.indices, d.indptr), shape=d.shape).toarray()


# --- exact decompression, every coloring and mode ----------------------------------------------------


@FAST
@given(patterns(), st.sampled_from(ALL_ORDERS), st.integers(0, 1000))
def test_jacobian_decompression_is_exact_in_every_mode(pattern: sp.csr_array, order: str, seed: int) -> None:
    jac = _values(pattern, seed)
    m, n = jac.shape
    columns = decompression.column_decompression(pattern, coloring.column_coloring(pattern, order, seed))
    compressed = decompression.seeds(columns.colors, columns.n_colors, n) @ jac.T
    np.testing.assert_array_equal(_rebuilt(columns, columns.decompress(compressed)), jac)
    rows = decompression.row_decompression(pattern, coloring.row_coloring(pattern, order, seed))
    compressed = decompression.seeds(rows.colors, rows.n_colors, m) @ jac
    np.testing.assert_array_equal(_rebuilt(rows, rows.decompress(compressed)), jac)
    both = decompression.bidirectional_decompression(pattern, coloring.bicoloring_of(pattern, order, seed).colors)
    assert both.row_colors is not None
    forward = decompression.seeds(both.colors, both.n_forward, n) @ jac.T
    reverse = decompression.seeds(both.row_colors, both.n_reverse, m) @ jac
    np.testing.assert_array_equal(
        _rebuilt(both, both.decompress(np.concatenate([forward.ravel(), reverse.ravel()]))), jac
    )
    # Bicoloring never needs more products than the better of its two one-sided colorings would with neutrals.
    assert both.n_colors <= m + n


@FAST
@given(patterns(symmetric=True), st.sampled_from(ALL_ORDERS), st.integers(0, 1000))
def test_star_and_acyclic_decompressions_are_exact(pattern: sp.csr_array, order: str, seed: int) -> None:
    values = _values(pattern, seed)
    hessian = np.triu(values) + np.triu(values, 1).T
    n = hessian.shape[0]
    star_colors = coloring.star_coloring(pattern, order, seed)
    assert coloring.is_star_coloring(pattern, star_colors)
    star = decompression.star_decompression(pattern, star_colors)
    compressed = decompression.seeds(star.colors, star.n_colors, n) @ hessian
    np.testing.assert_array_equal(_rebuilt(star, star.decompress(compressed)), hessian)
    acyclic_colors = coloring.acyclic_coloring(pattern, order, seed)
    assert coloring.is_acyclic_coloring(pattern, acyclic_colors)
    acyclic = decompression.acyclic_decompression(pattern, acyclic_colors)
    compressed = decompression.seeds(acyclic.colors, acyclic.n_colors, n) @ hessian
    np.testing.assert_allclose(_rebuilt(acyclic, acyclic.decompress(compressed)), hessian, rtol=1e-12)
    assert acyclic.n_colors <= max(int(star_colors.max(initial=-1)) + 1, 1)


def test_orders_are_permutations_and_the_checkers_refuse_bad_colorings() -> None:
    graph = coloring.adjacency(sp.csr_array(np.random.default_rng(3).random((30, 30)) < 0.2))
    for order in coloring.ORDERS:
        assert sorted(coloring.vertex_order(graph, order, seed=4).tolist()) == list(range(30))
    cycle = sp.csr_array(
        np.eye(4, k=1, dtype=bool)
        | np.eye(4, k=-1, dtype=bool)
        | np.eye(4, k=3, dtype=bool)
        | np.eye(4, k=-3, dtype=bool)
    )
    assert not coloring.is_acyclic_coloring(cycle, np.array([0, 1, 0, 1]))
    with pytest.raises(ValueError, match="does not separate"):
        decompression.acyclic_decompression(cycle, np.array([0, 1, 0, 1]))
    with pytest.raises(ValueError, match="unknown vertex order"):
        coloring.vertex_order(graph, "alphabetical")


@pytest.mark.skipif(not kernels.numba_available(), reason="Numba is not installed")
def test_compiled_kernels_give_the_python_kernels_colorings(monkeypatch: pytest.MonkeyPatch) -> None:
    pattern = sp.csr_array(np.random.default_rng(5).random((40, 40)) < 0.1) + sp.eye_array(40, dtype=bool)
    pattern = sp.csr_array(pattern + pattern.T, dtype=bool)
    found = {}
    for threshold in (10**12, 0):
        monkeypatch.setattr(kernels, "COMPILE_FROM", threshold)
        found[threshold] = [
            coloring.column_coloring(pattern, "smallest_last"),
            coloring.star_coloring(pattern, "incidence_degree"),
            coloring.acyclic_coloring(pattern, "dynamic_largest_first"),
        ]
        d = decompression.acyclic_decompression(pattern, found[threshold][2])
        hessian = pattern.toarray() * 1.5
        compressed = decompression.seeds(d.colors, d.n_colors, 40) @ hessian
        np.testing.assert_allclose(_rebuilt(d, d.decompress(compressed)), hessian)
    for python, compiled in zip(found[10**12], found[0]):
        np.testing.assert_array_equal(python, compiled)


# --- optimal colors on structured patterns -----------------------------------------------------------------


def _band(n: int, k: int) -> sp.csr_array:
    return sp.csr_array(sum(np.eye(n, k=s, dtype=bool) for s in range(-k, k + 1)) > 0)


def _grid(m: int) -> sp.csr_array:
    n = m * m
    index = np.arange(n).reshape(m, m)
    rows, cols = [index.ravel()], [index.ravel()]
    for a, b in ((index[1:, :], index[:-1, :]), (index[:, 1:], index[:, :-1])):
        rows += [a.ravel(), b.ravel()]
        cols += [b.ravel(), a.ravel()]
    return sp.csr_array(
        (np.ones(sum(r.size for r in rows), bool), (np.concatenate(rows), np.concatenate(cols))), shape=(n, n)
    )


@pytest.mark.parametrize("k", [1, 2, 3])
def test_banded_patterns_get_their_optimal_colors(k: int) -> None:
    band = _band(60, k)
    assert coloring.column_coloring(band).max() + 1 == 2 * k + 1
    assert coloring.star_coloring(band).max() + 1 == 2 * k + 1
    assert coloring.acyclic_coloring(band).max() + 1 == k + 1  # floor(rho / 2) + 1 with rho = 2k bands


@pytest.mark.parametrize("m", [20, 30])
def test_grid_patterns_get_five_colors(m: int) -> None:
    grid = _grid(m)
    assert coloring.column_coloring(grid).max() + 1 == 5  # the 2-D five-point Laplacian Jacobian
    assert coloring.star_coloring(grid).max() + 1 == 5  # the grid Hessian


def test_arrowhead_jacobian_takes_three_products_bidirectionally() -> None:
    x = np.linspace(-1, 1, 40)
    reference = di.jacobian(arrowhead, di.AutoTorch(), x)
    for dense in AD_BACKENDS:  # (exact: compared to rounding)
        backend = di.AutoSparse(dense, mode="bidirectional")
        prep = di.prepare_jacobian(arrowhead, backend, x)
        assert prep.colors <= 3 and prep.info.mode == "bidirectional" and prep.info.n_forward >= 1
        np.testing.assert_allclose(di.jacobian(arrowhead, prep, backend, x).toarray(), reference, rtol=1e-12)
        # mode="auto" finds it too; a forward-only coloring needs one product per column.
        assert di.prepare_jacobian(arrowhead, di.AutoSparse(dense), x).colors <= 3
    assert di.prepare_jacobian(arrowhead, di.AutoSparse(di.AutoTorch(), mode="forward"), x).colors == 40


# --- the backend: acyclic, chunks, given colorings, pytrees ---------------------------------------------


def _triples(x: Any) -> Any:
    """A pentadiagonal Hessian: each three consecutive entries coupled."""
    xp = di.array_namespace(x)
    return xp.sum(xp.sin(x[:-2] * x[1:-1] * x[2:]))


@pytest.mark.parametrize("dense", backend_params(AD_BACKENDS))  # (exact: compared to rounding)
def test_acyclic_hessians_and_chunks_agree_with_dense(dense: di.AbstractBackend) -> None:
    x = np.linspace(-1, 1, 12)
    reference = di.hessian(arrowhead_energy, di.AutoTorch(), x)
    for backend in (di.AutoSparse(dense, coloring="acyclic"), di.AutoSparse(dense, chunk_size=1)):
        prep = di.prepare_hessian(arrowhead_energy, backend, x)
        _, g, h = di.value_gradient_and_hessian(arrowhead_energy, prep, backend, x)
        np.testing.assert_allclose(h.toarray(), reference, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(g, di.gradient(arrowhead_energy, di.AutoTorch(), x), rtol=1e-12)
    assert prep.info.chunks == prep.colors
    prep = di.prepare_hessian(arrowhead_energy, di.AutoSparse(dense, coloring="acyclic"), x)
    # As few colors as a star coloring (2): the star one wins the tie, read without substitution.
    assert (prep.info.mode, prep.info.coloring, prep.colors) == ("symmetric", "star", 2)
    assert prep.info.order.startswith("star:")
    prep = di.prepare_hessian(_triples, di.AutoSparse(dense, coloring="acyclic"), x)
    assert (prep.info.mode, prep.info.coloring, prep.colors) == ("substitution", "acyclic", 3)  # star: 5
    h = di.hessian(_triples, prep, di.AutoSparse(dense, coloring="acyclic"), x)
    np.testing.assert_allclose(h.toarray(), di.hessian(_triples, di.AutoTorch(), x), rtol=1e-12, atol=1e-12)
    jac = di.jacobian(tridiagonal, di.AutoSparse(dense, chunk_size=2), x)
    np.testing.assert_allclose(jac.toarray(), di.jacobian(tridiagonal, di.AutoTorch(), x), rtol=1e-12)


def test_prep_info_names_the_coloring_and_its_order() -> None:
    x = np.ones((6, 5))
    prep = di.prepare_jacobian(laplacian_2d, di.AutoSparse(di.AutoTorch(), order="natural", mode="forward"), x)
    assert (prep.info.coloring, prep.info.order, prep.info.mode) == ("column", "natural", "forward")
    prep = di.prepare_jacobian(laplacian_2d, di.AutoSparse(di.AutoTorch(), order="random", seed=3), x)
    assert prep.info.order == "random"
    prep = di.prepare_jacobian(laplacian_2d, di.AutoSparse(di.AutoTorch()), x)
    assert prep.colors == 5 and prep.info.order.split("~")[0].removesuffix("+recolored") in coloring.ORDERS
    assert prep.info.tried[0][0] == "natural" and prep.info.coloring_time > 0 and prep.info.detection_time > 0
    with pytest.raises(ValueError, match="mode"):
        di.AutoSparse(di.AutoTorch(), mode="sideways")
    with pytest.raises(ValueError, match="chunk_size"):
        di.AutoSparse(di.AutoTorch(), chunk_size=0)


def test_a_given_coloring_is_used_and_checked() -> None:
    x = np.linspace(-1, 1, 9)
    band = _band(9, 1)
    backend = di.AutoSparse(di.AutoTorch(), sparsity=di.KnownSparsity(band, colors=np.arange(9) % 3))
    prep = di.prepare_jacobian(tridiagonal, backend, x)
    assert prep.colors == 3 and prep.info.coloring == "given"
    np.testing.assert_allclose(
        di.jacobian(tridiagonal, prep, backend, x).toarray(), di.jacobian(tridiagonal, di.AutoTorch(), x)
    )
    bad = di.AutoSparse(di.AutoTorch(), sparsity=di.KnownSparsity(band, colors=np.arange(9) % 2))
    with pytest.raises(di.InvalidInputError, match="share a row"):
        di.prepare_jacobian(tridiagonal, bad, x)
    with pytest.raises(di.InvalidInputError, match="colors"):
        di.prepare_jacobian(tridiagonal, di.AutoSparse(di.AutoTorch(), sparsity=di.KnownSparsity(band, colors=[0])), x)
    not_star = di.AutoSparse(di.AutoTorch(), sparsity=di.KnownSparsity(_band(9, 1), colors=np.arange(9) % 2))
    with pytest.raises(di.InvalidInputError, match="star coloring"):
        di.prepare_hessian(lambda v: (v[1:] * v[:-1]).sum(), not_star, x)
    with pytest.raises(ValueError, match="non-negative"):
        di.KnownSparsity(band, colors=[-1] * 9)
    assert di.KnownSparsity(band, colors=np.arange(9) % 3) != di.KnownSparsity(band)


def test_pytree_x_gives_one_matrix_over_the_flattened_leaves() -> None:
    def energy(tree: Any) -> Any:
        xp = di.array_namespace(tree["a"])
        return xp.sum(tree["a"] ** 2) * tree["b"][0] + xp.sum(tree["b"] ** 3)

    tree = {"a": np.array([1.0, 2.0, 3.0]), "b": np.array([0.5, 2.0])}
    for dense in (di.AutoJAX(jit=True), di.AutoTorch()):
        backend = di.AutoSparse(dense)
        prep = di.prepare_hessian(energy, backend, tree)
        _, g, h = di.value_gradient_and_hessian(energy, prep, backend, tree)
        np.testing.assert_allclose(g["a"], 2 * tree["a"] * 0.5)
        np.testing.assert_allclose(g["b"], [14 + 3 * 0.25, 12.0])
        expected = np.zeros((5, 5))
        expected[:3, :3] = np.eye(3) * 2 * 0.5
        expected[:3, 3] = expected[3, :3] = 2 * tree["a"]
        expected[3, 3], expected[4, 4] = 6 * 0.5, 6 * 2.0
        np.testing.assert_allclose(h.toarray(), expected)


# --- detection of the Brusselator written with stack or concat, on every engine --------------------------


@pytest.mark.parametrize("stacked", [True, False], ids=["stack", "concat"])
def test_the_brusselator_is_detected_exactly_on_every_engine(stacked: bool) -> None:
    from bench.sparse_structured import brusselator

    def rhs(v: Any) -> Any:
        return brusselator(v, stacked)

    u = np.random.default_rng(0).uniform(0.5, 1.5, 2 * 8 * 8)
    reference = di.jacobian(rhs, di.AutoTorch(), u)
    for dense in BACKENDS:
        backend = di.AutoSparse(dense)
        prep = di.prepare_jacobian(rhs, backend, u)
        assert prep.info.notes == () and prep.sparsity.nnz == 2 * 64 * 5 + 2 * 64
        np.testing.assert_allclose(prep.sparsity.toarray(), reference != 0)
        result = di.jacobian(rhs, prep, backend, u)
        np.testing.assert_allclose(result.toarray(), reference, rtol=1e-5, atol=1e-6)


# --- wrappers: AutoFastest, di plan --sparse, di check tolerances -----------------------------------------


def test_autofastest_times_sparse_candidates() -> None:
    x = np.linspace(-1, 1, 30)
    only_sparse = di.AutoFastest([di.AutoSparse(di.AutoJAX(jit=True))], budget_s=0.05)
    prep = di.prepare_jacobian(tridiagonal, only_sparse, x)
    assert [row.status for row in prep.plan.rows] == ["chosen"]
    np.testing.assert_allclose(
        di.jacobian(tridiagonal, prep, only_sparse, x).toarray(), di.jacobian(tridiagonal, di.AutoTorch(), x)
    )
    mixed = di.AutoFastest([di.AutoSparse(di.AutoTorch()), di.AutoTorch()], budget_s=0.05)
    grid = np.ones((4, 5))
    prep = di.prepare_jacobian(laplacian_2d, mixed, grid)
    assert all(row.status in ("chosen", "slower") for row in prep.plan.rows), prep.plan.rows


def test_plan_sparse_adds_sparse_candidates(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    module = tmp_path / "sparse_plan_functions.py"
    module.write_text(
        "import di\n\ndef tri(x):\n    xp = di.array_namespace(x)\n    zero = x[:1] * 0\n"
        "    p = xp.concat([zero, x, zero])\n    return p[:-2] - 2 * p[1:-1] + p[2:] + x * x\n"
    )
    rows = tmp_path / "plan.json"
    args = ["plan", f"{module}:tri", "--operator", "jacobian", "--x-shape", "12", "--backends", "torch", "--sparse"]
    status = main([*args, "--budget", "0.05", "--json", str(rows)])
    assert status == EXIT_OK, capsys.readouterr().out
    plan = json.loads(rows.read_text())
    names = json.dumps(plan)
    assert "AutoSparse" in names and "AutoTorch" in names


def test_sparse_finite_differences_get_finite_difference_tolerances() -> None:
    assert default_tolerances(di.AutoSparse(di.AutoFiniteDiff()), np.float64) == default_tolerances(
        di.AutoFiniteDiff(), np.float64
    )
    assert default_tolerances(di.AutoSparse(di.AutoJAX()), np.float64) == default_tolerances(di.AutoJAX(), np.float64)


def test_eager_jax_compiles_the_colored_program_once_at_preparation() -> None:
    pytest.importorskip("jax")
    traces = [0]

    def f(x: Any) -> Any:
        traces[0] += 1  # a Python side effect runs once per trace on JAX
        xp = di.array_namespace(x)
        return xp.sum(x[1:] * x[:-1]) + xp.sum(x**4)

    backend = di.AutoSparse(di.AutoJAX(jit=False))
    x = np.linspace(0.5, 1.5, 30)
    prep = di.prepare_hessian(f, backend, x)
    after_preparation = traces[0]
    for shift in (0.0, 1.0, 2.0):
        hessian = di.hessian(f, prep, backend, x + shift).toarray()
        expected = np.diag(12 * (x + shift) ** 2) + np.eye(30, k=1) + np.eye(30, k=-1)
        np.testing.assert_allclose(hessian, expected, rtol=1e-12)
    assert traces[0] == after_preparation
    assert prep.info.notes == ()


def test_eager_jax_keeps_python_control_flow_on_values_with_a_note() -> None:
    pytest.importorskip("jax")

    def f(x: Any) -> Any:
        xp = di.array_namespace(x)
        if x[0] > 0:  # runs eagerly only: the compiled twin cannot branch on a traced value
            return xp.sum(x**3)
        return xp.sum(x**2)

    backend = di.AutoSparse(di.AutoJAX(jit=False), sparsity=di.DenseSparsity())
    x = np.ones(5)
    prep = di.prepare_hessian(f, backend, x)
    np.testing.assert_allclose(di.hessian(f, prep, backend, x).toarray(), 6 * np.eye(5))
    np.testing.assert_allclose(di.hessian(f, prep, backend, -x).toarray(), 2 * np.eye(5))
    assert any("run eagerly" in note for note in prep.info.notes)


def test_a_pattern_without_zeros_takes_one_color_per_column_without_a_search() -> None:
    def f(x: Any) -> Any:
        xp = di.array_namespace(x)
        return xp.sum(x) ** 3

    backend = di.AutoSparse(di.AutoFiniteDiff(), sparsity=di.TracerSparsity(method="arrays"))
    x = np.array([0.5, 1.0, 1.5, 2.0])
    prep = di.prepare_hessian(f, backend, x)
    assert (prep.colors, prep.info.order) == (4, "dense")
    np.testing.assert_allclose(di.hessian(f, prep, backend, x).toarray(), np.full((4, 4), 6 * x.sum()), rtol=1e-5)
    jacobian_prep = di.prepare_jacobian(lambda v: v * di.array_namespace(v).sum(v), backend, x)
    assert (jacobian_prep.colors, jacobian_prep.info.order) == (4, "dense")


def _squares(x: Any) -> Any:
    return x**2


def _tall(x: Any) -> Any:
    xp = di.array_namespace(x)
    return xp.concat([x**2, xp.sin(x), x * 3.0])


@pytest.mark.parametrize("order", ALL_ORDERS)
@pytest.mark.parametrize("f", [_squares, _tall], ids=["diagonal", "tall"])
def test_bidirectional_jacobians_that_need_no_pullback(f: Any, order: str) -> None:
    # Each nonzero is read from a pushforward: the pullbacks have no seeds (an IndexError before).
    backend = di.AutoSparse(di.AutoFiniteDiff(), mode="bidirectional", order=order)
    x = np.array([0.5, -1.0, 2.0, 0.25])
    prep = di.prepare_jacobian(f, backend, x)
    assert prep.info.n_forward == prep.colors >= 1
    expected = di.jacobian(f, di.AutoFiniteDiff(), x)
    np.testing.assert_allclose(di.jacobian(f, prep, backend, x).toarray(), expected, rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(np.diag(expected[:4]), 2 * x, rtol=1e-6)


@pytest.mark.parametrize("mode", ["forward", "reverse", "bidirectional"])
def test_a_constant_output_needs_no_product_in_any_mode(mode: str) -> None:
    def constant(x: Any) -> Any:
        return x * 0.0 + 1.0

    backend = di.AutoSparse(di.AutoFiniteDiff(), mode=mode)
    prep = di.prepare_jacobian(constant, backend, np.ones(3))
    assert prep.colors == 0 and prep.sparsity.nnz == 0
    value, jacobian = di.value_and_jacobian(constant, prep, backend, np.arange(3.0))
    np.testing.assert_array_equal(value, np.ones(3))
    np.testing.assert_array_equal(jacobian.toarray(), np.zeros((3, 3)))


def test_n_forward_counts_the_pushforwards_in_every_mode() -> None:
    x = np.linspace(0.5, 1.5, 8)
    expected = di.jacobian(arrowhead, di.AutoFiniteDiff(), x)
    counts = {}
    for mode in ("forward", "reverse", "bidirectional"):
        backend = di.AutoSparse(di.AutoFiniteDiff(), mode=mode)
        prep = di.prepare_jacobian(arrowhead, backend, x)
        np.testing.assert_allclose(di.jacobian(arrowhead, prep, backend, x).toarray(), expected, atol=1e-6)
        counts[mode] = (prep.colors, prep.info.n_forward)
    assert counts["forward"] == (8, 8) and counts["reverse"] == (8, 0)
    assert counts["bidirectional"][0] == 3 and 1 <= counts["bidirectional"][1] <= 2
    assert di.prepare_hessian(arrowhead_energy, di.AutoSparse(di.AutoFiniteDiff()), x).info.n_forward == 0
