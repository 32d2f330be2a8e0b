"""Compiled backends: AutoJAX(jit=True) and AutoTorch(compile=True).

The traced-versus-compiled-in contract of docs/compiled.md, checked with trace
and compile counters rather than timings.
"""

from __future__ import annotations

import threading
import time
import warnings
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import pytest
from helpers import CompileCounter, reachable_arrays, sin_times, sin_times_sum

import di
from di.backends.compile import is_static_context

jax = pytest.importorskip("jax")
torch = pytest.importorskip("torch")
jnp = jax.numpy


def quadratic(x: Any, a: Any) -> Any:
    return (a * x * x).sum()


# --- AutoJAX(jit=True) --------------------------------------------------------------


class TraceCounter:
    """Counts how often f's Python body runs: under jax.jit, only while tracing."""

    def __init__(self) -> None:
        self.count = 0

    def __call__(self, x: Any, a: Any, *rest: Any) -> Any:
        self.count += 1
        scale = 1.0
        for value in rest:
            scale = scale * value
        return (a * x * x).sum() * scale


JIT = di.AutoJAX(jit=True)


def test_jax_jit_prepared_calls_never_trace_again() -> None:
    f = TraceCounter()
    prep = di.prepare_gradient(f, JIT, np.zeros(4), di.Constant(-np.ones(4)))
    assert f.count == 1  # the gradient program, compiled at preparation
    x = np.arange(4.0)
    for a in (np.ones(4), 2 * np.ones(4)):
        np.testing.assert_allclose(di.gradient(f, prep, JIT, x, di.Constant(a)), 2 * a * x)
    assert f.count == 1
    for a in (np.ones(4), 2 * np.ones(4), np.arange(4.0)):
        y, g = di.value_and_gradient(f, prep, JIT, x, di.Constant(a))
        np.testing.assert_allclose(g, 2 * a * x)
        np.testing.assert_allclose(y, (a * x * x).sum())
        np.testing.assert_allclose(di.gradient(f, prep, JIT, x, di.Constant(a)), 2 * a * x)
    assert f.count == 2  # value_and_gradient's program, compiled by its first call only


def test_jax_jit_traced_float_constant_does_not_retrace() -> None:
    f = TraceCounter()
    x = np.arange(3.0)
    prep = di.prepare_gradient(f, JIT, np.zeros(3), di.Constant(np.ones(3)), di.Constant(-1.0))
    for scale in (1.0, 2.5, -3.0):
        g = di.gradient(f, prep, JIT, x, di.Constant(np.ones(3)), di.Constant(scale))
        np.testing.assert_allclose(g, 2 * x * scale)
    assert f.count == 1


def test_jax_jit_static_int_compiles_once_per_value() -> None:
    f = TraceCounter()
    x = np.arange(3.0)
    prep = di.prepare_gradient(f, JIT, np.zeros(3), di.Constant(np.ones(3)), di.Constant(1))
    assert f.count == 1
    for k, expected_traces in ((1, 1), (2, 2), (3, 3), (2, 3), (1, 3)):
        g = di.gradient(f, prep, JIT, x, di.Constant(np.ones(3)), di.Constant(k))
        np.testing.assert_allclose(g, 2 * x * k)
        assert f.count == expected_traces


def test_jax_jit_static_value_used_as_shape() -> None:
    def f(x: Any, n: int) -> Any:
        return (x[:n] ** 2).sum()

    x = np.arange(5.0)
    prep = di.prepare_gradient(f, JIT, np.zeros(5), di.Constant(2))
    np.testing.assert_allclose(di.gradient(f, prep, JIT, x, di.Constant(2)), [0, 2, 0, 0, 0])
    np.testing.assert_allclose(di.gradient(f, prep, JIT, x, di.Constant(4)), [0, 2, 4, 6, 0])


def test_jax_jit_static_false_traces_an_int() -> None:
    f = TraceCounter()
    x = np.arange(3.0)
    prep = di.prepare_gradient(f, JIT, np.zeros(3), di.Constant(np.ones(3)), di.Constant(1, static=False))
    for k in (1, 2, 5):
        g = di.gradient(f, prep, JIT, x, di.Constant(np.ones(3)), di.Constant(k, static=False))
        np.testing.assert_allclose(g, 2 * x * k)
    assert f.count == 1


def test_jax_jit_static_true_compiles_a_float_in() -> None:
    f = TraceCounter()
    x = np.arange(3.0)
    prep = di.prepare_gradient(f, JIT, np.zeros(3), di.Constant(np.ones(3)), di.Constant(1.0, static=True))
    di.gradient(f, prep, JIT, x, di.Constant(np.ones(3)), di.Constant(1.0, static=True))
    assert f.count == 1
    g = di.gradient(f, prep, JIT, x, di.Constant(np.ones(3)), di.Constant(2.0, static=True))
    np.testing.assert_allclose(g, 4 * x)
    assert f.count == 2


def test_jax_jit_warns_once_past_eight_static_values() -> None:
    f = TraceCounter()
    x = np.arange(3.0)
    prep = di.prepare_gradient(f, JIT, np.zeros(3), di.Constant(np.ones(3)), di.Constant(0))
    with warnings.catch_warnings():
        warnings.simplefilter("error", di.RecompileWarning)
        for k in range(8):
            di.gradient(f, prep, JIT, x, di.Constant(np.ones(3)), di.Constant(k))
    with pytest.warns(di.RecompileWarning, match="context 2"):
        di.gradient(f, prep, JIT, x, di.Constant(np.ones(3)), di.Constant(8))
    with warnings.catch_warnings():
        warnings.simplefilter("error", di.RecompileWarning)
        di.gradient(f, prep, JIT, x, di.Constant(np.ones(3)), di.Constant(9))


