"""Property-based agreement: random shapes, dtypes, pytrees and functions, every backend.

Each example draws

* a pytree ``x``: a bare array or a dict / list / tuple (possibly nested once) of
  1 to 4 arrays, with shapes among 0-d, empty, one element, small ones and, rarely,
  a few thousand elements; float32, float64 or mixed leaves; numpy, torch or jax;
* a function composed from a small grammar of smooth elementwise operations (sin,
  tanh, exp of a bounded value, ``v * v``, ``v * c``, sums and products of those),
  each leaf reduced by a sum, a mean or a dot with a constant (passed as a
  ``di.Constant`` pytree, so contexts are exercised too). The grammar is evaluated
  by one function written with ``array_api_compat.array_namespace``, as a user
  would write it, so the same code runs under every engine.

and checks that ``gradient``, ``jacobian`` and ``hvp`` of every installed backend
agree with a float64 reference from an exact engine, which itself agrees with
float64 central finite differences computed here (independently of
``di.AutoFiniteDiff``), within dtype-appropriate tolerances, and that results come
back with the structure, family, shape and dtype of ``x``.

The run is bounded by hypothesis profiles: ``ci`` (the default, 15 examples per
test) and ``dev`` (200), chosen with ``DI_HYPOTHESIS_PROFILE=dev``. The profiles
are applied per test (never loaded globally), so other test modules keep their
own settings.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest
from conftest import (
    AD_BACKENDS,
    BACKENDS,
    FAMILIES,
    as_family,
    backend_id,
    dtype_name,
    engine_name,
    family,
    to_numpy,
)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import di
from di.testing import approximates

# --- profiles --------------------------------------------------------------------------------------------------------

_HEALTH = [HealthCheck.too_slow, HealthCheck.data_too_large]
# Both inherit conftest.py's profile: the same examples at every run unless DI_HYPOTHESIS_RANDOM is set.
settings.register_profile("ci", max_examples=10, deadline=None, suppress_health_check=_HEALTH, print_blob=True)
settings.register_profile("dev", max_examples=200, deadline=None, suppress_health_check=_HEALTH, print_blob=True)
PROFILE = os.environ.get("DI_HYPOTHESIS_PROFILE", "ci")
PROPERTY_SETTINGS = settings.get_profile(PROFILE)

# The backends under test: every engine and its compiled variant (not the forward-difference scheme).
PROPERTY_BACKENDS = list(BACKENDS)
# The float64 reference engine: the cheapest exact one installed (autograd compiles nothing), else any.
_REFERENCE_ORDER = (di.AutoAutograd(), di.AutoTorch(), di.AutoJAX(jit=True), di.AutoJAX(), *AD_BACKENDS)
REFERENCE = next((b for b in _REFERENCE_ORDER if b in AD_BACKENDS), None)

pytestmark = pytest.mark.skipif(REFERENCE is None, reason="no exact (AD) backend installed")


# --- the grammar -----------------------------------------------------------------------------------------------------

# Elementwise expressions of one leaf ``v``, as nested tuples:
#   ("v",) | ("sin", e) | ("tanh", e) | ("exp_tanh", e) | ("square", e) | ("scale", e, c)
#   | ("add", e, e) | ("mul", e, e)
# Reductions of an expression to a scalar: "sum", "mean", "dot" (with a constant).

Expr = tuple[Any, ...]


def evaluate(expr: Expr, v: Any, xp: Any) -> Any:
    """The expression at ``v``, with the array namespace ``xp`` (any engine)."""
    op = expr[0]
    if op == "v":
        return v
    if op == "sin":
        return xp.sin(evaluate(expr[1], v, xp))
    if op == "tanh":
        return xp.tanh(evaluate(expr[1], v, xp))
    if op == "exp_tanh":  # exp of a bounded value
        return xp.exp(xp.tanh(evaluate(expr[1], v, xp)))
    if op == "square":
        a = evaluate(expr[1], v, xp)
        return a * a
    if op == "scale":
        return evaluate(expr[1], v, xp) * expr[2]
    if op == "add":
        return evaluate(expr[1], v, xp) + evaluate(expr[2], v, xp)
    if op == "mul":
        return evaluate(expr[1], v, xp) * evaluate(expr[2], v, xp)
    raise AssertionError(op)


def reduce(reduction: str, e: Any, w: Any, xp: Any) -> Any:
    """One leaf's contribution to a scalar."""
    if reduction == "sum":
        return xp.sum(e)
    if reduction == "mean":
        return xp.mean(e)
    return xp.sum(e * w)  # "dot": with a constant of the leaf's shape


