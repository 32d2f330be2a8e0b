"""The implicit preparation cache of unprepared calls (``di.gradient(f, backend, x)``).

Counted, never timed: traces of ``f`` (a Python side effect runs once per trace),
graphs handed to a recording ``torch.compile`` backend, the cache's own counts.
Results are checked against analytic derivatives.
"""

from __future__ import annotations

import concurrent.futures
import gc
import importlib.util
import weakref
from typing import Any

import numpy as np
import pytest
from conftest import BACKENDS, as_family, assert_close, backend_params, engine_family, to_numpy

import di

HAS_JAX = importlib.util.find_spec("jax") is not None
HAS_TORCH = importlib.util.find_spec("torch") is not None


@pytest.fixture(autouse=True)
def _empty_cache() -> Any:
    di.cache_clear()
    yield
    di.set_cache(enabled=True, maxsize=128)
    di.cache_clear()


def cubes(x: Any, scale: Any = 1.0) -> Any:
    xp = di.array_namespace(x)
    return scale * xp.sum(x**3)


@pytest.mark.parametrize("backend", backend_params(BACKENDS))
def test_repeated_unprepared_calls_prepare_once_and_compute_each_point(backend: di.AbstractBackend) -> None:
    family = engine_family(backend)
    for value in (1.0, 2.0, -0.5):
        x_np = np.array([value, 2 * value, 0.25])
        g = di.gradient(cubes, backend, as_family(x_np, family), di.Constant(value))
        assert_close(to_numpy(g), value * 3 * x_np**2, backend, np.float64, "gradient")
    info = di.cache_info()
    assert (info.misses, info.hits, info.currsize) == (1, 2, 1)
    (hv,) = di.hvp(cubes, backend, as_family(np.array([1.0, 2.0]), family), (as_family(np.ones(2), family),))
    assert_close(to_numpy(hv), np.array([6.0, 12.0]), backend, np.float64, "hvp")
    assert di.cache_info().currsize == 2


@pytest.mark.skipif(not HAS_JAX, reason="jax not installed")
def test_a_thousand_unprepared_calls_on_jitted_jax_trace_f_once_per_signature() -> None:
    import jax.numpy as jnp

    traces = [0]

    def f(x: Any, c: Any) -> Any:
        traces[0] += 1
        return c * jnp.sum(jnp.sin(x))

    backend = di.AutoJAX(jit=True)
    for i in range(1000):
        g = di.gradient(f, backend, 0.5 * jnp.ones(3), di.Constant(float(i % 7)))  # new Constant values: no trace
    np.testing.assert_allclose(np.asarray(g), (999 % 7) * np.cos(0.5) * np.ones(3), rtol=1e-6)
    assert traces[0] == 1
    for i in range(1000):  # a second signature (shape), then a third (dtype), each traced once
        di.gradient(f, backend, jnp.ones(4 if i % 2 else 3), di.Constant(1.0))
    assert traces[0] == 2
    di.gradient(f, backend, jnp.ones(3, dtype=jnp.float16), di.Constant(1.0))
    assert traces[0] == 3
    assert di.cache_info().currsize == 3


@pytest.mark.skipif(not HAS_JAX, reason="jax not installed")
def test_closure_values_are_baked_in_as_under_jax_jit_and_constants_are_not() -> None:
    import jax.numpy as jnp

    scale = [2.0]
    baked = lambda x: scale[0] * jnp.sum(x**2)
    traced = lambda x, c: c * jnp.sum(x**2)
    backend, x = di.AutoJAX(jit=True), jnp.ones(2)
    assert float(di.gradient(baked, backend, x)[0]) == 4.0
    scale[0] = 3.0
    assert float(di.gradient(baked, backend, x)[0]) == 4.0  # as jax.jit: the first call's value
    assert float(di.gradient(traced, backend, x, di.Constant(2.0))[0]) == 4.0
    assert float(di.gradient(traced, backend, x, di.Constant(3.0))[0]) == 6.0


