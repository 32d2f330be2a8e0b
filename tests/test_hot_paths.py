"""The prepared hot paths of issue 23 give the same results as the slow ones.

A pytree ``x`` on ``AutoJAX(jit=True)`` is compared by the compiled executable (a
strict prep still reports the differing leaf; a non-strict one compiles again);
eager torch differentiates the caller's parameters (leaf tensors that require grad)
as they are, as ``torch.autograd.grad`` does, and its other tensors through detached
aliases made at each call (the prep holds none); flat containers are flattened and
rebuilt in one step.
"""

from __future__ import annotations

import collections
import gc
import weakref
from typing import Any

import numpy as np
import optree
import pytest
from conftest import BACKENDS, backend_id, capabilities, compiles, engine_family
from hypothesis import given, settings
from hypothesis import strategies as st

import di
from di.families import get_family
from di.pytrees.structure import Structure

jax = pytest.importorskip("jax")
torch = pytest.importorskip("torch")
jnp = jax.numpy


def takes_pytree_gradients(backend: Any) -> bool:
    """Whether the engine's gradient programs take a pytree x as it is (else di flattens it
    into one vector with the prepared layout)."""
    return "gradient" in capabilities(backend).pytrees_when(compiles(backend))


TREE_TAKERS = [b for b in BACKENDS if takes_pytree_gradients(b)]
FLATTENERS = [b for b in BACKENDS if not takes_pytree_gradients(b)]


def weighted(p: Any, c: Any) -> Any:
    """``sum(c * w**2) + sum(b**3)``: gradient ``{"w": 2 c w, "b": 3 b**2}``."""
    xp = di.array_namespace(p["w"])
    return xp.sum(c * p["w"] ** 2) + xp.sum(p["b"] ** 3)


# JAX arrays in JAX's default precision (float32), which the compiled-JAX tests below prepare with.
TO_FAMILY = {"jax": jnp.asarray}


def _convert(family: str) -> Any:
    return TO_FAMILY.get(family, get_family(family).from_numpy)


def _tree(family: str, w: list[float], b: list[float]) -> dict[str, Any]:
    convert = _convert(family)
    return {"w": convert(np.array(w)), "b": convert(np.array(b))}


def _numpy(value: Any) -> np.ndarray:
    return np.asarray(value.detach() if hasattr(value, "detach") else value)


@pytest.mark.parametrize("backend", TREE_TAKERS, ids=backend_id)
def test_a_non_strict_prep_takes_another_shape_of_pytree(backend: Any) -> None:
    family = engine_family(backend)
    c = di.Constant(2.0)
    prep = di.prepare_gradient(weighted, backend, _tree(family, [1.0, 2.0], [0.5]), c, strict=False)
    for w, b in (([1.0, 2.0], [0.5]), ([3.0, -1.0, 0.5], [1.0, 2.0]), ([1.0, 2.0], [0.5])):
        g = di.gradient(weighted, prep, backend, _tree(family, w, b), c)
        np.testing.assert_allclose(_numpy(g["w"]), 4 * np.array(w), rtol=1e-6)
        np.testing.assert_allclose(_numpy(g["b"]), 3 * np.array(b) ** 2, rtol=1e-6)


@pytest.mark.parametrize("backend", FLATTENERS, ids=backend_id)
def test_a_flattening_backend_refuses_another_shape_of_pytree_even_without_the_check(backend: Any) -> None:
    """Engines that take one vector flatten x with the prepared layout: leaves of other
    shapes are refused (before this, their results came back in the prepared shapes)."""
    c = di.Constant(2.0)
    prep = di.prepare_gradient(weighted, backend, _tree("numpy", [1.0, 2.0], [0.5]), c, strict=False)
    g = di.gradient(weighted, prep, backend, _tree("numpy", [3.0, -1.0], [1.0]), c)
    np.testing.assert_allclose(g["w"], [12.0, -4.0], rtol=1e-6)
    for w, b in (([3.0, -1.0, 0.5], [1.0, 2.0]), ([3.0], [1.0, 2.0])):  # (the second: the same size)
        with pytest.raises(di.PreparationMismatchError, match=r"leaves have other shapes \(\(1,\), \(2,\)\)"):
            di.gradient(weighted, prep, backend, _tree("numpy", w, b), c)


def test_a_strict_compiled_jax_prep_reports_each_kind_of_difference() -> None:
    backend, c = di.AutoJAX(jit=True), di.Constant(2.0)
    prep = di.prepare_gradient(weighted, backend, _tree("jax", [1.0, 2.0], [0.5]), c)
    g = di.gradient(weighted, prep, backend, _tree("jax", [3.0, 4.0], [1.0]), c)
    np.testing.assert_allclose(g["w"], [12.0, 16.0])
    with pytest.raises(di.PreparationMismatchError, match=r"x\['w'\] differs.*\(2,\).*\(3,\)"):
        di.gradient(weighted, prep, backend, _tree("jax", [1.0, 2.0, 3.0], [0.5]), c)
    with pytest.raises(di.PreparationMismatchError, match="structure"):
        di.gradient(weighted, prep, backend, {"w": jnp.ones(2)}, c)
    with pytest.raises(di.PreparationMismatchError, match=r"x\['b'\] differs.*int32"):
        di.gradient(weighted, prep, backend, {"w": jnp.ones(2), "b": jnp.ones(1, dtype=jnp.int32)}, c)
    with pytest.raises(di.PreparationMismatchError, match="context 1"):
        di.gradient(weighted, prep, backend, _tree("jax", [1.0, 2.0], [0.5]), di.Constant(jnp.ones(3)))
    # and the prep still serves the prepared arguments afterwards, without compiling again
    g = di.gradient(weighted, prep, backend, _tree("jax", [1.0, 1.0], [2.0]), c)
    np.testing.assert_allclose(g["b"], [12.0])


def test_a_compiled_jax_pytree_prep_compiles_once_for_a_loop() -> None:
    traces = [0]

    def f(p: Any) -> Any:
        xp = di.array_namespace(p["w"])
        traces[0] += 1
        return xp.sum(p["w"] ** 2) + xp.sum(p["b"] ** 3)

    backend = di.AutoJAX(jit=True)
    p = _tree("jax", [1.0, 2.0], [0.5])
    prep = di.prepare_gradient(f, backend, p)
    before = traces[0]
    for _ in range(4):
        g = di.gradient(f, prep, backend, p)
        p = {key: p[key] - 0.1 * g[key] for key in p}
    assert traces[0] == before


def _model_loss() -> tuple[Any, dict[str, Any], tuple[Any, ...]]:
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 1, dtype=torch.float64)
    inputs = torch.randn(5, 3, dtype=torch.float64)
    targets = torch.randn(5, 1, dtype=torch.float64)

    def loss(p: Any, inputs: Any, targets: Any) -> Any:
        xp = di.array_namespace(inputs)
        return xp.mean((torch.func.functional_call(model, p, (inputs,)) - targets) ** 2)

    return loss, dict(model.named_parameters()), (inputs, targets)


