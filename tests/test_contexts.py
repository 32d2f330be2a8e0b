"""Contexts: Constant and x are never mutated, Cache semantics per engine, and how
context values reach ``f`` (converted to the backend's family, or unchanged)."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import (
    BACKENDS,
    FAMILIES,
    as_family,
    assert_close,
    backend_params,
    backend_scenario_params,
    can_write_cache,
    capabilities,
    compiles,
    engine_family,
    engine_name,
    family,
    to_numpy,
)
from functions import scenario

import di
from di.families import get_family
from di.prep.traced import traced_type

_CACHE_WRITERS = [b for b in BACKENDS if can_write_cache(b)]
# engines that take a Cache but compute with arrays that cannot be written into (JAX's)
_IMMUTABLE_CACHES = [b for b in BACKENDS if capabilities(b).cache and not can_write_cache(b)]
_CACHE_REFUSERS = [b for b in BACKENDS if not capabilities(b).cache]
_TORCH = [b for b in BACKENDS if engine_name(b) == "torch"]


def _snapshot(value):
    """A copy of a context value or x, to compare with after the call."""
    if isinstance(value, (float, int, str)):
        return value
    return to_numpy(value)


def _assert_same(before, after, what):
    if isinstance(before, np.ndarray):
        now = to_numpy(after)
        assert now.dtype == before.dtype, f"{what}: dtype changed"
        np.testing.assert_array_equal(now, before, err_msg=f"{what} was mutated")
    else:
        assert after == before, f"{what} was mutated"


def _all_calls(f, backend, x, contexts):
    prep = di.prepare_gradient(f, backend, x, *contexts)
    di.gradient(f, backend, x, *contexts)
    di.value_and_gradient(f, backend, x, *contexts)
    for _ in range(2):
        di.gradient(f, prep, backend, x, *contexts)
        di.value_and_gradient(f, prep, backend, x, *contexts)


# --- x and Constant are read only ------------------------------------------------------


@pytest.mark.parametrize(("backend", "scenario"), backend_scenario_params())
def test_x_and_constants_not_mutated(backend, scenario):
    x, contexts = scenario.build()
    x_before = to_numpy(x)
    constants_before = [_snapshot(c.value) for c in contexts if isinstance(c, di.Constant)]
    _all_calls(scenario.f, backend, x, contexts)
    _assert_same(x_before, x, "x")
    constants_after = [c.value for c in contexts if isinstance(c, di.Constant)]
    for i, (before, after) in enumerate(zip(constants_before, constants_after)):
        _assert_same(before, after, f"Constant {i}")


@pytest.mark.parametrize("family_name", [name for name in FAMILIES if name != "numpy"])
def test_x_and_constants_of_other_families_not_mutated(backend, family_name):
    s = scenario("quadratic_form_constants")
    x_np, (a, b) = s.build()
    x = as_family(x_np, family_name)
    contexts = (di.Constant(as_family(a.value, family_name)), di.Constant(as_family(b.value, family_name)))
    _all_calls(s.f, backend, x, contexts)
    _assert_same(x_np, x, "x")
    _assert_same(a.value, contexts[0].value, "Constant matrix")
    _assert_same(b.value, contexts[1].value, "Constant vector")
    if family_name == "torch":
        assert not x.requires_grad and x.grad is None and x.grad_fn is None
        for c in contexts:
            assert not c.value.requires_grad and c.value.grad_fn is None
    _, grad = s.expected(x_np, (a, b))
    assert_close(di.gradient(s.f, backend, x, *contexts), grad, backend, x_np.dtype)


def test_read_only_numpy_inputs_are_accepted_and_left_alone(backend):
    s = scenario("quadratic_form_constants")
    x, (a, b) = s.build()
    for array in (x, a.value, b.value):
        array.flags.writeable = False
    _, grad = s.expected(x, (a, b))
    prep = di.prepare_gradient(s.f, backend, x, a, b)
    assert_close(di.gradient(s.f, prep, backend, x, a, b), grad, backend, x.dtype)
    assert not x.flags.writeable and not a.value.flags.writeable


# --- Cache ------------------------------------------------------------------------------------


def _write_then_use(x, buf):
    xp = di.array_namespace(x)
    buf[...] = 3.0 * x
    return xp.sum(buf**2)


@pytest.mark.parametrize("cache_family", [name for name in FAMILIES if name in ("numpy", "torch")])
@pytest.mark.parametrize("backend", backend_params(_CACHE_WRITERS))
def test_cache_writes_land_in_the_callers_buffer(backend, cache_family):
    x = np.array([0.5, -1.0, 2.0, 0.25])
    buf = as_family(np.full(4, np.nan), cache_family)
    prep = di.prepare_gradient(_write_then_use, backend, np.zeros(4), di.Cache(as_family(np.zeros(4), cache_family)))
    for label, call in (
        ("unprepared", lambda: di.gradient(_write_then_use, backend, x, di.Cache(buf))),
        ("prepared", lambda: di.gradient(_write_then_use, prep, backend, x, di.Cache(buf))),
        ("value_and_gradient", lambda: di.value_and_gradient(_write_then_use, prep, backend, x, di.Cache(buf))[1]),
    ):
        to_nan = buf if cache_family == "numpy" else buf.detach().numpy()
        to_nan[...] = np.nan  # the initial value must not matter
        g = call()
        assert_close(g, 18.0 * x, backend, x.dtype, label)
        assert family(buf) == cache_family
        # f's last write is in the caller's buffer (finite differences: at a point
        # within one step of x).
        np.testing.assert_allclose(to_numpy(buf), 3.0 * x, rtol=1e-4, atol=1e-4, err_msg=label)
        if cache_family == "torch":
            assert buf.grad_fn is None and not buf.requires_grad, f"{label}: the cache holds a graph"


@pytest.mark.parametrize("backend", backend_params(_TORCH))
def test_torch_cache_tensor_holds_no_graph_and_stays_the_same_memory(backend):
    torch = pytest.importorskip("torch")
    x = torch.tensor([1.0, 2.0, -1.0], dtype=torch.float64)
    buf = torch.zeros(3, dtype=torch.float64)
    pointer = buf.data_ptr()
    prep = di.prepare_gradient(_write_then_use, backend, x, di.Cache(buf))
    for _ in range(3):
        y, g = di.value_and_gradient(_write_then_use, prep, backend, x, di.Cache(buf))
        assert buf.grad_fn is None and not buf.requires_grad
        assert buf.data_ptr() == pointer
        torch.testing.assert_close(buf, 3.0 * x, rtol=0, atol=0)
        torch.testing.assert_close(g, 18.0 * x, rtol=1e-12, atol=1e-12)
        assert float(y) == pytest.approx(9.0 * float((x**2).sum()), rel=1e-12)
        assert not y.requires_grad and not g.requires_grad


@pytest.mark.parametrize("backend", backend_params(_CACHE_REFUSERS))
@pytest.mark.parametrize("cache_family", [name for name in FAMILIES if name in ("numpy", "torch")])
def test_an_engine_without_cache_refuses_it_at_preparation(backend, cache_family):
    calls = []

    def f(x, w, buf):
        calls.append(1)
        return (x * w).sum()

    x = np.ones(3)
    contexts = (di.Constant(np.ones(3)), di.Cache(as_family(np.zeros(3), cache_family)))
    with pytest.raises(di.UnsupportedContextError) as info:
        di.prepare_gradient(f, backend, x, *contexts)
    message = str(info.value)
    assert type(backend).__name__ in message and "Cache" in message
    assert capabilities(backend).cache_note in message  # autograd's names AutoTorch, AutoJAX and AutoFiniteDiff
    takers = [type(b).__name__ for b in BACKENDS if capabilities(b).cache]
    assert any(name in message for name in takers), f"the message suggests none of {takers}: {message}"
    assert isinstance(info.value, di.DIError) and isinstance(info.value, TypeError)
    for call in (di.gradient, di.value_and_gradient):
        with pytest.raises(di.UnsupportedContextError):
            call(f, backend, x, *contexts)
    assert not calls, "f was called before the Cache was refused"


@pytest.mark.parametrize("backend", backend_params(_IMMUTABLE_CACHES))
@pytest.mark.parametrize("cache_family", FAMILIES)
def test_a_cache_of_an_immutable_family_is_passed_as_such_an_array(backend, cache_family):
    seen = []

    def f(x, buf):
        seen.append(family(buf) == engine_family(backend))  # (a traced array of the family, under a transform)
        try:
            buf[0] = 1.0
        except TypeError:
            seen.append("immutable")
        else:  # pragma: no cover - reached only if the cache were writable
            seen.append("written")
        xp = di.array_namespace(x)
        scratch = 3.0 * x  # build new arrays instead of writing into the cache
        return xp.sum(scratch**2)

    x = np.array([0.5, -1.0, 2.0])
    buf = as_family(np.zeros(3), cache_family)
    prep = di.prepare_gradient(f, backend, x, di.Cache(buf))
    g = di.gradient(f, prep, backend, x, di.Cache(buf))
    assert_close(g, 18.0 * x, backend, x.dtype)
    assert seen and all(s is True or s == "immutable" for s in seen), seen
    assert "immutable" in seen and True in seen
    np.testing.assert_array_equal(to_numpy(buf), np.zeros(3))


# --- how context values reach f --------------------------------------------------------------


@pytest.mark.parametrize("given_family", FAMILIES)
def test_array_contexts_reach_f_in_the_backends_family(backend, given_family):
    seen = {}

    def f(x, a, *cache):
        seen["a"] = a
        if cache:
            seen["c"] = cache[0]
        xp = di.array_namespace(x)
        return xp.sum(a * x**2)

    x_np, a_np = np.array([1.0, 2.0, 3.0]), np.array([0.5, 1.0, 2.0])
    x = as_family(x_np, given_family)
    contexts = [di.Constant(as_family(a_np, given_family))]
    if capabilities(backend).cache:
        contexts.append(di.Cache(as_family(np.zeros(3), given_family)))
    g = di.gradient(f, backend, x, *contexts)
    assert_close(g, 2.0 * a_np * x_np, backend, x_np.dtype)
    assert family(g) == given_family

    want = engine_family(backend)
    received = [seen["a"]] + ([seen["c"]] if "c" in seen else [])
    for value in received:  # arrays of the engine's family, or its traced values (JAX's tracers, PyTensor's variables)
        traced = traced_type(value)
        its_own = traced is not None and traced.engine == engine_name(backend)
        assert family(value) == want or its_own, f"f received a {family(value)} context on {backend!r}"


class _Options:
    """A hashable, non-array context value."""

    def __init__(self, power: int) -> None:
        self.power = power

    def __hash__(self) -> int:
        return hash(self.power)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Options) and other.power == self.power


def test_non_array_contexts_pass_through_unchanged(backend):
    seen = []
    options = _Options(2)

    def f(x, name, options, power):
        seen.append((name, options, power))
        xp = di.array_namespace(x)
        assert name == "square"
        return xp.sum(x**options.power) * power

    x = np.array([1.0, -2.0])
    contexts = (di.Constant("square"), di.Constant(options), di.Constant(3))
    prep = di.prepare_gradient(f, backend, x, *contexts)
    g = di.gradient(f, prep, backend, x, *contexts)
    assert_close(g, 6.0 * x, backend, x.dtype)
    assert seen
    for name, opts, power in seen:
        assert name == "square" and opts is options and power == 3
        assert type(power) is int


def test_bool_and_int_constants_that_f_branches_or_slices_on(backend):
    """A bool Constant f branches on and an int one it slices with stay Python values
    for every operator, the jacobian's choice of mode included (AutoJAX traced them
    there: TracerBoolConversionError, and slice entries that must be static)."""

    def branch(x, flag):
        xp = di.array_namespace(x)
        return x**2 if flag else xp.sin(x)

    def head(x, n):
        return x[:n] * 2.0

    x = np.array([1.0, 2.0, 3.0])
    for flag, expected in ((True, np.diag(2.0 * x)), (False, np.diag(np.cos(x)))):
        assert_close(di.jacobian(branch, backend, x, di.Constant(flag)), expected, backend, x.dtype)
        prep = di.prepare_jacobian(branch, backend, x, di.Constant(flag))
        assert_close(di.jacobian(branch, prep, backend, x, di.Constant(flag)), expected, backend, x.dtype)
    y, jac = di.value_and_jacobian(head, backend, x, di.Constant(2))
    assert_close(y, [2.0, 4.0], backend, x.dtype)
    assert_close(jac, 2.0 * np.eye(3)[:2], backend, x.dtype)


def test_python_float_constant_reaches_f_as_a_number(backend):
    seen = []

    def f(x, scale):
        seen.append(scale)
        xp = di.array_namespace(x)
        return scale * xp.sum(x**2)

    x = np.array([1.0, -2.0])
    g = di.gradient(f, backend, x, di.Constant(0.25))
    assert_close(g, 0.5 * x, backend, x.dtype)
    if not compiles(backend):  # traced by a compiled program
        assert all(type(s) is float and s == 0.25 for s in seen)


def test_torch_constant_that_requires_grad_is_not_differentiated(backend):
    torch = pytest.importorskip("torch")
    a = torch.tensor([0.5, 1.0, 2.0], dtype=torch.float64, requires_grad=True)

    def f(x, a):
        xp = di.array_namespace(x)
        return xp.sum(a * x**2)

    x = np.array([1.0, -2.0, 3.0])
    g = di.gradient(f, backend, x, di.Constant(a))
    assert_close(g, 2.0 * a.detach().numpy() * x, backend, x.dtype)
    assert a.grad is None, "di accumulated a gradient into a Constant"
    assert family(g) == "numpy"


# --- results are the caller's: they share no memory with x, a Constant or a Cache -----------


def _buffer_calls(xp_sum):
    """``(label, f, call)`` for each combined operator, ``f`` returning the Cache
    buffer (or a view of it) as its value, or in its aux; ``call(f, backend, x,
    buf)`` returns the value (or aux leaf) the test reads."""

    def squares(x, buf):
        buf[...] = x * x
        return buf

    def first_square(x, buf):
        buf[...] = x * x
        return buf[0]

    def with_aux(x, buf):
        buf[...] = x * x
        return xp_sum(buf), {"squares": buf}

    t = np.array([1.0, 0.0])

    def prepared(prepare, operator, *tangents, **kwargs):
        def call(f, backend, x, buf):
            prep = prepare(f, backend, np.zeros(2), *tangents, di.Cache(buf), **kwargs)
            return lambda x: operator(f, prep, backend, x, *tangents, di.Cache(buf), **kwargs)

        return call

    return [
        ("value_and_jacobian", squares, prepared(di.prepare_jacobian, di.value_and_jacobian), 0),
        ("value_and_pushforward", squares, prepared(di.prepare_pushforward, di.value_and_pushforward, (t,)), 0),
        ("value_and_pullback", squares, prepared(di.prepare_pullback, di.value_and_pullback, (t,)), 0),
        ("value_and_gradient", first_square, prepared(di.prepare_gradient, di.value_and_gradient), 0),
        ("value_gradient_and_hessian", first_square, prepared(di.prepare_hessian, di.value_gradient_and_hessian), 0),
        ("aux", with_aux, prepared(di.prepare_gradient, di.gradient, has_aux=True), ("aux",)),
    ]


@pytest.mark.parametrize("cache_family", [name for name in FAMILIES if name in ("numpy", "torch")])
@pytest.mark.parametrize("backend", backend_params(_CACHE_WRITERS))
def test_results_share_no_memory_with_the_cache(backend, cache_family):
    """A value (or aux) that is the buffer f filled comes back as a copy: the next
    call, which fills the buffer again, leaves the first results as they were."""
    for label, f, make, where in _buffer_calls(lambda a: di.array_namespace(a).sum(a)):
        buf = as_family(np.zeros(2), cache_family)
        call = make(f, backend, np.zeros(2), buf)
        first = call(np.array([1.0, 2.0]))
        call(np.array([3.0, 4.0]))
        read = first[1]["squares"] if where == ("aux",) else first[0]
        expected = [1.0, 4.0] if read.shape != () else 1.0
        assert_close(read, expected, backend, np.float64, f"{label} after the next call")


@pytest.mark.parametrize("given_family", FAMILIES)
def test_results_share_no_memory_with_x_or_a_constant(backend, given_family):
    """Values and aux leaves that are x, a Constant or a view of one are the
    caller's to write: writing into them leaves x and the Constant as they were."""
    base = np.array([1.0, 2.0, 3.0])
    x, c = as_family(base, given_family), as_family(base + 10.0, given_family)
    t = (as_family(np.ones(3), given_family),)

    def vector(x, c):
        return x

    def view(x, c):
        return x[1:]

    def scalar(x, c):
        return x[0]

    def with_aux(x, c):
        xp = di.array_namespace(x)
        return xp.sum(x * c), {"x": x, "c": c, "view": x[1:]}

    calls = [
        ("value_and_jacobian", lambda: [di.value_and_jacobian(vector, backend, x, di.Constant(c))[0]]),
        ("value_and_jacobian of a view", lambda: [di.value_and_jacobian(view, backend, x, di.Constant(c))[0]]),
        ("value_and_pushforward", lambda: [di.value_and_pushforward(vector, backend, x, t, di.Constant(c))[0]]),
        ("value_and_pullback", lambda: [di.value_and_pullback(vector, backend, x, t, di.Constant(c))[0]]),
        ("value_and_gradient", lambda: [di.value_and_gradient(scalar, backend, x, di.Constant(c))[0]]),
        ("value_gradient_and_hessian", lambda: [di.value_gradient_and_hessian(scalar, backend, x, di.Constant(c))[0]]),
        ("aux", lambda: list(di.gradient(with_aux, backend, x, di.Constant(c), has_aux=True)[1].values())),
        (
            "aux, combined",
            lambda: list(di.value_and_gradient(with_aux, backend, x, di.Constant(c), has_aux=True)[0][1].values()),
        ),
    ]
    if given_family == "numpy":  # a 0-d x
        x0 = np.array(2.0)
        calls.append(("value_and_derivative", lambda: [di.value_and_derivative(lambda s: s, backend, x0)[0]]))
    for label, call in calls:
        for result in call():
            if not get_family(family(result)).mutable:
                continue  # immutable (JAX's arrays, TensorFlow's tensors)
            if family(result) == "torch":
                result = result.detach()
            result[...] = 99.0
        np.testing.assert_array_equal(to_numpy(x), base, err_msg=f"{label}: x was written through a result")
        np.testing.assert_array_equal(to_numpy(c), base + 10.0, err_msg=f"{label}: a Constant was written")
        if given_family == "numpy" and "derivative" in label:
            assert float(x0) == 2.0, f"{label}: x was written through a result"