def show(expr: Expr) -> str:
    op = expr[0]
    if op == "v":
        return "v"
    if op == "scale":
        return f"({show(expr[1])} * {expr[2]:g})"
    if op in ("add", "mul"):
        return f"({show(expr[1])} {'+' if op == 'add' else '*'} {show(expr[2])})"
    if op == "square":
        return f"({show(expr[1])})**2"
    return f"{op}({show(expr[1])})"


def leaves_of(tree: Any) -> list[Any]:
    """The leaves of a dict / list / tuple pytree, dict keys sorted (as optree and JAX do)."""
    if isinstance(tree, dict):
        return [leaf for key in sorted(tree) for leaf in leaves_of(tree[key])]
    if isinstance(tree, (list, tuple)):
        return [leaf for item in tree for leaf in leaves_of(item)]
    return [tree]


def rebuild(tree: Any, leaves: list[Any]) -> Any:
    """A pytree of ``tree``'s structure with ``leaves`` (consumed in order)."""
    it = iter(leaves)

    def build(node: Any) -> Any:
        if isinstance(node, dict):
            return {key: build(node[key]) for key in sorted(node)}
        if isinstance(node, (list, tuple)):
            return type(node)(build(item) for item in node)
        return next(it)

    return build(tree)


@dataclass(frozen=True)
class Term:
    expr: Expr
    reduction: str


def scalar_function(terms: list[Term]) -> Callable[..., Any]:
    """``f(x, w) = sum_i reduce_i(e_i(leaf_i), w_i)``: one term per leaf of ``x``."""

    def f(x: Any, w: Any) -> Any:
        leaves, weights = leaves_of(x), leaves_of(w)
        total = None
        for term, leaf, weight in zip(terms, leaves, weights):
            xp = di.array_namespace(leaf)
            part = reduce(term.reduction, evaluate(term.expr, leaf, xp), weight, xp)
            total = part if total is None else total + part
        return total

    return f


def vector_function(head: Expr, terms: list[Term]) -> Callable[..., Any]:
    """``f(x, w) = e_0(leaf_0) * (1 + 0.25 * sum_{i>0} reduce_i(e_i(leaf_i), w_i))``: an
    array shaped like the first leaf that depends on every leaf."""

    def f(x: Any, w: Any) -> Any:
        leaves, weights = leaves_of(x), leaves_of(w)
        xp = di.array_namespace(leaves[0])
        y = evaluate(head, leaves[0], xp)
        coupling = None
        for term, leaf, weight in zip(terms, leaves[1:], weights[1:]):
            leaf_xp = di.array_namespace(leaf)
            part = reduce(term.reduction, evaluate(term.expr, leaf, leaf_xp), weight, leaf_xp)
            coupling = part if coupling is None else coupling + part
        return y if coupling is None else y * (1.0 + 0.25 * coupling)

    return f


# --- strategies ------------------------------------------------------------------------------------------------------

_SMALL_SHAPES = [(), (0,), (1,), (2,), (3,), (5,), (2, 3), (3, 1), (0, 2), (1, 1, 1), (4, 2)]
_BIG_SHAPES = {
    "gradient": [(1000,), (2500,), (40, 60)],
    "hvp": [(1000,), (3000,), (50, 40)],
    "jacobian": [(150,), (12, 20)],
}


