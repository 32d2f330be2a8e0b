"""gradient and value_and_gradient: analytic answers, cross-backend agreement, prep
reuse, result family/shape/dtype, and ``out=``."""

from __future__ import annotations

import functools

import numpy as np
import pytest
from conftest import (
    AD_BACKENDS,
    APPROXIMATIONS,
    BACKENDS,
    BACKENDS_AND_SCHEMES,
    ENGINES,
    FAMILIES,
    as_family,
    assert_close,
    backend_id,
    backend_params,
    backend_scenario_params,
    dtype_name,
    engine_family,
    family,
    scenario_params,
    supports,
    to_numpy,
)
from functions import SCENARIOS, negated, scenario
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

import di
from di.backends.registry import engines
from di.backends.selectors import engine_of
from di.testing import approximates

# --- every backend against the analytic answer ------------------------------------------
#
# Accuracy is what a difference scheme changes: these run every scheme of the approximating
# engines (forward differences too) besides every engine and its compiled variant.


@pytest.mark.parametrize(("backend", "scenario"), backend_scenario_params(backends=BACKENDS_AND_SCHEMES))
def test_unprepared_matches_analytic(backend, scenario):
    x, contexts = scenario.build()
    value, grad = scenario.expected(x, contexts)

    g = di.gradient(scenario.f, backend, x, *contexts)
    assert_close(g, grad, backend, x.dtype, "gradient")

    y, g = di.value_and_gradient(scenario.f, backend, x, *contexts)
    assert_close(y, value, backend, x.dtype, "value")
    assert_close(g, grad, backend, x.dtype, "gradient of value_and_gradient")


@pytest.mark.parametrize(("backend", "scenario"), backend_scenario_params(backends=BACKENDS_AND_SCHEMES))
def test_prepared_twice_matches_analytic(backend, scenario):
    x, contexts = scenario.build()
    value, grad = scenario.expected(x, contexts)
    prep = di.prepare_gradient(scenario.f, backend, x, *contexts)
    assert isinstance(prep, di.Prep)

    for call in range(2):
        g = di.gradient(scenario.f, prep, backend, x, *contexts)
        assert_close(g, grad, backend, x.dtype, f"prepared gradient, call {call}")
        y, g = di.value_and_gradient(scenario.f, prep, backend, x, *contexts)
        assert_close(y, value, backend, x.dtype, f"prepared value, call {call}")
        assert_close(g, grad, backend, x.dtype, f"prepared value_and_gradient, call {call}")


# --- prep reuse: execution values are the ones used -----------------------------------------


@pytest.mark.parametrize(("backend", "scenario"), backend_scenario_params(backends=BACKENDS_AND_SCHEMES))
def test_prep_on_zeros_and_negated_constants_answers_with_execution_values(backend, scenario):
    x, contexts = scenario.build(seed=1)
    prep = di.prepare_gradient(scenario.f, backend, np.zeros_like(x), *negated(contexts))

    value, grad = scenario.expected(x, contexts)
    for call in range(2):
        g = di.gradient(scenario.f, prep, backend, x, *contexts)
        assert_close(g, grad, backend, x.dtype, f"gradient, call {call}")
        y, g = di.value_and_gradient(scenario.f, prep, backend, x, *contexts)
        assert_close(y, value, backend, x.dtype, f"value, call {call}")
        assert_close(g, grad, backend, x.dtype, f"value_and_gradient, call {call}")

    # Other values again, same signature: no stale answer from the previous call.
    x2, contexts2 = scenario.build(seed=2)
    value2, grad2 = scenario.expected(x2, contexts2)
    assert_close(di.gradient(scenario.f, prep, backend, x2, *contexts2), grad2, backend, x.dtype, "second x")
    y2, g2 = di.value_and_gradient(scenario.f, prep, backend, x2, *contexts2)
    assert_close(y2, value2, backend, x.dtype, "second value")
    assert_close(g2, grad2, backend, x.dtype, "second value_and_gradient")