def test_jax_jit_counts_the_static_value_of_the_preparation() -> None:
    """The preparation compiled its own value: with it, 1..9 are 9 distinct values
    and the 9th warns (the count started empty before, warning one value late and
    saying 9 at the 10th)."""

    def f(x: Any, n: int) -> Any:
        xp = di.array_namespace(x)
        return xp.sum(x[:n] ** 2)

    prep = di.prepare_gradient(f, JIT, np.zeros(12), di.Constant(1))
    with warnings.catch_warnings():
        warnings.simplefilter("error", di.RecompileWarning)
        for n in range(2, 9):
            di.gradient(f, prep, JIT, np.ones(12), di.Constant(n))
    with pytest.warns(di.RecompileWarning, match="context 1 is compiled in .* has taken 9 distinct values"):
        g = di.gradient(f, prep, JIT, np.ones(12), di.Constant(9))
    np.testing.assert_allclose(g, [2.0] * 9 + [0.0] * 3)


def test_jax_jit_unhashable_static_is_refused() -> None:
    with pytest.raises(di.InvalidInputError, match=r"context 1.*not hashable"):
        di.prepare_gradient(quadratic, JIT, np.zeros(3), di.Constant([1.0, 2.0], static=True))


def test_jax_jit_closure_is_frozen_at_preparation() -> None:
    weights = np.ones(3)

    def f(x: Any) -> Any:
        return (weights * x * x).sum()

    prep = di.prepare_gradient(f, JIT, np.zeros(3))
    weights[:] = 10.0  # documented pitfall: jit compiled the old values in
    np.testing.assert_allclose(di.gradient(f, prep, JIT, np.ones(3)), 2 * np.ones(3))
    # the recommended way: pass it as a context, traced
    prep = di.prepare_gradient(quadratic, JIT, np.zeros(3), di.Constant(weights))
    np.testing.assert_allclose(di.gradient(quadratic, prep, JIT, np.ones(3), di.Constant(weights)), 20 * np.ones(3))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_jax_jit_numpy_in_numpy_out(dtype: Any) -> None:
    x = np.arange(3, dtype=dtype)
    prep = di.prepare_gradient(quadratic, JIT, np.zeros(3, dtype), di.Constant(np.ones(3, dtype)))
    y, g = di.value_and_gradient(quadratic, prep, JIT, x, di.Constant(np.ones(3, dtype)))
    assert type(g) is np.ndarray and g.dtype == dtype and g.shape == (3,)
    assert isinstance(y, np.ndarray) and y.shape == ()
    np.testing.assert_allclose(g, 2 * x)
    assert not jax.config.jax_enable_x64  # scoped, never global


def quadratic_with_rest(x: Any, a: Any, *rest: Any) -> Any:
    return (a * x * x).sum()


def test_jax_jit_prep_holds_no_array() -> None:
    x, a = np.arange(3.0), np.ones(3)
    contexts = (di.Constant(a), di.Cache(np.zeros(3)), di.Constant(2))
    prep = di.prepare_gradient(quadratic_with_rest, JIT, x, *contexts)
    np.testing.assert_allclose(di.gradient(quadratic_with_rest, prep, JIT, x, *contexts), 2 * x)
    assert reachable_arrays(prep) == []


def test_jax_jit_strict_mismatch_and_unprepared() -> None:
    prep = di.prepare_gradient(quadratic, JIT, np.zeros(3), di.Constant(np.ones(3)))
    with pytest.raises(di.PreparationMismatchError, match=r"x +differs"):
        di.gradient(quadratic, prep, JIT, np.zeros(4), di.Constant(np.ones(3)))
    np.testing.assert_allclose(di.gradient(quadratic, JIT, np.arange(3.0), di.Constant(np.ones(3))), [0, 2, 4])


# --- which program each call runs (outputs counted, never timed) ---------------------


class JitRecorder:
    """Stands in for ``jax.jit``: each jitted function di builds records its
    lowerings (compiles at preparation) and the arguments of each call, so a
    test can lower the program a call ran and count its outputs."""

    def __init__(self, real_jit: Any) -> None:
        self.real_jit = real_jit
        self.calls: list[tuple[Any, tuple[Any, ...]]] = []
        self.lowered = 0

    def __call__(self, fun: Any, **options: Any) -> Any:
        jitted, recorder = self.real_jit(fun, **options), self

        class Recorded:
            def __call__(self, *args: Any) -> Any:
                recorder.calls.append((jitted, args))
                return jitted(*args)

            def lower(self, *args: Any) -> Any:
                recorder.lowered += 1
                return jitted.lower(*args)

        return Recorded()

    def outputs_of_last_call(self) -> int:
        jitted, args = self.calls[-1]
        return len(jax.tree_util.tree_leaves(jitted.lower(*args).out_info))


def scalar_jax(x: Any, a: Any) -> Any:
    return jnp.sum(jnp.sin(x) * x * x * a)


def vector_jax(x: Any, a: Any) -> Any:
    return jnp.tanh(x) * x * a


X32 = np.linspace(-1.0, 1.0, 5, dtype=np.float32)
V32 = np.cos(X32)
S32 = np.array(0.3, dtype=np.float32)

