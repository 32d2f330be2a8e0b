"""torch-specific details the other test modules do not cover, and behaviour
tests that the torch adapter once got wrong, run on every backend: the dtype of
forward-mode results when ``f`` mixes a float32 ``x`` with a Python float."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from conftest import BACKENDS, backend_id
from helpers import sin_times, sin_times_sum

import di

torch = pytest.importorskip("torch")

COMPILED = di.AutoTorch(compile=True, compile_options={"backend": "aot_eager"})
WITH_COMPILED = [pytest.param(b, id=backend_id(b)) for b in BACKENDS] + [pytest.param(COMPILED, id="torch-compile")]


# --- output dtypes --------------------------------------------------------------------


def _cubed_twice(x: Any) -> Any:
    xp = di.array_namespace(x)
    return xp.multiply(x, x) * x * 2.0  # a Python float: torch.func.jvp promoted its tangent to float64


def _float32_results(backend: Any, operator: str) -> tuple[Any, ...]:
    """``operator``'s results at a 0-d float32 ``x``, each written into a float32
    ``out=`` buffer where the operator takes one."""
    x = np.array(0.7, dtype=np.float32)
    tx = (np.ones((), np.float32),)
    if operator == "pushforward":
        return di.pushforward(_cubed_twice, backend, x, tx)  # type: ignore[no-any-return]
    if operator == "value_and_pushforward":
        y, dys = di.value_and_pushforward(_cubed_twice, backend, x, tx)
        return (y, *dys)
    if operator == "pushforward_with_aux":
        dys, aux = di.pushforward(lambda x: (_cubed_twice(x), {"tag": "cubed"}), backend, x, tx + tx, has_aux=True)
        assert aux == {"tag": "cubed"}
        return dys  # type: ignore[no-any-return]
    out = np.zeros((), np.float32)
    if operator == "second_derivative":
        result = di.second_derivative(_cubed_twice, backend, x, out=out)
        assert result is out
        return (result,)
    results = di.value_derivative_and_second_derivative(_cubed_twice, backend, x, out=out)
    assert results[2] is out
    return tuple(results)


@pytest.mark.parametrize(
    "operator",
    [
        "pushforward",
        "value_and_pushforward",
        "pushforward_with_aux",
        "second_derivative",
        "value_derivative_and_second_derivative",
    ],
)
@pytest.mark.parametrize("backend", WITH_COMPILED)
def test_forward_mode_results_keep_a_float32_x_s_dtype(backend: Any, operator: str) -> None:
    results = _float32_results(backend, operator)
    assert [np.asarray(r).dtype for r in results] == [np.float32] * len(results)
    expected = {
        "pushforward": [6 * 0.49],
        "value_and_pushforward": [2 * 0.343, 6 * 0.49],
        "pushforward_with_aux": [6 * 0.49, 6 * 0.49],
        "second_derivative": [12 * 0.7],
        "value_derivative_and_second_derivative": [2 * 0.343, 6 * 0.49, 12 * 0.7],
    }[operator]
    rtol = 1e-2 if isinstance(backend, di.AutoFiniteDiff) else 1e-5
    np.testing.assert_allclose([float(r) for r in results], expected, rtol=rtol)


# --- compiled torch: NumPy arrays f closes over ------------------------------------------

TABLE = np.arange(3.0)


def _squares_with_table(x: Any) -> Any:
    xp = di.array_namespace(x)
    return xp.sum(x * x), {"t": TABLE}


@pytest.mark.parametrize("operator", ["gradient", "value_and_gradient", "pullback"])
def test_compiled_reverse_mode_returns_a_closed_over_numpy_array_in_aux(operator: str) -> None:
    """dynamo fails its own guard on a NumPy array read from a global inside
    torch.func.grad or vjp (raw AssertionError 'Guard failed on the same frame it
    was created'): f is compiled alone and differentiated eagerly, as for a graph break."""
    x = np.array([1.0, 2.0])
    if operator == "pullback":
        (g,), aux = di.pullback(_squares_with_table, COMPILED, x, (np.ones(()),), has_aux=True)
    elif operator == "gradient":
        g, aux = di.gradient(_squares_with_table, COMPILED, x, has_aux=True)
    else:
        (y, aux), g = di.value_and_gradient(_squares_with_table, COMPILED, x, has_aux=True)
        assert float(y) == 5.0
    np.testing.assert_array_equal(g, [2.0, 4.0])
    assert isinstance(aux["t"], np.ndarray)
    np.testing.assert_array_equal(aux["t"], TABLE)


@pytest.mark.parametrize("operator", ["hessian", "jacobian", "derivative"])
def test_compiled_forward_programs_name_a_closed_over_numpy_array(operator: str) -> None:
    """Programs with no eager fallback say what dynamo could not trace and how to
    pass the array instead; the remedy (a Constant) works."""

    def f(x: Any) -> Any:
        xp = di.array_namespace(x)
        return xp.sum(x * x) * xp.sum(xp.asarray(TABLE)) if operator == "hessian" else x * x * xp.sum(xp.asarray(TABLE))

    def with_constant(x: Any, table: Any) -> Any:
        xp = di.array_namespace(x)
        return xp.sum(x * x) * xp.sum(table) if operator == "hessian" else x * x * xp.sum(table)

    x = np.array(2.0) if operator == "derivative" else np.array([1.0, 2.0])
    with pytest.raises(di.UnsupportedOperatorError, match="reads a NumPy array it closes over") as info:
        getattr(di, operator)(f, COMPILED, x)
    assert "di.Constant" in str(info.value)
    assert "Guard failed on the same frame" in str(info.value.__cause__)
    expected = getattr(di, operator)(f, di.AutoTorch(), x)
    np.testing.assert_allclose(getattr(di, operator)(with_constant, COMPILED, x, di.Constant(TABLE)), expected)


# --- pytree outputs ----------------------------------------------------------------------


@pytest.mark.parametrize("structure", ["dict", "list"])
@pytest.mark.parametrize("backend", [di.AutoTorch(), COMPILED], ids=["torch", "torch-compile"])
def test_a_pullback_of_a_pytree_output_is_refused_as_such(backend: Any, structure: str) -> None:
    """Compiled torch converted the pytree cotangent at preparation and leaked
    torch's 'Could not infer dtype of dict'; both refuse f's output with the remedy."""

    def f(x: Any) -> Any:
        xp = di.array_namespace(x)
        squares, product = x * x, xp.prod(x)
        return {"a": squares, "s": product} if structure == "dict" else [squares, product]

    x = np.array([1.0, 2.0])
    ty = {"a": np.ones(2), "s": np.array(1.0)} if structure == "dict" else [np.ones(2), np.array(1.0)]
    with pytest.raises(di.InvalidOutputError, match=f"f returned a {structure}. Pytree outputs are supported by"):
        di.pullback(f, backend, x, (ty,))


# --- NumPy arrays f closes over, on the left of an operator ---------------------------------

WEIGHTS = np.array([1.0, 2.0, 3.0])

ON_THE_LEFT = {
    "times": lambda x: di.array_namespace(x).sum(WEIGHTS * x),
    "matmul": lambda x: WEIGHTS @ x,
    "minus": lambda x: di.array_namespace(x).sum(WEIGHTS - x),
}


@pytest.mark.parametrize("operator", ["gradient", "hessian"])
@pytest.mark.parametrize("case", sorted(ON_THE_LEFT))
def test_a_closed_over_numpy_array_on_the_left_is_named(case: str, operator: str) -> None:
    """np.ndarray.__mul__ (and @, -) refuses a tensor with Python's own TypeError,
    which leaked raw; x * W and W + x already got di's error naming the closure."""
    with pytest.raises(di.InvalidOutputError, match="f combined a NumPy array it closes over") as info:
        getattr(di, operator)(ON_THE_LEFT[case], di.AutoTorch(), np.ones(3))
    assert "di.Constant(data)" in str(info.value)
    assert isinstance(info.value.__cause__, TypeError)
    assert "'numpy.ndarray' and 'Tensor'" in str(info.value.__cause__)


# --- writes into x -------------------------------------------------------------------------


def _zeroes_its_first(x: Any) -> Any:
    xp = di.array_namespace(x)
    x[0] = 0.0
    return xp.sum(x * x)


def _increments(x: Any) -> Any:
    xp = di.array_namespace(x)
    x += 1.0
    return xp.sum(x * x)


@pytest.mark.parametrize("operator", ["gradient", "hessian", "pullback"])
@pytest.mark.parametrize("f", [_zeroes_its_first, _increments], ids=["index", "augmented"])
@pytest.mark.parametrize("backend", [di.AutoTorch(), COMPILED], ids=["torch", "torch-compile"])
def test_a_write_into_x_is_refused_by_the_mutation_rule(backend: Any, f: Any, operator: str) -> None:
    """torch's 'a leaf Variable that requires grad is being used in an in-place
    operation' leaked raw; it is di's InvalidInputError naming the rule, chained."""
    x = np.array([1.0, 2.0, 3.0])
    with pytest.raises(di.InvalidInputError, match="f wrote into x in place") as info:
        if operator == "pullback":
            di.pullback(f, backend, x, (np.ones(()),))
        else:
            getattr(di, operator)(f, backend, x)
    assert "mutation rule" in str(info.value)
    if operator == "pullback":  # its preparation evaluates f untraced (the output's shape): found after the write
        assert "evaluating f untraced" in str(info.value) and "already holds what f wrote" in str(info.value)
        assert x[0] != 1.0
        return
    assert operator in str(info.value)
    assert isinstance(info.value.__cause__, RuntimeError)
    assert "in-place operation" in str(info.value.__cause__)
    np.testing.assert_array_equal(x, [1.0, 2.0, 3.0])  # refused before the write


# --- results of several tangents --------------------------------------------------------------


def _several_results(backend: Any, operator: str, x: Any) -> tuple[Any, ...]:
    tangents = (torch.ones(3, dtype=torch.float64), torch.arange(3.0, dtype=torch.float64))
    if operator == "value_and_pullback":
        return di.value_and_pullback(sin_times, backend, x, tangents)[1]  # type: ignore[no-any-return]
    f = sin_times_sum if operator == "hvp" else sin_times
    return getattr(di, operator)(f, backend, x, tangents)  # type: ignore[no-any-return]


@pytest.mark.parametrize("graph", [True, False], ids=["graph", "no-graph"])
@pytest.mark.parametrize("operator", ["pushforward", "hvp", "pullback", "value_and_pullback"])
@pytest.mark.parametrize("backend", [di.AutoTorch(), COMPILED], ids=["torch", "torch-compile"])
def test_the_results_of_several_tangents_are_independent(backend: Any, operator: str, graph: bool) -> None:
    """With two tangents, pushforward and hvp (and compiled pullbacks) returned
    rows of one batched tensor (unbind's views): writing into one raised torch's
    'Output 0 of Unbind is a view and is being modified inplace' with a graph
    kept, and without one each kept the whole batch alive (resize_ showed the
    other row). Each is a tensor of its own, which the caller may write into."""
    x = torch.linspace(-1.0, 1.0, 3, dtype=torch.float64).requires_grad_(graph)
    first, second = _several_results(backend, operator, x)
    assert first._base is None and second._base is None
    assert first.untyped_storage().data_ptr() != second.untyped_storage().data_ptr()
    before = second.detach().clone()
    with torch.no_grad():
        first.mul_(2.0)
        first.detach().resize_(6)
    torch.testing.assert_close(second.detach(), before)


# --- out= ---------------------------------------------------------------------------------


class _Counted:
    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, x: Any) -> Any:
        self.calls += 1
        xp = di.array_namespace(x)
        return xp.multiply(x, x)