def _native(loss: Any, params: dict[str, Any], data: tuple[Any, ...]) -> dict[str, np.ndarray]:
    leaves = {k: v.detach().requires_grad_() for k, v in params.items()}
    grads = torch.autograd.grad(loss(leaves, *data), list(leaves.values()))
    return {k: g.numpy() for k, g in zip(leaves, grads)}


@pytest.mark.parametrize("create_graph", [False, True])
def test_torch_parameters_updated_between_calls_give_fresh_gradients(create_graph: bool) -> None:
    loss, params, data = _model_loss()
    backend = di.AutoTorch(create_graph=create_graph)
    contexts = tuple(di.Constant(d) for d in data)
    prep = di.prepare_gradient(loss, backend, params, *contexts)
    for _ in range(3):
        g = di.gradient(loss, prep, backend, params, *contexts)
        expected = _native(loss, params, data)
        assert list(g) == list(params)
        for key in params:
            np.testing.assert_allclose(_numpy(g[key]), expected[key], rtol=1e-12)
        with torch.no_grad():  # an optimizer step: in place, the same tensors
            for key in params:
                params[key] -= 0.5 * g[key].detach()
    with torch.no_grad():  # the same tensor objects on new memory
        params["weight"].data = params["weight"].data * 3.0
    g = di.gradient(loss, prep, backend, params, *contexts)
    np.testing.assert_allclose(_numpy(g["weight"]), _native(loss, params, data)["weight"], rtol=1e-12)
    other = {k: torch.nn.Parameter(v.detach() + 1.0) for k, v in params.items()}  # other tensors
    g = di.gradient(loss, prep, backend, other, *contexts)
    np.testing.assert_allclose(_numpy(g["bias"]), _native(loss, other, data)["bias"], rtol=1e-12)


def _calls(backend: Any, loss: Any, params: dict[str, Any], contexts: tuple[Any, ...]) -> dict[str, Any]:
    """The gradient from each operator taking a pytree ``x`` (prepared, twice, and
    unprepared): ``gradient``, ``value_and_gradient`` and the pullback of 1."""
    one = (torch.ones((), dtype=torch.float64),)
    prep = di.prepare_gradient(loss, backend, params, *contexts)
    pullback_prep = di.prepare_pullback(loss, backend, params, one, *contexts)
    return {
        "gradient": di.gradient(loss, prep, backend, params, *contexts),
        "gradient again": di.gradient(loss, prep, backend, params, *contexts),
        "value_and_gradient": di.value_and_gradient(loss, prep, backend, params, *contexts)[1],
        "unprepared": di.gradient(loss, backend, params, *contexts),
        "pullback": di.pullback(loss, pullback_prep, backend, params, one, *contexts)[0],
    }


@pytest.mark.parametrize("mode", ["create_graph=False", "no_grad"])
def test_parameters_are_differentiated_as_torch_autograd_grad_does(mode: str) -> None:
    """Leaf tensors that require grad (a model's parameters) are differentiated as
    they are, unconnected to the caller's graph: the results are
    torch.autograd.grad's, carry no graph, and the parameters' .grad stays None."""
    loss, params, data = _model_loss()
    contexts = tuple(di.Constant(d) for d in data)
    expected = _native(loss, params, data)
    if mode == "no_grad":
        with torch.no_grad():
            results = _calls(di.AutoTorch(), loss, params, contexts)
    else:
        results = _calls(di.AutoTorch(create_graph=False), loss, params, contexts)
    for name, g in results.items():
        assert list(g) == list(params), name
        for key in params:
            assert not g[key].requires_grad and g[key].grad_fn is None, name
            np.testing.assert_allclose(_numpy(g[key]), expected[key], rtol=1e-12, err_msg=name)
    assert all(p.grad is None for p in params.values())


def test_parameters_unused_by_f_get_zeros_and_bad_outputs_are_refused() -> None:
    _, params, data = _model_loss()
    backend, contexts = di.AutoTorch(create_graph=False), tuple(di.Constant(d) for d in data)

    def weight_only(p: Any, inputs: Any, targets: Any) -> Any:
        xp = di.array_namespace(inputs)
        return xp.sum(p["weight"] ** 2)

    prep = di.prepare_gradient(weight_only, backend, params, *contexts)
    y, g = di.value_and_gradient(weight_only, prep, backend, params, *contexts)
    np.testing.assert_allclose(_numpy(g["weight"]), 2 * _numpy(params["weight"]), rtol=1e-12)
    np.testing.assert_array_equal(_numpy(g["bias"]), np.zeros(1))
    assert y.shape == () and not y.requires_grad and not g["bias"].requires_grad
    np.testing.assert_allclose(float(y), float((params["weight"].detach() ** 2).sum()), rtol=1e-12)

    def rows(p: Any, inputs: Any, targets: Any) -> Any:
        return torch.func.functional_call(torch.nn.Linear(3, 1, dtype=torch.float64), p, (inputs,))

    with pytest.raises(di.InvalidOutputError, match="gradient"):
        di.gradient(rows, di.prepare_gradient(rows, backend, params, *contexts), backend, params, *contexts)


def test_f_takes_the_caller_s_parameters_when_every_leaf_is_one() -> None:
    loss, params, data = _model_loss()
    seen: list[Any] = []

    def f(p: Any, inputs: Any, targets: Any) -> Any:
        seen.append(p)
        return loss(p, inputs, targets)

    backend, contexts = di.AutoTorch(create_graph=False), tuple(di.Constant(d) for d in data)
    prep = di.prepare_gradient(f, backend, params, *contexts)
    di.gradient(f, prep, backend, params, *contexts)
    assert seen[-1] is params
    params["bias"].requires_grad_(False)  # a frozen leaf is differentiated through an alias...
    g = di.gradient(f, prep, backend, params, *contexts)
    assert seen[-1] is not params and seen[-1]["weight"] is params["weight"]
    assert seen[-1]["bias"] is not params["bias"] and seen[-1]["bias"].data_ptr() == params["bias"].data_ptr()
    expected = _native(loss, params, data)
    for key in params:  # ... and still gets its gradient
        np.testing.assert_allclose(_numpy(g[key]), expected[key], rtol=1e-12)


