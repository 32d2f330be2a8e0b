"""AutoSparse: coloring, decompression, detection, and agreement with dense results."""

from __future__ import annotations

import gc
import inspect
import weakref
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.sparse as sp
import torch
from conftest import FAMILIES, alternating_params, as_family, assert_close, backend_id, backend_params
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from jax.experimental import sparse as jsparse

import di
from di.families import get_family
from di.sparse import coloring, decompression
from di.sparse import jaxpr as detection
from di.testing import default_scenarios, test_differentiation
from di.testing.sparse_scenarios import arrowhead_energy, expected_pattern, tridiagonal

SCENARIOS = [s for s in default_scenarios() if "sparse" in s.tags]
ORDERS = ("largest_first", "natural")
FAST = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


# --- random patterns ------------------------------------------------------------------------


@st.composite
def patterns(draw: Any, symmetric: bool = False) -> sp.csr_array:
    m = draw(st.integers(1, 14))
    n = m if symmetric else draw(st.integers(1, 14))
    density = draw(st.floats(0.0, 0.6))
    seed = draw(st.integers(0, 2**31 - 1))
    dense = np.random.default_rng(seed).random((m, n)) < density
    if symmetric:
        dense = dense | dense.T | np.eye(n, dtype=bool)
    return sp.csr_array(dense)


def _values(pattern: sp.csr_array, seed: int = 0) -> np.ndarray:
    """A dense matrix with random nonzero values exactly on the pattern."""
    matrix = pattern.toarray() * np.random.default_rng(seed).uniform(1, 2, pattern.shape)
    return matrix


# --- coloring ----------------------------------------------------------------------------------


@FAST
@given(patterns(), st.sampled_from(ORDERS))
def test_column_and_row_colorings_are_structurally_orthogonal(pattern: sp.csr_array, order: str) -> None:
    columns = coloring.column_coloring(pattern, order)
    rows = coloring.row_coloring(pattern, order)
    assert coloring.is_structurally_orthogonal(pattern, columns)
    assert coloring.is_structurally_orthogonal(sp.csr_array(pattern.T), rows)
    assert columns.max(initial=0) < pattern.shape[1] and rows.max(initial=0) < pattern.shape[0]


@FAST
@given(patterns(symmetric=True), st.sampled_from(ORDERS))
def test_star_coloring_is_a_star_coloring(pattern: sp.csr_array, order: str) -> None:
    colors = coloring.star_coloring(pattern, order)
    assert coloring.is_star_coloring(pattern, colors)


def test_star_checker_rejects_a_two_colored_path() -> None:
    path = sp.csr_array(np.eye(4, k=1) + np.eye(4, k=-1) + np.eye(4))
    assert not coloring.is_star_coloring(path, np.array([0, 1, 0, 1]))
    assert coloring.is_star_coloring(path, coloring.star_coloring(path))


def test_arrowhead_hessian_needs_two_colors_where_columns_need_n() -> None:
    n = 200
    arrow = np.eye(n, dtype=bool)
    arrow[0, :] = arrow[:, 0] = True
    pattern = sp.csr_array(arrow)
    assert coloring.star_coloring(pattern).max() + 1 == 2
    assert coloring.column_coloring(pattern).max() + 1 == n


# --- decompression -----------------------------------------------------------------------------


@FAST
@given(patterns(), st.sampled_from(ORDERS), st.integers(0, 1000))
def test_decompression_is_exact_for_both_colorings(pattern: sp.csr_array, order: str, seed: int) -> None:
    jac = _values(pattern, seed)
    columns = decompression.column_decompression(pattern, coloring.column_coloring(pattern, order))
    compressed = jac @ decompression.seeds(columns.colors, columns.n_colors, jac.shape[1]).T  # (m, colors)
    data = columns.decompress(compressed.T)
    np.testing.assert_array_equal(sp.csr_array((data, columns.indices, columns.indptr), shape=jac.shape).toarray(), jac)
    rows = decompression.row_decompression(pattern, coloring.row_coloring(pattern, order))
    compressed = decompression.seeds(rows.colors, rows.n_colors, jac.shape[0]) @ jac  # (colors, n)
    data = rows.decompress(compressed)
    np.testing.assert_array_equal(sp.csr_array((data, rows.indices, rows.indptr), shape=jac.shape).toarray(), jac)


@FAST
@given(patterns(symmetric=True), st.sampled_from(ORDERS), st.integers(0, 1000))
def test_star_decompression_is_exact(pattern: sp.csr_array, order: str, seed: int) -> None:
    values = _values(pattern, seed)
    hessian = np.triu(values) + np.triu(values, 1).T
    star = decompression.star_decompression(pattern, coloring.star_coloring(pattern, order))
    compressed = (hessian @ decompression.seeds(star.colors, star.n_colors, hessian.shape[0]).T).T
    data = star.decompress(compressed)
    np.testing.assert_array_equal(
        sp.csr_array((data, star.indices, star.indptr), shape=hessian.shape).toarray(), hessian
    )