def exprs(depth: int) -> st.SearchStrategy[Expr]:
    leaf = st.just(("v",))
    if depth == 0:
        return leaf
    sub = exprs(depth - 1)
    constants = st.sampled_from([-1.5, -0.5, 0.25, 0.75, 2.0])
    return st.one_of(
        leaf,
        st.tuples(st.sampled_from(["sin", "tanh", "exp_tanh", "square"]), sub),
        st.tuples(st.just("scale"), sub, constants),
        st.tuples(st.sampled_from(["add", "mul"]), sub, sub),
    )


@dataclass
class Case:
    """One drawn example: the structure (leaves as numpy arrays), function terms, family."""

    structure: Any  # a numpy leaf or a container of numpy leaves
    terms: list[Term]
    head: Expr
    family: str
    seed: int

    @property
    def numpy_leaves(self) -> list[np.ndarray]:
        return leaves_of(self.structure)

    def describe(self) -> str:
        shapes = [(leaf.shape, str(leaf.dtype)) for leaf in self.numpy_leaves]
        kind = type(self.structure).__name__
        terms = ", ".join(f"{t.reduction}({show(t.expr)})" for t in self.terms)
        return f"{self.family} {kind} leaves={shapes} head={show(self.head)} terms=[{terms}]"


@st.composite
def cases(draw: st.DrawFn, operator: str) -> Case:
    big = draw(st.integers(0, 11)) == 7  # rare, and not a value hypothesis favours
    n_leaves = draw(st.integers(1, 4)) if not big else draw(st.integers(1, 2))
    shapes = [draw(st.sampled_from(_SMALL_SHAPES)) for _ in range(n_leaves)]
    if big:
        shapes[0] = draw(st.sampled_from(_BIG_SHAPES[operator]))
    dtype_mode = draw(st.sampled_from(["float64", "float32", "mixed"]))
    if dtype_mode == "mixed":
        dtypes = [draw(st.sampled_from([np.float32, np.float64])) for _ in shapes]
    else:
        dtypes = [np.dtype(dtype_mode)] * n_leaves
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    leaves = [rng.uniform(-2.0, 2.0, size=shape).astype(dtype) for shape, dtype in zip(shapes, dtypes)]
    kind = draw(st.sampled_from(["array", "array", "dict", "list", "tuple", "nested"])) if n_leaves == 1 else None
    if n_leaves > 1:
        kind = draw(st.sampled_from(["dict", "list", "tuple", "nested"]))
    if kind == "array":
        structure: Any = leaves[0]
    elif kind == "dict":
        structure = {name: leaf for name, leaf in zip("abcd", leaves)}
    elif kind == "list":
        structure = list(leaves)
    elif kind == "tuple":
        structure = tuple(leaves)
    else:  # one level of nesting: {"a": leaf0, "b": [rest...]} (sorted keys keep leaf order)
        structure = {"a": leaves[0], "b": [*leaves[1:]]} if n_leaves > 1 else {"a": (leaves[0],)}
    terms = []
    for leaf in leaves:
        reductions = ["sum", "dot"] if leaf.size == 0 else ["sum", "mean", "dot"]
        terms.append(Term(draw(exprs(3)), draw(st.sampled_from(reductions))))
    head = draw(exprs(3))
    family_name = draw(st.sampled_from(FAMILIES))
    return Case(structure, terms, head, family_name, seed)


# --- arrays in and out -----------------------------------------------------------------------------------------------


def in_family(case: Case, tree: Any) -> Any:
    """``tree`` (numpy leaves) with its leaves in the case's family."""
    return rebuild(tree, [as_family(leaf, case.family) for leaf in leaves_of(tree)])


def random_like(structure: Any, rng: np.random.Generator, dtype: Any = None) -> Any:
    return rebuild(
        structure,
        [rng.uniform(-1.0, 1.0, size=leaf.shape).astype(dtype or leaf.dtype) for leaf in leaves_of(structure)],
    )


def as_float64(structure: Any) -> Any:
    return rebuild(structure, [leaf.astype(np.float64) for leaf in leaves_of(structure)])


