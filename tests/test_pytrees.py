"""Pytrees, mixed array families, dtypes, odd layouts, devices and sharding."""

from __future__ import annotations

import collections
import dataclasses
import os
import subprocess
import sys
import tempfile
import textwrap
from typing import Any

import numpy as np
import optree
import pytest
from conftest import BACKENDS, as_family, backend_id, engine_family, engine_name, to_numpy

import di
from di.families import family_of
from di.testing import approximates

jax = pytest.importorskip("jax")
torch = pytest.importorskip("torch")
jnp = jax.numpy

JAX_BACKENDS = [b for b in BACKENDS if engine_name(b) == "jax"]
# The engines whose own pytree registry sorts a dict's keys (JAX's): no capability declares it.
SORTS_DICT_KEYS = {"jax"}

Pair = collections.namedtuple("Pair", ["first", "second"])


@optree.dataclasses.dataclass(namespace="")
class Params:
    weights: Any
    bias: Any


def xp_of(tree: Any) -> Any:
    return di.array_namespace(*optree.tree_leaves(tree))


def energy(p: Any, a: Any) -> Any:
    """sum(a * w**2) + sum(pair.first**3) + 2 * sum(pair.second) + sum(bias**2)."""
    xp = xp_of(p)
    return (
        xp.sum(a * p["params"].weights ** 2)
        + xp.sum(p["pair"].first ** 3)
        + 2 * xp.sum(p["pair"].second)
        + xp.sum(p["params"].bias ** 2)
        + xp.sum(p["list"][0] * p["list"][1])
    )


def make_tree(dtype: Any = np.float64) -> Any:
    return {
        "params": Params(weights=np.array([1.0, -2.0, 0.5], dtype), bias=np.array([[0.3, 0.7]], dtype)),
        "pair": Pair(first=np.array([2.0, -1.0], dtype), second=np.array(4.0, dtype)),
        "list": [np.array([1.5, 2.5], dtype), np.array([-1.0, 3.0], dtype)],
    }


A = np.array([1.0, 2.0, 3.0])


def expected_gradient(p: Any) -> Any:
    return {
        "params": Params(weights=2 * A * p["params"].weights, bias=2 * p["params"].bias),
        "pair": Pair(first=3 * p["pair"].first ** 2, second=np.array(2.0)),
        "list": [p["list"][1], p["list"][0]],
    }


def assert_tree_close(actual: Any, expected: Any, tol: float) -> None:
    assert optree.tree_structure(actual) == optree.tree_structure(expected)
    for got, want in zip(optree.tree_leaves(actual), optree.tree_leaves(expected)):
        assert np.shape(got) == np.shape(want)
        np.testing.assert_allclose(np.asarray(got, dtype=float), want, rtol=tol, atol=tol)


@pytest.mark.parametrize("backend", BACKENDS, ids=backend_id)
def test_gradient_keeps_the_structure_of_x(backend: Any) -> None:
    x = make_tree()
    prep = di.prepare_gradient(energy, backend, optree.tree_map(np.zeros_like, x), di.Constant(-A))
    for _ in range(2):
        g = di.gradient(energy, prep, backend, x, di.Constant(A))
        assert isinstance(g["params"], Params) and isinstance(g["pair"], Pair) and isinstance(g["list"], list)
        assert_tree_close(g, expected_gradient(x), 1e-6)
    y, g = di.value_and_gradient(energy, prep, backend, x, di.Constant(A))
    assert_tree_close(g, expected_gradient(x), 1e-6)
    np.testing.assert_allclose(np.asarray(y, dtype=float), energy(x, A), rtol=1e-12)


def quadratic_tree(p: Any) -> Any:
    xp = xp_of(p)
    return xp.sum(p["a"] ** 2 * p["b"][0]) + xp.sum(p["b"][1] ** 3)


def vector_tree(p: Any) -> Any:
    xp = xp_of(p)
    return xp.stack([xp.sum(p["a"] * 2.0), p["b"][0] * p["b"][1]])