def test_a_non_leaf_that_requires_grad_keeps_its_alias() -> None:
    """A gradient with respect to a non-leaf is taken at the non-leaf: the caller's
    graph that made it is neither walked nor freed (it can still be backpropagated)."""
    loss, params, data = _model_loss()
    source = torch.ones(1, 3, dtype=torch.float64, requires_grad=True)
    made = {"weight": source * params["weight"].detach(), "bias": params["bias"]}
    seen: list[Any] = []

    def f(p: Any, inputs: Any, targets: Any) -> Any:
        seen.append(p)
        return loss(p, inputs, targets)

    backend, contexts = di.AutoTorch(create_graph=False), tuple(di.Constant(d) for d in data)
    g = di.gradient(f, di.prepare_gradient(f, backend, made, *contexts), backend, made, *contexts)
    assert seen[-1]["bias"] is made["bias"]
    assert seen[-1]["weight"] is not made["weight"] and seen[-1]["weight"].grad_fn is None  # a detached alias
    expected = _native(loss, made, data)
    for key in made:
        np.testing.assert_allclose(_numpy(g[key]), expected[key], rtol=1e-12)
        assert not g[key].requires_grad
    assert source.grad is None
    made["weight"].sum().backward()  # the caller's graph is intact
    np.testing.assert_allclose(_numpy(source.grad), _numpy(params["weight"]), rtol=1e-12)


def test_hooks_of_the_caller_on_a_parameter_do_not_run() -> None:
    """di computes the derivative of f: a hook the caller registered on a parameter
    (say, gradient clipping for its own backward passes) neither runs nor changes it."""
    loss, params, data = _model_loss()
    calls: list[Any] = []
    params["weight"].register_hook(lambda grad: calls.append(grad) or grad * 100.0)
    backend, contexts = di.AutoTorch(create_graph=False), tuple(di.Constant(d) for d in data)
    expected = _native(loss, params, data)
    for name, g in _calls(backend, loss, params, contexts).items():
        np.testing.assert_allclose(_numpy(g["weight"]), expected["weight"], rtol=1e-12, err_msg=name)
    assert calls == []


def test_inference_parameters_that_require_grad_are_differentiated() -> None:
    """Parameters made under inference_mode may require grad, but autograd cannot
    save them: they are copied into normal tensors, as before."""
    loss, params, data = _model_loss()
    with torch.inference_mode():
        params = {k: torch.nn.Parameter(v.detach() * 1.0) for k, v in params.items()}
    assert all(p.requires_grad and p.is_leaf and p.is_inference() for p in params.values())
    backend, contexts = di.AutoTorch(create_graph=False), tuple(di.Constant(d) for d in data)
    expected = _native(loss, {k: v.clone() for k, v in params.items()}, data)
    g = di.gradient(loss, di.prepare_gradient(loss, backend, params, *contexts), backend, params, *contexts)
    for key in params:
        np.testing.assert_allclose(_numpy(g[key]), expected[key], rtol=1e-12)


@pytest.mark.parametrize("change", ["key", "shape", "dtype", "device", "data", "in place"])
def test_a_strict_torch_prep_refuses_a_changed_pytree(change: str) -> None:
    """The strict check of a pytree of tensors reads every leaf at every call: the
    same tensor objects changed since (``.data`` replaced, reshaped in place) are
    refused too, naming the leaf. (A leaf made an ``nn.Parameter`` is a tensor
    like the prepared one: tests/test_prep_matching_rule.py.)"""
    backend = di.AutoTorch(create_graph=False)
    p = _tree("torch", [1.0, 2.0], [0.5])
    c = di.Constant(2.0)
    prep = di.prepare_gradient(weighted, backend, p, c)
    np.testing.assert_allclose(di.gradient(weighted, prep, backend, p, c)["w"].numpy(), [4.0, 8.0])
    leaf = "x\\['b'\\] differs"
    if change == "key":
        p = {"w": p["w"], "c": p["b"]}
        leaf = "structure"
    elif change == "shape":
        p["b"] = torch.ones(2, dtype=torch.float64)
    elif change == "dtype":
        p["b"] = torch.ones(1, dtype=torch.float32)
    elif change == "device":
        p["b"] = torch.ones(1, dtype=torch.float64, device="meta")
    elif change == "data":
        p["b"].data = torch.ones(3, dtype=torch.float64)
    else:
        p["b"].unsqueeze_(0)
    with pytest.raises(di.PreparationMismatchError, match=leaf):
        di.gradient(weighted, prep, backend, p, c)


def test_inference_tensors_updated_in_place_give_fresh_gradients() -> None:
    """An inference tensor cannot require grad: it is copied for each call, never
    reused, so a write under inference_mode is seen by the next call."""
    backend, c = di.AutoTorch(), di.Constant(2.0)
    with torch.inference_mode():
        p = _tree("torch", [1.0, 2.0], [0.5])
    prep = di.prepare_gradient(weighted, backend, p, c)
    np.testing.assert_allclose(di.gradient(weighted, prep, backend, p, c)["w"].numpy(), [4.0, 8.0])
    with torch.inference_mode():
        p["w"].mul_(3.0)
    np.testing.assert_allclose(di.gradient(weighted, prep, backend, p, c)["w"].numpy(), [12.0, 24.0])


def test_a_torch_prep_holds_no_tensors_once_they_are_freed() -> None:
    """Plain tensors are differentiated through detached aliases made at each call
    (a write into a tensor between calls is seen), and nothing of a call outlives it."""
    seen: list[Any] = []  # weak references to what f was given: the detached aliases of p's tensors
    pointers: list[int] = []

    def f(p: Any, c: Any) -> Any:
        seen[:] = [weakref.ref(t) for t in p.values()]
        pointers[:] = [t.data_ptr() for t in p.values()]
        return weighted(p, c)

    backend, c = di.AutoTorch(create_graph=False), di.Constant(2.0)
    p = _tree("torch", [1.0, 2.0], [0.5])
    prep = di.prepare_gradient(f, backend, p, c)
    di.gradient(f, prep, backend, p, c)
    first = list(seen)
    gc.collect()
    assert all(ref() is None for ref in first)  # the first call's aliases died with it
    p["w"].mul_(2.0)  # a write the next call sees: its aliases share p's memory
    g = di.gradient(f, prep, backend, p, c)
    assert pointers == [t.data_ptr() for t in p.values()] and seen[0]() is not p["w"]
    np.testing.assert_allclose(g["w"].numpy(), [8.0, 16.0])
    alive = [weakref.ref(t) for t in p.values()]
    del p, g
    gc.collect()
    assert all(ref() is None for ref in alive)  # the prep holds none of the caller's tensors
    assert all(ref() is None for ref in seen)
    g = di.gradient(f, prep, backend, _tree("torch", [3.0, 1.0], [2.0]), c)
    np.testing.assert_allclose(g["w"].numpy(), [12.0, 4.0])


