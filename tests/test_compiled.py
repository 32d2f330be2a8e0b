"""Compiled backends: AutoJAX(jit=True) and AutoTorch(compile=True).

The traced-versus-compiled-in contract of docs/compiled.md, checked with trace
and compile counters rather than timings.
"""

from __future__ import annotations

import types
import warnings
from typing import Any

import numpy as np
import pytest

import di

jax = pytest.importorskip("jax")
torch = pytest.importorskip("torch")
jnp = jax.numpy


def reachable_arrays(root: Any) -> list[str]:
    """Paths of every numpy/torch/jax array reachable from a prep through di's
    own objects (slots, containers, closures of di functions)."""
    found: list[str] = []
    seen: set[int] = set()

    def walk(obj: Any, path: str) -> None:
        if id(obj) in seen:
            return
        seen.add(id(obj))
        if isinstance(obj, (np.ndarray, np.generic, torch.Tensor, jax.Array)):
            found.append(path)
            return
        if isinstance(obj, dict):
            for key, value in obj.items():
                walk(value, f"{path}[{key!r}]")
        elif isinstance(obj, (list, tuple, set, frozenset)):
            for index, value in enumerate(obj):
                walk(value, f"{path}[{index}]")
        elif isinstance(obj, types.FunctionType):
            if obj.__module__.startswith("di"):
                for cell, name in zip(obj.__closure__ or (), obj.__code__.co_freevars):
                    walk(cell.cell_contents, f"{path}.<{name}>")
                walk(obj.__defaults__, f"{path}.__defaults__")
        elif type(obj).__module__.startswith("di"):
            for name in getattr(type(obj), "__slots__", ()):
                if hasattr(obj, name):
                    walk(getattr(obj, name), f"{path}.{name}")
            for name, value in getattr(obj, "__dict__", {}).items():
                walk(value, f"{path}.{name}")

    walk(root, "prep")
    return found


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


# --- AutoTorch(compile=True) ----------------------------------------------------------


class CompileCounter:
    """A torch.compile backend that counts graph compilations and runs them eagerly."""

    def __init__(self) -> None:
        self.count = 0

    def __call__(self, gm: Any, example_inputs: Any) -> Any:
        self.count += 1
        return gm.forward


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
    assert counter.count == 3


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
    from di.operators.common import same_point_check

    held = same_point_check(np.ones(2), ())  # a same-point prep keeps a copy of its point
    assert reachable_arrays({"program": held}) == ["prep['program'].<x_copy>"]
    assert reachable_arrays({"data": (1, np.ones(1))}) == ["prep['data'][1]"]