def check_like(result: Any, template: Any, case: Case, what: str, leading: tuple[int, ...] = ()) -> None:
    """``result`` has the structure of ``template`` (numpy leaves), each leaf in the case's
    family with the template leaf's dtype and shape ``leading + leaf.shape``."""
    if isinstance(template, np.ndarray):
        assert family(result) == case.family, f"{what}: family {family(result)} != {case.family}"
        assert tuple(result.shape) == leading + template.shape, f"{what}: shape {tuple(result.shape)}"
        assert dtype_name(result) == template.dtype.name, f"{what}: dtype {result.dtype}"
        return
    assert type(result) is type(template), f"{what}: {type(result).__name__} != {type(template).__name__}"
    if isinstance(template, dict):
        assert sorted(result) == sorted(template), f"{what}: keys {sorted(result)}"
        for key in template:
            check_like(result[key], template[key], case, f"{what}[{key!r}]", leading)
    else:
        assert len(result) == len(template), f"{what}: length {len(result)}"
        for i, (r, t) in enumerate(zip(result, template)):
            check_like(r, t, case, f"{what}[{i}]", leading)


def flat(result: Any, template: Any, m: int = 1) -> np.ndarray:
    """A float64 ``(m, n)`` matrix from a result whose leaves have ``m`` leading entries
    before the shape of the matching leaf of ``template``."""
    parts = [
        to_numpy(leaf).astype(np.float64).reshape(m, like.size)
        for leaf, like in zip(leaves_of(result), leaves_of(template))
    ]
    return np.concatenate(parts, axis=1)


# --- references ------------------------------------------------------------------------------------------------------


def finite_difference_jacobian(f: Callable[..., Any], x: Any, w: Any) -> tuple[np.ndarray, np.ndarray]:
    """``(f(x) as a float64 vector, d f / d x as an (m, n) matrix)`` by central differences
    in float64 (numpy leaves), step ``eps**(1/3) * max(1, |x_i|)``."""
    leaves = [leaf.astype(np.float64) for leaf in leaves_of(x)]
    sizes = [leaf.size for leaf in leaves]
    vector = np.concatenate([leaf.reshape(-1) for leaf in leaves]) if leaves else np.zeros(0)

    def call(v: np.ndarray) -> np.ndarray:
        parts, start = [], 0
        for leaf, size in zip(leaves, sizes):
            parts.append(v[start : start + size].reshape(leaf.shape))
            start += size
        return np.asarray(f(rebuild(x, parts), w), dtype=np.float64).reshape(-1)

    y0 = call(vector)
    columns = np.zeros((y0.size, vector.size))
    base = np.finfo(np.float64).eps ** (1 / 3)
    for i in range(vector.size):
        h = base * max(1.0, abs(vector[i]))
        up, down = vector.copy(), vector.copy()
        up[i] += h
        down[i] -= h
        columns[:, i] = (call(up) - call(down)) / ((up[i] - vector[i]) + (vector[i] - down[i]))
    return y0, columns


def reference_hvp(f: Callable[..., Any], x64: Any, v64: Any, w: Any) -> np.ndarray:
    """Float64 central differences of the exact float64 gradient along ``v``."""
    prep = di.prepare_gradient(f, REFERENCE, x64, di.Constant(w))
    v_flat = flat(v64, v64)
    scale = max(1.0, float(np.max(np.abs(flat(x64, x64)), initial=0.0)))
    h = np.finfo(np.float64).eps ** (1 / 3) * scale / max(1.0, float(np.max(np.abs(v_flat), initial=0.0)))
    shifted = [
        rebuild(x64, [np.asarray(xl + sign * h * vl) for xl, vl in zip(leaves_of(x64), leaves_of(v64))])
        for sign in (1.0, -1.0)
    ]
    up, down = (flat(di.gradient(f, prep, REFERENCE, point, di.Constant(w)), x64) for point in shifted)
    return ((up - down) / (2.0 * h)).reshape(-1)


# --- tolerances ------------------------------------------------------------------------------------------------------