@pytest.mark.skipif(not HAS_TORCH, reason="torch not installed")
def test_unprepared_calls_on_compiled_torch_compile_once() -> None:
    import torch
    from helpers import CompileCounter

    counter = CompileCounter()
    backend = di.AutoTorch(compile=True, compile_options={"backend": counter})
    for value in np.linspace(0.0, 1.0, 50):
        x = torch.full((3,), float(value), dtype=torch.float64)
        g = di.gradient(cubes, backend, x, di.Constant(2.0))
        torch.testing.assert_close(g, 6.0 * x**2)
    assert counter.count == 1
    assert di.cache_info().misses == 1


def test_a_dropped_function_frees_its_entry() -> None:
    backend = di.AutoFiniteDiff()

    def make() -> Any:
        return lambda x: (x**2).sum()

    f = make()
    freed = weakref.ref(f)
    di.gradient(f, backend, np.ones(2))
    assert di.cache_info().currsize == 1
    del f
    gc.collect()
    assert freed() is None
    assert di.cache_info().currsize == 0


def test_a_new_lambda_per_call_does_not_grow_the_cache_even_if_kept() -> None:
    backend, kept = di.AutoFiniteDiff(), []
    di.set_cache(maxsize=8)
    for i in range(100):
        f = lambda x, i=i: i * (x**2).sum()
        kept.append(f)  # alive: only the bound keeps the cache small
        np.testing.assert_allclose(di.gradient(f, backend, np.ones(2)), [2.0 * i] * 2, atol=1e-5)
    assert di.cache_info().currsize == 8
    del f
    for _ in range(100):  # a lambda per call, dropped after it: freed with it
        di.gradient(lambda x: (x**2).sum(), backend, np.ones(2))
    kept.clear()
    gc.collect()
    assert di.cache_info().currsize == 0


def test_bound_methods_are_one_function_per_object_and_free_their_object() -> None:
    class Model:
        def __init__(self, a: float) -> None:
            self.a = a

        def loss(self, x: Any) -> Any:
            return self.a * (x**2).sum()

    backend, x = di.AutoFiniteDiff(), np.array([1.0, 2.0])
    first, second = Model(1.0), Model(3.0)
    for _ in range(3):
        np.testing.assert_allclose(di.gradient(first.loss, backend, x), [2.0, 4.0], rtol=1e-6)
        np.testing.assert_allclose(di.gradient(second.loss, backend, x), [6.0, 12.0], rtol=1e-6)
    info = di.cache_info()
    assert (info.misses, info.hits, info.currsize) == (2, 4, 2)
    freed = weakref.ref(first)
    del first
    gc.collect()
    assert freed() is None and di.cache_info().currsize == 1


def test_a_finite_difference_loop_calls_f_itself_not_its_weak_stand_in(monkeypatch: Any) -> None:
    from di.operators.cache import WeakFunction

    through_stand_in = []
    call = WeakFunction.__call__

    def counted(self: Any, *args: Any, **kwargs: Any) -> Any:
        through_stand_in.append(1)
        return call(self, *args, **kwargs)

    monkeypatch.setattr(WeakFunction, "__call__", counted)

    class Model:
        def loss(self, x: Any) -> Any:
            xp = di.array_namespace(x)
            return xp.sum(xp.sin(x) * x)

    backend, x, model = di.AutoFiniteDiff(), np.linspace(0.5, 1.5, 40), Model()
    expected = np.sin(x) + x * np.cos(x)
    for f in (cubes, model.loss):
        for _ in range(3):
            through_stand_in.clear()
            gradient = di.gradient(f, backend, x)
            # (the first evaluation, which checks f's output, may go through it; not the 80 of the loop)
            assert len(through_stand_in) <= 2
        np.testing.assert_allclose(gradient, 3 * x**2 if f is cubes else expected, rtol=1e-6)
        through_stand_in.clear()
        jacobian = di.jacobian(lambda x: x**2, backend, x[:5])
        np.testing.assert_allclose(jacobian, np.diag(2 * x[:5]), rtol=1e-6, atol=1e-8)
        assert len(through_stand_in) <= 2
    freed = weakref.ref(model)
    del model, f
    gc.collect()
    assert freed() is None