@pytest.mark.parametrize("given_family", FAMILIES)
def test_products_share_no_memory_with_the_tangents(backend, given_family):
    """A linear f (the identity, a reshape) has products that are its tangents: the
    pushforward or pullback of the identity was the caller's tangent itself on torch
    and autograd, so writing into the result wrote into the tangent."""
    x = as_family(np.zeros(4), given_family)

    def identity(x):
        return x

    def square(x):
        return x.reshape((2, 2))

    for label, f, operator, tangent in (
        ("pushforward of the identity", identity, di.pushforward, np.arange(4.0)),
        ("pullback of the identity", identity, di.pullback, np.arange(4.0)),
        ("pushforward of a reshape", square, di.pushforward, np.arange(4.0)),
        ("pullback of a reshape", square, di.pullback, np.arange(4.0).reshape(2, 2)),
    ):
        for combined in (False, True):
            t = as_family(tangent, given_family)
            function = getattr(di, f"value_and_{operator.__name__}") if combined else operator
            result = function(f, backend, x, (t,))
            (product,) = result[1] if combined else result
            assert_close(product, np.arange(4.0).reshape(np.shape(product)), backend, np.float64, label)
            if get_family(family(product)).mutable:  # (not JAX's arrays, TensorFlow's tensors)
                (product.detach() if family(product) == "torch" else product)[...] = 99.0
            np.testing.assert_array_equal(to_numpy(t), tangent, err_msg=f"{label}: the tangent was written")