@pytest.mark.parametrize("operator", ["gradient", "jacobian"])
@pytest.mark.parametrize("backend", BACKENDS, ids=backend_id)
def test_an_expanded_out_buffer_is_refused_before_any_work(backend: Any, operator: str) -> None:
    """An expanded torch buffer (torch.zeros(1).expand(3)) raised torch's raw
    'more than one element of the written-to tensor refers to a single memory
    location' after the work; as a read-only NumPy buffer, it is refused before
    anything is written (a gradient's before f runs)."""
    f = _Counted()
    g = (lambda x: di.array_namespace(x).sum(f(x))) if operator == "gradient" else f
    x = torch.tensor([1.0, 2.0, 3.0], dtype=torch.float64)
    prep = getattr(di, f"prepare_{operator}")(g, backend, x)
    shape = (3,) if operator == "gradient" else (3, 3)
    out = torch.zeros(1, dtype=torch.float64).expand(*shape)
    calls = f.calls
    with pytest.raises(di.OutBufferError, match=r"read-only \(an expanded torch tensor.*stride of 0"):
        getattr(di, operator)(g, prep, backend, x, out=out)
    assert not out.any()
    if operator == "gradient":  # (a jacobian's buffer is checked against the result: after f ran, before writing)
        assert f.calls == calls
    fresh = torch.zeros(shape, dtype=torch.float64)
    assert getattr(di, operator)(g, prep, backend, x, out=fresh) is fresh  # a buffer of its own is written