# operator, its value_and_* form, f, x, tangents, outputs of the value_and_* program
FAMILIES = [
    ("gradient", "value_and_gradient", scalar_jax, X32, None, 2),
    ("jacobian", "value_and_jacobian", vector_jax, X32, None, 2),
    ("hessian", "value_gradient_and_hessian", scalar_jax, X32, None, 3),
    ("pushforward", "value_and_pushforward", vector_jax, X32, (V32,), 2),
    ("pullback", "value_and_pullback", vector_jax, X32, (V32,), 2),
    ("hvp", "gradient_and_hvp", scalar_jax, X32, (V32,), 2),
    ("derivative", "value_and_derivative", vector_jax, S32, None, 2),
    ("second_derivative", "value_derivative_and_second_derivative", vector_jax, S32, None, 3),
]


@pytest.mark.parametrize(
    ("plain", "full", "f", "x", "tangents", "full_outputs"), FAMILIES, ids=[c[0] for c in FAMILIES]
)
def test_jax_jit_plain_operator_runs_a_program_without_the_value(
    monkeypatch: pytest.MonkeyPatch, plain: str, full: str, f: Any, x: Any, tangents: Any, full_outputs: int
) -> None:
    recorder = JitRecorder(jax.jit)
    monkeypatch.setattr(jax, "jit", recorder)
    args = (x,) if tangents is None else (x, tangents)
    a = di.Constant(np.float32(2.0))
    prep = getattr(di, f"prepare_{plain}")(f, JIT, *args, a)
    assert recorder.lowered == 1  # preparation compiles the plain operator's program only
    result = getattr(di, plain)(f, prep, JIT, *args, a)
    assert recorder.outputs_of_last_call() == 1
    combined = getattr(di, full)(f, prep, JIT, *args, a)
    assert recorder.outputs_of_last_call() == full_outputs
    assert recorder.lowered == 1  # the value_and_* program compiled on its first call, not at preparation
    for got, expected in zip(jax.tree_util.tree_leaves(result), jax.tree_util.tree_leaves(combined[-1])):
        np.testing.assert_allclose(got, expected, rtol=1e-6)


class GraphOutputs:
    """A torch.compile backend that records how many outputs each graph it
    compiles returns, and runs the graph eagerly."""

    def __init__(self) -> None:
        self.outputs: list[int] = []

    def __call__(self, gm: Any, example_inputs: Any) -> Any:
        self.outputs.append(len(gm.graph.output_node().args[0]))
        return gm.forward


def test_torch_compile_plain_gradient_graph_returns_the_gradient_alone() -> None:
    graphs = GraphOutputs()
    backend = di.AutoTorch(compile=True, compile_options={"backend": graphs})
    x = torch.linspace(-1.0, 1.0, 5)
    prep = di.prepare_gradient(scaled, backend, torch.zeros(5), di.Constant(1.0), di.Constant(2))
    assert graphs.outputs == [1]  # compiled at preparation: the gradient only
    g = di.gradient(scaled, prep, backend, x, di.Constant(3.0), di.Constant(2))
    torch.testing.assert_close(g, 2 * 3.0 * x * 2)
    assert graphs.outputs == [1]
    y, g = di.value_and_gradient(scaled, prep, backend, x, di.Constant(3.0), di.Constant(2))
    assert graphs.outputs == [1, 2]  # value and gradient, compiled by the first call
    torch.testing.assert_close(y, (3.0 * x**2).sum() * 2)
    torch.testing.assert_close(g, 2 * 3.0 * x * 2)


def scalar_torch(x: Any, a: Any) -> Any:
    return (torch.sin(x) * x * x * a).sum()


def vector_torch(x: Any, a: Any) -> Any:
    return torch.tanh(x) * x * a


T64 = torch.linspace(-1.0, 1.0, 4, dtype=torch.float64)
TORCH_FAMILIES = [
    (plain, full, {scalar_jax: scalar_torch, vector_jax: vector_torch}[f], x, tangents, outputs)
    for plain, full, f, x, tangents, outputs in FAMILIES
    if plain != "gradient"
]


@pytest.mark.parametrize(
    ("plain", "full", "f", "x", "tangents", "full_outputs"), TORCH_FAMILIES, ids=[c[0] for c in TORCH_FAMILIES]
)
def test_torch_compile_plain_operator_graph_returns_its_result_alone(
    plain: str, full: str, f: Any, x: Any, tangents: Any, full_outputs: int
) -> None:
    graphs = GraphOutputs()
    backend = di.AutoTorch(compile=True, compile_options={"backend": graphs})
    x = torch.from_numpy(x.astype(np.float64))
    args = (x,) if tangents is None else (x, tuple(torch.from_numpy(t.astype(np.float64)) for t in tangents))
    a = di.Constant(2.0)
    prep = getattr(di, f"prepare_{plain}")(f, backend, *args, a)
    result = getattr(di, plain)(f, prep, backend, *args, a)
    assert graphs.outputs == [1]  # compiled at preparation, its result only
    combined = getattr(di, full)(f, prep, backend, *args, a)
    assert graphs.outputs == [1, full_outputs]  # compiled by its first call
    expected = getattr(di, plain)(f, di.AutoTorch(), *args, a)
    for got in (result, combined[-1]):
        for got_leaf, expected_leaf in zip(
            got if isinstance(got, tuple) else (got,), expected if isinstance(expected, tuple) else (expected,)
        ):
            torch.testing.assert_close(got_leaf, expected_leaf)