@pytest.mark.parametrize("backend", BACKENDS, ids=backend_id)
def test_jacobian_hvp_hessian_pushforward_pullback_on_pytrees(backend: Any) -> None:
    x = {"a": np.array([1.0, 2.0]), "b": (np.array(3.0), np.array(0.5))}
    a, b0, b1 = x["a"], float(x["b"][0]), float(x["b"][1])
    tol = 1e-4 if approximates(backend) else 1e-10
    # jacobian: output structure outside (an array here), input structure inside
    jac = di.jacobian(vector_tree, backend, x)
    np.testing.assert_allclose(jac["a"], [[2.0, 2.0], [0.0, 0.0]], atol=tol)
    np.testing.assert_allclose(jac["b"][0], [0.0, b1], atol=tol)
    np.testing.assert_allclose(jac["b"][1], [0.0, b0], atol=tol)
    (jv,) = di.pushforward(vector_tree, backend, x, (x,))
    np.testing.assert_allclose(jv, [2 * a.sum(), 2 * b0 * b1], rtol=tol, atol=tol)
    (vj,) = di.pullback(vector_tree, backend, x, (np.array([1.0, 2.0]),))
    np.testing.assert_allclose(vj["a"], [2.0, 2.0], atol=tol)
    np.testing.assert_allclose(vj["b"][1], 2 * b0, atol=tol)
    # second order: hessian blocks [i][j] have shape x_i.shape + x_j.shape
    hessian = di.hessian(quadratic_tree, backend, x)
    np.testing.assert_allclose(hessian["a"]["a"], np.diag([2 * b0] * 2), atol=tol)
    np.testing.assert_allclose(hessian["a"]["b"][0], 2 * a, atol=tol)
    assert hessian["a"]["b"][0].shape == (2,) and hessian["b"][0]["a"].shape == (2,)
    np.testing.assert_allclose(hessian["b"][1]["b"][1], 6 * b1, atol=tol)
    tangent = {"a": np.array([1.0, 0.0]), "b": (np.array(0.0), np.array(1.0))}
    (hv,) = di.hvp(quadratic_tree, backend, x, (tangent,))
    np.testing.assert_allclose(hv["a"], [2 * b0, 0.0], atol=tol)
    np.testing.assert_allclose(hv["b"][0], 2 * a[0], atol=tol)
    np.testing.assert_allclose(hv["b"][1], 6 * b1, atol=tol)


@pytest.mark.parametrize("backend", BACKENDS, ids=backend_id)
def test_mismatch_names_the_differing_leaf(backend: Any) -> None:
    x = {"weights": [np.ones(2), np.ones(3)], "bias": np.zeros(1)}

    def f(p: Any) -> Any:
        xp = di.array_namespace(p)
        return xp.sum(p["weights"][0] ** 2) + xp.sum(p["weights"][1] ** 2) + xp.sum(p["bias"])

    prep = di.prepare_gradient(f, backend, x)
    other = {"weights": [np.ones(2), np.ones(4)], "bias": np.zeros(1)}
    with pytest.raises(di.PreparationMismatchError, match=r"x\['weights'\]\[1\] differs.*\(3,\).*\(4,\)"):
        di.gradient(f, prep, backend, other)
    with pytest.raises(di.PreparationMismatchError, match="structure"):
        di.gradient(f, prep, backend, {"weights": [np.ones(2), np.ones(3)]})


@pytest.mark.parametrize("leaf", [np.array([1, 2]), np.array([True, False])])
@pytest.mark.parametrize("operator", ["gradient", "pullback", "hessian"])
@pytest.mark.parametrize("backend", BACKENDS, ids=backend_id)
def test_a_leaf_that_is_not_real_floating_is_refused(backend: Any, operator: str, leaf: np.ndarray) -> None:
    """Every backend refuses an int or bool leaf of x, naming it. AutoJAX, which takes
    pytrees as they are, returned JAX's float0 cotangents for an int leaf. (A complex
    leaf is differentiated through its real view: tests/test_complex.py.)"""
    x = {"a": leaf, "b": np.array([0.5, 1.0])}

    def f(p: Any) -> Any:
        xp = di.array_namespace(p["b"])
        return xp.sum(p["b"] ** 2) * 2.0

    arguments = ((np.ones(()),),) if operator == "pullback" else ()
    with pytest.raises(di.InvalidInputError, match=rf"x\['a'\] is an array of dtype {leaf.dtype}; .*np.asarray"):
        getattr(di, operator)(f, backend, x, *arguments)


def test_jax_registered_nodes_work_with_jax_and_are_refused_clearly_elsewhere() -> None:
    @jax.tree_util.register_dataclass
    @dataclasses.dataclass
    class JaxParams:
        w: Any
        b: Any

    def f(p: Any) -> Any:
        xp = di.array_namespace(p.w)
        return xp.sum(p.w**2) + xp.sum(p.b)

    x = JaxParams(jnp.array([1.0, 2.0]), jnp.array([3.0]))
    for backend in (di.AutoJAX(), di.AutoJAX(jit=True)):
        g = di.gradient(f, di.prepare_gradient(f, backend, x), backend, x)
        assert isinstance(g, JaxParams)
        np.testing.assert_allclose(g.w, [2.0, 4.0])
    with pytest.raises(di.InvalidInputError, match="registered with JAX only"):
        di.gradient(f, di.AutoTorch(), x)