def _zeroes_its_first_map(x: Any) -> Any:
    xp = di.array_namespace(x)
    x[0] = 0.0
    return xp.multiply(x, x)


def _increments_map(x: Any) -> Any:
    xp = di.array_namespace(x)
    x += 1.0
    return xp.multiply(x, x)


def _writing_call(backend: Any, operator: str, x: Any) -> Any:
    if operator in ("derivative", "second_derivative"):
        return getattr(di, operator)(_increments_map, backend, x)
    if operator == "pushforward":
        return di.pushforward(_zeroes_its_first_map, backend, x, (np.ones(3),))
    if operator == "pullback":
        return di.pullback(_zeroes_its_first_map, backend, x, (np.ones(3),))
    return di.jacobian(_zeroes_its_first_map, backend, x)  # (forward mode: as many outputs as inputs)


@pytest.mark.parametrize("writable", [True, False], ids=["writable", "read-only"])
@pytest.mark.parametrize("operator", ["pushforward", "derivative", "jacobian", "second_derivative", "pullback"])
@pytest.mark.parametrize("backend", [di.AutoTorch(), COMPILED], ids=["torch", "torch-compile"])
def test_a_write_into_x_under_forward_mode_is_refused(backend: Any, operator: str, writable: bool) -> None:
    """torch's forward mode lets f write into x: pushforward and derivative gave
    no error, and the caller's NumPy x was overwritten silently (jacobian in
    forward mode, and f evaluated untraced at a preparation, the same; a second
    derivative raised torch's raw 'mutate a captured Tensor'). The write is
    found after f ran (x's version counter) and refused with InvalidInputError,
    which says whether the caller's x holds it. The eager pushforward, two reverse
    passes, refuses the write before it is made."""
    start = [0.5] if operator in ("derivative", "second_derivative") else [1.0, 2.0, 3.0]
    x = np.array(start[0] if len(start) == 1 else start)
    x.flags.writeable = writable  # (a read-only array reaches f as a copy)
    with pytest.raises(di.InvalidInputError, match="f wrote into x") as info:
        _writing_call(backend, operator, x)
    message = str(info.value)
    assert "mutation rule" in message
    if operator == "pushforward" and backend == di.AutoTorch():
        # eagerly two reverse passes: autograd refuses the write into x's alias before it happens
        np.testing.assert_array_equal(x, start)
    elif writable:
        assert "The caller's x already holds what f wrote" in message
        assert not np.array_equal(np.atleast_1d(x), start)  # (as the message says)
    else:
        assert "The caller's x is unchanged" in message
        np.testing.assert_array_equal(np.atleast_1d(x), start)