def test_prep_reuse_with_new_constant_matrix(backend):
    # The Constant changes value between calls (and from preparation): the gradient follows.
    s = scenario("quadratic_form_constants")
    x, (a, b) = s.build()
    prep = di.prepare_gradient(s.f, backend, x, di.Constant(np.zeros((4, 4))), di.Constant(np.zeros(4)))
    for scale in (1.0, -3.0, 0.5):
        contexts = (di.Constant(scale * a.value), di.Constant(b.value + scale))
        _, grad = s.expected(x, contexts)
        assert_close(di.gradient(s.f, prep, backend, x, *contexts), grad, backend, x.dtype, f"scale {scale}")


def test_prep_reuse_with_new_float_constant(backend):
    # A Python float Constant takes new values on a prepared (and, for jit, compiled) call.
    f = lambda x, c: c * (x**2).sum()
    x = np.array([1.0, -2.0, 0.5])
    prep = di.prepare_gradient(f, backend, x, di.Constant(1.0))
    for c in (2.0, -0.25, 10.0):
        assert_close(di.gradient(f, prep, backend, x, di.Constant(c)), 2.0 * c * x, backend, x.dtype, f"c={c}")


# --- all backends against each other -------------------------------------------------------


@pytest.mark.parametrize("scenario", scenario_params())
def test_all_backends_agree(scenario, backends):
    runs = [b for b in backends if supports(b, scenario)]
    assert len(runs) >= 2
    results = {}
    for b in runs:
        x, contexts = scenario.build()  # fresh Cache buffers for each backend
        results[b] = di.value_and_gradient(scenario.f, b, x, *contexts)
    reference = next(b for b in runs if b in AD_BACKENDS) if any(b in AD_BACKENDS for b in runs) else runs[0]
    y_ref, g_ref = (to_numpy(r).astype(np.float64) for r in results[reference])
    for b in runs:
        y, g = results[b]
        assert_close(y, y_ref, b, x.dtype, f"value vs {backend_id(reference)}")
        assert_close(g, g_ref, b, x.dtype, f"gradient vs {backend_id(reference)}")


@functools.cache
def _quadratic_prep(backend):
    s = scenario("quadratic_form_constants")
    return di.prepare_gradient(s.f, backend, np.zeros(4), di.Constant(np.zeros((4, 4))), di.Constant(np.zeros(4)))


_floats = st.floats(min_value=-10.0, max_value=10.0, allow_nan=False, allow_infinity=False)


@settings(max_examples=12, deadline=None)
@given(x=arrays(np.float64, 4, elements=_floats), a=arrays(np.float64, (4, 4), elements=_floats))
def test_property_random_inputs_every_backend_agrees_with_analytic(x, a):
    s = scenario("quadratic_form_constants")
    b = np.arange(4.0)
    contexts = (di.Constant(a), di.Constant(b))
    value, grad = s.expected(x, contexts)
    gradients = {}
    for backend in BACKENDS_AND_SCHEMES:
        y, g = di.value_and_gradient(s.f, _quadratic_prep(backend), backend, x, *contexts)
        assert_close(g, grad, backend, x.dtype, "gradient")
        assert_close(y, value, backend, x.dtype, "value")
        gradients[backend] = to_numpy(g)
    # The exact engines agree with one another to rounding.
    for backend in AD_BACKENDS:
        np.testing.assert_allclose(gradients[backend], gradients[AD_BACKENDS[0]], rtol=1e-12, atol=1e-12)


@functools.cache
def _float32_prep(backend):
    return di.prepare_gradient(scenario("sin_squared_plus_float").f, backend, np.zeros((2, 3), np.float32))


@settings(max_examples=10, deadline=None)
@given(x=arrays(np.float32, (2, 3), elements=st.floats(-3.0, 3.0, width=32)))
def test_property_float32_random_x(x):
    s = scenario("sin_squared_plus_float")
    _, grad = s.expected(x, ())
    for backend in BACKENDS_AND_SCHEMES:
        g = di.gradient(s.f, _float32_prep(backend), backend, x)
        assert g.dtype == np.float32
        assert_close(g, grad, backend, np.float32, "float32 gradient")


# --- result family, shape, dtype -------------------------------------------------------------