def test_pytree_contexts_are_converted_leaf_by_leaf() -> None:
    def f(x: Any, c: Any) -> Any:
        xp = di.array_namespace(x)
        return xp.sum(c["scale"] * x**2) + xp.sum(c["shift"][0] * x)

    c = {"scale": np.array([1.0, 2.0]), "shift": [np.array([0.5, 0.5])]}
    x = np.array([1.0, 1.0])
    for backend in BACKENDS:
        g = di.gradient(f, backend, x, di.Constant(c))
        np.testing.assert_allclose(g, 2 * c["scale"] * x + 0.5, rtol=1e-6)


# --- families ---------------------------------------------------------------------------------


@pytest.mark.parametrize("family", ["numpy", "torch", "jax"])
@pytest.mark.parametrize("backend", BACKENDS, ids=backend_id)
def test_any_family_with_any_backend(backend: Any, family: str) -> None:
    x = as_family(np.array([0.5, -1.0, 2.0], dtype=np.float32), family)
    a = as_family(np.array([1.0, 2.0, 3.0], dtype=np.float32), family)

    def f(x: Any, a: Any) -> Any:
        xp = di.array_namespace(x)
        return xp.sum(a * x**3)

    g = di.gradient(f, backend, x, di.Constant(a))
    jac = di.jacobian(lambda x, a: a * x**2, backend, x, di.Constant(a))
    for result in (g, jac):
        assert family_of(result) == family
        assert str(result.dtype).endswith("float32")
    np.testing.assert_allclose(np.asarray(g), 3 * np.asarray(a) * np.asarray(x) ** 2, rtol=1e-3)


# --- dtypes and layouts --------------------------------------------------------------------------


def squares(x: Any) -> Any:
    xp = di.array_namespace(x)
    return xp.sum(x * x)


DTYPE_INPUTS = {
    "numpy-float16": lambda: np.array([1.0, -2.0, 0.5], np.float16),
    "numpy-float32": lambda: np.array([1.0, -2.0, 0.5], np.float32),
    "numpy-float64": lambda: np.array([1.0, -2.0, 0.5], np.float64),
    "torch-float16": lambda: torch.tensor([1.0, -2.0, 0.5], dtype=torch.float16),
    "torch-bfloat16": lambda: torch.tensor([1.0, -2.0, 0.5], dtype=torch.bfloat16),
    "jax-bfloat16": lambda: jnp.array([1.0, -2.0, 0.5], dtype=jnp.bfloat16),
}


@pytest.mark.parametrize("name", list(DTYPE_INPUTS))
@pytest.mark.parametrize("backend", BACKENDS, ids=backend_id)
def test_dtype_is_preserved(backend: Any, name: str) -> None:
    x = DTYPE_INPUTS[name]()
    g = di.gradient(squares, backend, x)
    assert type(g) is type(x) and g.dtype == x.dtype and g.shape == x.shape
    as_float = np.asarray(g.float() if family_of(g) == "torch" else g, dtype=np.float64)
    np.testing.assert_allclose(as_float, [2.0, -4.0, 1.0], rtol=1e-2)


@pytest.mark.parametrize("backend", BACKENDS, ids=backend_id)
def test_mixed_precision_leaves_are_kept_leaf_by_leaf(backend: Any) -> None:
    x = {"low": np.array([1.0, 2.0], np.float32), "high": np.array([3.0], np.float64)}

    def f(p: Any) -> Any:
        xp = di.array_namespace(p)
        return xp.sum(p["low"] ** 2) + xp.sum(p["high"] ** 2)

    g = di.gradient(f, backend, x)
    assert g["low"].dtype == np.float32 and g["high"].dtype == np.float64
    np.testing.assert_allclose(g["low"], [2.0, 4.0], rtol=1e-4)
    np.testing.assert_allclose(g["high"], [6.0], rtol=1e-6)


LAYOUTS = {
    "0-d": np.array(1.5),
    "empty": np.zeros(0),
    "one-element": np.array([1.5]),
    "non-contiguous": np.arange(12.0).reshape(3, 4)[:, ::2],
    "negative-strides": np.arange(6.0)[::-2],
    "memmap": np.memmap(tempfile.TemporaryFile(), dtype=np.float64, mode="w+", shape=(3,)),
}
LAYOUTS["memmap"][:] = [1.0, 2.0, 3.0]


