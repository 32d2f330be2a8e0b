"""The array-API sparsity tracer (``TracerSparsity(method="arrays")``, no JAX needed),
its local form (``LocalTracerSparsity``) and its second-order (Hessian) sets."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from conftest import alternating_params, backend_params, refuses_float
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import di
from di.sparse.arrays import array_pattern

N = 6
PERMUTATION = np.array([3, 0, 5, 1, 4, 2])
SPARSE_MATRIX = np.where(np.random.default_rng(7).random((N, N)) < 0.3, 1.5, 0.0)


def _xp(v: Any) -> Any:
    return di.array_namespace(v)


# Each step maps the current vector (N entries) and the input x to a new vector.
STEPS: dict[str, Callable[[Any, Any], Any]] = {
    "sin": lambda v, x: _xp(v).sin(v),
    "exp": lambda v, x: _xp(v).exp(v * 0.1),
    "square": lambda v, x: v**2,
    "tanh": lambda v, x: _xp(v).tanh(v),
    "abs": lambda v, x: _xp(v).abs(v),
    "roll": lambda v, x: _xp(v).roll(v, 2),
    "flip": lambda v, x: _xp(v).flip(v),
    "cumulative_sum": lambda v, x: _xp(v).cumulative_sum(v),
    "sort": lambda v, x: _xp(v).sort(v),
    "take": lambda v, x: _xp(v).take(v, PERMUTATION),
    "integer index": lambda v, x: v[PERMUTATION],
    "where": lambda v, x: _xp(v).where(v > 0, v, _xp(v).flip(v)),
    "stack": lambda v, x: _xp(v).reshape(_xp(v).stack([v[:3], v[3:] * v[:3]], axis=1), (-1,)),
    "concat": lambda v, x: _xp(v).concat([v[4:], v[:4] * 2.0]),
    "constant matmul": lambda v, x: SPARSE_MATRIX @ v + v * 0.5,
    "matmul": lambda v, x: _xp(v).reshape(_xp(v).reshape(v, (2, 3)).T @ _xp(v).reshape(v, (2, 3)), (-1,))[:N],
    "product of neighbours": lambda v, x: v * _xp(v).roll(v, 1),
    "add x": lambda v, x: v + x[PERMUTATION],
    "transpose": lambda v, x: _xp(v).reshape(_xp(v).permute_dims(_xp(v).reshape(v, (2, 3)), (1, 0)), (-1,)),
    "broadcast sum": lambda v, x: v + _xp(v).sum(v[:2]),
    "tile": lambda v, x: _xp(v).tile(v[:3], (2,)),
    "maximum": lambda v, x: _xp(v).maximum(v, _xp(v).flip(v)),
    "prod": lambda v, x: v * _xp(v).prod(v[:2]),
    "cumulative_prod": lambda v, x: _xp(v).cumulative_prod(v * 0.5),
    "clip": lambda v, x: _xp(v).clip(v, -0.5, 0.5) + v * 0.1,
    "divide": lambda v, x: v / (1.0 + v**2),
    "std": lambda v, x: v + _xp(v).std(v[:3]),
    "unstack": lambda v, x: _xp(v).reshape(_xp(v).stack(_xp(v).unstack(_xp(v).reshape(v, (2, 3)), axis=1)), (-1,)),
    "mean over axis": lambda v, x: (
        _xp(v).reshape(_xp(v).broadcast_to(_xp(v).mean(_xp(v).reshape(v, (2, 3)), axis=0), (2, 3)), (-1,)) + v
    ),
    "moveaxis": lambda v, x: _xp(v).reshape(_xp(v).moveaxis(_xp(v).reshape(v, (3, 2)), 0, 1), (-1,)),
    "tril": lambda v, x: _xp(v).reshape(_xp(v).tril(_xp(v).reshape(v, (2, 3)), k=1), (-1,)) + v * 0.1,
    "expand and squeeze": lambda v, x: _xp(v).squeeze(_xp(v).expand_dims(v, axis=0), axis=0),
    "max": lambda v, x: v + _xp(v).max(v[3:]),
    "pow": lambda v, x: (v**2 + 1.0) ** x[0] * 0.1 + v,
    "take_along_axis": lambda v, x: _xp(v).take_along_axis(v, PERMUTATION, axis=0),
    "fft": lambda v, x: _xp(v).reshape(_xp(v).real(_xp(v).fft.fft(_xp(v).reshape(v, (2, 3)), axis=1)), (-1,)),
    "inv": lambda v, x: _xp(v).concat(
        [_xp(v).reshape(_xp(v).linalg.inv(_xp(v).reshape(v[:4], (2, 2)) * 0.1 + 3 * _xp(v).eye(2)), (-1,)), v[4:]]
    ),
    "vector_norm": lambda v, x: v + _xp(v).tile(_xp(v).linalg.vector_norm(_xp(v).reshape(v, (2, 3)), axis=0), (2,)),
    "trace": lambda v, x: v * _xp(v).linalg.trace(_xp(v).reshape(v[:4], (2, 2))),
}
SAFE_FOR_SECOND_ORDER = [name for name in STEPS if name not in ("abs", "maximum", "clip", "sort", "where", "max")]


def _program(steps: list[str]) -> Callable[[Any], Any]:
    def f(x: Any) -> Any:
        v = x
        for step in steps:
            v = STEPS[step](v, x)
        return v

    return f


def _dense_nonzeros(matrix: Any) -> np.ndarray:
    return np.abs(np.asarray(matrix)) > 0


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.sampled_from(sorted(STEPS)), min_size=1, max_size=6), st.integers(0, 2**31 - 1))
def test_compositions_never_miss_a_jacobian_nonzero(steps: list[str], seed: int) -> None:
    pytest.importorskip("jax")
    f = _program(steps)
    x = np.random.default_rng(seed).uniform(-1.5, 1.5, N)
    pattern = array_pattern("jacobian", f, x, [], local=False).pattern.toarray()
    local = array_pattern("jacobian", f, x, [], local=True).pattern.toarray()
    for point in (x, np.random.default_rng(seed + 1).uniform(-1.5, 1.5, N)):
        dense = _dense_nonzeros(di.jacobian(f, di.AutoJAX(), point))
        assert not np.any(dense & ~pattern), f"global pattern misses nonzeros of {steps}"
    assert not np.any(_dense_nonzeros(di.jacobian(f, di.AutoJAX(), x)) & ~local), f"local pattern misses {steps}"
    assert not np.any(local & ~pattern)  # the branch taken is one of the branches


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.sampled_from(SAFE_FOR_SECOND_ORDER), min_size=1, max_size=5), st.integers(0, 2**31 - 1))
def test_compositions_never_miss_a_hessian_nonzero(steps: list[str], seed: int) -> None:
    pytest.importorskip("jax")
    inner = _program(steps)

    def f(x: Any) -> Any:
        v = inner(x)
        return _xp(v).sum(v[1:] * v[:-1]) + _xp(v).sum(_xp(v).sin(v))

    x = np.random.default_rng(seed).uniform(-1.5, 1.5, N)
    pattern = array_pattern("hessian", f, x, [], local=False).pattern.toarray()
    assert np.array_equal(pattern, pattern.T)
    dense = _dense_nonzeros(di.hessian(f, di.AutoJAX(), x))
    assert not np.any(dense & ~pattern), f"Hessian pattern misses nonzeros of {steps}"
    from di.sparse.jaxpr import hessian_pattern

    # The program tracer reads the gradient's program, whose cotangents it cannot see are structurally
    # zero (sin of the part of x a slice drops still meets cos(x) * 0): it may be coarser, never finer.
    program = hessian_pattern(f, x, [], []).pattern.toarray()
    assert not np.any(dense & ~program), f"the program tracer misses nonzeros of {steps}"
    assert not np.any(pattern & ~program), f"the array tracer is coarser than the program tracer on {steps}"


def test_partially_separable_hessians_are_exact() -> None:
    def f(x: Any) -> Any:
        xp = di.array_namespace(x)
        # chained products (no diagonal), a sum of squares of differences, and
        # terms that are linear in x (no second-order pairs at all)
        return xp.sum(x[1:6] * x[:5]) + xp.sum((x[7:] - x[6:-1]) ** 2) + 3.0 * xp.sum(x) + xp.sum(xp.abs(x))

    x = np.linspace(-1.0, 1.0, 10)
    expected = np.zeros((10, 10), dtype=bool)
    for i in range(5):
        expected[i, i + 1] = expected[i + 1, i] = True
    for i in range(6, 9):
        expected[i, i + 1] = expected[i + 1, i] = True
        expected[i, i] = expected[i + 1, i + 1] = True
    pattern = array_pattern("hessian", f, x, [], local=False).pattern.toarray()
    np.testing.assert_array_equal(pattern, expected)
    local = array_pattern("hessian", f, x, [], local=True).pattern.toarray()
    np.testing.assert_array_equal(local, expected)


def test_products_couple_their_factors_and_sums_do_not() -> None:
    def f(x: Any) -> Any:
        xp = di.array_namespace(x)
        return (x[0] + x[1]) * (x[2] + x[3]) + xp.exp(x[4]) + x[5] / x[6]

    pattern = array_pattern("hessian", f, np.ones(7), [], local=False).pattern.toarray()
    expected = np.zeros((7, 7), dtype=bool)
    for i in (0, 1):
        for j in (2, 3):
            expected[i, j] = expected[j, i] = True
    expected[4, 4] = True
    expected[5, 6] = expected[6, 5] = expected[6, 6] = True
    np.testing.assert_array_equal(pattern, expected)


# (both tracers read f, never the engine: each engine runs the products of one of them)
@pytest.mark.parametrize(
    ("dense", "sparsity"), alternating_params([di.TracerSparsity(method="arrays"), di.LocalTracerSparsity()])
)
def test_the_array_tracer_works_on_every_engine(dense: di.AbstractBackend, sparsity: Any) -> None:
    from bench.sparse_structured import brusselator

    backend = di.AutoSparse(dense, sparsity=sparsity)
    x = np.random.default_rng(0).uniform(0.5, 1.5, 2 * 6 * 6)
    for stacked in (True, False):

        def rhs(u: Any, stacked: bool = stacked) -> Any:
            return brusselator(u, stacked)

        prep = di.prepare_jacobian(rhs, backend, x)
        assert prep.sparsity.nnz == 2 * 36 * 6 and prep.info.notes == ()
        reference = di.jacobian(rhs, di.AutoFiniteDiff(), x)
        np.testing.assert_allclose(di.jacobian(rhs, prep, backend, x).toarray(), reference, atol=1e-6)

    def energy(u: Any) -> Any:
        xp = di.array_namespace(u)
        return xp.sum(u[1:] * u[:-1]) + xp.sum(u**4)

    prep = di.prepare_hessian(energy, backend, x)
    expected = np.diag(12 * x**2) + np.eye(x.size, k=1) + np.eye(x.size, k=-1)
    np.testing.assert_allclose(di.hessian(energy, prep, backend, x).toarray(), expected, rtol=1e-5, atol=1e-5)
    assert prep.colors == 3


def test_the_local_tracer_takes_the_branch_the_point_takes() -> None:
    def f(x: Any) -> Any:
        xp = di.array_namespace(x)
        if x[0] > 0:  # a Python branch on a value
            return x * x[1]
        return xp.where(x > 0, x**2, xp.flip(x))

    backend = di.AutoSparse(di.AutoFiniteDiff(), sparsity=di.LocalTracerSparsity())
    positive = np.array([1.0, 2.0, 3.0])
    prep = di.prepare_jacobian(f, backend, positive)
    np.testing.assert_array_equal(prep.sparsity.toarray(), [[1, 1, 0], [0, 1, 0], [0, 1, 1]])
    jacobian = di.jacobian(f, prep, backend, positive).toarray()
    np.testing.assert_allclose(jacobian, [[2, 1, 0], [0, 4, 0], [0, 3, 2]], rtol=1e-6)
    mixed = np.array([-1.0, 2.0, -3.0])
    prep = di.prepare_jacobian(f, backend, mixed)
    np.testing.assert_array_equal(prep.sparsity.toarray(), [[0, 0, 1], [0, 1, 0], [1, 0, 0]])
    with pytest.raises(di.InvalidInputError, match="LocalTracerSparsity"):
        di.prepare_jacobian(f, di.AutoSparse(di.AutoFiniteDiff(), sparsity=di.TracerSparsity(method="arrays")), mixed)


def test_unknown_functions_are_dense_with_a_note_and_writes_are_refused() -> None:
    def f(x: Any) -> Any:
        xp = di.array_namespace(x)
        return xp.concat([xp.convolve(x[:3], x[:3]), x[3:] ** 2])

    detection = array_pattern("jacobian", f, np.ones(5), [], local=False)
    assert detection.pattern.toarray()[:5, :3].all() and not detection.pattern.toarray()[:5, 3:].any()
    assert detection.notes == [
        "convolve: unknown to the sparsity tracer: every output element taken to depend on every input"
    ]

    def writes(x: Any) -> Any:
        x[0] = 1.0
        return x

    with pytest.raises(di.InvalidInputError, match="writes into arrays"):
        array_pattern("jacobian", writes, np.ones(3), [], local=False)


def test_value_dependent_functions_are_local_only() -> None:
    def f(x: Any) -> Any:
        xp = di.array_namespace(x)
        return xp.unique_values(x) * 2.0  # each unique value is the first element equal to it

    x = np.array([1.0, 2.0, 1.0, 3.0])
    local = array_pattern("jacobian", f, x, [], local=True).pattern.toarray()
    np.testing.assert_array_equal(local, [[1, 0, 0, 0], [0, 1, 0, 0], [0, 0, 0, 1]])
    with pytest.raises(di.InvalidInputError, match="unique of a value computed from x"):
        array_pattern("jacobian", f, x, [], local=False)


def test_contexts_are_unknown_to_the_global_tracer_and_read_by_the_local_one() -> None:
    def f(x: Any, c: Any) -> Any:
        return x * c

    zero_context = [di.Constant(np.array([0.0, 1.0, 0.0]))]
    global_pattern = array_pattern("jacobian", f, np.ones(3), zero_context, local=False).pattern.toarray()
    np.testing.assert_array_equal(global_pattern, np.eye(3, dtype=bool))
    local_pattern = array_pattern("jacobian", f, np.ones(3), zero_context, local=True).pattern.toarray()
    np.testing.assert_array_equal(local_pattern, np.diag([False, True, False]))  # read at their values


def test_tracer_sparsity_uses_the_array_tracer_without_the_program_tracer(monkeypatch: pytest.MonkeyPatch) -> None:
    from di.sparse import detection

    assert detection.tracer_method(di.TracerSparsity()) == "program"
    monkeypatch.setattr(detection, "program_tracer_installed", lambda: False)
    assert detection.tracer_method(di.TracerSparsity()) == "arrays"

    def f(x: Any) -> Any:
        xp = di.array_namespace(x)
        return xp.sum(x[1:] * x[:-1])

    backend = di.AutoSparse(di.AutoFiniteDiff())
    x = np.arange(1.0, 6.0)
    prep = di.prepare_hessian(f, backend, x)
    np.testing.assert_array_equal(prep.sparsity.toarray(), np.eye(5, k=1) + np.eye(5, k=-1))
    hessian = di.hessian(f, prep, backend, x).toarray()  # finite differences: about 1e-6
    np.testing.assert_allclose(hessian, np.eye(5, k=1) + np.eye(5, k=-1), atol=1e-5)
    with pytest.raises(ValueError, match="method must be one of"):
        di.TracerSparsity(method="bogus")


def _sign_times_x(x: Any) -> Any:
    xp = di.array_namespace(x)
    return xp.sign(x) * x


def _times_largest(x: Any) -> Any:
    xp = di.array_namespace(x)
    return x * x[xp.argmax(x)]


def _times_floor(x: Any) -> Any:
    xp = di.array_namespace(x)
    return x * xp.floor(x)


@pytest.mark.parametrize(
    ("f", "prepared_at", "called_at"),
    [
        (_sign_times_x, [0.0, 0.0, 0.0], [1.0, -2.0, 0.5]),  # sign(x) is zero at 0, not a constant zero
        (_times_floor, [0.5, 0.25, 0.75], [1.5, 2.25, -0.5]),  # floor(x) too, at [0.5, ...]
        (_times_largest, [3.0, 0.0, 0.0], [1.0, 3.0, 2.0]),  # argmax moves without a branch
    ],
    ids=["sign", "floor", "argmax"],
)
def test_the_local_pattern_holds_where_f_takes_no_other_branch(f: Any, prepared_at: Any, called_at: Any) -> None:
    backend = di.AutoSparse(di.AutoFiniteDiff(), sparsity=di.LocalTracerSparsity())
    prep = di.prepare_jacobian(f, backend, np.array(prepared_at))
    x = np.array(called_at)
    expected = di.jacobian(f, di.AutoFiniteDiff(), x)
    assert np.abs(expected).sum() > 0
    np.testing.assert_allclose(di.jacobian(f, prep, backend, x).toarray(), expected, atol=1e-6)
    # A constant zero factor still drops its dependence; a Python branch is still taken as at the point.
    constant = array_pattern("jacobian", lambda v: v * np.array([0.0, 1.0, 0.0]), x, [], local=True)
    np.testing.assert_array_equal(constant.pattern.toarray(), np.diag([False, True, False]))


def _branches_on_numbers(x: Any) -> Any:
    xp = di.array_namespace(x)
    if float(xp.sum(x)) > 0 and int(xp.max(x)) >= 1:  # Python numbers of values of x: branches
        return x[1:] * x[:-1]
    return x[1:] - x[:-1]


@pytest.mark.parametrize("dense", backend_params())
def test_the_local_tracer_reads_float_and_int_as_it_reads_bool(dense: di.AbstractBackend) -> None:
    x = np.arange(1.0, 5.0)
    local = array_pattern("jacobian", _branches_on_numbers, x, [], local=True).pattern.toarray()
    np.testing.assert_array_equal(local, np.eye(3, 4, dtype=bool) | np.eye(3, 4, k=1, dtype=bool))
    backend = di.AutoSparse(dense, sparsity=di.LocalTracerSparsity())
    if refuses_float(dense):  # the engine itself cannot pass float() of x
        with pytest.raises(di.InvalidOutputError, match=r"float\(\)"):
            di.jacobian(_branches_on_numbers, backend, x)
        return
    expected = np.eye(3, 4) * x[1:, None] + np.eye(3, 4, k=1) * x[:-1, None]  # d(x[i + 1] x[i])
    np.testing.assert_allclose(di.jacobian(_branches_on_numbers, backend, x).toarray(), expected, rtol=1e-6)
    with pytest.raises(di.InvalidInputError, match=r"AutoSparse\(.*float\(\) of a value computed from x.*"):
        di.jacobian(_branches_on_numbers, di.AutoSparse(dense, sparsity=di.TracerSparsity(method="arrays")), x)


@pytest.mark.parametrize("sparsity", [di.TracerSparsity(method="arrays"), di.LocalTracerSparsity()], ids=repr)
def test_a_numpy_function_on_a_traced_array_is_refused_naming_the_backend_and_a_remedy(sparsity: Any) -> None:
    def numpy_sine(x: Any) -> Any:
        return np.sin(x)

    backend = di.AutoSparse(di.AutoFiniteDiff(), sparsity=sparsity)
    with pytest.raises(di.InvalidInputError) as refused:
        di.jacobian(numpy_sine, backend, np.ones(3))
    message = str(refused.value)
    assert message.startswith(repr(backend)) and "asarray()" in message
    assert "xp = di.array_namespace(x)" in message and "di.DenseSparsity()" in message


@pytest.mark.parametrize("dense", backend_params())
@pytest.mark.parametrize(
    "sparsity", [di.TracerSparsity(), di.TracerSparsity(method="arrays"), di.LocalTracerSparsity()], ids=repr
)
def test_a_failed_trace_is_diagnosed_once_on_a_copy_of_x(dense: di.AbstractBackend, sparsity: Any) -> None:
    concrete_calls: list[int] = []

    def writes_into_x(x: Any) -> Any:
        xp = di.array_namespace(x)
        if type(x) is np.ndarray:  # the diagnosis: f on concrete arguments
            concrete_calls.append(1)
        x[0] = 5.0
        return xp.multiply(x, 2.0)

    backend = di.AutoSparse(dense, sparsity=sparsity)
    x = np.ones(3)
    with pytest.raises(di.InvalidInputError, match=r"^AutoSparse\("):
        di.jacobian(writes_into_x, backend, x)
    np.testing.assert_array_equal(x, np.ones(3))
    assert concrete_calls == [1]