def _weighted_sin(x, w):
    xp = di.array_namespace(x)
    return xp.sum(w * xp.sin(x))


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["float32", "float64"])
@pytest.mark.parametrize("family_name", FAMILIES)
@pytest.mark.parametrize("shape", [(2, 3), (), (1,)], ids=["2x3", "0d", "1el"])
def test_result_family_shape_dtype(backend, family_name, dtype, shape):
    rng = np.random.default_rng(3)
    x_np = rng.normal(size=shape).astype(dtype)
    w = rng.uniform(0.5, 2.0, size=shape).astype(dtype)
    x = as_family(x_np, family_name)
    grad = w.astype(np.float64) * np.cos(x_np.astype(np.float64))
    value = float(np.sum(w.astype(np.float64) * np.sin(x_np.astype(np.float64))))

    prep = di.prepare_gradient(_weighted_sin, backend, x, di.Constant(w))
    results = [
        ("value_and_gradient", di.value_and_gradient(_weighted_sin, prep, backend, x, di.Constant(w))),
        ("gradient", (None, di.gradient(_weighted_sin, prep, backend, x, di.Constant(w)))),
    ]
    for label, (y, g) in results:
        assert family(g) == family_name, f"{label}: gradient is {family(g)} for {family_name} x"
        assert tuple(g.shape) == shape, label
        assert dtype_name(g) == dtype_name(x), f"{label}: {dtype_name(g)} gradient for {dtype_name(x)} x"
        assert_close(g, grad, backend, dtype, label)
        if y is not None:
            assert family(y) == family_name, f"{label}: value is {family(y)} for {family_name} x"
            assert tuple(y.shape) == (), label
            assert dtype_name(y) == dtype_name(x), f"{label}: {dtype_name(y)} value for {dtype_name(x)} x"
            assert_close(y, value, backend, dtype, label)
        if family_name == "torch":
            assert not g.requires_grad and g.grad_fn is None, f"{label}: the gradient holds a graph"


def test_jax_float64_without_touching_the_global_flag(backend):
    jax = pytest.importorskip("jax")
    assert not jax.config.jax_enable_x64, "the test session must run with x64 off"
    x = np.array([0.1, 0.2, 0.3])
    g = di.gradient(scenario("sum_squares").f, backend, x)
    assert g.dtype == np.float64
    if backend in AD_BACKENDS:
        # A float64 answer, not a float32 one cast up: exact for 2x.
        np.testing.assert_array_equal(to_numpy(g), 2.0 * x)
    else:
        assert_close(g, 2.0 * x, backend, np.float64)
    assert not jax.config.jax_enable_x64


def test_torch_x_that_requires_grad(backend):
    """AutoTorch's gradient carries the caller's graph (create_graph-style: see
    tests/test_transforms_torch.py); other engines' results are not torch
    operations and come back detached, as before."""
    torch = pytest.importorskip("torch")
    x = torch.tensor([1.0, -2.0, 3.0], dtype=torch.float64, requires_grad=True)
    g = di.gradient(scenario("sum_squares").f, backend, x)
    # (a result of an engine computing in torch's family is a torch operation)
    assert family(g) == "torch" and g.requires_grad == (engine_family(backend) == "torch")
    assert_close(g, 2.0 * x.detach().numpy(), backend, np.float64)
    assert x.grad is None, "di accumulated into the caller's x.grad"


def test_python_float_x(backend):
    f = lambda x: x**3
    g = di.gradient(f, backend, 0.1)
    assert_close(g, 3 * 0.1**2, backend, np.float64, "gradient at a Python float")
    y, g = di.value_and_gradient(f, backend, 0.1)
    assert_close(y, 0.1**3, backend, np.float64, "value at a Python float")
    assert_close(g, 3 * 0.1**2, backend, np.float64, "gradient at a Python float")


def test_same_prep_serves_gradient_and_value_and_gradient(backend):
    s = scenario("logsumexp")
    x, _ = s.build()
    prep = di.prepare_gradient(s.f, backend, x)
    y, g1 = di.value_and_gradient(s.f, prep, backend, x)
    g2 = di.gradient(s.f, prep, backend, x)
    np.testing.assert_allclose(to_numpy(g1), to_numpy(g2), rtol=1e-12, atol=1e-15)
    value, grad = s.expected(x, ())
    assert_close(y, value, backend, x.dtype)
    assert_close(g2, grad, backend, x.dtype)


# --- out= -----------------------------------------------------------------------------------------


_OUT_FAMILIES = [name for name in FAMILIES if name in ("numpy", "torch")]