@pytest.mark.parametrize("layout", list(LAYOUTS))
@pytest.mark.parametrize("backend", BACKENDS, ids=backend_id)
def test_odd_layouts(backend: Any, layout: str) -> None:
    x = LAYOUTS[layout]
    before = x.copy()
    g = di.gradient(squares, backend, x)
    assert g.shape == x.shape and g.dtype == x.dtype
    np.testing.assert_allclose(g, 2 * x, rtol=1e-6)
    np.testing.assert_allclose(di.value_and_gradient(squares, backend, x)[1], 2 * x, rtol=1e-6)
    np.testing.assert_array_equal(x, before)
    if x.ndim == 1:
        np.testing.assert_allclose(di.hessian(squares, backend, x), 2 * np.eye(x.size), atol=1e-4)


def keyed_energy(p: Any, c: Any) -> Any:
    xp = di.array_namespace(p[1])
    return xp.sum(p[1] ** 2) + xp.sum(c["a"] * p["a"] ** 2) + xp.sum(c[0])


@pytest.mark.parametrize(
    ("backend", "sorts_keys"), list(zip(BACKENDS, [True, True, False, False, False])), ids=backend_id
)
def test_dict_keys_that_do_not_sort(backend: Any, sorts_keys: bool) -> None:
    """Keys 1 and "a" do not sort. An engine that flattens dicts by sorted keys
    (JAX's registry) cannot take them: a di error up front names the argument;
    every other backend computes, keeping the caller's key order."""
    x = {1: np.array([1.0, -2.0]), "a": np.array([3.0])}
    c = {"a": np.array([2.0]), 0: np.array([1.0])}
    if sorts_keys:
        refusal = r"cannot flatten {} as a pytree.*keys of one type"
        with pytest.raises(di.InvalidInputError, match=refusal.format("x")):
            di.gradient(keyed_energy, backend, x, di.Constant({"a": np.array([2.0]), 0: np.array([1.0])}))
        with pytest.raises(di.InvalidInputError, match=refusal.format("context 1")):
            di.gradient(lambda p, c: keyed_energy({1: p, "a": p}, c), backend, np.ones(2), di.Constant(c))
        return
    prep = di.prepare_gradient(keyed_energy, backend, x, di.Constant(c))
    for g in (
        di.gradient(keyed_energy, prep, backend, x, di.Constant(c)),
        di.gradient(keyed_energy, backend, x, di.Constant(c)),
    ):
        assert list(g) == [1, "a"]
        np.testing.assert_allclose(g[1], [2.0, -4.0], rtol=1e-6)
        np.testing.assert_allclose(g["a"], [12.0], rtol=1e-6)


DEPTH = 400  # optree and JAX take far deeper trees; di's own walks used to stop near 250


def nested(leaf: Any, depth: int = DEPTH) -> Any:
    for _ in range(depth):
        leaf = [leaf]
    return leaf


def innermost(tree: Any) -> Any:
    while isinstance(tree, list):
        tree = tree[0]
    return tree


def deep_energy(p: Any) -> Any:
    xp = di.array_namespace(p["b"])
    return xp.sum(innermost(p["a"]) ** 2) + xp.sum(xp.sin(p["b"]))


@pytest.mark.parametrize("backend", BACKENDS, ids=backend_id)
def test_deeply_nested_x(backend: Any) -> None:
    inner, b = np.array([1.0, -2.0, 0.5]), np.array([0.3, 0.7])
    x = {"b": b, "a": nested(inner)}
    expected = {"b": np.cos(b), "a": nested(2 * inner)}
    prep = di.prepare_gradient(deep_energy, backend, x)
    for g in (di.gradient(deep_energy, prep, backend, x), di.gradient(deep_energy, backend, x)):
        assert list(g) == ["b", "a"] and len(optree.tree_leaves(g["a"])) == 1
        assert optree.tree_structure(g) == optree.tree_structure(x)
        np.testing.assert_allclose(innermost(g["a"]), 2 * inner, rtol=1e-6)
        np.testing.assert_allclose(g["b"], np.cos(b), rtol=1e-6)
    y, g = di.value_and_gradient(deep_energy, prep, backend, x)
    value_rtol = 1e-6 if approximates(backend) else 1e-12  # (f in MLX's float64: float32-accurate sin)
    np.testing.assert_allclose(y, np.sum(inner**2) + np.sum(np.sin(b)), rtol=value_rtol)
    assert_tree_close(g, expected, 1e-6)
    tangent = {"b": np.ones(2), "a": nested(np.array([1.0, 0.0, 2.0]))}
    (dy,) = di.pushforward(deep_energy, backend, x, (tangent,))
    np.testing.assert_allclose(dy, 2 * (1.0 + 2 * 0.5) + np.sum(np.cos(b)), rtol=1e-6)