def test_eager_second_order_says_which_program_it_chose() -> None:
    """prep.info.program names the program an eager torch prep chose: double
    backward for hvp, the batched double backward for a small hessian and
    torch.func's reverse over reverse for a large one; both hessians agree with
    the analytic one (sum x**4: diag(12 x**2)); a first-order prep chooses nothing."""
    from di.engines.torch.second_order import BATCHED_HESSIAN_MAX_N

    def f(x: Any) -> Any:
        xp = di.array_namespace(x)
        return xp.sum(x**4)

    backend = di.AutoTorch()
    small = torch.linspace(-1.0, 1.0, 6, dtype=torch.float64)
    prep = di.prepare_hvp(f, backend, small, (torch.ones_like(small),))
    assert prep.info.program is not None and prep.info.program.startswith("double backward")
    for n, expected in ((6, "is_grads_batched"), (BATCHED_HESSIAN_MAX_N + 2, "reverse over reverse")):
        x = torch.linspace(-1.0, 1.0, n, dtype=torch.float64)
        prep = di.prepare_hessian(f, backend, x)
        assert expected in prep.info.program, prep.info
        torch.testing.assert_close(di.hessian(f, prep, backend, x), torch.diag(12 * x**2))
    assert di.prepare_gradient(f, backend, small).info.program is None