@pytest.mark.parametrize("family_name", _OUT_FAMILIES)
@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["float32", "float64"])
def test_out_receives_the_gradient(backend, family_name, dtype):
    s = scenario("quadratic_form_constants")
    x_np, contexts = s.build()
    x_np = x_np.astype(dtype)
    contexts = tuple(di.Constant(c.value.astype(dtype)) for c in contexts)
    _, grad = s.expected(x_np, contexts)
    x = as_family(x_np, family_name)
    prep = di.prepare_gradient(s.f, backend, x, *contexts)

    calls = {
        "unprepared gradient": lambda out: di.gradient(s.f, backend, x, *contexts, out=out),
        "prepared gradient": lambda out: di.gradient(s.f, prep, backend, x, *contexts, out=out),
        "unprepared value_and_gradient": lambda out: di.value_and_gradient(s.f, backend, x, *contexts, out=out)[1],
        "prepared value_and_gradient": lambda out: di.value_and_gradient(s.f, prep, backend, x, *contexts, out=out)[1],
    }
    for label, call in calls.items():
        out = as_family(np.full(x_np.shape, 7.0, dtype=dtype), family_name)
        result = call(out)
        assert result is out, f"{label}: did not return the out buffer"
        assert_close(out, grad, backend, dtype, label)
        if family_name == "torch":
            assert not out.requires_grad and out.grad_fn is None


def _bad_outs(x_np):
    """``(label, x, bad out)`` for an out that does not fit."""
    cases = [
        ("numpy-shape", x_np, np.full(x_np.size + 1, 7.0)),
        ("numpy-2d-shape", x_np, np.full((1, x_np.size), 7.0)),
        ("numpy-dtype", x_np, np.full(x_np.shape, 7.0, dtype=np.float32)),
        ("numpy-int-dtype", x_np, np.full(x_np.shape, 7, dtype=np.int64)),
    ]
    if "torch" in FAMILIES:
        cases += [
            ("numpy-x-torch-out", x_np, as_family(np.full(x_np.shape, 7.0), "torch")),
            ("torch-x-numpy-out", as_family(x_np, "torch"), np.full(x_np.shape, 7.0)),
            ("torch-shape", as_family(x_np, "torch"), as_family(np.full(x_np.size + 1, 7.0), "torch")),
            ("torch-dtype", as_family(x_np, "torch"), as_family(np.full(x_np.shape, 7.0, np.float32), "torch")),
        ]
    return cases


@pytest.mark.parametrize("backend", backend_params(ENGINES))  # refused before any program runs
def test_out_that_does_not_fit_is_refused_and_untouched(backend):
    s = scenario("sum_squares")
    x_np, _ = s.build()
    for label, x, out in _bad_outs(x_np):
        before = to_numpy(out)
        prep = di.prepare_gradient(s.f, backend, x)
        for operator, args in (
            (di.gradient, (backend, x)),
            (di.gradient, (prep, backend, x)),
            (di.value_and_gradient, (prep, backend, x)),
        ):
            with pytest.raises(di.OutBufferError, match="out"):
                operator(s.f, *args, out=out)
            np.testing.assert_array_equal(to_numpy(out), before, err_msg=f"{label}: out was written")
            assert to_numpy(out).dtype == before.dtype


@pytest.mark.parametrize("backend", backend_params(ENGINES))  # refused before any program runs
def test_out_refused_for_jax_x(backend):
    pytest.importorskip("jax")
    s = scenario("sum_squares")
    x_np, _ = s.build()
    x = as_family(x_np, "jax")
    for out in (np.full(x_np.shape, 7.0), as_family(x_np, "jax")):
        before = to_numpy(out)
        with pytest.raises(di.OutBufferError) as info:
            di.gradient(s.f, backend, x, out=out)
        assert "jax" in str(info.value).lower()
        np.testing.assert_array_equal(to_numpy(out), before)
    # Without out= the same call works.
    assert_close(di.gradient(s.f, backend, x), 2.0 * x_np, backend, x_np.dtype)


class _Boom(Exception):
    pass


def _raises(x):
    raise _Boom("no gradient today")


@pytest.mark.parametrize("family_name", _OUT_FAMILIES)
def test_out_untouched_when_f_raises(backend, family_name):
    x = as_family(np.array([1.0, 2.0, 3.0]), family_name)
    out = as_family(np.full(3, 7.0), family_name)
    with pytest.raises(_Boom, match="no gradient today"):
        di.gradient(_raises, backend, x, out=out)
    with pytest.raises(_Boom, match="no gradient today"):
        di.value_and_gradient(_raises, backend, x, out=out)
    np.testing.assert_array_equal(to_numpy(out), np.full(3, 7.0))