@pytest.mark.parametrize("backend", backend_params(_TORCH))
def test_torch_cache_with_an_x_that_requires_grad_gives_a_differentiable_result(backend):
    """The gradient carries the caller's graph (x requires grad): backward through
    it gives the second derivative, even after later calls fill the buffer again;
    such a call fills a buffer of its own, so the caller's keeps no graph."""
    torch = pytest.importorskip("torch")

    def f(x, buf):
        xp = di.array_namespace(x)
        buf[...] = x * x
        return xp.sum(xp.sin(buf))

    def exact(x):  # d/dx of the gradient 2 x cos(x^2), summed
        return 2.0 * torch.cos(x**2) - 4.0 * x**2 * torch.sin(x**2)

    buf = torch.zeros(2, dtype=torch.float64)
    x = torch.tensor([0.5, 1.0], dtype=torch.float64, requires_grad=True)
    prep = di.prepare_gradient(f, backend, x.detach(), di.Cache(buf))
    g = di.gradient(f, prep, backend, x, di.Cache(buf))
    torch.testing.assert_close(g.detach(), 2.0 * x.detach() * torch.cos(x.detach() ** 2))
    assert buf.grad_fn is None and not buf.requires_grad
    other = torch.tensor([2.0, 3.0], dtype=torch.float64, requires_grad=True)
    di.value_and_gradient(f, prep, backend, other, di.Cache(buf))
    di.gradient(f, prep, backend, other.detach(), di.Cache(buf))  # writes into buf
    g.sum().backward()
    torch.testing.assert_close(x.grad, exact(x.detach()))