def test_structure_flattens_flat_containers_as_optree_does() -> None:
    tree = {"zeta": 1, "alpha": 2, "mid": 3}
    structure = Structure(tree)
    assert structure.leaves({"mid": 6, "zeta": 4, "alpha": 5}) == [5, 6, 4]  # optree's (sorted) order
    assert list(structure.unflatten([5, 6, 4])) == ["zeta", "alpha", "mid"]  # the caller's order
    assert structure.leaves({"zeta": 1, "alpha": 2}) is None
    assert structure.leaves({"zeta": 1, "alpha": 2, "other": 3}) is None
    assert structure.leaves([1, 2, 3]) is None
    assert Structure([1, 2]).leaves((1, 2)) is None
    assert Structure((1, 2)).unflatten([3, 4]) == (3, 4)


Pair = collections.namedtuple("Pair", "first second")
KEYS = st.one_of(st.text(max_size=3), st.integers(-3, 3))
TREES = st.recursive(
    st.integers(0, 9),
    lambda children: st.one_of(
        st.just(None),
        st.lists(children, max_size=4),
        st.lists(children, max_size=4).map(tuple),
        st.tuples(children, children).map(lambda pair: Pair(*pair)),
        st.dictionaries(st.text(max_size=3), children, max_size=4),
        st.dictionaries(KEYS, children, max_size=3),  # keys that do not sort: insertion order
        st.dictionaries(st.text(max_size=3), children, max_size=2).map(collections.OrderedDict),  # walked
    ),
    max_leaves=12,
)


def _other_structures(tree: Any) -> list[Any]:
    """Trees that differ from ``tree`` in one place: a container of another type,
    length or keys, somewhere inside."""
    if isinstance(tree, dict):
        changed = [{**tree, "extra key": 1}, list(tree.values())]
        changed += [dict(list(tree.items())[1:])] if tree else []
        for key, value in tree.items():
            changed += [{**tree, key: other} for other in _other_structures(value)[:2]]
        return changed
    if isinstance(tree, (list, tuple)):
        changed = [
            [*tree, 1] if isinstance(tree, list) else (*tree, 1),
            tuple(tree) if isinstance(tree, list) else list(tree),
        ]
        for i, value in enumerate(tree):
            for other in _other_structures(value)[:2]:
                items = list(tree)
                items[i] = other
                changed.append(type(tree)(*items) if hasattr(tree, "_fields") else type(tree)(items))
        return changed
    return [0] if tree is None else []  # a leaf may be anything: the leaves' own check sees it


@given(TREES)
@settings(max_examples=300, deadline=None)
def test_structure_takes_apart_and_rebuilds_trees_as_optree_does(tree: Any) -> None:
    """Nested dicts, lists, tuples, namedtuples and None (the written functions) and
    trees holding an OrderedDict (the walk): optree's leaves, the caller's key
    order back, ``None`` for a tree of another structure."""
    if not isinstance(tree, (dict, list, tuple)):
        tree = [tree]
    structure = Structure(tree)
    leaves, _ = optree.tree_flatten(tree, none_is_leaf=False)
    assert structure.leaves(tree) == leaves
    assert structure.num_leaves == len(leaves)
    rebuilt = structure.unflatten(leaves)
    assert rebuilt == tree and type(rebuilt) is type(tree)
    assert repr(rebuilt) == repr(tree)  # every dict in its own key order
    assert structure.unflatten(iter(leaves)) == tree
    for other in _other_structures(tree):
        if optree.tree_structure(other, none_is_leaf=False) != optree.tree_structure(tree, none_is_leaf=False):
            assert structure.leaves(other) is None, other


@pytest.mark.parametrize("shape", ["wide", "deep", "deeper"])
def test_structure_of_a_wide_or_deep_tree(shape: str) -> None:
    """A tree too large or too deep to write functions for is walked (without
    recursion: 600 levels went past Python's recursion limit): the same leaves and
    tree either way."""
    tree: Any = {f"k{i}": i for i in range(3000)} if shape == "wide" else 0
    if shape != "wide":
        for depth in range(150 if shape == "deep" else 600):
            tree = [tree] if depth % 2 else {"a": tree, "b": None}
    structure = Structure(tree)
    leaves = optree.tree_leaves(tree, none_is_leaf=False)
    assert structure.leaves(tree) == leaves
    assert structure.unflatten(leaves) == tree
    assert structure.leaves([tree]) is None


def test_a_strict_compiled_jax_prep_of_numpy_leaves_refuses_64_bit_ones() -> None:
    """Outside enable_x64 JAX reads a NumPy float64 array as float32, so a float32
    executable would take it: the strict check still refuses it (before, the call
    returned float32 gradients for a float64 leaf or context)."""
    backend = di.AutoJAX(jit=True)
    p32 = {"w": np.ones(2, np.float32), "b": np.ones(1, np.float32)}
    c32 = di.Constant(np.float32(2.0) * np.ones(2, np.float32))
    prep = di.prepare_gradient(weighted, backend, p32, c32)
    g = di.gradient(weighted, prep, backend, p32, c32)
    assert g["w"].dtype == np.float32
    np.testing.assert_allclose(g["w"], [4.0, 4.0])
    with pytest.raises(di.PreparationMismatchError, match=r"x\['w'\] differs.*float64"):
        di.gradient(weighted, prep, backend, {"w": np.ones(2), "b": np.ones(1, np.float32)}, c32)
    with pytest.raises(di.PreparationMismatchError, match=r"context 1.*float64"):
        di.gradient(weighted, prep, backend, p32, di.Constant(np.ones(2)))


def test_a_strict_compiled_jax_prep_refuses_a_weakly_typed_x() -> None:
    """JAX compiles a weakly typed array apart (another program): a strict prep made
    for a strongly typed x says so rather than compiling again in silence."""
    backend = di.AutoJAX(jit=True)

    def f(x: Any) -> Any:
        xp = di.array_namespace(x)
        return xp.sum(x**2)

    strong = jnp.ones(3, dtype=jnp.float32)
    weak = jax.lax.broadcast_in_dim(1.0, (3,), ())  # a weakly typed float32 array
    assert weak.aval.weak_type and weak.dtype == strong.dtype and weak.shape == strong.shape
    prep = di.prepare_gradient(f, backend, strong)
    np.testing.assert_allclose(di.gradient(f, prep, backend, 2 * strong), [4.0, 4.0, 4.0])
    with pytest.raises(di.PreparationMismatchError, match="weak"):
        di.gradient(f, prep, backend, weak)


