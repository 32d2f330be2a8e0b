"""``DifferentiateWith`` inside JAX: jit, grad, value_and_grad, jacfwd, jacrev, vmap
and lax.scan, each compared with JAX differentiating the same ``f`` natively."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from mixing_support import (
    BATCH,
    DATA,
    INPUTS,
    PARAMS,
    Recorder,
    X,
    close,
    counting_preps,
    layer,
    layer_mean,
    loss,
    wave,
)

import di

jax = pytest.importorskip("jax")
jnp = jax.numpy

INNERS = [
    *([di.AutoTorch()] if importlib.util.find_spec("torch") else []),
    di.AutoFiniteDiff(),
    *([di.AutoAutograd()] if importlib.util.find_spec("autograd") else []),
]
RTOL, ATOL = 1e-4, 1e-5  # float32, JAX's default


def f32(value: Any) -> Any:
    return jax.tree_util.tree_map(lambda leaf: jnp.asarray(leaf, dtype=jnp.float32), value)


@pytest.fixture(params=INNERS, ids=lambda b: type(b).__name__)
def inner(request: pytest.FixtureRequest) -> di.AbstractBackend:
    return request.param


def test_jit_grad_and_value_and_grad_with_a_traced_constant(inner: di.AbstractBackend) -> None:
    f = Recorder(loss)
    g = di.DifferentiateWith(f, inner, di.Constant(DATA))
    x, data = f32(X), f32(DATA)
    grad = jax.jit(jax.grad(lambda x, d: g(x, d) * 3.0))(x, data)
    close(grad, jax.grad(lambda x, d: loss(x, d) * 3.0)(x, data), RTOL, ATOL)
    assert grad.dtype == jnp.float32
    value, grad = jax.value_and_grad(g)(x, data)
    close((value, grad), jax.value_and_grad(loss)(x, data), RTOL, ATOL)
    assert "jax" not in f.libraries  # the inner engine ran f


def test_the_declared_constant_serves_a_call_with_x_alone(inner: di.AbstractBackend) -> None:
    g = di.DifferentiateWith(loss, inner, di.Constant(DATA))
    close(jax.jit(jax.grad(g))(f32(X)), jax.grad(loss)(f32(X), f32(DATA)), RTOL, ATOL)


def test_jacfwd_and_jacrev(inner: di.AbstractBackend) -> None:
    g = di.DifferentiateWith(wave, inner)
    x = f32(X)
    close(jax.jacfwd(g)(x), jax.jacfwd(wave)(x), RTOL, ATOL)
    close(jax.jit(jax.jacrev(g))(x), jax.jacrev(wave)(x), RTOL, ATOL)


def test_vmap_of_g_of_its_gradient_and_the_gradient_of_a_vmap(inner: di.AbstractBackend) -> None:
    g = di.DifferentiateWith(loss, inner)
    batch, data = f32(BATCH), f32(DATA)
    close(jax.vmap(g, in_axes=(0, None))(batch, data), jax.vmap(loss, in_axes=(0, None))(batch, data), RTOL, ATOL)
    per_row = jax.jit(jax.vmap(jax.grad(g), in_axes=(0, None)))
    close(per_row(batch, data), jax.vmap(jax.grad(loss), in_axes=(0, None))(batch, data), RTOL, ATOL)
    w = di.DifferentiateWith(wave, inner)
    total = jax.grad(lambda b: jnp.sum(jax.vmap(w)(b) ** 2))
    close(total(batch), jax.grad(lambda b: jnp.sum(jax.vmap(wave)(b) ** 2))(batch), RTOL, ATOL)
    close(jax.vmap(jax.jacrev(w))(batch), jax.vmap(jax.jacrev(wave))(batch), RTOL, ATOL)
    close(jax.vmap(jax.jacfwd(w))(batch), jax.vmap(jax.jacfwd(wave))(batch), RTOL, ATOL)


def test_lax_scan(inner: di.AbstractBackend) -> None:
    g = di.DifferentiateWith(wave, inner)

    def rolled(step: Any) -> Any:
        def run(x: Any) -> Any:
            final, _ = jax.lax.scan(lambda carry, _: (step(carry) * 0.1, None), x, None, length=3)
            return jnp.sum(final)

        return run

    x = f32(X)
    close(jax.jit(jax.grad(rolled(g)))(x), jax.grad(rolled(wave))(x), RTOL, ATOL)


def test_pytree_input_and_output(inner: di.AbstractBackend) -> None:
    g = di.DifferentiateWith(layer, inner, di.Constant(INPUTS.astype(np.float32)))
    params, inputs = f32(PARAMS), f32(INPUTS)
    out = jax.jit(g)(params)
    close(out, layer(params, inputs), RTOL, ATOL)
    assert set(out) == {"mean", "hidden"}
    mean = di.DifferentiateWith(layer_mean, inner, di.Constant(INPUTS.astype(np.float32)))
    close(jax.jit(jax.grad(mean))(params), jax.grad(layer_mean)(params, inputs), RTOL, ATOL)
    hidden = jax.jacrev(lambda p: g(p)["hidden"])(params)
    close(hidden, jax.jacrev(lambda p: layer(p, inputs)["hidden"])(params), RTOL, ATOL)


def test_float64_is_kept_under_x64(inner: di.AbstractBackend) -> None:
    g = di.DifferentiateWith(loss, inner, di.Constant(DATA))
    with jax.enable_x64(True):
        x = jnp.asarray(X)
        grad = jax.jit(jax.grad(g))(x)
        expected = jax.grad(loss)(x, jnp.asarray(DATA))
    assert grad.dtype == jnp.float64
    rtol = 1e-6 if isinstance(inner, di.AutoFiniteDiff) else 1e-12
    close(grad, expected, rtol, 1e-9)


def test_float64_arrays_outside_x64_are_prepared_again_in_float32(inner: di.AbstractBackend) -> None:
    """A float64 array made inside jax.enable_x64 and differentiated outside it
    reaches g's callbacks in float32, as JAX computes there: a prep of its own,
    not the float64 one of the call inside the scope (whose PreparationMismatchError
    JAX raised wrapped in its own runtime error)."""
    g = di.DifferentiateWith(loss, inner, di.Constant(DATA))
    with jax.enable_x64(True):
        x, data = jnp.asarray(X), jnp.asarray(DATA)
        inside = jax.grad(g)(x, data)
    assert inside.dtype == jnp.float64
    expected = jax.grad(loss)(x, data)
    for grad in (jax.grad(g)(x, data), jax.jit(jax.grad(g))(x, data), jax.grad(g)(x, data)):
        assert grad.dtype == jnp.float32
        close(grad, expected, RTOL, ATOL)
    value, tangent = jax.jvp(lambda x: g(x, data), (x,), (x,))
    expected_value, expected_tangent = jax.jvp(lambda x: loss(x, data), (x,), (x,))
    assert tangent.dtype == jnp.float32
    close((value, tangent), (expected_value, expected_tangent), RTOL, ATOL)


def test_concrete_jax_values_give_f_itself() -> None:
    f = Recorder(wave)
    g = di.DifferentiateWith(f, di.AutoFiniteDiff())
    result = g(f32(X))
    assert isinstance(result, jax.Array) and result.dtype == jnp.float32
    close(result, wave(f32(X)), RTOL, ATOL)
    assert f.libraries == {"numpy"}


def test_one_prep_per_signature_reused_and_a_new_shape_prepared_again() -> None:
    g = di.DifferentiateWith(loss, di.AutoFiniteDiff())
    grad = jax.jit(jax.grad(g))
    with counting_preps() as counts:
        for shift in range(3):
            close(grad(f32(X + shift), f32(DATA)), jax.grad(loss)(f32(X + shift), f32(DATA)), RTOL, ATOL)
        assert counts["pullback"] == 1
        longer, longer_data = f32(np.concatenate([X, X])), f32(np.concatenate([DATA, DATA]))
        close(grad(longer, longer_data), jax.grad(loss)(longer, longer_data), RTOL, ATOL)
        assert counts["pullback"] == 2


def test_a_jacobian_shaped_use_asks_autosparse_for_one_sparse_jacobian() -> None:
    sparse = di.AutoSparse(di.AutoFiniteDiff(), sparsity=di.KnownSparsity(np.eye(4, dtype=bool)))
    g = di.DifferentiateWith(wave, sparse)
    with counting_preps() as counts:
        close(jax.jacfwd(g)(f32(X)), jax.jacfwd(wave)(f32(X)), RTOL, ATOL)
        close(jax.jacrev(g)(f32(X)), jax.jacrev(wave)(f32(X)), RTOL, ATOL)
    assert counts["pullback"] == counts["pushforward"] == 0 and counts["jacobian"] == 1


def test_a_numpy_black_box_with_finite_differences_inside_jax_grad() -> None:
    def black_box(x: Any) -> Any:  # NumPy only: JAX cannot trace it
        return np.sum(np.sin(np.asarray(x)) * np.arange(1.0, 5.0))

    with pytest.raises(di.InvalidOutputError, match="DifferentiateWith"):
        di.gradient(black_box, di.AutoJAX(), X)
    g = di.DifferentiateWith(black_box, di.AutoFiniteDiff())
    close(jax.jit(jax.grad(g))(f32(X)), np.cos(X) * np.arange(1.0, 5.0), RTOL, ATOL)


def test_second_order_through_g_is_refused_naming_both_engines() -> None:
    g = di.DifferentiateWith(loss, di.AutoFiniteDiff(), di.Constant(DATA))
    with pytest.raises(di.UnsupportedOperatorError, match=r"inside JAX.*AutoFiniteDiff.*di\.hessian"):
        jax.hessian(g)(f32(X))
    with pytest.raises(di.UnsupportedOperatorError):
        jax.grad(lambda x: jnp.sum(jax.grad(g)(x)))(f32(X))


def test_a_derivative_with_respect_to_a_constant_is_refused() -> None:
    g = di.DifferentiateWith(loss, di.AutoFiniteDiff(), di.Constant(DATA))
    with pytest.raises(di.InvalidInputError, match="context 1"):
        jax.grad(g, argnums=1)(f32(X), f32(DATA))


_TWO_DEVICES = textwrap.dedent(
    """
    import os

    os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=2"  # before JAX is imported
    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax.sharding import Mesh, NamedSharding, PartitionSpec

    import di
    from di.families import get_family, spec_of

    def f(x, c):
        xp = di.array_namespace(x)
        return xp.sum(x**2 * c)

    first, second = jax.devices()
    sharding = NamedSharding(Mesh(np.array([first, second]), ("d",)), PartitionSpec("d"))
    x, c = (jax.device_put(jnp.asarray(v), sharding) for v in ([0.5, 1.0, 2.0, 3.0], [1.0, 2.0, 3.0, 4.0]))
    # a sharded x and Constant reach torch (by NumPy, which gathers them), not a raw BufferError
    for backend in (di.AutoTorch(), di.AutoFiniteDiff()):
        grad = di.gradient(f, backend, x, di.Constant(c))
        np.testing.assert_array_equal(np.asarray(grad), [1.0, 4.0, 12.0, 24.0], err_msg=repr(backend))
    half = jax.device_put(jnp.asarray([0.5, 1.0, 2.0, 3.0], dtype=jnp.bfloat16), sharding)
    grad = di.gradient(f, di.AutoTorch(), half, di.Constant(jnp.ones(4, dtype=jnp.bfloat16)))
    assert grad.dtype == jnp.bfloat16
    np.testing.assert_array_equal(np.asarray(grad, dtype=np.float64), [1.0, 2.0, 4.0, 6.0])
    # reports name a device other than the host's first
    on_first, on_second = jnp.arange(3.0), jax.device_put(jnp.arange(3.0), second)
    assert " on " not in spec_of(on_first).describe()
    assert "id=1" in spec_of(on_second).describe(), spec_of(on_second).describe()
    # where results of another engine's family go: x's device, x's sharding
    family = get_family("jax")
    assert family.placement(on_first) is None
    assert family.placement(on_second)(jnp.ones(5)).devices() == {second}
    place = family.placement(x)
    assert place(jnp.ones(4)).sharding == x.sharding
    hessian = place(jnp.ones((4, 4)))
    assert hessian.sharding.is_fully_replicated and hessian.devices() == {first, second}

    # end to end: other engines' results come back where x lives (they came back on device 0)
    def cubes(x):
        xp = di.array_namespace(x)
        return xp.sum(x**3)

    def squares(x):
        return x**2

    at_second = jax.device_put(jnp.asarray([1.0, 2.0, 3.0]), second)
    along = jax.device_put(jnp.asarray([1.0, 0.0, 1.0]), second)
    for backend in (di.AutoTorch(), di.AutoAutograd(), di.AutoFiniteDiff()):
        name = repr(backend)
        grad = di.gradient(cubes, backend, at_second)
        assert grad.devices() == {second}, (name, grad.devices())
        np.testing.assert_allclose(np.asarray(grad), [3.0, 12.0, 27.0], rtol=1e-4, err_msg=name)
        value, grad = di.value_and_gradient(cubes, backend, at_second)
        assert value.devices() == grad.devices() == {second}, (name, value.devices(), grad.devices())
        np.testing.assert_allclose(np.asarray(value), 36.0, rtol=1e-6, err_msg=name)
        hess = di.hessian(cubes, backend, at_second)
        assert hess.devices() == {second}, (name, hess.devices())
        np.testing.assert_allclose(np.asarray(hess), np.diag([6.0, 12.0, 18.0]), rtol=1e-4, atol=1e-4, err_msg=name)
        (jvp,) = di.pushforward(squares, backend, at_second, (along,))
        assert jvp.devices() == {second}, (name, jvp.devices())
        np.testing.assert_allclose(np.asarray(jvp), [2.0, 0.0, 6.0], rtol=1e-4, atol=1e-6, err_msg=name)
        # sharded over both: a result shaped like x keeps its sharding, a Hessian is replicated
        grad = di.gradient(f, backend, x, di.Constant(c))
        assert grad.sharding == x.sharding, (name, grad.sharding)
        np.testing.assert_allclose(np.asarray(grad), [1.0, 4.0, 12.0, 24.0], rtol=1e-4, err_msg=name)
        hess = di.hessian(f, backend, x, di.Constant(c))
        assert hess.sharding.is_fully_replicated and hess.devices() == {first, second}, (name, hess.sharding)
        np.testing.assert_allclose(np.asarray(hess), np.diag([2.0, 4.0, 6.0, 8.0]), rtol=1e-4, atol=1e-4)
    print("ok")
    """
)


@pytest.mark.skipif(not importlib.util.find_spec("torch"), reason="needs torch")
def test_jax_arrays_on_a_second_device_and_sharded_over_two() -> None:
    """In a process of its own: XLA takes the number of CPU devices before JAX is
    imported, which every test process here has done."""
    root = Path(__file__).resolve().parent.parent
    done = subprocess.run([sys.executable, "-c", _TWO_DEVICES], capture_output=True, text=True, timeout=300, cwd=root)
    assert done.returncode == 0 and done.stdout.split()[-1:] == ["ok"], done.stderr[-3000:]