def tolerance(backend: di.AbstractBackend, case: Case, operator: str) -> tuple[float, float]:
    """``(rtol, atol relative to the largest reference entry)`` for ``backend``'s result
    against the exact float64 reference."""
    if any(leaf.dtype == np.float32 for leaf in case.numpy_leaves):
        return 2e-3, 2e-4  # measured worst ~2e-5 (float32 rounding through depth-3 expressions)
    if approximates(backend):
        return (1e-4, 1e-5) if operator == "hvp" else (1e-6, 1e-7)
    return 1e-9, 1e-10


def assert_agree(
    actual: np.ndarray, expected: np.ndarray, rtol: float, atol: float, what: str, scale: float = 0.0
) -> None:
    """``|actual - expected| <= atol * scale + rtol * |expected|``, ``scale`` at least the largest
    entry of ``expected`` and at least 0.01: a derivative that is tiny because terms of order one
    cancelled (``1 - tanh(u)**2`` at a large ``u``) carries the rounding of those terms, which two
    exact engines round differently (seen: 3.9e-6 against 3.9e-6 + 5e-15)."""
    assert actual.shape == expected.shape, f"{what}: shape {actual.shape} != {expected.shape}"
    scale = max(scale, float(np.max(np.abs(expected), initial=0.0)), 1e-2)
    np.testing.assert_allclose(actual, expected, rtol=rtol, atol=atol * scale, err_msg=what)


# The float64 finite differences are judged against the exact reference with a tolerance
# that covers their truncation (O(h^2)) and cancellation (eps |f| / h) errors.
def fd_reference_tolerance(f_scale: float) -> tuple[float, float]:
    return 1e-6, 1e-7 + 1e-9 * f_scale


# --- the properties --------------------------------------------------------------------------------------------------


def _weights(case: Case) -> Any:
    rng = np.random.default_rng(case.seed + 1)
    return random_like(case.structure, rng)  # each weight in its leaf's dtype, as a user would


@PROPERTY_SETTINGS
@given(case=cases("gradient"))
def test_gradient_every_backend_agrees_with_finite_differences(case: Case) -> None:
    f = scalar_function(case.terms)
    w = _weights(case)
    x64 = as_float64(case.structure)
    # The exact float64 gradient, checked against float64 central differences.
    exact = flat(di.gradient(f, REFERENCE, x64, di.Constant(w)), x64)
    y0, fd = finite_difference_jacobian(f, case.structure, w)
    rtol, atol = fd_reference_tolerance(float(np.abs(y0).max(initial=0.0)))
    assert_agree(exact, fd, rtol, atol, f"exact vs finite differences: {case.describe()}")
    # Every backend, prepared on other values, agrees with it.
    rng = np.random.default_rng(case.seed + 2)
    x = in_family(case, case.structure)
    weights = di.Constant(in_family(case, w))
    for backend in PROPERTY_BACKENDS:
        prep = di.prepare_gradient(f, backend, in_family(case, random_like(case.structure, rng)), weights)
        g = di.gradient(f, prep, backend, x, weights)
        what = f"gradient on {backend_id(backend)}: {case.describe()}"
        check_like(g, case.structure, case, what)
        rtol, atol = tolerance(backend, case, "gradient")
        assert_agree(flat(g, x64), exact, rtol, atol, what)