@pytest.mark.parametrize("backend", [di.AutoJAX(), di.AutoJAX(jit=True)], ids=["jax", "jax-jit"])
def test_jax_tangents_are_cast_to_x_dtype_unless_they_have_it(backend: Any) -> None:
    """A JAX tangent of x's dtype is passed on as it is; a weakly typed one, one of
    another dtype and a numpy one are cast to x's dtype first (before, every tangent
    was converted at every call, 10 us eagerly). Each gives jax.jvp's (or jax.vjp's)
    product on the cast tangent (to float32 rounding: jit fuses)."""

    def f(x: Any) -> Any:
        xp = di.array_namespace(x)
        return xp.sin(x) * xp.sum(x**2)

    x = jnp.asarray([0.3, -1.2, 2.0], dtype=jnp.float32)
    strong = jnp.asarray([1.0, 0.5, -2.0], dtype=jnp.float32)
    weak = jax.lax.broadcast_in_dim(0.5, (3,), ())
    assert weak.aval.weak_type
    tangents = {"strong": strong, "weak": weak, "int": jnp.asarray([1, 0, 2]), "numpy": np.asarray(strong, np.float64)}
    for name, t in tangents.items():
        expected_dy = jax.jvp(f, (x,), (jnp.asarray(t, dtype=jnp.float32),))[1]
        expected_dx = jax.vjp(f, x)[1](jnp.asarray(t, dtype=jnp.float32))[0]
        (dy,) = di.pushforward(f, backend, x, (t,))
        (dx,) = di.pullback(f, backend, x, (t,))
        assert dy.dtype == dx.dtype == jnp.float32, name
        np.testing.assert_allclose(dy, expected_dy, rtol=1e-5, atol=1e-6, err_msg=name)
        np.testing.assert_allclose(dx, expected_dx, rtol=1e-5, atol=1e-6, err_msg=name)


@pytest.mark.parametrize(
    "backend",
    [*TREE_TAKERS, di.AutoTorch(compile=True, compile_options={"backend": "eager"})],
    ids=backend_id,
)
def test_a_non_strict_prep_given_other_keys_keeps_them(backend: Any) -> None:
    """A non-strict prep of ``{"w", "b"}`` called with ``{"c", "w"}``: the result has
    the call's keys (before, the prepared key order was imposed on it, which renamed
    ``c`` to ``b`` on JAX; compiled torch refused the dict)."""
    family = engine_family(backend)
    convert = _convert(family)

    def f(p: Any) -> Any:
        xp = di.array_namespace(p["w"])
        return xp.sum(p["w"] ** 2) + xp.sum(p["c"] ** 3) if "c" in p else xp.sum(p["w"] ** 2)

    prep = di.prepare_gradient(f, backend, _tree(family, [1.0, 2.0], [0.5]), strict=False)
    g = di.gradient(f, prep, backend, {"c": convert(np.array([1.0, 2.0])), "w": convert(np.array([3.0]))})
    assert set(g) == {"c", "w"}
    np.testing.assert_allclose(_numpy(g["c"]), [3.0, 12.0])
    np.testing.assert_allclose(_numpy(g["w"]), [6.0])


def test_compiled_torch_results_keep_the_dict_order_of_x() -> None:
    """torch.func takes a dict of tensors as it is and returns it in x's key order
    (which is not sorted here), for both forms of the gradient."""
    backend = di.AutoTorch(compile=True, compile_options={"backend": "eager"})
    p = _tree("torch", [1.0, 2.0], [0.5])
    assert list(p) == ["w", "b"]
    prep = di.prepare_gradient(weighted, backend, p, di.Constant(2.0))
    g = di.gradient(weighted, prep, backend, p, di.Constant(2.0))
    y, g2 = di.value_and_gradient(weighted, prep, backend, p, di.Constant(2.0))
    assert list(g) == list(g2) == ["w", "b"]
    np.testing.assert_allclose(_numpy(g["w"]), [4.0, 8.0])
    np.testing.assert_allclose(_numpy(g2["b"]), [0.75])
    np.testing.assert_allclose(_numpy(y), 2.0 * 5.0 + 0.125)


def _di_functions_entered(call: Any) -> list[str]:
    """The functions of di's own modules that ``call`` enters (``di.namespace``, which
    ``f`` calls, aside), in order."""
    import os
    import sys

    root = os.path.dirname(di.__file__) + os.sep
    entered: list[str] = []

    def profile(frame: Any, event: str, arg: Any) -> None:
        filename = frame.f_code.co_filename
        if event == "call" and filename.startswith(root) and not filename.endswith("namespace.py"):
            entered.append(frame.f_code.co_name)

    sys.setprofile(profile)
    try:
        call()
    finally:
        sys.setprofile(None)
    return entered


def _square_sum(x: Any) -> Any:
    xp = di.array_namespace(x)
    return xp.sum(x * x)


def _tree_square_sum(p: Any) -> Any:
    xp = di.array_namespace(p["a"])
    return xp.sum(p["a"] ** 2) + xp.sum(p["b"] ** 2)


@pytest.mark.parametrize(
    ("case", "most"),
    [("numpy x on AutoJAX(jit=True)", 2), ("jax x", 2), ("jax dict, sorted keys", 2), ("torch x", 6)],
)
def test_a_prepared_call_enters_few_functions_of_di(case: str, most: int) -> None:
    """The prepared hot path in Python calls (what a call costs on top of the engine's,
    0.1-0.5 us each on a slow core), counted rather than timed: the operator
    function, the prep's runner, and what the engine's program needs (2, 2, 2 and 6
    here; 4 for the dict and 6 for torch before they were unrolled; 3 for a JAX x
    before its abstract value was tested inline; torch's sixth, grad_of_scalar, calls
    autograd's engine as torch.autograd.grad does, without grad's own Python functions,
    which are not counted here but cost more)."""
    f: Any = _square_sum
    if case.startswith("numpy x"):
        backend, x = di.AutoJAX(jit=True), np.array([1.0, 2.0], dtype=np.float32)
    elif case == "jax x":
        backend, x = di.AutoJAX(jit=True), jnp.array([1.0, 2.0])
    elif case.startswith("jax dict"):
        backend, x, f = di.AutoJAX(jit=True), {"a": jnp.array([1.0, 2.0]), "b": jnp.array([3.0])}, _tree_square_sum
    else:
        backend, x = di.AutoTorch(), torch.tensor([1.0, 2.0])
    prep = di.prepare_gradient(f, backend, x)
    di.gradient(f, prep, backend, x)  # (a first call may compile)
    results: list[Any] = []
    entered = _di_functions_entered(lambda: results.append(di.gradient(f, prep, backend, x)))
    assert entered[0] == "dispatch" and len(entered) <= most, entered
    g = results[0]
    np.testing.assert_allclose(_numpy(g["a"]) if isinstance(g, dict) else _numpy(g), [2.0, 4.0])
    if isinstance(g, dict):
        np.testing.assert_allclose(_numpy(g["b"]), [6.0])
    if case.startswith("numpy x"):
        assert isinstance(g, np.ndarray) and g.flags.writeable