@pytest.mark.parametrize("operator", ["gradient", "value_and_gradient", "pullback", "jacobian"])
def test_a_dict_constant_whose_tensors_require_grad_keeps_their_graph(operator):
    """Model parameters passed as a dict Constant: the result carries their graph
    (docs/transforms.md), as for a tensor Constant. Eager AutoTorch looked only at
    whether the dict itself requires grad, and returned results cut off from it."""
    torch = pytest.importorskip("torch")

    def f(x, c):
        xp = di.array_namespace(x)
        return xp.sum(xp.tanh(x * c["w"]) * c["b"])

    def g(x, c):
        return f(x, c) * x

    def result_of(call, x, c):
        if operator == "gradient":
            return call(f, x, c)
        if operator == "value_and_gradient":
            y, grad = call(f, x, c)
            return y + (grad**2).sum()
        if operator == "pullback":
            return call(g, x, c)
        return call(g, x, c)

    backend = di.AutoTorch()
    native = {
        "gradient": lambda f, x, c: torch.autograd.grad(f(x, c), x, create_graph=True)[0],
        "value_and_gradient": lambda f, x, c: (f(x, c), torch.autograd.grad(f(x, c), x, create_graph=True)[0]),
        "pullback": lambda g, x, c: torch.autograd.grad(g(x, c), x, torch.ones(3, dtype=x.dtype), create_graph=True)[0],
        "jacobian": lambda g, x, c: torch.autograd.functional.jacobian(lambda x: g(x, c), x, create_graph=True),
    }[operator]
    ours = {
        "gradient": lambda f, x, c: di.gradient(f, backend, x, di.Constant(c)),
        "value_and_gradient": lambda f, x, c: di.value_and_gradient(f, backend, x, di.Constant(c)),
        "pullback": lambda g, x, c: di.pullback(g, backend, x, (torch.ones(3, dtype=x.dtype),), di.Constant(c))[0],
        "jacobian": lambda g, x, c: di.jacobian(g, backend, x, di.Constant(c)),
    }[operator]
    grads = []
    for call, differentiable_x in ((native, True), (ours, False)):
        x = torch.tensor([0.5, 1.0, 2.0], dtype=torch.float64, requires_grad=differentiable_x)
        c = {
            "w": torch.tensor([1.5, -0.7, 0.3], dtype=torch.float64, requires_grad=True),
            "b": torch.tensor(2.0, dtype=torch.float64, requires_grad=True),
        }
        result = result_of(call, x, c)
        assert result.requires_grad, operator
        grads.append(torch.autograd.grad((result**2).sum(), [c["w"], c["b"]]))
    for expected, got in zip(*grads):
        np.testing.assert_allclose(got.numpy(), expected.numpy(), rtol=1e-10)