def _coupled(x: Any, scale: Any) -> Any:
    xp = di.array_namespace(x)
    return scale * x * x * x - x * xp.sum(x * x) / x.shape[0]


def test_eager_pushforward_is_a_double_vjp_agreeing_with_torch_func_jvp() -> None:
    """The eager pushforward at a real tensor x is two reverse passes (the pullback
    along a cotangent that requires grad, then its own pullback along each tangent;
    0.7 of forward_ad dual numbers' time and 0.4 of torch.func.jvp's at n = 32 and 1e3),
    said in prep.info; its results are torch.func.jvp's: one tangent, several, with a
    Constant, with aux, the value, a complex output of a real x, a tangent not shared
    with the result of a linear f; a pytree x (torch.func.jvp there)."""
    import torch

    x = torch.linspace(-1.0, 1.0, 5, dtype=torch.float64)
    tangents = (torch.cos(x), torch.sin(x), torch.ones(5, dtype=torch.float64))
    backend = di.AutoTorch()

    def expected(f: Any, t: Any) -> Any:
        return torch.func.jvp(f, (x,), (t,))[1]

    for count in (1, 3):
        prep = di.prepare_pushforward(_coupled, backend, x, tangents[:count], di.Constant(2.0))
        assert prep.info.program.startswith("double vjp")
        y, products = di.value_and_pushforward(_coupled, prep, backend, x, tangents[:count], di.Constant(2.0))
        torch.testing.assert_close(y, _coupled(x, 2.0))
        for t, product in zip(tangents[:count], products):
            torch.testing.assert_close(product, expected(lambda x: _coupled(x, 2.0), t))

    def with_aux(x: Any) -> Any:
        return _coupled(x, 1.0), {"norm": (x * x).sum(), "label": "kept"}

    products, aux = di.pushforward(with_aux, backend, x, tangents[:2], has_aux=True)
    torch.testing.assert_close(products[1], expected(lambda x: _coupled(x, 1.0), tangents[1]))
    assert aux["label"] == "kept" and not aux["norm"].requires_grad
    torch.testing.assert_close(aux["norm"], (x * x).sum())

    def complex_output(x: Any) -> Any:
        return torch.exp(1j * x) * x

    (product,) = di.pushforward(complex_output, backend, x, tangents[:1])
    torch.testing.assert_close(product, expected(complex_output, tangents[0]))
    (identity,) = di.pushforward(lambda x: x, backend, x, tangents[:1])
    torch.testing.assert_close(identity, tangents[0])
    assert identity.data_ptr() != tangents[0].data_ptr()
    tree = {"a": x, "b": x[:2]}
    (tree_product,) = di.pushforward(lambda p: p["a"] * p["b"].sum(), backend, tree, (tree,))
    torch.testing.assert_close(tree_product, torch.func.jvp(lambda p: p["a"] * p["b"].sum(), (tree,), (tree,))[1])


def test_one_eager_pushforward_prep_serves_threads() -> None:
    """The double vjp keeps no forward-mode state: eight threads sharing one prep
    (dual numbers raised 'Nested forward mode AD is not supported' in three of four
    threads) all get torch.func.jvp's result."""
    import concurrent.futures

    import torch

    backend = di.AutoTorch()
    x = torch.linspace(-1.0, 1.0, 64, dtype=torch.float64)
    prep = di.prepare_pushforward(_coupled, backend, x, (x,), di.Constant(2.0))

    def run(i: int) -> Any:
        t = torch.full_like(x, float(i))
        return [di.pushforward(_coupled, prep, backend, x, (t,), di.Constant(2.0))[0] for _ in range(20)][-1], t

    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        results = list(pool.map(run, range(8)))
    for product, t in results:
        torch.testing.assert_close(product, torch.func.jvp(lambda x: _coupled(x, 2.0), (x,), (t,))[1])