def test_threads_share_the_cache_and_get_their_own_results() -> None:
    backend = di.AutoFiniteDiff()
    calls = [0]

    def f(x: Any) -> Any:
        calls[0] += 1
        return (x**3).sum()

    points = [np.array([i / 10, 1.0 + i / 7]) for i in range(64)]
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        results = list(pool.map(lambda x: di.gradient(f, backend, x), points))
    for x, g in zip(points, results):
        np.testing.assert_allclose(g, 3 * x**2, rtol=1e-5, atol=1e-6)
    info = di.cache_info()
    assert info.currsize == 1 and info.hits + info.misses == 64 and info.misses == 1


@pytest.mark.parametrize(
    "other",
    [
        pytest.param(lambda: (np.ones(3, dtype=np.float32), (di.Constant(1.0),)), id="dtype"),
        pytest.param(lambda: (np.ones(4), (di.Constant(1.0),)), id="shape"),
        pytest.param(lambda: (np.ones(3), (di.Constant(np.ones(2)),)), id="constant-structure"),
        pytest.param(lambda: (np.ones(3), (di.Cache(np.ones(3)),)), id="context-kind"),
        pytest.param(lambda: ({"w": np.ones(3)}, (di.Constant(1.0),)), id="pytree"),
        pytest.param(lambda: (np.ones(3), ()), id="no-context"),
    ],
)
def test_a_call_a_strict_prep_would_refuse_gets_its_own_entry(other: Any) -> None:
    backend = di.AutoFiniteDiff()

    def f(x: Any, *contexts: Any) -> Any:
        leaves = list(x.values()) if isinstance(x, dict) else [x]
        scale = np.sum(contexts[0]) if contexts else 1.0
        return scale * sum((leaf.astype(np.float64) ** 2).sum() for leaf in leaves)

    di.gradient(f, backend, np.ones(3), di.Constant(1.0))
    x, contexts = other()
    g = di.gradient(f, backend, x, *contexts)
    leaf = x["w"] if isinstance(x, dict) else x
    scale = float(np.sum(contexts[0].value)) if contexts else 1.0
    np.testing.assert_allclose(g["w"] if isinstance(x, dict) else g, 2 * scale * leaf, rtol=1e-3)
    assert (g["w"] if isinstance(x, dict) else g).dtype == leaf.dtype
    assert di.cache_info().currsize == 2 and di.cache_info().misses == 2


@pytest.mark.skipif(not HAS_TORCH, reason="torch not installed")
def test_another_family_or_device_kind_is_another_entry() -> None:
    import torch

    backend = di.AutoTorch()
    g_torch = di.gradient(cubes, backend, torch.ones(2, dtype=torch.float64))
    g_numpy = di.gradient(cubes, backend, np.ones(2))
    assert isinstance(g_torch, torch.Tensor) and isinstance(g_numpy, np.ndarray)
    np.testing.assert_allclose(g_numpy, [3.0, 3.0])
    assert di.cache_info().currsize == 2


def test_out_buffers_and_cache_contexts_are_the_calls_own() -> None:
    backend = di.AutoFiniteDiff()

    def f(x: Any, buffer: Any) -> Any:
        buffer[:] = x * x  # scratch space f overwrites
        return buffer.sum()

    for value in (1.0, 2.0):
        out, scratch = np.zeros(2), np.zeros(2)
        result = di.gradient(f, backend, np.full(2, value), di.Cache(scratch), out=out)
        assert result is out
        np.testing.assert_allclose(out, [2 * value] * 2, rtol=1e-5)
    assert di.cache_info().currsize == 1 and di.cache_info().hits == 1
    with pytest.raises(di.OutBufferError):
        di.gradient(f, backend, np.ones(2), di.Cache(np.zeros(2)), out=np.zeros(3))