@pytest.mark.parametrize("n", [1, 2, 7])
def test_a_pattern_without_zeros_is_read_directly_one_color_each(n: int) -> None:
    pattern = sp.csr_array(np.ones((n, n), dtype=bool))
    fast = decompression.star_decompression_one_color_each(pattern)
    checked = decompression.star_decompression(pattern, np.arange(n))
    for name in ("colors", "index", "indptr", "indices"):
        np.testing.assert_array_equal(getattr(fast, name), getattr(checked, name))
    assert (fast.mode, fast.n_colors, fast.shape) == ("symmetric", n, (n, n))
    hessian = np.random.default_rng(n).standard_normal((n, n))
    hessian = hessian + hessian.T
    compressed = (hessian @ decompression.seeds(fast.colors, fast.n_colors, n).T).T
    np.testing.assert_array_equal(fast.decompress(compressed), hessian.reshape(-1))


def test_decompression_refuses_a_bad_coloring() -> None:
    pattern = sp.csr_array(np.ones((2, 2), dtype=bool))
    with pytest.raises(ValueError, match="does not separate"):
        decompression.column_decompression(pattern, np.array([0, 0]))
    with pytest.raises(ValueError, match="does not separate"):
        decompression.star_decompression(sp.csr_array(np.ones((3, 3), dtype=bool)), np.array([0, 1, 1]))


# --- detection ------------------------------------------------------------------------------------


@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda s: s.name)
def test_tracer_finds_the_true_pattern_of_every_sparse_scenario(scenario: Any) -> None:
    detect = detection.hessian_pattern if scenario.operator == "hessian" else detection.jacobian_pattern
    found = detect(scenario.f, scenario.x, [], [])
    np.testing.assert_array_equal(found.pattern.toarray(), expected_pattern(scenario))
    assert found.notes == []