def test_torch_compile_plain_hvp_graph_has_no_gradient_output() -> None:
    graphs = GraphOutputs()
    backend = di.AutoTorch(compile=True, compile_options={"backend": graphs})
    tx = (torch.ones(4, dtype=torch.float64), torch.arange(4.0, dtype=torch.float64))
    prep = di.prepare_hvp(scaled, backend, T64, tx, di.Constant(1.0), di.Constant(1))
    hvps = di.hvp(scaled, prep, backend, T64, tx, di.Constant(0.5), di.Constant(1))
    g, hvps_too = di.gradient_and_hvp(scaled, prep, backend, T64, tx, di.Constant(0.5), di.Constant(1))
    assert graphs.outputs == [2, 3]  # two products; the gradient and two products
    for t, hv, hv_too in zip(tx, hvps, hvps_too):
        torch.testing.assert_close(hv, t)  # f = 0.5 sum(x^2): H = I
        torch.testing.assert_close(hv_too, t)
    torch.testing.assert_close(g, 0.5 * 2 * T64)


def test_jax_jit_value_and_gradient_compiles_once_across_threads() -> None:
    f = TraceCounter()
    prep = di.prepare_gradient(f, JIT, np.zeros(4), di.Constant(np.ones(4)))
    x, threads = np.arange(4.0), 8
    barrier = threading.Barrier(threads)

    def first_use(k: int) -> Any:
        barrier.wait()
        return di.value_and_gradient(f, prep, JIT, x, di.Constant(np.full(4, float(k))))

    with ThreadPoolExecutor(threads) as pool:
        results = list(pool.map(first_use, range(threads)))
    assert f.count == 2  # the gradient program at preparation, value_and_gradient's once
    for k, (y, g) in enumerate(results):
        np.testing.assert_allclose(g, 2 * k * x)
        np.testing.assert_allclose(y, k * (x * x).sum())


def test_compiled_on_first_use_compiles_once_across_threads() -> None:
    from di.backends.compile import compiled_on_first_use

    compiles: list[int] = []

    def program(k: int) -> int:  # compiles on its first call, like jax.jit and torch.compile
        if not compiles or compiles[-1] != -1:
            compiles.append(k)
            time.sleep(0.05)
            compiles.append(-1)
        return 2 * k

    run, threads = compiled_on_first_use(program), 8
    barrier = threading.Barrier(threads)

    def first_use(k: int) -> int:
        barrier.wait()
        return run(k)  # type: ignore[no-any-return]

    with ThreadPoolExecutor(threads) as pool:
        assert list(pool.map(first_use, range(threads))) == [2 * k for k in range(threads)]
    assert len(compiles) == 2  # one compile, whichever thread came first


class CountingX64:
    """Stands in for ``jax.enable_x64`` in di's JAX adapter: counts the scopes di
    enters, and reads the real state."""

    def __init__(self, real: Any) -> None:
        self.real, self.entered = real, 0

    @property
    def value(self) -> bool:
        return bool(self.real.value)

    def __call__(self, flag: bool) -> Any:
        self.entered += 1
        return self.real(flag)


def test_jax_jit_float64_enters_no_scope_inside_the_callers(monkeypatch: pytest.MonkeyPatch) -> None:
    import di.engines.jax.x64 as jax_adapter

    scopes = CountingX64(jax.enable_x64)
    monkeypatch.setattr(jax_adapter, "_X64", scopes)
    x = np.linspace(-1.0, 1.0, 3)  # float64
    prep = di.prepare_gradient(quadratic, JIT, x, di.Constant(np.ones(3)))
    scopes.entered = 0
    g = di.gradient(quadratic, prep, JIT, x, di.Constant(np.ones(3)))
    assert scopes.entered == 1 and g.dtype == np.float64  # outside any scope: di scopes the call
    with jax.enable_x64(True):
        for _ in range(3):
            g = di.gradient(quadratic, prep, JIT, x, di.Constant(np.ones(3)))
            assert g.dtype == np.float64
        x_jax = jnp.asarray(x)
        prep_jax = di.prepare_gradient(quadratic, JIT, x_jax, di.Constant(jnp.ones(3)))
        scopes.entered = 1
        g_jax = di.gradient(quadratic, prep_jax, JIT, x_jax, di.Constant(jnp.ones(3)))
        assert g_jax.dtype == jnp.float64
    assert scopes.entered == 1  # inside the caller's scope: none of its own
    np.testing.assert_allclose(g, 2 * x)
    np.testing.assert_allclose(g_jax, 2 * x)
    prep32 = di.prepare_gradient(quadratic, JIT, x.astype(np.float32), di.Constant(np.ones(3, np.float32)))
    scopes.entered = 0
    di.gradient(quadratic, prep32, JIT, x.astype(np.float32), di.Constant(np.ones(3, np.float32)))
    assert scopes.entered == 0  # float32 needs no scope: decided at preparation
    assert not jax.config.jax_enable_x64  # the global flag never changes


# --- AutoTorch(compile=True) ----------------------------------------------------------


def scaled(x: Any, a: Any, k: Any) -> Any:
    return (a * x**2).sum() * k