def test_compiled_torch_names_an_x_nested_deeper_than_dynamo_traces() -> None:
    # dynamo follows containers recursively: torch.compile(torch.func.grad(f)) fails near 50 levels too
    x = {"b": torch.tensor([0.3, 0.7]), "a": nested(torch.tensor([1.0, -2.0, 0.5]), 60)}
    compiled = di.AutoTorch(compile=True, compile_options={"backend": "eager"})
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(1000)  # Python's default (a test that imports pytensor itself raises it to 3000)
    try:
        with pytest.raises(
            di.InvalidInputError, match=r"x nests 61 containers deep.*Use AutoTorch\(\) \(eager\)"
        ) as info:
            di.prepare_gradient(deep_energy, compiled, x)
    finally:
        sys.setrecursionlimit(limit)
    assert isinstance(info.value.__cause__, torch._dynamo.exc.TorchDynamoException)
    g = di.gradient(deep_energy, di.AutoTorch(), x)
    np.testing.assert_allclose(innermost(g["a"]), [2.0, -4.0, 1.0])


def cubic_coupled(x: Any) -> Any:
    xp = di.array_namespace(x)
    return x**2 * xp.sum(x)


@pytest.mark.parametrize(
    "backend",
    [*BACKENDS, di.AutoTorch(compile=True, compile_options={"backend": "aot_eager"})],
    ids=backend_id,
)
def test_an_expanded_torch_x(backend: Any) -> None:
    """A tensor whose elements share memory (``expand``: a stride of 0), which
    torch's forward mode refuses natively: every backend gives the same
    derivatives, and ``x`` is left as it was."""
    x = torch.tensor([1.5], dtype=torch.float64).expand(3)
    xn, ones = np.full(3, 1.5), np.ones(3)
    np.testing.assert_allclose(to_numpy(di.gradient(squares, backend, x)), 2 * xn)
    (dy,) = di.pushforward(cubic_coupled, backend, x, (torch.ones(3, dtype=torch.float64),))
    np.testing.assert_allclose(to_numpy(dy), 2 * xn * xn.sum() + xn**2 * ones.sum(), rtol=1e-6)
    expected_jacobian = np.diag(2 * xn * xn.sum()) + np.outer(xn**2, ones)
    np.testing.assert_allclose(to_numpy(di.jacobian(cubic_coupled, backend, x)), expected_jacobian, rtol=1e-6)
    np.testing.assert_allclose(to_numpy(di.hessian(squares, backend, x)), 2 * np.eye(3), atol=1e-6)
    (hv,) = di.hvp(squares, backend, x, (torch.ones(3, dtype=torch.float64),))
    np.testing.assert_allclose(to_numpy(hv), 2 * ones, atol=1e-6)
    assert x.stride() == (0,) and torch.equal(x, torch.full((3,), 1.5, dtype=torch.float64))


# --- devices ------------------------------------------------------------------------------------------


SHARDING_SCRIPT = textwrap.dedent(
    """
    import numpy as np, jax, jax.numpy as jnp
    from jax.sharding import Mesh, NamedSharding, PartitionSpec
    import di
    assert len(jax.devices()) == 4, jax.devices()
    mesh = Mesh(np.array(jax.devices()), ("i",))
    sharding = NamedSharding(mesh, PartitionSpec("i"))
    x = jax.device_put(jnp.arange(8.0), sharding)
    f = lambda x: jnp.sum(jnp.sin(x) * x ** 2)
    backend = di.AutoJAX(jit=True)
    prep = di.prepare_gradient(f, backend, x)
    g = di.gradient(f, prep, backend, x)
    np.testing.assert_allclose(g, jax.grad(f)(jnp.arange(8.0)), rtol=1e-6)
    assert g.sharding.is_equivalent_to(x.sharding, x.ndim), (g.sharding, x.sharding)
    (hv,) = di.hvp(f, backend, x, (x,))
    np.testing.assert_allclose(hv, jax.jvp(jax.grad(f), (jnp.arange(8.0),), (jnp.arange(8.0),))[1], rtol=1e-5)
    assert hv.sharding.is_equivalent_to(x.sharding, x.ndim), (hv.sharding, x.sharding)
    print("sharded ok")
    """
)