@pytest.mark.parametrize("operator", ["pushforward", "pullback", "hvp"])
def test_a_compiled_jax_tangent_call_enters_two_functions_of_di(operator: str) -> None:
    """AutoJAX(jit=True) pushforward, pullback and hvp at a JAX x and tangent: the
    operator function and the runner (x and the tangent tested by their abstract value,
    inline; the jitted function called by it, its one result put in a tuple there);
    3 before the runner called the jitted function itself, 5 before the abstract
    values were tested inline. A tangent of another shape is still refused, and a
    strict prep of a NumPy tangent takes the same path."""
    backend, x, v = di.AutoJAX(jit=True), jnp.array([1.0, 2.0]), jnp.array([1.0, -1.0])
    f: Any = _square_sum if operator == "hvp" else (lambda x: x * x)
    prepare, call = getattr(di, f"prepare_{operator}"), getattr(di, operator)
    prep = prepare(f, backend, x, (v,))
    call(f, prep, backend, x, (v,))
    results: list[Any] = []
    entered = _di_functions_entered(lambda: results.append(call(f, prep, backend, x, (v,))))
    assert entered[0] == "dispatch" and len(entered) <= 2, entered
    expected = [2.0, -2.0] if operator == "hvp" else [2.0, -4.0]  # 2 v; 2 x * v
    assert results[0].__class__ is tuple and len(results[0]) == 1
    np.testing.assert_allclose(results[0][0], expected)
    with pytest.raises(di.PreparationMismatchError, match="differs"):
        call(f, prep, backend, x, (jnp.ones(3),))
    with pytest.raises(di.PreparationMismatchError, match="differs"):
        call(f, prep, backend, x, (np.array([1.0, -1.0], dtype=np.float32),))
    numpy_v = np.array([1.0, -1.0], dtype=np.float32)
    prep = prepare(f, backend, x, (numpy_v,))
    call(f, prep, backend, x, (numpy_v,))
    entered = _di_functions_entered(lambda: results.append(call(f, prep, backend, x, (numpy_v,))))
    assert len(entered) <= 2, entered
    np.testing.assert_allclose(results[-1][0], expected)


def test_the_everyday_torch_ml_call_takes_the_short_path() -> None:
    """value_and_gradient with has_aux of a parameter dict, with a batch (X, y) as one
    Constant, on eager AutoTorch(): the short path a torch user writes (detach each
    leaf, f, torch.autograd.grad), aux detached and its own memory; counted, not
    timed: 7 functions of di (the seventh, grad_of_scalar, calls autograd's engine as
    torch.autograd.grad does, without grad's own Python functions, which cost more;
    6 before it; 10 before the batch's requires_grad, aux's detaching, the
    tree gradient's backward and aux's family check went inline; 12 before the runner
    called each pytree's leaves and their check inline, 22 before aux's family check,
    aux's detaching, the alias loop and the split of (y, aux) were folded) where the
    general path entered 82."""
    torch.manual_seed(0)
    params = {"w": torch.randn(3, 4), "b": torch.randn(4), "scale": torch.tensor(0.5)}
    batch = (torch.randn(5, 3), torch.randn(5, 4))

    def loss(p: Any, batch: Any) -> Any:
        X, y = batch
        xp = di.array_namespace(X)
        prediction = p["scale"] * xp.tanh(X @ p["w"] + p["b"])
        return xp.mean((prediction - y) ** 2), {"mean": xp.mean(prediction)}

    backend, context = di.AutoTorch(), di.Constant(batch)
    prep = di.prepare_gradient(loss, backend, params, context, has_aux=True)
    di.value_and_gradient(loss, prep, backend, params, context, has_aux=True)
    results: list[Any] = []
    entered = _di_functions_entered(
        lambda: results.append(di.value_and_gradient(loss, prep, backend, params, context, has_aux=True))
    )
    assert "run_tree_gradient" in entered and "wants_graph" not in entered and len(entered) <= 7, entered
    (value, aux), grads = results[0]
    leaves = {name: t.detach().requires_grad_() for name, t in params.items()}
    expected_value, expected_aux = loss(leaves, batch)
    expected = dict(zip(leaves, torch.autograd.grad(expected_value, tuple(leaves.values()))))
    torch.testing.assert_close(value, expected_value.detach())
    assert list(grads) == list(params)
    for name in params:
        torch.testing.assert_close(grads[name], expected[name])
    torch.testing.assert_close(aux["mean"], expected_aux["mean"].detach())
    assert not aux["mean"].requires_grad and not value.requires_grad

    def returning_the_batch(p: Any, batch: Any) -> Any:
        return loss(p, batch)[0], {"X": batch[0]}

    # an aux tensor that is an input (the batch's X) is a copy, never the caller's memory
    prep = di.prepare_gradient(returning_the_batch, backend, params, context, has_aux=True)
    (_, aux), _ = di.value_and_gradient(returning_the_batch, prep, backend, params, context, has_aux=True)
    torch.testing.assert_close(aux["X"], batch[0])
    assert aux["X"].untyped_storage().data_ptr() != batch[0].untyped_storage().data_ptr()


def test_the_torch_tree_gradient_s_short_path_leaves_other_batches_and_aux_to_the_general_one() -> None:
    """What the short path of a torch tree gradient asks inline (whether a tuple
    Constant's tensors require grad; whether aux is a flat dict of tensors f
    computed) sends everything else to the general path, as before: a batch tensor
    that requires grad keeps its graph (the value's gradient flows into it), and an
    aux holding a view of a parameter, or a float, comes back as the general path
    gives it (the view a copy: never the caller's memory)."""
    params = {"w": torch.tensor([1.0, 2.0]), "b": torch.tensor(0.5)}
    X = torch.tensor([3.0, -1.0], requires_grad=True)
    backend = di.AutoTorch()

    def loss(p: Any, batch: Any) -> Any:
        X, scale = batch
        xp = di.array_namespace(X)
        return scale * xp.sum(p["w"] * X) + p["b"], {"row": p["w"][:1], "note": 2.5}

    context = di.Constant((X, torch.tensor(2.0)))
    prep = di.prepare_gradient(loss, backend, params, context, has_aux=True)
    (value, aux), grads = di.value_and_gradient(loss, prep, backend, params, context, has_aux=True)
    torch.testing.assert_close(grads["w"], torch.tensor([6.0, -2.0]))
    torch.testing.assert_close(grads["b"], torch.tensor(1.0))
    (gradient_of_x,) = torch.autograd.grad(value, X)  # the batch's graph was kept
    torch.testing.assert_close(gradient_of_x, torch.tensor([2.0, 4.0]))
    assert aux["note"] == 2.5
    torch.testing.assert_close(aux["row"], torch.tensor([1.0]))
    assert aux["row"].untyped_storage().data_ptr() != params["w"].untyped_storage().data_ptr()

    plain = di.Constant((X.detach(), torch.tensor(2.0)))
    prep = di.prepare_gradient(loss, backend, params, plain, has_aux=True)
    (value, aux), grads = di.value_and_gradient(loss, prep, backend, params, plain, has_aux=True)
    assert not value.requires_grad and aux["note"] == 2.5 and not aux["row"].requires_grad
    torch.testing.assert_close(grads["w"], torch.tensor([6.0, -2.0]))
    assert aux["row"].untyped_storage().data_ptr() != params["w"].untyped_storage().data_ptr()