@PROPERTY_SETTINGS
@given(case=cases("jacobian"))
def test_jacobian_every_backend_agrees_with_finite_differences(case: Case) -> None:
    f = vector_function(case.head, case.terms[1:])
    w = _weights(case)
    x64 = as_float64(case.structure)
    out_shape = case.numpy_leaves[0].shape
    m = math.prod(out_shape)
    exact = flat(di.jacobian(f, REFERENCE, x64, di.Constant(w)), x64, m)
    y0, fd = finite_difference_jacobian(f, case.structure, w)
    rtol, atol = fd_reference_tolerance(float(np.abs(y0).max(initial=0.0)))
    assert_agree(exact, fd, rtol, atol, f"exact vs finite differences: {case.describe()}")
    rng = np.random.default_rng(case.seed + 2)
    x = in_family(case, case.structure)
    weights = di.Constant(in_family(case, w))
    # The jacobian's leaves are shaped (*f(x).shape, *leaf.shape), with f(x) like the first leaf
    # and in its dtype; mixed-precision leaves get the promoted dtype of the output and the leaf.
    for backend in PROPERTY_BACKENDS:
        prep = di.prepare_jacobian(f, backend, in_family(case, random_like(case.structure, rng)), weights)
        jac = di.jacobian(f, prep, backend, x, weights)
        what = f"jacobian on {backend_id(backend)}: {case.describe()}"
        if len({leaf.dtype for leaf in case.numpy_leaves}) == 1:
            check_like(jac, case.structure, case, what, leading=out_shape)
        rtol, atol = tolerance(backend, case, "jacobian")
        assert_agree(flat(jac, x64, m), exact, rtol, atol, what)


@PROPERTY_SETTINGS
@given(case=cases("hvp"))
def test_hvp_every_backend_agrees_with_finite_differences(case: Case) -> None:
    f = scalar_function(case.terms)
    w = _weights(case)
    x64 = as_float64(case.structure)
    rng = np.random.default_rng(case.seed + 3)
    v = random_like(case.structure, rng)
    exact = flat(di.hvp(f, REFERENCE, x64, (as_float64(v),), di.Constant(w))[0], x64).reshape(-1)
    fd = reference_hvp(f, x64, as_float64(v), w)
    # Second differences of f are judged against the size of its gradient too: an hvp that is
    # exactly zero (f linear) comes out of differences of gradients as rounding noise of that size.
    f_scale, g = di.value_and_gradient(f, REFERENCE, x64, di.Constant(w))
    f_scale, g_scale = abs(float(f_scale)), float(np.abs(flat(g, x64)).max(initial=0.0))
    rtol, atol = fd_reference_tolerance(g_scale)
    assert_agree(exact, fd, rtol, atol, f"exact vs finite differences: {case.describe()}")
    x = in_family(case, case.structure)
    tx = (in_family(case, v),)
    weights = di.Constant(in_family(case, w))
    for backend in PROPERTY_BACKENDS:
        other = in_family(case, random_like(case.structure, rng))
        prep = di.prepare_hvp(f, backend, other, (in_family(case, random_like(case.structure, rng)),), weights)
        (hv,) = di.hvp(f, prep, backend, x, tx, weights)
        what = f"hvp on {backend_id(backend)}: {case.describe()}"
        check_like(hv, case.structure, case, what)
        rtol, atol = tolerance(backend, case, "hvp")
        # Finite differences of finite-difference gradients: rounding of f (a sum of many terms) divided
        # by two steps; measured worst ~5e-8 |f(x)| (n = 1000, |f| ~ 1500). In float32, an hvp is rounded
        # at the size of the gradient's terms: a saturated tanh's 1 - tanh**2 keeps ~1e-7 of them, which
        # hypothesis found as a 2% error on an hvp entry of 1.6e-6 (JAX, gradient ~1).
        if approximates(backend):
            scale = max(g_scale, 1e-2 * f_scale)
        else:
            scale = g_scale if any(leaf.dtype == np.float32 for leaf in case.numpy_leaves) else 0.0
        assert_agree(flat(hv, x64).reshape(-1), exact, rtol, atol, what, scale)


# --- the grammar itself ----------------------------------------------------------------------------------------------


def test_the_grammar_runs_on_every_family() -> None:
    """The one array-API evaluation gives the same numbers on numpy, torch and jax."""
    expr = ("add", ("mul", ("sin", ("v",)), ("exp_tanh", ("scale", ("v",), 2.0))), ("square", ("tanh", ("v",))))
    v = np.linspace(-2.0, 2.0, 7)
    expected = np.sin(v) * np.exp(np.tanh(2.0 * v)) + np.tanh(v) ** 2
    for name in FAMILIES:
        array = as_family(v, name)
        got = evaluate(expr, array, di.array_namespace(array))
        np.testing.assert_allclose(to_numpy(got), expected, rtol=1e-6, err_msg=name)  # JAX computes in float32
    assert show(expr) == "((sin(v) * exp_tanh((v * 2))) + (tanh(v))**2)"