def test_torch_compile_float_traced_int_static() -> None:
    counter = CompileCounter()
    backend = di.AutoTorch(compile=True, compile_options={"backend": counter})
    x = torch.tensor([1.0, 2.0, 3.0])
    prep = di.prepare_gradient(scaled, backend, torch.zeros(3), di.Constant(-1.0), di.Constant(2))
    assert counter.count == 1
    for a in (1.0, 2.0, 3.5):
        g = di.gradient(scaled, prep, backend, x, di.Constant(a), di.Constant(2))
        torch.testing.assert_close(g, 2 * a * x * 2)
    assert counter.count == 1
    y, g = di.value_and_gradient(scaled, prep, backend, x, di.Constant(1.0), di.Constant(2))
    torch.testing.assert_close(y, torch.tensor(28.0))
    assert counter.count == 2  # value_and_gradient's program, compiled by its first call
    g = di.gradient(scaled, prep, backend, x, di.Constant(1.0), di.Constant(3))
    torch.testing.assert_close(g, 2 * x * 3)
    assert counter.count == 3  # a new static int compiles once
    g = di.gradient(scaled, prep, backend, x, di.Constant(1.0), di.Constant(3))
    torch.testing.assert_close(g, 2 * x * 3)
    compiled = counter.count
    for k in (2, 3, 2):  # every value seen: no compile
        torch.testing.assert_close(di.gradient(scaled, prep, backend, x, di.Constant(1.0), di.Constant(k)), 2 * x * k)
    assert counter.count == compiled


def formatted(x: Any, n: int, shape: tuple[int, int]) -> Any:
    """Plain Python on static ints: formatting fails on a ``SymInt``."""
    xp = di.array_namespace(x)
    digits = len(f"{n:d}") + len(f"{shape[0]:d}")
    return xp.sum(xp.reshape(x, shape) ** 2) * digits


def test_torch_compile_static_ints_stay_constants_after_new_values() -> None:
    """dynamo's automatic dynamic shapes passed a static int's second value as a
    SymInt, on which f"{n:d}" failed (torch._dynamo.exc.Unsupported); each value
    of an int, alone or in a tuple, is compiled in now, once."""
    counter = CompileCounter()
    backend = di.AutoTorch(compile=True, compile_options={"backend": counter})
    x = np.arange(6.0)
    prep = di.prepare_gradient(formatted, backend, x, di.Constant(1), di.Constant((2, 3)))
    with warnings.catch_warnings():
        warnings.simplefilter("error", di.RecompileWarning)  # new static values are expected recompiles
        for n, shape in ((1, (2, 3)), (22, (2, 3)), (333, (3, 2)), (22, (6, 1)), (1, (2, 3)), (22, (3, 2))):
            digits = len(str(n)) + len(str(shape[0]))
            g = di.gradient(formatted, prep, backend, x, di.Constant(n), di.Constant(shape))
            np.testing.assert_allclose(g, 2 * x * digits)
    assert counter.count == 5  # one compile per distinct pair of values, none for a pair seen again


def test_torch_compile_numpy_and_cache() -> None:
    def f(x: Any, buf: Any, a: Any) -> Any:
        buf[:] = x * a
        return (buf * x).sum()

    backend = di.AutoTorch(compile=True, compile_options={"backend": "aot_eager"})
    buf = torch.zeros(3, dtype=torch.float64)
    prep = di.prepare_gradient(f, backend, np.zeros(3), di.Cache(buf), di.Constant(np.ones(3)))
    x = np.array([1.0, 2.0, 3.0])
    g = di.gradient(f, prep, backend, x, di.Cache(buf), di.Constant(np.full(3, 2.0)))
    assert type(g) is np.ndarray and g.dtype == np.float64
    np.testing.assert_allclose(g, 4 * x)
    assert buf.grad_fn is None and not buf.requires_grad
    np.testing.assert_allclose(buf.numpy(), 2 * x)


def test_torch_compile_graph_break_warns() -> None:
    def branching(x: Any) -> Any:
        if x.sum() > 0:
            return (x * x).sum()
        return x.sum()

    backend = di.AutoTorch(compile=True, compile_options={"backend": "eager"})
    with pytest.warns(di.RecompileWarning, match="graph"):
        prep = di.prepare_gradient(branching, backend, torch.ones(3))
    torch.testing.assert_close(di.gradient(branching, prep, backend, torch.ones(3)), 2 * torch.ones(3))


T = {"n": 0}


def counting(x: Any) -> Any:
    """Bumps a global call counter: dynamo guards on ``G[...].T['n'] == k`` and
    recompiles at every call (natively too)."""
    T["n"] += 1
    return (x * x).sum()


def test_torch_compile_recompiling_f_warns_then_raises_a_di_error() -> None:
    backend = di.AutoTorch(compile=True, compile_options={"backend": "eager"})
    prep = di.prepare_gradient(counting, backend, torch.zeros(3))
    x = torch.arange(3.0)
    limit = torch._dynamo.config.recompile_limit
    with warnings.catch_warnings():
        warnings.simplefilter("error", di.RecompileWarning)
        torch.testing.assert_close(di.gradient(counting, prep, backend, x), 2 * x)  # the first recompile
    for recompile in range(2, limit):
        with pytest.warns(di.RecompileWarning, match=rf"{recompile} recompiles.*T\['n'\] == \d+") as caught:
            torch.testing.assert_close(di.gradient(counting, prep, backend, x), 2 * x)
        assert len(caught) == 1 and caught[0].filename == __file__  # points at the caller
    with pytest.raises(
        di.RecompileLimitError, match=rf"recompile limit \({limit}\).*T\['n'\] == \d+.*Constant"
    ) as info:
        di.gradient(counting, prep, backend, x)
    assert isinstance(info.value, di.DIError)
    assert type(info.value.__cause__).__name__ == "FailOnRecompileLimitHit"


def test_torch_compile_new_static_values_are_not_unexpected_recompiles() -> None:
    backend = di.AutoTorch(compile=True, compile_options={"backend": "eager"})
    x = torch.arange(3.0)
    prep = di.prepare_gradient(scaled, backend, x, di.Constant(1.0), di.Constant(1))
    with warnings.catch_warnings():
        warnings.simplefilter("error", di.RecompileWarning)
        for k in (2, 3, 4, 2, 3):
            torch.testing.assert_close(
                di.gradient(scaled, prep, backend, x, di.Constant(1.0), di.Constant(k)), 2 * x * k
            )