@pytest.mark.parametrize("caller", ["jax", "numpy"])
def test_the_key_order_step_lays_aux_out_for_every_kind_of_aux_and_structure(caller: str) -> None:
    """On AutoJAX(jit=True) a dict x's key order step also lays aux out (one
    generated function): the plain and combined forms, aux of the caller's arrays,
    aux with other leaves, a NumPy caller's aux converted, and a strict=False
    prep given another structure (the fallback) all come back as JAX lays them out,
    in x's key order."""
    backend = di.AutoJAX(jit=True)
    as_caller: Any = jnp.asarray if caller == "jax" else (lambda v: np.asarray(v, dtype=np.float32))
    params = {"w": as_caller([1.0, 2.0]), "b": as_caller(0.5)}  # (not sorted keys)

    def loss(p: Any, scale: Any) -> Any:
        xp = di.array_namespace(p["w"])
        y = scale * xp.sum(p["w"] ** 2) + p["b"]
        return y, {"mean": xp.mean(p["w"]), "note": "ok", "n": 2}

    context = di.Constant(as_caller(3.0))
    for strict in (True, False):
        prep = di.prepare_gradient(loss, backend, params, context, has_aux=True, strict=strict)
        for _ in range(3):  # (the first call fixes the generated step)
            (value, aux), grads = di.value_and_gradient(loss, prep, backend, params, context, has_aux=True)
            plain, plain_aux = di.gradient(loss, prep, backend, params, context, has_aux=True)
            for result, kept in ((grads, aux), (plain, plain_aux)):
                assert list(result) == ["w", "b"]
                np.testing.assert_allclose(np.asarray(result["w"]), [6.0, 12.0])
                np.testing.assert_allclose(np.asarray(result["b"]), 1.0)
                assert list(kept) == ["mean", "note", "n"] and kept["note"] == "ok" and kept["n"] == 2
                assert di.families.family_of(kept["mean"]) == caller
                np.testing.assert_allclose(np.asarray(kept["mean"]), 1.5)
            np.testing.assert_allclose(np.asarray(value), 15.5)
    other = {"w": as_caller([1.0, 2.0, 3.0]), "b": as_caller(0.5), "c": as_caller(1.0)}
    (value, aux), grads = di.value_and_gradient(loss, prep, backend, other, context, has_aux=True)
    assert set(grads) == {"w", "b", "c"} and aux["note"] == "ok"
    np.testing.assert_allclose(np.asarray(grads["w"]), [6.0, 12.0, 18.0])
    np.testing.assert_allclose(np.asarray(value), 42.5)


@pytest.mark.parametrize("strict", [True, False])
def test_compiled_jax_builds_the_callers_result_from_its_flat_leaves(strict: bool) -> None:
    """On AutoJAX(jit=True) with has_aux the compiled program returns its leaves flat
    (with the trace's aux record) and one generated step builds the caller's result
    from them: the gradient in x's key order, aux (nested, keys not sorted) in f's;
    a strict=False prep given another structure between two prepared calls takes the
    general path, and the prepared x the generated one again; an array x too."""
    backend = di.AutoJAX(jit=True)
    params = {"w": jnp.asarray([1.0, 2.0]), "b": jnp.asarray(0.5)}  # (not sorted keys)

    def loss(p: Any, scale: Any) -> Any:
        y = scale * jnp.sum(p["w"] ** 2) + p["b"]
        return y, {"z": jnp.mean(p["w"]), "a": {"y2": 2 * y, "max": jnp.max(p["w"])}}

    def check(result: Any, size: int) -> None:
        (value, aux), grads = result
        w = np.arange(1.0, size + 1)
        assert type(grads) is dict and type(aux) is dict and list(aux) == ["z", "a"] and list(aux["a"]) == ["y2", "max"]
        np.testing.assert_allclose(np.asarray(grads["w"]), 6.0 * w)
        np.testing.assert_allclose(np.asarray(grads["b"]), 1.0)
        np.testing.assert_allclose(np.asarray(value), 3.0 * np.sum(w**2) + 0.5)
        np.testing.assert_allclose(np.asarray(aux["z"]), np.mean(w))
        np.testing.assert_allclose(np.asarray(aux["a"]["y2"]), 2 * np.asarray(value))
        np.testing.assert_allclose(np.asarray(aux["a"]["max"]), size)

    context = di.Constant(jnp.asarray(3.0))
    prep = di.prepare_gradient(loss, backend, params, context, has_aux=True, strict=strict)
    other = {"w": jnp.asarray([1.0, 2.0, 3.0]), "c": jnp.asarray(1.0), "b": jnp.asarray(0.5)}
    for x in (params, params, other, params) if not strict else (params, params, params):
        result = di.value_and_gradient(loss, prep, backend, x, context, has_aux=True)
        check(result, len(x["w"]))
        # (another structure comes back as JAX lays it out, as before the flat leaves)
        assert list(result[1]) == list(x) if x is params else set(result[1]) == set(x)
        grads, aux = di.gradient(loss, prep, backend, x, context, has_aux=True)
        assert set(grads) == set(x) and list(aux) == ["z", "a"]
        np.testing.assert_allclose(np.asarray(grads["w"]), 6.0 * np.asarray(x["w"]))
    entered = _di_functions_entered(lambda: di.value_and_gradient(loss, prep, backend, params, context, has_aux=True))
    # (the generated step, then aux's family conversion: nested, it is not the flat dict recognised inline)
    slow = {"joined_carried", "joined_laid_out", "ordered", "in_order"}
    assert entered[2] == "laid_out" and not slow & set(entered), entered

    def array_loss(x: Any, scale: Any) -> Any:
        return scale * jnp.sum(x**2), {"m": jnp.mean(x)}

    x = jnp.asarray([1.0, 2.0])
    prep = di.prepare_gradient(array_loss, backend, x, context, has_aux=True, strict=strict)
    for _ in range(3):
        (value, aux), grad = di.value_and_gradient(array_loss, prep, backend, x, context, has_aux=True)
        plain, plain_aux = di.gradient(array_loss, prep, backend, x, context, has_aux=True)
        for g, a in ((grad, aux), (plain, plain_aux)):
            np.testing.assert_allclose(np.asarray(g), [6.0, 12.0])
            assert list(a) == ["m"]
            np.testing.assert_allclose(np.asarray(a["m"]), 1.5)
        np.testing.assert_allclose(np.asarray(value), 15.0)