# --- the defects these properties found, one deterministic case each -------------------------------------------------


@pytest.mark.skipif("jax" not in FAMILIES, reason="jax is not installed")
@pytest.mark.parametrize("backend", [b for b in PROPERTY_BACKENDS if engine_name(b) != "jax"], ids=backend_id)
def test_a_pytree_of_float64_jax_arrays_stays_float64(backend: di.AbstractBackend) -> None:
    x = {"a": as_family(np.array([0.1, 0.2]), "jax"), "b": as_family(np.array(0.3), "jax")}

    def f(x):
        return x["a"] * x["a"] * x["b"]

    jac = di.jacobian(f, backend, x)
    assert str(jac["a"].dtype) == "float64" and str(jac["b"].dtype) == "float64", (jac["a"].dtype, jac["b"].dtype)
    np.testing.assert_allclose(to_numpy(jac["b"]), [0.01, 0.04], rtol=1e-9)  # float32 would miss this


@pytest.mark.parametrize("backend", [b for b in PROPERTY_BACKENDS if isinstance(b, di.AutoFiniteDiff)], ids=backend_id)
def test_finite_difference_jacobian_of_an_f_returning_x_or_a_view(backend: di.AbstractBackend) -> None:
    x = np.array([0.5, -1.0, 2.0])
    np.testing.assert_allclose(di.jacobian(lambda x: x, backend, x), np.eye(3), atol=1e-8)
    np.testing.assert_allclose(di.jacobian(lambda x: x[1:], backend, x), np.eye(3)[1:], atol=1e-8)
    np.testing.assert_allclose(di.pullback(lambda x: x, backend, x, (np.ones(3),))[0], np.ones(3), atol=1e-8)


@pytest.mark.parametrize("backend", [b for b in PROPERTY_BACKENDS if isinstance(b, di.AutoTorch)], ids=backend_id)
def test_torch_jacobian_of_an_empty_x_or_an_empty_output(backend: di.AbstractBackend) -> None:
    assert di.jacobian(lambda x: x * 2.0, backend, np.zeros(0)).shape == (0, 0)
    assert di.jacobian(lambda x: x[:0] * 2.0, backend, np.ones(2)).shape == (0, 2)


@pytest.mark.parametrize("backend", [b for b in PROPERTY_BACKENDS if isinstance(b, di.AutoTorch)], ids=backend_id)
def test_torch_keeps_float32_for_0d_inputs(backend: di.AbstractBackend) -> None:
    assert di.jacobian(lambda x: x * 1.0, backend, np.array(0.5, np.float32)).dtype == np.float32
    x = {"a": np.array(0.5, np.float32), "b": np.array(-0.9, np.float32)}

    def f(x):
        xp = di.array_namespace(x["b"])
        return xp.sum(x["a"]) + xp.sum(xp.sin(x["b"]))

    (hv,) = di.hvp(f, backend, x, (x,))
    assert hv["a"].dtype == np.float32 and hv["b"].dtype == np.float32, (hv["a"].dtype, hv["b"].dtype)


@pytest.mark.parametrize("backend", [b for b in PROPERTY_BACKENDS if isinstance(b, di.AutoFiniteDiff)], ids=backend_id)
def test_finite_difference_hvp_at_a_0d_x(backend: di.AbstractBackend) -> None:
    def f(x):
        xp = di.array_namespace(x)
        return xp.sum(xp.sin(x))

    x = np.array(0.5)
    (hv,) = di.hvp(f, backend, x, (np.array(0.7),))
    np.testing.assert_allclose(hv, -np.sin(0.5) * 0.7, rtol=1e-5)