def broadcast_curve(t: Any, c: Any) -> Any:
    xp = di.array_namespace(t)
    return xp.sin(t) * t * c  # the scalar t broadcast against the array c


def test_torch_compile_second_derivative_of_a_scalar_broadcast_against_an_array() -> None:
    """A jvp of a jvp whose f broadcasts the 0-d x failed in dynamo's fake tensors
    ("more than one element of the written-to tensor refers to a single memory
    location"); eager torch computed it."""
    backend = di.AutoTorch(compile=True, compile_options={"backend": "aot_eager"})
    t, c = np.array(0.7), np.array([1.0, 2.0, 3.0])
    y, dy, d2y = (np.sin(t) * t * c, (np.cos(t) * t + np.sin(t)) * c, (2 * np.cos(t) - np.sin(t) * t) * c)
    for value in (False, True):  # the plain program compiled at preparation, then the combined one
        prep = di.prepare_second_derivative(broadcast_curve, backend, t, di.Constant(c), value=value)
        np.testing.assert_allclose(di.second_derivative(broadcast_curve, prep, backend, t, di.Constant(c)), d2y)
        results = di.value_derivative_and_second_derivative(broadcast_curve, prep, backend, t, di.Constant(c))
        for result, expected in zip(results, (y, dy, d2y)):
            np.testing.assert_allclose(result, expected)
    out = np.empty(3)
    di.second_derivative(broadcast_curve, backend, t, di.Constant(c), out=out)
    np.testing.assert_allclose(out, d2y)
    eager = di.second_derivative(broadcast_curve, di.AutoTorch(), t, di.Constant(c))
    np.testing.assert_allclose(eager, d2y)


class FlaggedError(Exception):
    """An exception of the caller's own."""


RAISED = {"FlaggedError": FlaggedError, "ValueError": ValueError, "StopIteration": StopIteration}


def raising(x: Any, error: str) -> Any:
    """Raises the exception ``RAISED[error]`` when ``error`` (a static context) names one."""
    if error:
        raise RAISED[error]("raised by f 42")
    xp = di.array_namespace(x)
    return xp.sum(xp.sin(x) ** 2)


def raising_vector(x: Any, error: str) -> Any:
    if error:
        raise RAISED[error]("raised by f 42")
    xp = di.array_namespace(x)
    return xp.sin(x) * x


# operator: (f, x, the arguments between x and the contexts)
RAISING = {
    "gradient": (raising, np.ones(2), ()),
    "jacobian": (raising_vector, np.ones(2), ()),
    "pushforward": (raising_vector, np.ones(2), ((np.ones(2),),)),
    "pullback": (raising_vector, np.ones(2), ((np.ones(2),),)),
    "derivative": (raising_vector, np.array(0.5), ()),
    "hvp": (raising, np.ones(2), ((np.ones(2),),)),
    "hessian": (raising, np.ones(2), ()),
    "second_derivative": (raising_vector, np.array(0.5), ()),
}


@pytest.mark.parametrize("operator", list(RAISING))
def test_torch_compile_passes_fs_own_errors_through(operator: str) -> None:
    """dynamo reports an exception f raises while traced as its own ("Observed
    exception"), which di wrapped in UnsupportedOperatorError or passed on; f's
    own exception comes out now, unchanged, at preparation and at a recompile (a
    new static value), and the prep keeps computing afterwards."""
    backend = di.AutoTorch(compile=True, compile_options={"backend": "aot_eager"})
    f, x, between = RAISING[operator]
    prepare, call = getattr(di, f"prepare_{operator}"), getattr(di, operator)
    with warnings.catch_warnings():
        warnings.simplefilter("error", di.RecompileWarning)  # f breaks no graph: it raises
        for name, error in RAISED.items():
            with pytest.raises(error, match=r"^raised by f 42$") as raised:
                prepare(f, backend, x, *between, di.Constant(name))
            assert raised.value.__cause__ is None and raised.value.__context__ is None
        prep = prepare(f, backend, x, *between, di.Constant(""))
        for name, error in RAISED.items():
            with pytest.raises(error, match=r"^raised by f 42$") as raised:
                call(f, prep, backend, x, *between, di.Constant(name))
            assert raised.value.__cause__ is None and raised.value.__context__ is None
        result = call(f, prep, backend, x, *between, di.Constant(""))
    expected = call(f, di.AutoTorch(), x, *between, di.Constant(""))
    for got, want in zip(
        result if isinstance(result, tuple) else (result,), expected if isinstance(expected, tuple) else (expected,)
    ):
        np.testing.assert_allclose(got, want)


def test_torch_compile_prep_holds_no_array() -> None:
    backend = di.AutoTorch(compile=True, compile_options={"backend": "eager"})
    prep = di.prepare_gradient(scaled, backend, torch.zeros(3), di.Constant(torch.ones(3)), di.Constant(2.0))
    assert reachable_arrays(prep) == []