def test_the_everyday_jax_ml_call_enters_few_functions_of_di() -> None:
    """The same call on AutoJAX(jit=True) (the combined program compiled by its first
    call, aux joined, the gradient put in the dict's own key order): 3 functions of di
    per call, counted, not timed: the operator function, the runner, and the one
    finishing step the runner calls, which builds the caller's result from the
    compiled program's flat leaves (aux joined, the key order, aux's layout and family
    check in one). 4 when aux was joined by a step of its own from the sorted dict JAX
    built, 5 when the trace's aux record was a node of di's own that
    JAX unflattened by a Python call, 7 before aux's layout and family check went into
    the key order; 17 before the
    steps left their wrappers and the key order was one generated function; 25 before
    the compiled executable was called directly, the key order rebuilt without its
    bookkeeping and aux's family recognised by one loop."""
    params = {"w": jnp.ones((3, 4)), "b": jnp.zeros(4), "scale": jnp.asarray(0.5)}  # (not sorted keys)
    batch = (jnp.linspace(-1.0, 1.0, 15).reshape(5, 3), jnp.ones((5, 4)))

    def loss(p: Any, batch: Any) -> Any:
        X, y = batch
        xp = di.array_namespace(X)
        prediction = p["scale"] * xp.tanh(X @ p["w"] + p["b"])
        return xp.mean((prediction - y) ** 2), {"mean": xp.mean(prediction)}

    backend, context = di.AutoJAX(jit=True), di.Constant(batch)
    prep = di.prepare_gradient(loss, backend, params, context, has_aux=True)
    di.value_and_gradient(loss, prep, backend, params, context, has_aux=True)  # (compiles)
    results: list[Any] = []
    entered = _di_functions_entered(
        lambda: results.append(di.value_and_gradient(loss, prep, backend, params, context, has_aux=True))
    )
    assert entered[0] == "dispatch" and len(entered) <= 3, entered
    (value, aux), grads = results[0]
    (expected_value, expected_aux), expected = jax.value_and_grad(loss, has_aux=True)(params, batch)
    np.testing.assert_allclose(value, expected_value, rtol=1e-6)
    np.testing.assert_allclose(aux["mean"], expected_aux["mean"], rtol=1e-6)
    assert list(grads) == list(params)
    for name in params:
        np.testing.assert_allclose(grads[name], expected[name], rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("compile", [False, True])
def test_a_strict_mlx_tangent_call_takes_the_strict_form(compile: bool) -> None:
    """A strict prep's runner, once its comparison has passed, calls the program's
    strict form (on MLX: the common call without asking again for x's and the
    tangent's classes and dtypes); inside a caller's MLX transform that form still
    hands the call to the general path, which differentiates through it."""
    mx = pytest.importorskip("mlx.core")

    def g(x: Any) -> Any:
        return x * x

    backend = di.AutoMLX(compile=compile)
    x, v = mx.array([1.0, 2.0]), mx.array([1.0, -1.0])
    prep = di.prepare_pushforward(g, backend, x, (v,))
    di.pushforward(g, prep, backend, x, (v,))
    results: list[Any] = []
    entered = _di_functions_entered(lambda: results.append(di.pushforward(g, prep, backend, x, (v,))))
    # (then MLX's jvp of f through di's layers: eager, or traced at each call under the suite's
    # MLX_DISABLE_COMPILE; compiled outside the suite, the strict form is the last of three)
    assert entered[:3] == ["dispatch", "run_strict_with_tangents_0c", "strict_with_tangents"], entered
    if not compile:  # then the operator's function, one mx.jvp of the checked f: 12 before it skipped the
        # general pushforward's closures, loop and helpers for one tangent and no context
        assert entered[3:] == ["<lambda>", "value_and_pushforward", "checked", "array_output"], entered
    np.testing.assert_allclose(np.array(results[0][0]), [2.0, -4.0])  # 2 x v
    outer = mx.grad(lambda x: di.pushforward(g, prep, backend, x, (v,))[0].sum())(x)
    np.testing.assert_allclose(np.array(outer), [2.0, -2.0])  # d/dx sum(2 x v) = 2 v
    with pytest.raises(di.PreparationMismatchError, match="differs"):
        di.pushforward(g, prep, backend, x, (mx.ones(3),))


def test_the_torch_ml_calls_own_strict_check_refuses_as_the_runner_did() -> None:
    """The strict check of the ML call's leaves and batch (the runner's inline comparison,
    TorchFamily.leaves_matcher): a leaf or a batch tensor of another shape, dtype or
    structure is refused before f runs, with the report a strict prep gives; a model's
    parameters (leaves that require grad), a Parameter where a tensor was prepared and
    a strict=False prep take the program's own paths, with the same numbers."""
    torch.manual_seed(0)
    params = {"w": torch.randn(3, 4), "b": torch.randn(4)}
    batch = (torch.randn(5, 3), torch.randn(5, 4))
    calls: list[int] = []

    def loss(p: Any, batch: Any) -> Any:
        calls.append(1)
        X, y = batch
        prediction = torch.tanh(X @ p["w"] + p["b"])
        return ((prediction - y) ** 2).mean(), {"mean": prediction.mean()}

    backend, context = di.AutoTorch(), di.Constant(batch)
    prep = di.prepare_gradient(loss, backend, params, context, has_aux=True)
    loose = di.prepare_gradient(loss, backend, params, context, has_aux=True, strict=False)
    leaves = {name: t.detach().requires_grad_() for name, t in params.items()}
    expected = dict(zip(leaves, torch.autograd.grad(loss(leaves, batch)[0], tuple(leaves.values()))))
    for point in (
        params,
        {name: torch.nn.Parameter(t.clone()) for name, t in params.items()},
        {"w": torch.nn.Parameter(params["w"].clone(), requires_grad=False), "b": params["b"]},
    ):
        for p in (prep, loose):
            (_, _), grads = di.value_and_gradient(loss, p, backend, point, context, has_aux=True)
            for name in params:
                torch.testing.assert_close(grads[name], expected[name])
    refused = [
        ({"w": torch.randn(4, 3), "b": params["b"]}, context),
        ({"w": params["w"].double(), "b": params["b"]}, context),
        ({"w": params["w"], "b": params["b"].to(torch.float16)}, context),
        ({"w": params["w"]}, context),
        (params, di.Constant((batch[0], batch[1].double()))),
        (params, di.Constant((batch[0][:4], batch[1][:4]))),
        (params, di.Constant((batch[0], batch[1], batch[1]))),
        (params, di.Constant([batch[0], batch[1]])),
    ]
    for x, c in refused:
        calls.clear()
        with pytest.raises(di.PreparationMismatchError) as raised:
            di.value_and_gradient(loss, prep, backend, x, c, has_aux=True)
        with pytest.raises(di.PreparationMismatchError) as reported:
            prep.check(loss, backend, x, [c])
        assert str(raised.value) == str(reported.value) and not calls