_COMPILED_TORCH = [di.AutoTorch(compile=True, compile_options={"backend": "aot_eager"})]
_PYTREE_OPTIONS = {
    "dict-str": ({"n": 2, "method": "fast"}, lambda o: o["n"]),
    "dict-int": ({"n": 2}, lambda o: o["n"]),
    "list": ([2, "a"], lambda o: o[0]),
    "nested-tuple": ((("n", 2),), lambda o: o[0][1]),
    "dict-float": ({"n": 2, "scale": 1.0}, lambda o: o["n"]),
}


@pytest.mark.parametrize("options", sorted(_PYTREE_OPTIONS))
@pytest.mark.parametrize("backend", backend_params([*BACKENDS, *(b for b in _COMPILED_TORCH if b.is_installed)]))
def test_a_pytree_constant_holding_ints_and_strings(backend, options):
    """A dict, list or tuple Constant of options: its ints and strings reach f as
    Python values on every backend (AutoJAX(jit=True) traced them: JAX's TypeError
    for a string leaf, 'Slice entries must be static integers' for an int one)."""
    value, n_of = _PYTREE_OPTIONS[options]

    def f(x, o):
        xp = di.array_namespace(x)
        scale = o["scale"] if isinstance(o, dict) and "scale" in o else 1.0
        return xp.sum(x[: n_of(o)] ** 2) * scale

    x = np.array([1.0, 2.0, 3.0])
    assert_close(di.gradient(f, backend, x, di.Constant(value)), [2.0, 4.0, 0.0], backend, x.dtype)
    prep = di.prepare_gradient(f, backend, x, di.Constant(value))
    assert_close(di.gradient(f, prep, backend, x, di.Constant(value)), [2.0, 4.0, 0.0], backend, x.dtype)