def test_it_can_be_turned_off_for_a_block_and_for_the_process() -> None:
    backend = di.AutoFiniteDiff()
    with di.caching(False):
        di.gradient(cubes, backend, np.ones(2))
        assert not di.cache_info().enabled
    assert di.cache_info().currsize == 0 and di.cache_info().enabled
    di.set_cache(enabled=False)
    di.gradient(cubes, backend, np.ones(2))
    assert di.cache_info() == (0, 0, 128, 0, False)
    di.set_cache(enabled=True)
    di.gradient(cubes, backend, np.ones(2))
    assert di.cache_info().currsize == 1
    di.set_cache(maxsize=0)
    assert di.cache_info().currsize == 0
    with pytest.raises(di.InvalidOptionTypeError):
        di.set_cache(enabled="no")  # type: ignore[arg-type]
    with pytest.raises(di.InvalidOptionError):
        di.set_cache(maxsize=-1)


def test_the_last_hit_is_not_served_once_the_cache_is_off() -> None:
    # A hit is remembered per operator and no longer asks whether the cache is on: turning
    # it off (for the process or a block) or clearing it must empty that memory.
    backend, x = di.AutoFiniteDiff(), np.array([1.0, 2.0])
    for _ in range(3):  # a miss, a hit found by the key (remembered), a remembered hit
        di.gradient(cubes, backend, x)
    assert (di.cache_info().misses, di.cache_info().hits) == (1, 2)
    with di.caching(False):
        np.testing.assert_allclose(di.gradient(cubes, backend, x), 3 * x**2, rtol=1e-5)
    assert (di.cache_info().misses, di.cache_info().hits) == (1, 2)
    di.gradient(cubes, backend, x)
    di.set_cache(enabled=False)
    np.testing.assert_allclose(di.gradient(cubes, backend, x), 3 * x**2, rtol=1e-5)
    assert (di.cache_info().misses, di.cache_info().hits) == (1, 3)
    di.set_cache(enabled=True)
    di.cache_clear()
    di.gradient(cubes, backend, x)
    assert (di.cache_info().misses, di.cache_info().hits) == (1, 0)


def test_fastest_plans_once_per_signature() -> None:
    backend = di.AutoFastest([di.AutoFiniteDiff(), di.AutoFiniteDiff(method="forward")], budget_s=0.01)
    for value in (1.0, 2.0, 3.0):
        g = di.gradient(cubes, backend, np.full(2, value))
        np.testing.assert_allclose(g, [3 * value**2] * 2, rtol=1e-4)
    assert di.cache_info().misses == 1 and di.cache_info().hits == 2
    with di.caching(False), pytest.raises(di.InvalidInputError, match=r"prepare_gradient.*di.set_cache"):
        di.gradient(cubes, backend, np.ones(2))


def test_sparse_detects_once_per_signature() -> None:
    calls = [0]

    def squares(x: Any) -> Any:
        calls[0] += 1
        return x * x

    backend = di.AutoSparse(di.AutoFiniteDiff())
    for value in (1.0, 2.0):
        J = di.jacobian(squares, backend, np.full(3, value))
        np.testing.assert_allclose(J.toarray(), np.diag([2 * value] * 3), atol=1e-5)
    counted = calls[0]
    di.jacobian(squares, backend, np.full(3, 5.0))
    assert calls[0] - counted <= 2 * 3 + 1  # the evaluations of one call, no detection
    assert di.cache_info().misses == 1