def test_a_large_eager_pushforward_runs_forward_mode_with_the_same_results_and_rules() -> None:
    """From FORWARD_FROM elements of x the eager pushforward is forward mode by dual tensors (the
    double vjp's two extra passes cost most there: 1.4-1.9x forward mode's time at
    2**16 elements on functions without Python scalars), said in prep.info; on both
    sides of the size the results agree, several tangents and the value included, a
    classic autograd.Function without a jvp rule runs (forward mode refuses it once,
    the prep remembers), an f writing into x is refused with x unchanged, with
    create_graph=True and create_graph=False, and the product is differentiable in
    an x and a context that require grad."""
    import torch

    from di.engines.torch.func import FORWARD_FROM
    from di.engines.torch.transforms import functorch_active

    class Cube(torch.autograd.Function):  # classic style: no jvp, no vmap rule
        @staticmethod
        def forward(ctx: Any, x: Any) -> Any:
            ctx.save_for_backward(x)
            return x**3

        @staticmethod
        def backward(ctx: Any, grad: Any) -> Any:
            (x,) = ctx.saved_tensors
            return 3 * x * x * grad

    def writes(x: Any) -> Any:
        x.mul_(2.0)
        return x * 1.0

    backend = di.AutoTorch()
    for size, spelling in ((FORWARD_FROM - 1, "double vjp"), (FORWARD_FROM, "forward_ad dual tensors")):
        x = torch.linspace(-1.0, 1.0, size, dtype=torch.float64)
        tangents = (torch.cos(x), torch.sin(x))
        prep = di.prepare_pushforward(_coupled, backend, x, tangents, di.Constant(2.0))
        assert prep.info.program.startswith(spelling)
        y, products = di.value_and_pushforward(_coupled, prep, backend, x, tangents, di.Constant(2.0))
        torch.testing.assert_close(y, _coupled(x, 2.0))
        assert not y.requires_grad and not any(product.requires_grad for product in products)
        for t, product in zip(tangents, products):
            torch.testing.assert_close(product, torch.func.jvp(lambda x: _coupled(x, 2.0), (x,), (t,))[1])
        if size == FORWARD_FROM:  # dual tensors: f runs under a forward_ad level, without functorch's
            seen: list[tuple[int, bool]] = []

            def watched(x: Any, seen: list[tuple[int, bool]] = seen) -> Any:
                seen.append((int(torch.autograd.forward_ad._current_level), functorch_active()))
                return _coupled(x, 2.0)

            (product,) = di.pushforward(watched, backend, x, tangents[:1])
            torch.testing.assert_close(product, products[0])
            assert seen[-1][0] >= 0 and not seen[-1][1]
        calls: list[int] = []

        def cube(x: Any, calls: list[int] = calls) -> Any:
            calls.append(1)
            return Cube.apply(x)

        cube_prep = di.prepare_pushforward(cube, backend, x, tangents[:1])
        for _ in range(2):
            torch.testing.assert_close(
                di.pushforward(cube, cube_prep, backend, x, tangents[:1])[0], 3 * x * x * tangents[0]
            )
        # forward mode refuses the Function once (f ran twice then), and is not tried again
        assert len(calls) == (2 if spelling == "double vjp" else 3)
        before = x.clone()
        for graph_backend in (backend, di.AutoTorch(create_graph=False)):
            with pytest.raises(di.InvalidInputError, match="in place"):
                di.pushforward(writes, graph_backend, x, tangents[:1])
            assert torch.equal(x, before)
        scale = torch.tensor(2.0, dtype=torch.float64, requires_grad=True)  # the caller's graph, through a context
        (scaled,) = di.pushforward(_coupled, backend, x, tangents[:1], di.Constant(scale))
        (d_scale,) = torch.autograd.grad(scaled.sum(), scale)
        torch.testing.assert_close(d_scale, (3 * x * x * tangents[0]).sum())
        leaf = x.clone().requires_grad_()  # create_graph=True: the product is differentiable in x
        (product,) = di.pushforward(_coupled, backend, leaf, tangents[:1], di.Constant(2.0))
        (second,) = torch.autograd.grad(product.sum(), leaf)
        t = tangents[0]
        expected = torch.func.grad(lambda x, t=t: torch.func.jvp(lambda x: _coupled(x, 2.0), (x,), (t,))[1].sum())(x)
        torch.testing.assert_close(second, expected)