def test_torch_compile_inductor_matches_eager() -> None:
    """The one real inductor compile (about 20 s on 2 cores)."""

    def rosenbrock(x: Any, a: Any) -> Any:
        return (a * (x[1:] - x[:-1] ** 2) ** 2 + (1 - x[:-1]) ** 2).sum()

    backend = di.AutoTorch(compile=True)
    x = torch.linspace(-1.0, 1.5, 6, dtype=torch.float64)
    prep = di.prepare_gradient(rosenbrock, backend, torch.zeros(6, dtype=torch.float64), di.Constant(50.0))
    for a in (100.0, 10.0):
        compiled = di.gradient(rosenbrock, prep, backend, x, di.Constant(a))
        eager = di.gradient(rosenbrock, di.AutoTorch(), x, di.Constant(a))
        assert compiled.dtype == torch.float64
        torch.testing.assert_close(compiled, eager)


def test_reachable_arrays_finds_a_held_array() -> None:
    """The walker used above can fail: it sees an array held in a di closure."""
    from di.operators.same_point import same_point_check

    held = same_point_check(np.ones(2), ())  # a same-point prep keeps a copy of its point
    assert reachable_arrays({"program": held}) == ["prep['program'].<x_copy>"]
    assert reachable_arrays({"data": (1, np.ones(1))}) == ["prep['data'][1]"]


# --- contexts on every compiled backend ----------------------------------------------


COMPILED = [
    pytest.param(JIT, id="jax-jit"),
    pytest.param(di.AutoTorch(compile=True, compile_options={"backend": "aot_eager"}), id="torch-compile"),
]
EAGER = {"jax-jit": di.AutoJAX(), "torch-compile": di.AutoTorch()}


def leading_squares(x: Any, n: Any) -> Any:
    xp = di.array_namespace(x)
    return xp.sum(x[:n] ** 2)


def squares_or_sum(x: Any, flag: Any) -> Any:
    xp = di.array_namespace(x)
    return xp.sum(x**2) if flag else xp.sum(x)


@pytest.mark.parametrize("backend", COMPILED)
def test_numpy_integer_and_bool_scalars_are_static_like_python_ones(
    backend: di.AutoJAX | di.AutoTorch, request: pytest.FixtureRequest
) -> None:
    """np.int64(2) as a slice bound and np.bool_ as a branch were traced on
    AutoJAX(jit=True) (raw IndexError, TracerBoolConversionError): NumPy integer
    and bool scalars are compiled in like Python ints and bools, on every
    compiled backend; a new value compiles again."""
    eager = EAGER[request.node.callspec.id]
    x = np.array([1.0, 2.0, 3.0])
    assert is_static_context(di.Constant(np.int64(2)))
    assert not is_static_context(di.Constant(np.array(2)))
    assert not is_static_context(di.Constant(np.float64(2.0)))
    prep = di.prepare_gradient(leading_squares, backend, np.zeros(3), di.Constant(np.int64(2)))
    for n in (np.int64(2), np.int64(1), np.int64(3), np.int64(2)):
        g = di.gradient(leading_squares, prep, backend, x, di.Constant(n))
        np.testing.assert_allclose(g, di.gradient(leading_squares, eager, x, di.Constant(n)))
        np.testing.assert_allclose(g, np.where(np.arange(3) < n, 2 * x, 0.0))
        y, g = di.value_and_gradient(leading_squares, prep, backend, x, di.Constant(n))
        assert float(y) == float(np.sum(x[:n] ** 2))
    prep = di.prepare_gradient(squares_or_sum, backend, np.zeros(3), di.Constant(np.bool_(True)))
    for flag in (np.bool_(True), np.bool_(False), np.bool_(True)):
        g = di.gradient(squares_or_sum, prep, backend, x, di.Constant(flag))
        np.testing.assert_allclose(g, 2 * x if flag else np.ones(3))
        np.testing.assert_allclose(g, di.gradient(squares_or_sum, eager, x, di.Constant(flag)))


def weighted_by_a_list(x: Any, weights: Any) -> Any:
    xp = di.array_namespace(x)
    return xp.sum(weights[0] * x**2) + weights[1] * xp.sum(x)


def weighted_by_a_dict(x: Any, weights: Any) -> Any:
    xp = di.array_namespace(x)
    return xp.sum(weights["a"] * x**2) + weights["b"] * xp.sum(x * weights["w"])


def test_torch_compile_float_leaves_of_a_list_or_dict_constant_are_traced() -> None:
    """The floats of Constant([1.0, 0.5]) were guarded as constants: each new
    value compiled again, and the tenth raised RecompileLimitError (a
    RecompileWarning before). They are 0-d tensors of x's dtype now, as a float
    Constant of its own is: one compile for every value."""
    counter = CompileCounter()
    backend = di.AutoTorch(compile=True, compile_options={"backend": counter})
    x = np.array([1.0, 2.0, 3.0])
    prep = di.prepare_gradient(weighted_by_a_list, backend, np.zeros(3), di.Constant([0.0, 0.0]))
    for k in range(1, 11):
        weights = [float(k), 0.5 * k]
        g = di.gradient(weighted_by_a_list, prep, backend, x, di.Constant(weights))
        np.testing.assert_allclose(g, 2 * k * x + 0.5 * k)
        np.testing.assert_allclose(g, di.gradient(weighted_by_a_list, di.AutoTorch(), x, di.Constant(weights)))
    assert counter.count == 1
    x32 = x.astype(np.float32)
    start = {"a": 0.0, "b": 1.0, "w": np.ones(3)}
    prep = di.prepare_gradient(weighted_by_a_dict, backend, x32, di.Constant(start), value=True)
    for k in range(1, 11):
        weights = {"a": float(k), "b": 0.5 * k, "w": np.full(3, 2.0)}
        y, g = di.value_and_gradient(weighted_by_a_dict, prep, backend, x32, di.Constant(weights))
        assert g.dtype == np.float32
        np.testing.assert_allclose(g, 2 * k * x + k, rtol=1e-6)
        np.testing.assert_allclose(y, k * 14.0 + k * 6.0, rtol=1e-6)
    assert counter.count == 2