def test_sharded_jax_arrays_keep_their_sharding() -> None:
    env = {**os.environ, "XLA_FLAGS": "--xla_force_host_platform_device_count=4", "JAX_PLATFORMS": "cpu"}
    result = subprocess.run(
        [sys.executable, "-c", SHARDING_SCRIPT], env=env, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "sharded ok" in result.stdout


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU on this machine")
@pytest.mark.parametrize("backend", BACKENDS, ids=backend_id)
def test_torch_cuda_results_stay_on_the_gpu(backend: Any) -> None:
    x = torch.tensor([1.0, -2.0, 0.5], device="cuda")
    g = di.gradient(squares, backend, x)
    assert g.device == x.device
    torch.testing.assert_close(g, 2 * x, rtol=1e-4, atol=1e-4)


@pytest.mark.skipif(
    not any(d.platform == "gpu" for d in jax.devices()) if jax.default_backend() != "cpu" else True,
    reason="no JAX GPU on this machine",
)
def test_jax_gpu_results_stay_on_the_gpu() -> None:
    x = jnp.array([1.0, -2.0, 0.5])
    for backend in (di.AutoJAX(), di.AutoJAX(jit=True)):
        g = di.gradient(squares, backend, x)
        assert g.devices() == x.devices()


@pytest.mark.parametrize("backend", BACKENDS, ids=backend_id)
def test_dict_key_order_is_kept(backend: Any) -> None:
    x = {"zeta": np.array([1.0, 2.0]), "alpha": np.array([3.0])}

    def f(p: Any) -> Any:
        xp = di.array_namespace(p)
        return xp.sum(p["zeta"] ** 2) + xp.sum(p["alpha"] ** 3)

    assert list(di.gradient(f, backend, x)) == ["zeta", "alpha"]
    assert list(di.value_and_gradient(f, backend, x)[1]) == ["zeta", "alpha"]
    assert list(di.hvp(f, backend, x, (x,))[0]) == ["zeta", "alpha"]
    np.testing.assert_allclose(di.gradient(f, backend, x)["alpha"], [27.0], rtol=1e-6)


def test_a_loose_jax_prep_keeps_each_calls_key_order_after_its_first_result_set_the_rebuild() -> None:
    # the first result fixes how results are put in x's key order; a strict=False prep
    # called with dicts of other keys (or sizes) gets each call's own structure back
    backend = di.AutoJAX(jit=True)

    def f(p: Any) -> Any:
        xp = di.array_namespace(next(iter(p.values())))
        loss = sum(xp.sum(value**2) for value in p.values())
        return loss, {"loss": loss}

    first = {"zeta": np.array([1.0, 2.0]), "alpha": np.array([3.0])}
    prep = di.prepare_gradient(f, backend, first, strict=False, has_aux=True)
    others = ({"b": np.array([1.0]), "a": np.array([2.0, 0.5])}, {"q": np.array([4.0])}, first)
    for p in (first, first, *others):
        for call in (di.gradient, di.value_and_gradient):
            result = call(f, prep, backend, p, has_aux=True)
            g = result[0] if call is di.gradient else result[1]  # ((y, aux), g) or (g, aux)
            expected = list(p) if set(p) == set(first) else sorted(p)  # (another structure: as JAX returns it)
            assert list(g) == expected, (call.__name__, list(p))
            for key, value in p.items():
                np.testing.assert_allclose(g[key], 2 * value)


@pytest.mark.parametrize("backend", JAX_BACKENDS, ids=backend_id)
def test_pytree_outputs_on_jax(backend: Any) -> None:
    def f(x: Any) -> Any:
        return {"double": 2 * x, "total": (x**2).sum()}

    x = np.array([1.0, 3.0])
    jac = di.jacobian(f, backend, x)
    np.testing.assert_allclose(jac["double"], 2 * np.eye(2))
    np.testing.assert_allclose(jac["total"], 2 * x)
    assert type(jac["total"]) is np.ndarray
    (jv,) = di.pushforward(f, backend, x, (np.array([1.0, 0.0]),))
    np.testing.assert_allclose(jv["total"], 2.0)
    (vj,) = di.pullback(f, backend, x, ({"double": np.zeros(2), "total": np.array(1.0)},))
    np.testing.assert_allclose(vj, 2 * x)


@pytest.mark.parametrize("backend", [b for b in BACKENDS if engine_name(b) != "jax"], ids=backend_id)
def test_pytree_outputs_elsewhere_are_refused_clearly(backend: Any) -> None:
    with pytest.raises(di.InvalidOutputError, match="Pytree outputs are supported by AutoJAX"):
        di.jacobian(lambda x: {"double": 2 * x}, backend, np.ones(2))


@pytest.mark.parametrize("backend", BACKENDS, ids=backend_id)
def test_a_strict_prep_takes_numpy_scalars_for_0d_leaves(backend: di.AbstractBackend) -> None:
    """NumPy arithmetic makes NumPy scalars of 0-d arrays (``p[k] - 0.1 * g[k]``): the
    same argument for a strict prep, as for an unprepared call."""

    def f(p: Any) -> Any:
        xp = di.array_namespace(p["w"])
        return xp.sum(p["w"] ** 2) + p["b"] ** 2

    p = {"w": np.ones(3), "b": np.array(0.5)}
    prep = di.prepare_gradient(f, backend, p)
    g = di.gradient(f, prep, backend, p)
    p = {k: p[k] - 0.1 * g[k] for k in p}
    assert isinstance(p["b"], np.float64)  # what NumPy made of it
    g = di.gradient(f, prep, backend, p)
    np.testing.assert_allclose(g["b"], 0.8, rtol=1e-6)
    np.testing.assert_allclose(g["w"], 1.6 * np.ones(3), rtol=1e-6)


def _product(p: Any) -> Any:
    """f(p) = b * a (elementwise) for p = {"b": b, "a": a} and the nested / int-key layouts."""
    xp = di.array_namespace(p)
    b, a = (p["b"], p["a"]) if "b" in p else (p[2], p[1]) if 2 in p else (p["z"]["b"], p["z"]["a"])
    return xp.multiply(b, a)


def _energy(p: Any) -> Any:
    xp = di.array_namespace(p)
    return xp.sum(_product(p) * _product(p)) / 2


@pytest.mark.parametrize("layout", ["flat", "nested", "int"])
@pytest.mark.parametrize("backend", BACKENDS, ids=backend_id)
def test_jacobian_and_hessian_keep_the_key_order_of_x_at_every_level(backend: Any, layout: str) -> None:
    """Results holding x's structure inside another (a Jacobian: x's structure of
    arrays; a Hessian: x's structure of x's structures) keep x's key order at every
    level, as gradient does (AutoJAX sorted them)."""
    b, a = np.array([1.0, 2.0]), np.array([3.0, 4.0])
    x = {"flat": {"b": b, "a": a}, "nested": {"z": {"b": b, "a": a}}, "int": {2: b, 1: a}}[layout]
    kb, ka = {"flat": ("b", "a"), "nested": ("b", "a"), "int": (2, 1)}[layout]

    def inner(tree: Any) -> Any:
        return tree["z"] if layout == "nested" else tree

    def keys(tree: Any) -> list[Any]:
        return list(inner(tree))

    # d(b*a)/db = diag(a), d(b*a)/da = diag(b); hessian of sum((b*a)^2)/2
    tol = 1e-5
    for jac in (di.jacobian(_product, backend, x), di.value_and_jacobian(_product, backend, x)[1]):
        assert keys(jac) == [kb, ka]
        np.testing.assert_allclose(to_np(inner(jac)[kb]), np.diag(a), rtol=tol)
        np.testing.assert_allclose(to_np(inner(jac)[ka]), np.diag(b), rtol=tol)
    y, g, h2 = di.value_gradient_and_hessian(_energy, backend, x)
    np.testing.assert_allclose(y, ((b * a) ** 2).sum() / 2, rtol=tol)
    assert keys(g) == [kb, ka]
    np.testing.assert_allclose(inner(g)[kb], a * a * b, rtol=tol)
    for hess in (di.hessian(_energy, backend, x), h2):
        assert keys(hess) == [kb, ka]
        assert [keys(block) for block in inner(hess).values()] == [[kb, ka], [kb, ka]]
        np.testing.assert_allclose(inner(inner(hess)[kb])[kb], np.diag(a * a), rtol=1e-4, atol=1e-4)
        np.testing.assert_allclose(inner(inner(hess)[kb])[ka], np.diag(2 * a * b), rtol=1e-4, atol=1e-4)
        np.testing.assert_allclose(inner(inner(hess)[ka])[kb], np.diag(2 * a * b), rtol=1e-4, atol=1e-4)


def to_np(value: Any) -> Any:
    return np.asarray(value, dtype=float)


@pytest.mark.parametrize("backend", JAX_BACKENDS, ids=backend_id)
def test_pytree_outputs_keep_the_key_order_of_f(backend: Any) -> None:
    """An f returning a dict: the output level of jacobian, pushforward and the values
    keeps f's key order (AutoJAX sorted it), for an array x and a pytree x."""

    def f(x: Any) -> Any:
        return {"zeta": 2 * x, "alpha": x**2}

    x = np.array([1.0, 3.0])
    jac = di.jacobian(f, backend, x)
    assert list(jac) == ["zeta", "alpha"]
    np.testing.assert_allclose(jac["alpha"], np.diag(2 * x))
    y, jac = di.value_and_jacobian(f, backend, x)
    assert list(y) == list(jac) == ["zeta", "alpha"]
    (jv,) = di.pushforward(f, backend, x, (np.array([1.0, 0.0]),))
    assert list(jv) == ["zeta", "alpha"]
    np.testing.assert_allclose(jv["zeta"], [2.0, 0.0])
    y, (jv,) = di.value_and_pushforward(f, backend, x, (np.array([1.0, 0.0]),))
    assert list(y) == list(jv) == ["zeta", "alpha"]

    def g(p: Any) -> Any:
        return {"zeta": p["b"] * p["a"], "alpha": p["b"]}

    p = {"b": np.array([1.0, 2.0]), "a": np.array([3.0, 4.0])}
    jac = di.jacobian(g, backend, p)
    assert list(jac) == ["zeta", "alpha"]
    assert [list(block) for block in jac.values()] == [["b", "a"], ["b", "a"]]
    np.testing.assert_allclose(jac["zeta"]["a"], np.diag([1.0, 2.0]))


@pytest.mark.parametrize("backend", BACKENDS, ids=backend_id)
def test_a_python_float_leaf_in_a_tangent_is_a_0d_leaf(backend: Any) -> None:
    """A tangent {"v": 1.0, "w": ones(3)} for x = {"v": array(0.5), "w": ones(3)}: the
    float is the 0-d leaf the preparation's check takes it for (the flattening backends
    raised AttributeError: 'float' object has no attribute 'shape')."""

    def f(p: Any) -> Any:
        xp = di.array_namespace(p)
        return p["v"] ** 2 * xp.sum(p["w"] ** 2)

    x = {"v": np.array(0.5), "w": np.ones(3)}
    t = {"v": 1.0, "w": np.ones(3)}
    # gradient (2 v |w|^2, 2 v^2 w) = (3, 0.5 w); H t = (2|w|^2 + 4 v w.t_w, 4 v w t_v + 2 v^2 t_w)
    (hv,) = di.hvp(f, backend, x, (t,))
    np.testing.assert_allclose(to_np(hv["v"]), 12.0, rtol=1e-5)
    np.testing.assert_allclose(to_np(hv["w"]), [2.5, 2.5, 2.5], rtol=1e-5)
    (jv,) = di.pushforward(f, backend, x, (t,))
    np.testing.assert_allclose(to_np(jv), 4.5, rtol=1e-5)
    prep = di.prepare_hvp(f, backend, x, (t,))
    (hv,) = di.hvp(f, prep, backend, x, ({"v": 2.0, "w": np.zeros(3)},))
    np.testing.assert_allclose(to_np(hv["v"]), 12.0, rtol=1e-5)
    np.testing.assert_allclose(to_np(hv["w"]), [4.0, 4.0, 4.0], rtol=1e-5)


@pytest.mark.parametrize("backend", BACKENDS, ids=backend_id)
def test_a_python_float_cotangent_of_a_native_pytree_gives_the_gradient(backend: Any) -> None:
    """pullback(f, x, (2.0,)) of a scalar f at a pytree of the engine's own arrays is twice
    the gradient (eager and compiled TensorFlow raised AttributeError: 'float' object has
    no attribute 'dtype')."""

    def f(p: Any) -> Any:
        xp = di.array_namespace(p["a"])
        return xp.sum(p["a"] ** 2) + xp.sum(p["b"])

    native = engine_family(backend)
    x = {"a": as_family(np.array([1.0, 2.0]), native), "b": as_family(np.array([3.0]), native)}
    (pb,) = di.pullback(f, backend, x, (2.0,))
    np.testing.assert_allclose(to_numpy(pb["a"]), [4.0, 8.0], rtol=1e-5)
    np.testing.assert_allclose(to_numpy(pb["b"]), [2.0], rtol=1e-5)