def test_second_order_wrappers_are_cached_like_any_backend() -> None:
    backend = di.SecondOrder(di.AutoFiniteDiff(), di.AutoFiniteDiff())
    for value in (1.0, 2.0):
        (hv,) = di.hvp(cubes, backend, np.full(2, value), (np.array([1.0, 0.0]),))
        np.testing.assert_allclose(hv, [6 * value, 0.0], atol=1e-3)
    info = di.cache_info()
    assert (info.misses, info.hits, info.currsize) == (1, 1, 1)


@pytest.mark.parametrize(
    "backend",
    [
        pytest.param(di.AutoFiniteDiff(), id="finitediff"),
        pytest.param("jax-jit", id="jax-jit-pytree", marks=pytest.mark.skipif(not HAS_JAX, reason="jax not installed")),
    ],
)
def test_the_last_hit_is_tried_first_and_never_serves_a_call_it_does_not_fit(backend: Any) -> None:
    # The fast path tries the entry of the last hit before it builds a key: another
    # signature, a cleared cache or an evicted entry must still prepare anew.
    if backend == "jax-jit":
        import jax.numpy as jnp

        backend, wrap = di.AutoJAX(jit=True), (lambda a: {"w": jnp.asarray(a)})
        leaf = lambda g: np.asarray(g["w"])
    else:
        wrap, leaf = (lambda a: a), (lambda g: g)

    def f(x: Any, scale: Any) -> Any:
        xp = di.array_namespace(*(x.values() if isinstance(x, dict) else [x]))
        w = x["w"] if isinstance(x, dict) else x
        return scale * xp.sum(w**2)

    def check(values: list[float], scale: float) -> None:
        g = di.gradient(f, backend, wrap(np.array(values)), di.Constant(scale))
        np.testing.assert_allclose(leaf(g), 2 * scale * np.array(values), rtol=1e-4)

    for scale in (1.0, 2.0, 3.0):  # a miss, then hits: the last hit is remembered
        check([1.0, 2.0], scale)
    assert (di.cache_info().misses, di.cache_info().hits) == (1, 2)
    check([1.0, 2.0, 3.0], 1.0)  # another shape: the remembered entry does not fit
    assert (di.cache_info().misses, di.cache_info().currsize) == (2, 2)
    check([1.0, 2.0], 0.5)
    check([1.0, 2.0], 0.5)
    assert di.cache_info().hits == 4
    di.cache_clear()  # the remembered entry left the cache: prepared again, and kept
    check([1.0, 2.0], 1.0)
    assert (di.cache_info().misses, di.cache_info().currsize) == (1, 1)
    check([1.0, 2.0], 1.0)
    di.set_cache(maxsize=1)
    check([4.0], 1.0)  # evicts the entry just hit
    check([1.0, 2.0], 1.0)
    info = di.cache_info()
    assert (info.misses, info.hits, info.currsize) == (3, 1, 1)
    with pytest.raises(di.PreparationMismatchError):  # (a prep handed out stays strict)
        prep = di.prepare_gradient(f, backend, wrap(np.ones(2)), di.Constant(1.0))
        di.gradient(f, prep, backend, wrap(np.ones(3)), di.Constant(1.0))


def test_a_memmap_is_served_by_the_prep_of_its_ndarray(tmp_path: Any) -> None:
    # The probe compares classes inline and misses a memmap; the prep's own comparison
    # takes it as the ndarray it is (as a strict prep does), so the call is a hit.
    backend = di.AutoFiniteDiff()
    di.gradient(cubes, backend, np.ones(3))
    mapped = np.memmap(tmp_path / "x.bin", dtype=np.float64, mode="w+", shape=(3,))
    mapped[:] = [1.0, 2.0, 3.0]
    np.testing.assert_allclose(di.gradient(cubes, backend, mapped), 3 * np.array([1.0, 4.0, 9.0]), rtol=1e-5)
    info = di.cache_info()
    assert (info.misses, info.hits, info.currsize) == (1, 1, 1)