def test_out_untouched_when_f_returns_a_vector(backend):
    x = np.array([1.0, 2.0, 3.0])
    out = np.full(3, 7.0)
    with pytest.raises(di.InvalidOutputError):
        di.gradient(lambda x: x * 2.0, backend, x, out=out)
    np.testing.assert_array_equal(out, np.full(3, 7.0))


@pytest.mark.parametrize("scenario_", [s for s in SCENARIOS if s.name == "cubic_0d"], ids=["0d"])
def test_out_for_0d_x(backend, scenario_):
    x, _ = scenario_.build()
    _, grad = scenario_.expected(x, ())
    out = np.full((), 7.0)
    assert di.gradient(scenario_.f, backend, x, out=out) is out
    assert_close(out, grad, backend, x.dtype)


def test_the_matrices_cover_every_installed_engine():
    """The suite means to test every installed engine, as the registry lists them: guard
    against a silently empty or partial list."""
    installed = [e for e in engines() if e.default is not None and e.default.is_installed]
    assert len(installed) >= 2 and any(e.module == "" for e in installed)  # one needs no library: always there
    for engine in installed:
        assert engine.default in ENGINES and engine.default in BACKENDS
        assert [engine.labels[label] for label in engine.compiled] == [
            b for b in BACKENDS if engine_of(b) is engine and b != engine.default
        ]
        if engine.tolerances is not None:
            assert set(engine.labels.values()) <= set(APPROXIMATIONS)
    assert ENGINES == di.available_backends()
    assert AD_BACKENDS and all(b in BACKENDS and not approximates(b) for b in AD_BACKENDS)
    assert len(backend_params()) == len(BACKENDS) and len(set(map(backend_id, BACKENDS_AND_SCHEMES))) == len(
        BACKENDS_AND_SCHEMES
    )


# --- layouts, scalars and threads ------------------------------------------------------------------


def test_non_contiguous_x_and_out(backend):
    s = scenario("sum_squares")
    base = np.arange(10.0) - 4.5
    layouts = (("strided", base[::2]), ("reversed", base[::-1]), ("fortran", np.asfortranarray(base.reshape(2, 5))))
    for label, x in layouts:
        expected = 2.0 * np.asarray(x)
        assert_close(di.gradient(s.f, backend, x), expected, backend, x.dtype, label)
        out_base = np.full(2 * x.size, 7.0)
        out = out_base[::2].reshape(x.shape) if x.ndim == 1 else np.full(x.shape, 7.0, order="F")
        assert di.gradient(s.f, backend, x, out=out) is out
        assert_close(out, expected, backend, x.dtype, f"{label} out")
        if x.ndim == 1:
            np.testing.assert_array_equal(out_base[1::2], 7.0, err_msg="wrote outside the out view")
    np.testing.assert_array_equal(base, np.arange(10.0) - 4.5)


def test_numpy_scalar_x(backend):
    x = np.float64(0.3)
    g = di.gradient(scenario("cubic_0d").f, backend, x)
    assert family(g) == "numpy" and np.shape(g) == () and np.asarray(g).dtype == np.float64
    assert_close(g, 3 * 0.3**2 + 2.0, backend, np.float64)


def test_one_prep_shared_across_threads(backend):
    from concurrent.futures import ThreadPoolExecutor

    s = scenario("quadratic_form_constants")
    x0, contexts = s.build()
    prep = di.prepare_gradient(s.f, backend, x0, *contexts)

    def work(seed):
        x = np.random.default_rng(seed).normal(size=4)
        y, g = di.value_and_gradient(s.f, prep, backend, x, *contexts)
        return x, to_numpy(y), to_numpy(g), str(g.dtype)

    with ThreadPoolExecutor(max_workers=4) as pool:
        results = list(pool.map(work, range(16)))
    for x, y, g, dtype in results:
        value, grad = s.expected(x, contexts)
        assert dtype == "float64"
        assert_close(g, grad, backend, np.float64, "gradient in a thread")
        assert_close(y, value, backend, np.float64, "value in a thread")