def squares_with_numpy_aux(x: Any) -> Any:
    xp = di.array_namespace(x)
    return xp.sum(x**2), {"npa": np.full(2, 3.0), "scale": np.float64(0.5), "note": "ok"}


def map_with_numpy_aux(x: Any) -> Any:
    return x**2, {"npa": np.full(2, 3.0)}


@pytest.mark.parametrize("backend", COMPILED)
def test_numpy_arrays_in_aux_come_back_on_compiled_backends(
    backend: di.AutoJAX | di.AutoTorch, request: pytest.FixtureRequest
) -> None:
    """A NumPy array in aux raised torch's raw BackendCompilerFailed ('Cannot
    access storage of TensorWrapper') on AutoTorch(compile=True): dynamo traced
    it into a tensor inside torch.func's transform. It comes back as on the eager
    backend now, for gradient, value_and_gradient, jacobian and pushforward."""
    eager = EAGER[request.node.callspec.id]
    x = np.array([1.0, 2.0, 3.0])
    for b in (backend, eager):
        prep = di.prepare_gradient(squares_with_numpy_aux, b, np.zeros(3), has_aux=True)
        g, aux = di.gradient(squares_with_numpy_aux, prep, b, x, has_aux=True)
        np.testing.assert_allclose(g, 2 * x)
        assert type(aux["npa"]) is np.ndarray and aux["note"] == "ok"
        np.testing.assert_array_equal(aux["npa"], np.full(2, 3.0))
        assert float(aux["scale"]) == 0.5
        (y, aux), g = di.value_and_gradient(squares_with_numpy_aux, prep, b, x, has_aux=True)
        assert float(y) == 14.0
        np.testing.assert_array_equal(aux["npa"], np.full(2, 3.0))
        jac, aux = di.jacobian(map_with_numpy_aux, b, x, has_aux=True)
        np.testing.assert_allclose(jac, np.diag(2 * x))
        np.testing.assert_array_equal(aux["npa"], np.full(2, 3.0))
        dy, aux = di.pushforward(map_with_numpy_aux, b, x, (np.ones(3),), has_aux=True)
        np.testing.assert_allclose(dy[0], 2 * x)
        np.testing.assert_array_equal(aux["npa"], np.full(2, 3.0))
    xt = torch.ones(3, dtype=torch.float64)
    if isinstance(backend, di.AutoTorch):  # a torch caller gets aux's arrays as tensors, as on AutoTorch()
        _, aux = di.gradient(squares_with_numpy_aux, backend, xt, has_aux=True)
        torch.testing.assert_close(aux["npa"], torch.full((2,), 3.0, dtype=torch.float64))


def leading_map(x: Any, n: int) -> Any:
    xp = di.array_namespace(x)
    return xp.multiply(x[:n], x[:n])


def test_torch_compile_counts_the_static_value_of_the_preparation() -> None:
    """Compiled torch counted static values from nothing (one late: no warning at
    the 9th compiled value, "9 distinct values" only at the 10th), and numbered
    contexts among the tangents ("context 2" for a pushforward's only context).
    The preparation's value counts now, and the context is context 1."""
    options = {"backend": "eager", "recompile_limit": 16}  # (torch's own limit, 8, would stop at 9 values)
    backend = di.AutoTorch(compile=True, compile_options=options)
    x, tx = np.ones(12), (np.ones(12),)
    prep = di.prepare_pushforward(leading_map, backend, np.zeros(12), tx, di.Constant(1))
    with warnings.catch_warnings():
        warnings.simplefilter("error", di.RecompileWarning)
        for n in range(2, 9):
            di.pushforward(leading_map, prep, backend, x, tx, di.Constant(n))
    with pytest.warns(di.RecompileWarning, match="context 1 is compiled in .* has taken 9 distinct values"):
        (dy,) = di.pushforward(leading_map, prep, backend, x, tx, di.Constant(9))
    np.testing.assert_allclose(dy, np.full(9, 2.0))


@pytest.mark.parametrize("options", [None, {"backend": "aot_eager", "dynamic": True}], ids=["eager", "compiled"])
def test_torch_takes_an_expanded_tangent(options: dict[str, Any] | None) -> None:
    """An expanded tangent (a stride of 0) raised dynamo's raw TorchRuntimeError
    ('Cannot call storage_offset() on tensor with symbolic sizes/strides', from
    _make_dual) once the program was compiled with symbolic strides (after a
    second shape, or dynamic=True): tangents are made dense as x is."""
    backend = di.AutoTorch(compile=options is not None, compile_options=options)
    x = torch.linspace(-1, 1, 6, dtype=torch.float64).reshape(2, 3)
    expanded = torch.ones(1, 3, dtype=torch.float64).expand(2, 3)
    dense = torch.ones(2, 3, dtype=torch.float64)
    for operator, f in (("pushforward", sin_times), ("hvp", sin_times_sum)):
        prep = getattr(di, f"prepare_{operator}")(f, backend, x, (x,))
        (expected,) = getattr(di, operator)(f, prep, backend, x, (dense,))
        (result,) = getattr(di, operator)(f, prep, backend, x, (expanded,))
        torch.testing.assert_close(result, expected)
        results = getattr(di, operator)(f, backend, x, (expanded, dense))
        torch.testing.assert_close(results[0], expected)