_UNARY = {
    "sin": jnp.sin,
    "exp": lambda v: jnp.exp(v / 4),
    "square": lambda v: v * v,
    "cumsum": jnp.cumsum,
    "flip": jnp.flip,
    "roll": lambda v: jnp.roll(v, 2),
    "shift": lambda v: jnp.concatenate([v[1:], v[:1] * 0]) * v,
    "pad_slice": lambda v: jnp.pad(v, (1, 2))[2:-1] + v,
    "gather": lambda v: v[jnp.asarray(np.arange(v.size)[::-1] // 2 * 2)],
    "scatter_add": lambda v: v.at[jnp.asarray(np.arange(v.size) // 3)].add(v),
    "where": lambda v: jnp.where(jnp.asarray(np.arange(v.size) % 2 == 0), v, jnp.cos(v)),
    "matvec": lambda v: jnp.asarray(np.triu(np.tril(np.ones((v.size, v.size)), 1), -1)) @ v,
    "reshape_t": lambda v: jnp.reshape(jnp.reshape(v, (2, -1)).T, (-1,)) if v.size % 2 == 0 else v,
    "block_sum": lambda v: jnp.repeat(jnp.sum(jnp.reshape(v, (-1, 2)), axis=1), 2) if v.size % 2 == 0 else v,
    "max": lambda v: jnp.maximum(v, v[::-1]),
    "outer_diag": lambda v: jnp.diagonal(jnp.outer(v, v[::-1])),
}


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.sampled_from(sorted(_UNARY)), min_size=1, max_size=4), st.sampled_from([4, 6, 7]))
def test_tracer_never_misses_a_nonzero_of_random_compositions(names: list[str], n: int) -> None:
    def f(x: Any) -> Any:
        for name in names:
            x = _UNARY[name](x)
        return x

    def g(x: Any) -> Any:
        return jnp.sum(f(x) ** 3)

    x = np.random.default_rng(n).uniform(0.5, 1.5, n)
    with jax.enable_x64(True):
        jac, hess = jax.jit(lambda x: (jax.jacfwd(f)(x), jax.hessian(g)(x)))(jnp.asarray(x))
    jac, hess = np.asarray(jac), np.asarray(hess)
    found = detection.jacobian_pattern(f, x, [], []).pattern.toarray()
    assert not np.any((jac != 0) & ~found), names
    found = detection.hessian_pattern(g, x, [], []).pattern.toarray()
    assert not np.any((hess != 0) & ~found), names


def test_sort_and_loops_are_followed_and_value_dependent_loops_bounded_with_a_note() -> None:
    def sorted_tail(x: Any) -> Any:
        return jnp.concatenate([x[:1] * 2, jnp.sort(x[1:])])

    found = detection.jacobian_pattern(sorted_tail, np.zeros(4), [], [])
    expected = np.ones((4, 4), dtype=bool)
    expected[0, 1:] = False
    expected[1:, 0] = False
    np.testing.assert_array_equal(found.pattern.toarray(), expected)
    assert found.notes == []

    def looped(x: Any) -> Any:  # a fori_loop: unrolled exactly (each step couples neighbours)
        return jax.lax.fori_loop(0, 2, lambda i, v: v * 2 + jnp.roll(v, 1), x)

    found = detection.jacobian_pattern(looped, np.zeros(5), [], [])
    np.testing.assert_array_equal(
        found.pattern.toarray(), sum(np.eye(5, k=-k) + np.eye(5, k=5 - k) for k in range(3)) > 0
    )
    assert found.notes == []

    def until_large(x: Any) -> Any:  # the trip count depends on x: a fixed point bounds it
        return jax.lax.while_loop(lambda v: v[0] < 10.0, lambda v: v * 2 + jnp.roll(v, 1), x)

    found = detection.jacobian_pattern(until_large, np.ones(4), [], [])
    assert found.pattern.toarray().all() and any(note.startswith("while:") for note in found.notes)
    prep = di.prepare_jacobian(sorted_tail, di.AutoSparse(di.AutoJAX()), np.zeros(4))
    x = np.array([0.3, 2.0, -1.0, 0.5])
    np.testing.assert_allclose(
        di.jacobian(sorted_tail, prep, di.AutoSparse(di.AutoJAX()), x).toarray(),
        di.jacobian(sorted_tail, di.AutoJAX(), x),
    )


def test_custom_primitive_falls_back_to_dense() -> None:
    from jax.extend.core import Primitive

    double = Primitive("di_test_double")
    double.def_impl(lambda v: v * 2)
    double.def_abstract_eval(lambda aval: aval)
    found = detection.jacobian_pattern(lambda x: double.bind(x[:2]) * x[2], np.zeros(3), [], [])
    assert found.pattern.toarray().all() and any("di_test_double" in note for note in found.notes)


def test_dependencies_past_the_entry_budget_give_a_dense_pattern_with_a_note(monkeypatch: pytest.MonkeyPatch) -> None:
    from di.sparse.jaxpr import interpreter

    def masked_broadcast(x: Any) -> Any:  # a 6 x 6 intermediate of 126 entries, a lower triangular result
        return jnp.sum(jnp.cumsum(x)[:, None] * jnp.eye(x.shape[0]), axis=1)

    exact = detection.jacobian_pattern(masked_broadcast, np.zeros(6), [], [])
    np.testing.assert_array_equal(exact.pattern.toarray(), np.tri(6, dtype=bool))
    assert exact.notes == []
    # A budget of one dense pattern (36 entries): the broadcast cumulative sum's 126 entries pass it.
    monkeypatch.setattr(interpreter, "ENTRY_BUDGET_MINIMUM", 0)
    monkeypatch.setattr(interpreter, "ENTRY_BUDGET_FACTOR", 1)
    bounded = detection.jacobian_pattern(masked_broadcast, np.zeros(6), [], [])
    assert bounded.pattern.shape == (6, 6) and bounded.pattern.toarray().all()
    assert [note.split(":")[0] for note in bounded.notes] == ["dependencies"]
    assert tuple(bounded.output.shape) == (6,)
    hessian = detection.hessian_pattern(lambda x: jnp.sum(masked_broadcast(x) ** 2), np.zeros(6), [], [])
    assert hessian.pattern.toarray().all() and len(hessian.notes) == 1


def test_constants_and_contexts() -> None:
    band = np.eye(5) + np.eye(5, k=2)
    # A matrix f closes over is a known constant: its zeros are read.
    found = detection.jacobian_pattern(lambda x: band @ x, np.zeros(5), [], []).pattern
    np.testing.assert_array_equal(found.toarray(), band != 0)
    # A context is not: its value may change between calls.
    found = detection.jacobian_pattern(lambda x, a: a @ x, np.zeros(5), [band], [False]).pattern
    assert found.toarray().all()


# --- the backend ------------------------------------------------------------------------------------


def _all_families(backend: di.AbstractBackend, families: tuple[str, ...]) -> None:
    scenarios = [s.with_family(family) for family in families for s in SCENARIOS]
    report = test_differentiation([backend], scenarios, prep_modes=("prepared-twice",))
    assert report.failed == [] and len(report.passed) == len(scenarios)


# Every backend runs the sparse scenarios in NumPy's family; these also in others (by label): the
# conversions into an engine's family and across families, at the cost of one more run each.
_MORE_FAMILIES = {"torch": ("torch", "jax"), "finitediff": ("torch",)}


@pytest.mark.parametrize("backend", backend_params())
def test_sparse_results_agree_with_the_references(backend: di.AbstractBackend) -> None:
    more = [family for family in _MORE_FAMILIES.get(backend_id(backend), ()) if family in FAMILIES]
    _all_families(backend, ("numpy", *more))


def test_the_dense_mode_picks_pullbacks() -> None:
    x = np.linspace(-1, 1, 6)
    for mode in ("forward", "reverse"):
        backend = di.AutoSparse(di.AutoTorch(mode=mode))
        prep = di.prepare_jacobian(tridiagonal, backend, x)
        assert prep.info.mode == mode and prep.colors == 3
        np.testing.assert_allclose(di.jacobian(tridiagonal, prep, backend, x).toarray(), _tridiagonal(x))
    # Rows: one dense row needs one pullback per row color, columns need n pushforwards.
    prep = di.prepare_jacobian(lambda x: x * x.sum(), di.AutoSparse(di.AutoTorch()), x)
    assert prep.colors == 6


def _tridiagonal(x: np.ndarray) -> np.ndarray:
    return np.eye(x.size, k=1) + np.eye(x.size, k=-1) + np.diag(2 * x - 2)


def test_torch_compile_aot_eager() -> None:
    backend = di.AutoSparse(di.AutoTorch(compile=True, compile_options={"backend": "aot_eager"}))
    x = torch.linspace(-1, 1, 8, dtype=torch.float64)
    prep = di.prepare_jacobian(tridiagonal, backend, torch.zeros(8, dtype=torch.float64))
    jac = di.jacobian(tridiagonal, prep, backend, x)
    assert jac.layout == torch.sparse_csr and prep.colors == 3
    torch.testing.assert_close(jac.to_dense(), di.jacobian(tridiagonal, di.AutoTorch(), x))


def test_result_types_and_dense_results() -> None:
    x = np.linspace(-1, 1, 6)
    cases = [(x, sp.csr_array), (torch.from_numpy(x), torch.Tensor), (jnp.asarray(x, jnp.float32), jsparse.BCOO)]
    for value, kind in cases:
        for dense in (di.AutoJAX(jit=True), di.AutoTorch()):
            jac = di.jacobian(tridiagonal, di.AutoSparse(dense), value)
            assert isinstance(jac, kind) and tuple(jac.shape) == (6, 6)
            full = di.jacobian(tridiagonal, di.AutoSparse(dense, dense_result=True), value)
            assert di.families.family_of(full) == di.families.family_of(value)
            np.testing.assert_allclose(np.asarray(full), np.asarray(di.jacobian(tridiagonal, dense, value)), rtol=1e-6)
    grid = np.ones((3, 4))
    from di.testing.sparse_scenarios import laplacian_2d

    assert di.jacobian(laplacian_2d, di.AutoSparse(di.AutoTorch(), dense_result=True), grid).shape == (3, 4, 3, 4)
    assert di.jacobian(laplacian_2d, di.AutoSparse(di.AutoTorch()), grid).shape == (12, 12)


def test_dense_and_known_sparsity() -> None:
    x = np.linspace(-1, 1, 7)
    expected = di.jacobian(tridiagonal, di.AutoTorch(), x)
    for source in (di.DenseSparsity(), di.DenseSparsity(di.AutoFiniteDiff(), points=1, atol=1e-6)):
        backend = di.AutoSparse(di.AutoTorch(), sparsity=source)
        prep = di.prepare_jacobian(tridiagonal, backend, x)
        assert prep.sparsity.nnz == 19 and prep.colors == 3
        np.testing.assert_allclose(di.jacobian(tridiagonal, prep, backend, x).toarray(), expected)
    band = sp.diags_array([np.ones(6), np.ones(7), np.ones(6)], offsets=[-1, 0, 1])
    backend = di.AutoSparse(di.AutoFiniteDiff(), sparsity=di.KnownSparsity(band))
    assert hash(backend) == hash(di.AutoSparse(di.AutoFiniteDiff(), sparsity=di.KnownSparsity(band.toarray() != 0)))
    np.testing.assert_allclose(di.jacobian(tridiagonal, backend, x).toarray(), expected, atol=1e-8)
    with pytest.raises(di.InvalidInputError, match=r"shape \(7, 7\)"):
        di.jacobian(lambda x: x[:3], backend, x)


def test_hessians_use_star_coloring() -> None:
    x = np.linspace(-1, 1, 50)
    backend = di.AutoSparse(di.AutoJAX(jit=True))
    prep = di.prepare_hessian(arrowhead_energy, backend, x)
    assert prep.colors <= 3 and prep.sparsity.nnz == 3 * 50 - 2
    y, g, h = di.value_gradient_and_hessian(arrowhead_energy, prep, backend, x)
    np.testing.assert_allclose(h.toarray(), di.hessian(arrowhead_energy, di.AutoTorch(), x), rtol=1e-12)
    np.testing.assert_allclose(g, di.gradient(arrowhead_energy, di.AutoTorch(), x), rtol=1e-12)
    np.testing.assert_allclose(y, arrowhead_energy(x))


def test_errors_and_strictness() -> None:
    backend = di.AutoSparse(di.AutoTorch())
    x = np.linspace(-1, 1, 5)
    prep = di.prepare_jacobian(tridiagonal, backend, x)
    with pytest.raises(di.PreparationMismatchError):
        di.jacobian(tridiagonal, prep, backend, np.zeros(6))
    with pytest.raises(di.OutBufferError, match="sparse matrix"):
        di.jacobian(tridiagonal, prep, backend, x, out=np.zeros((5, 5)))
    # A pytree x: one matrix over the flattened leaves.
    np.testing.assert_allclose(
        di.jacobian(lambda t: t["a"] * t["b"], backend, {"a": x, "b": 2 * x}).toarray(),
        np.hstack([np.diag(2 * x), np.diag(x)]),
    )
    with pytest.raises(di.InvalidInputError, match="TracerSparsity could not trace f with JAX"):
        di.jacobian(lambda x: torch.sin(torch.as_tensor(x)), backend, torch.from_numpy(x))
    with pytest.raises(TypeError):
        di.AutoSparse(di.AutoSparse(di.AutoJAX()))
    with pytest.raises(ValueError):
        di.AutoSparse(di.AutoJAX(), order="bogus")
    if "has_aux" in inspect.signature(di.prepare_jacobian).parameters:
        with pytest.raises(di.UnsupportedOperatorError, match="has_aux"):
            di.prepare_jacobian(lambda x: (tridiagonal(x), x.sum()), backend, x, has_aux=True)
    # Other operators are the dense backend's.
    np.testing.assert_allclose(di.gradient(lambda x: (x**2).sum(), backend, x), 2 * x)


def test_prep_holds_no_caller_arrays() -> None:
    for backend in (di.AutoSparse(di.AutoJAX(jit=True)), di.AutoSparse(di.AutoTorch())):
        x = np.linspace(-1, 1, 9)
        alive = weakref.ref(x)
        prep = di.prepare_jacobian(tridiagonal, backend, x)
        del x
        gc.collect()
        assert alive() is None
        assert di.jacobian(tridiagonal, prep, backend, np.ones(9)).nnz == 25


def _sum_of_sines_and_cubes(x: Any) -> Any:
    xp = di.array_namespace(x)
    return xp.sum(xp.sin(x) + x**3)


def _tripled_square(x: Any) -> Any:
    xp = di.array_namespace(x)
    return xp.multiply(x**2, 3.0)


@pytest.mark.parametrize("inner", backend_params())
def test_a_0d_x(inner: di.AbstractBackend) -> None:
    """A 0-d x: the sparsity tracer's reduction of a 0-d value (the sum in f) made
    it raise 'could not trace f' for the hessian; now 1x1 results, the dense ones."""
    x = np.array(0.7)
    backend = di.AutoSparse(inner)
    hessian = di.hessian(_sum_of_sines_and_cubes, backend, x)
    assert hessian.shape == (1, 1)
    np.testing.assert_allclose(hessian.toarray(), [[-np.sin(0.7) + 6 * 0.7]], rtol=1e-5)
    jacobian = di.jacobian(_tripled_square, backend, x)
    np.testing.assert_allclose(jacobian.toarray(), [[6 * 0.7]], rtol=1e-5)


# --- f's own errors ------------------------------------------------------------------------------


class _OwnError(Exception):
    """An exception only f raises."""


_RAISED = {
    "custom": lambda: _OwnError("own", 7),
    "ValueError": lambda: ValueError("bad value 42"),
    "StopIteration": lambda: StopIteration("done"),
}

_SPARSE_OPERATORS = {
    "jacobian": (di.prepare_jacobian, di.jacobian),
    "value_and_jacobian": (di.prepare_jacobian, di.value_and_jacobian),
    "hessian": (di.prepare_hessian, di.hessian),
    "value_gradient_and_hessian": (di.prepare_hessian, di.value_gradient_and_hessian),
}


@pytest.mark.parametrize("prepared", [False, True], ids=["unprepared", "prepared"])
@pytest.mark.parametrize("operator", list(_SPARSE_OPERATORS))
@pytest.mark.parametrize("raised", list(_RAISED))
@pytest.mark.parametrize("dense", backend_params())
def test_an_error_f_raises_reaches_the_caller_with_its_own_type(
    dense: di.AbstractBackend, raised: str, operator: str, prepared: bool
) -> None:
    """The sparsity tracer fails on an f that raises; f's own exception, not the
    tracer's InvalidInputError, reaches the caller."""

    def raising(x: Any) -> Any:
        xp = di.array_namespace(x)
        xp.sin(x)
        raise _RAISED[raised]()

    prepare_op, op = _SPARSE_OPERATORS[operator]
    backend = di.AutoSparse(dense)
    expected = _RAISED[raised]()
    with pytest.raises(type(expected)) as caught:
        if prepared:
            prep = prepare_op(raising, backend, np.ones(3))
            op(raising, prep, backend, np.ones(3))
        else:
            op(raising, backend, np.ones(3))
    assert type(caught.value) is type(expected)
    assert caught.value.args == expected.args


@pytest.mark.parametrize("method", ["program", "arrays"])
def test_an_f_the_tracer_cannot_follow_still_gets_the_tracers_advice(method: str) -> None:
    def writes(x: Any) -> Any:
        xp = di.array_namespace(x)
        y = xp.sin(x)
        y[0] = 0.0
        return y

    backend = di.AutoSparse(di.AutoFiniteDiff(), sparsity=di.TracerSparsity(method=method))
    with pytest.raises(di.InvalidInputError, match=r"(?i)tracer"):
        di.jacobian(writes, backend, np.zeros(3))


# --- the value of the combined forms ---------------------------------------------------------------


def _banded_sum(x: Any) -> Any:
    xp = di.array_namespace(x)
    return xp.sum(x[1:] * x[:-1]) + xp.sum(x**3)


def _banded_products(x: Any) -> Any:
    xp = di.array_namespace(x)
    return xp.multiply(x[1:], x[:-1])


# (the value comes from the combined program, whichever source found the pattern)
@pytest.mark.parametrize(("dense", "sparsity"), alternating_params([di.TracerSparsity(), di.DenseSparsity()]))
def test_the_value_of_the_combined_forms_is_an_array_of_xs_family_and_dtype(
    dense: di.AbstractBackend, sparsity: Any
) -> None:
    """value_gradient_and_hessian over a NumPy engine returned a NumPy scalar
    (numpy.float64) where every backend returns a 0-d array."""
    backend = di.AutoSparse(dense, sparsity=sparsity)
    points = [np.linspace(0.5, 2.0, 4), np.linspace(0.5, 2.0, 4).astype(np.float32)]
    points += [torch.linspace(0.5, 2.0, 4, dtype=torch.float64), jnp.linspace(0.5, 2.0, 4)]
    for x in points:
        xs = np.asarray(x, dtype=np.float64)
        for prepared in (False, True):
            if prepared:
                prep = di.prepare_hessian(_banded_sum, backend, x)
                y, g, _ = di.value_gradient_and_hessian(_banded_sum, prep, backend, x)
                prep = di.prepare_jacobian(_banded_products, backend, x)
                v, _ = di.value_and_jacobian(_banded_products, prep, backend, x)
            else:
                y, g, _ = di.value_gradient_and_hessian(_banded_sum, backend, x)
                v, _ = di.value_and_jacobian(_banded_products, backend, x)
            for value in (y, g, v):
                assert type(value) is type(x), (type(value), type(x))
                assert value.dtype == x.dtype
            assert tuple(y.shape) == ()
            np.testing.assert_allclose(float(y), np.sum(xs[1:] * xs[:-1]) + np.sum(xs**3), rtol=1e-5)
            np.testing.assert_allclose(np.asarray(v), xs[1:] * xs[:-1], rtol=1e-5)


_TRACERS = [di.TracerSparsity(), di.TracerSparsity(method="arrays"), di.LocalTracerSparsity()]


def _pick(x: Any, k: Any) -> Any:
    return x * x[k]


def _picked_energy(x: Any, k: Any) -> Any:
    xp = di.array_namespace(x)
    return xp.sum(x * x[k])


@pytest.mark.parametrize("sparsity", _TRACERS, ids=repr)
@pytest.mark.parametrize("dense", backend_params())
def test_a_new_static_context_value_is_detected_again(dense: di.AbstractBackend, sparsity: Any) -> None:
    # x * x[k] depends on column k: a pattern detected for k = 0 misses column 2 at k = 2.
    backend = di.AutoSparse(dense, sparsity=sparsity)
    x = np.array([1.0, 2.0, 3.0])
    prep = di.prepare_jacobian(_pick, backend, np.ones(3), di.Constant(0))
    hessian_prep = di.prepare_hessian(_picked_energy, backend, np.ones(3), di.Constant(0))
    for k in (2, 0, 2):
        expected = np.asarray(di.jacobian(_pick, di.AutoJAX(), x, di.Constant(k)))
        got = di.jacobian(_pick, prep, backend, x, di.Constant(k)).toarray()
        np.testing.assert_allclose(got, expected, atol=1e-6)
        expected = np.asarray(di.hessian(_picked_energy, di.AutoJAX(), x, di.Constant(k)))
        got = di.hessian(_picked_energy, hessian_prep, backend, x, di.Constant(k)).toarray()
        np.testing.assert_allclose(got, expected, atol=1e-4)
    assert prep.sparsity.nnz == 5  # the prepared value's pattern: [[1, 0, 0], [1, 1, 0], [1, 0, 1]]


@pytest.mark.parametrize("sparsity", _TRACERS[:2], ids=repr)
def test_a_traced_int_context_used_as_an_index_is_unknown_to_the_global_tracers(sparsity: Any) -> None:
    backend = di.AutoSparse(di.AutoJAX(), sparsity=sparsity)
    x = np.array([1.0, 2.0, 3.0])
    prep = di.prepare_jacobian(_pick, backend, np.ones(3), di.Constant(0, static=False))
    assert prep.sparsity.toarray().all() and len(prep.info.notes) == 1
    for k in (2, 1):
        expected = np.asarray(di.jacobian(_pick, di.AutoJAX(), x, di.Constant(k)))
        got = di.jacobian(_pick, prep, backend, x, di.Constant(k, static=False)).toarray()
        np.testing.assert_allclose(got, expected)


@jax.custom_jvp
def _straight_through_round(x: Any) -> Any:
    return jnp.round(x)


@_straight_through_round.defjvp
def _straight_through_round_jvp(primals: Any, tangents: Any) -> Any:
    return jnp.round(primals[0]), tangents[0]


@jax.custom_vjp
def _flipped_gradient(x: Any) -> Any:
    return jnp.round(x)


_flipped_gradient.defvjp(lambda x: (jnp.round(x), None), lambda residual, ct: (jnp.flip(ct),))


@jax.custom_vjp
def _host_gradient(x: Any) -> Any:
    return 2.0 * x


_host_gradient.defvjp(lambda x: (2.0 * x, None), lambda residual, ct: (jnp.asarray(2.0 * np.asarray(ct)),))


@pytest.mark.parametrize(
    ("f", "dense", "expected_pattern", "noted"),
    [
        # custom_jvp: the rule's identity (the primal round has none), times x[2] for the first two.
        (lambda x: _straight_through_round(x[:2]) * x[2], di.AutoJAX(), [[1, 0, 1], [0, 1, 1]], False),
        (lambda x: _flipped_gradient(x) * 2.0, di.AutoJAX(mode="reverse"), [[0, 0, 1], [0, 1, 0], [1, 0, 0]], False),
        # A bwd rule that leaves JAX (NumPy on the cotangent) cannot be read: the call is bounded.
        (lambda x: _host_gradient(x), di.AutoFiniteDiff(), np.ones((3, 3)), True),
    ],
    ids=["custom_jvp", "custom_vjp", "custom_vjp-untraceable"],
)
def test_custom_rules_are_followed_not_their_primal(
    f: Any, dense: di.AbstractBackend, expected_pattern: Any, noted: bool
) -> None:
    # The jacobian is what the dense backend computes: for JAX the rule's, never round's zero derivative.
    backend = di.AutoSparse(dense)
    x = np.array([0.3, 1.7, -2.2])
    prep = di.prepare_jacobian(f, backend, x)
    np.testing.assert_array_equal(prep.sparsity.toarray(), expected_pattern)
    assert any("derivative rule could not be traced" in note for note in prep.info.notes) == noted
    expected = np.asarray(di.jacobian(f, dense, x))
    assert np.abs(expected).sum() > 0
    np.testing.assert_allclose(di.jacobian(f, prep, backend, x).toarray(), expected, atol=1e-6)


def test_second_order_is_refused_as_the_dense_backend_of_colored_operators() -> None:
    """AutoSparse colors one engine's products: a SecondOrder dense backend was met by
    the registry's 'no adapter is registered for SecondOrder; register one with
    di.register_backend', which sent the user the wrong way. Its first-order
    operators still run on SecondOrder."""
    backend = di.AutoSparse(di.SecondOrder(di.AutoFiniteDiff(), di.AutoJAX()))
    x = np.array([0.5, 1.0, -0.3])

    def chain(x: Any) -> Any:
        xp = di.array_namespace(x)
        return xp.sum(x[:-1] * x[1:] ** 2)

    def squares(x: Any) -> Any:
        return x**2

    for prepare, f in ((di.prepare_hessian, chain), (di.prepare_jacobian, squares)):
        with pytest.raises(
            di.UnsupportedOperatorError, match=r"cannot be AutoSparse's dense backend.*AutoSparse\(AutoJAX\(\)\)"
        ):
            prepare(f, backend, x)
    np.testing.assert_allclose(di.gradient(chain, backend, x), [1.0, 2 * 0.5 * 1.0 + 0.09, 2 * 1.0 * -0.3], rtol=1e-5)


# --- a pytree x: the caller's leaf order ------------------------------------------------------


def _two_leaves_out(t: Any) -> Any:
    xp = di.array_namespace(t["b"])
    return xp.concat([t["b"] * 2.0, xp.sin(t["a"]["z"]) * t["a"]["c"]])


def _two_leaves_energy(t: Any) -> Any:
    xp = di.array_namespace(t["b"])
    return xp.sum(t["b"] ** 3) + xp.sum(xp.sin(t["a"]["z"]) * t["a"]["c"])


def _unsorted_x() -> dict[str, Any]:
    """A pytree whose dicts are out of sorted key order (optree flattens them sorted)."""
    return {"b": np.array([1.0, 2.0]), "a": {"z": np.array([0.1, 0.2, 0.3]), "c": np.array(0.5)}}


def _iterated(tree: Any) -> list[Any]:
    """The leaves of nested dicts in the order they iterate."""
    return [leaf for value in tree.values() for leaf in (_iterated(value) if isinstance(value, dict) else [value])]


def _blocks(rows: list[Any], m: int) -> np.ndarray:
    return np.concatenate([np.asarray(block, dtype=np.float64).reshape(m, -1) for block in rows], axis=1)


def _second_order_atol(dense: di.AbstractBackend) -> float:
    """How near a sparse Hessian is to the exact one: central differences of central-difference
    gradients within about 1e-6, forward ones of forward ones within about 5e-4."""
    if isinstance(dense, di.AutoFiniteDiff):
        return 1e-3 if dense.method == "forward" else 1e-5
    return 1e-12


def _rows(hessian: Any, x: Any) -> list[Any]:
    """The rows of a dense Hessian of a pytree ``x`` (each shaped like ``x``), in ``x``'s iteration order."""
    return [
        row
        for key, leaf in x.items()
        for row in (_rows(hessian[key], leaf) if isinstance(leaf, dict) else [hessian[key]])
    ]


@pytest.mark.parametrize("dense", backend_params())
def test_a_pytree_x_s_columns_follow_the_caller_s_leaf_order(dense: di.AbstractBackend) -> None:
    x = _unsorted_x()
    backend = di.AutoSparse(dense)
    prep = di.prepare_jacobian(_two_leaves_out, backend, x)
    assert prep.info.columns == {"b": slice(0, 2), "a": {"z": slice(2, 5), "c": slice(5, 6)}}
    expected = _blocks(_iterated(di.jacobian(_two_leaves_out, dense, x)), 5)
    assert_close(di.jacobian(_two_leaves_out, prep, backend, x).toarray(), expected, dense, np.float64, "jacobian")
    # The Hessian's rows and columns, and the gradient beside it, in one order: a Newton step is right.
    _, gradient, hessian = di.value_gradient_and_hessian(_two_leaves_energy, backend, x)
    assert list(gradient) == ["b", "a"] and list(gradient["a"]) == ["z", "c"]
    flat_gradient = np.concatenate([np.reshape(g, -1) for g in _iterated(gradient)])
    expected_gradient = _blocks(_iterated(di.gradient(_two_leaves_energy, dense, x)), 1)[0]
    assert_close(flat_gradient, expected_gradient, dense, np.float64, "gradient")
    rows = _rows(di.hessian(_two_leaves_energy, di.AutoTorch(), x), x)  # exact: a dense FD Hessian is not
    expected_hessian = np.concatenate(
        [_blocks(_iterated(row), int(np.size(leaf))) for row, leaf in zip(rows, _iterated(x), strict=True)]
    )
    np.testing.assert_allclose(hessian.toarray(), expected_hessian, atol=_second_order_atol(dense))


@pytest.mark.parametrize("dense", backend_params())
def test_dense_results_over_a_pytree_x_are_the_dense_backend_s(dense: di.AbstractBackend) -> None:
    x = _unsorted_x()
    backend = di.AutoSparse(dense, dense_result=True)
    for operator, f in ((di.jacobian, _two_leaves_out), (di.hessian, _two_leaves_energy)):
        expected, result = operator(f, dense, x), operator(f, backend, x)
        exact = operator(f, di.AutoTorch(), x)  # a dense forward-difference Hessian is off by 1e-4
        assert list(result) == ["b", "a"] and list(result["a"]) == ["z", "c"]
        assert di.pytrees.tree_flatten(result)[1] == di.pytrees.tree_flatten(expected)[1]
        leaves = zip(*(di.pytrees.tree_leaves(t) for t in (result, expected, exact)), strict=True)
        for got, want, value in leaves:
            assert (type(got), got.shape, got.dtype) == (type(want), want.shape, want.dtype)
            np.testing.assert_allclose(got, value, rtol=1e-7, atol=_second_order_atol(dense))


@pytest.mark.parametrize("family", FAMILIES)
def test_every_familys_gather_reads_the_entries_at_numpy_positions(family: str) -> None:
    # AutoSparse reads the nonzeros of its compressed products with the family's gather.
    record = get_family(family)
    values = as_family(np.arange(10.0) * 1.5, family)
    positions = record.index(np.array([3, 0, 9, 3]))
    np.testing.assert_array_equal(record.to_numpy(record.gather(values, positions)), [4.5, 0.0, 13.5, 4.5])


def test_the_jax_gather_is_an_in_bounds_indexing() -> None:
    # jnp.take's default fill mode (bounds checks in the compiled program) made a one-color
    # prepared Hessian's call at n = 100 cost 15.3 us of CPU against 8.2 us by indexing.
    record = get_family("jax")
    positions = record.index(np.array([2, 0, 1]))
    program = str(jax.make_jaxpr(lambda v: record.gather(v, positions))(jnp.arange(3.0)))
    assert "PROMISE_IN_BOUNDS" in program and "FILL_OR_DROP" not in program


def _energy(v: Any) -> Any:
    xp = di.array_namespace(v)
    return xp.sum(v) ** 3 + xp.sum(v**4)


def _spread(v: Any) -> Any:
    xp = di.array_namespace(v)
    return xp.sin(v) * xp.sum(v * v)


def test_the_compressed_products_trace_f_once_for_all_batches(monkeypatch: pytest.MonkeyPatch) -> None:
    # Dense matrices: one color per column (or row). With the engine's batched form, one seed
    # matrix per batch of colors, preparation traces f as often however the colors are batched;
    # with a tangent per color (an engine without that form), once more per batch.
    from di.backends.protocol import Adapter
    from di.engines.jax.adapter import JAXAdapter

    x = np.linspace(-1.0, 1.0, 6)
    hessian = ("hessian", _energy, di.hessian(_energy, di.AutoJAX(), x), {})
    jacobian = ("jacobian", _spread, di.jacobian(_spread, di.AutoJAX(), x), {"mode": "reverse"})

    def traces(operator: str, function: Any, reference: Any, options: dict[str, Any], chunk_size: int | None) -> int:
        calls: list[None] = []

        def f(v: Any) -> Any:
            calls.append(None)
            return function(v)

        backend = di.AutoSparse(di.AutoJAX(jit=True), chunk_size=chunk_size, **options)
        prep = getattr(di, f"prepare_{operator}")(f, backend, x)
        count = len(calls)
        result = getattr(di, operator)(f, prep, backend, x)
        np.testing.assert_allclose(result.toarray(), reference, rtol=1e-12, atol=1e-12)
        assert prep.colors == 6 and prep.info.chunks == (1 if chunk_size is None else 6 // chunk_size)
        return count

    stacked = [traces(*hessian, None), traces(*hessian, 2), traces(*jacobian, 2)]
    monkeypatch.setattr(JAXAdapter, "stacked_products", Adapter.stacked_products)
    assert stacked[0] == stacked[1] < traces(*hessian, 2)
    assert stacked[2] < traces(*jacobian, 2)
