"""TensorFlow in detail: every operator against the analytic derivative and
against TensorFlow's own spelling (``tf.GradientTape``, ``ForwardAccumulator``,
``tape.jacobian``), eager and compiled; the family (NumPy in, NumPy out;
tensors in, tensors out; ``tf.Variable`` read as a tensor), the array namespace,
the compiled variant's traces (counted, never timed), and ``DifferentiateWith``
both ways: TensorFlow hosting a JAX function, and a TensorFlow function inside
JAX, torch and autograd, each against the outer engine natively.

One TensorFlow import serves the module (it takes seconds)."""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import pytest

import di

tf = pytest.importorskip("tensorflow")

EAGER, COMPILED = di.AutoTensorFlow(), di.AutoTensorFlow(compile=True)
BOTH = [pytest.param(EAGER, id="eager"), pytest.param(COMPILED, id="compiled")]

X = np.array([0.5, -1.0, 2.0])
T = np.array([1.0, 0.5, -2.0])
A = np.array([[1.0, 2.0, 0.0], [0.0, -1.0, 3.0]])


def scalar(x: Any) -> Any:
    xp = di.array_namespace(x)
    return xp.sum(xp.sin(x) * x) + x[0] * x[1]


def scalar_gradient(x: np.ndarray) -> np.ndarray:
    return np.sin(x) + x * np.cos(x) + np.array([x[1], x[0], 0.0])


def scalar_hessian(x: np.ndarray) -> np.ndarray:
    return np.diag(2 * np.cos(x) - x * np.sin(x)) + np.array([[0, 1.0, 0], [1.0, 0, 0], [0, 0, 0]])


def vector(x: Any, a: Any) -> Any:
    xp = di.array_namespace(x)
    return xp.tanh(a @ x)


def vector_jacobian(x: np.ndarray, a: np.ndarray) -> np.ndarray:
    return (1 - np.tanh(a @ x) ** 2)[:, None] * a


def curve(s: Any) -> Any:
    xp = di.array_namespace(s)
    return xp.stack([xp.sin(s), s**3])


def native_vector(x: Any, a: Any) -> Any:
    """``vector`` as plain TensorFlow spells it (its ``@`` takes matrices only: di
    gives ``f`` the array API's ``@`` while it runs it, and leaves tensors alone)."""
    return tf.tanh(tf.linalg.matvec(a, x))


@pytest.fixture(scope="module")
def native() -> dict[str, Any]:
    """TensorFlow's own spellings of each operator, at X (float64)."""
    x, t, a = tf.constant(X), tf.constant(T), tf.constant(A)
    with tf.GradientTape(persistent=True) as outer:
        outer.watch(x)
        with tf.GradientTape(persistent=True) as tape:
            tape.watch(x)
            y, v = scalar(x), native_vector(x, a)
        g = tape.gradient(y, x)
    with tf.autodiff.ForwardAccumulator(x, t) as accumulator:
        with tf.GradientTape() as inner:
            inner.watch(x)
            y2 = scalar(x)
        g2 = inner.gradient(y2, x)
        v2 = native_vector(x, a)
    s = tf.constant(0.7, tf.float64)
    one = tf.constant(1.0, tf.float64)
    with tf.autodiff.ForwardAccumulator(s, one) as second:
        with tf.autodiff.ForwardAccumulator(s, one) as first:
            c = curve(s)
        dc = first.jvp(c)
    return {
        "gradient": g.numpy(),
        "jacobian": tape.jacobian(v, x).numpy(),
        "pushforward": accumulator.jvp(v2).numpy(),
        "pullback": tape.gradient(v, x, output_gradients=tf.constant([1.0, -1.0], tf.float64)).numpy(),
        "hvp": accumulator.jvp(g2).numpy(),
        "hessian": outer.jacobian(g, x).numpy(),
        "derivative": dc.numpy(),
        "second_derivative": second.jvp(dc).numpy(),
    }


@pytest.mark.parametrize("backend", BOTH)
def test_operators_against_analytic_derivatives_and_tensorflow_itself(backend: Any, native: dict[str, Any]) -> None:
    c, w = di.Constant(A), np.array([1.0, -1.0])
    results = {
        "gradient": (di.gradient(scalar, backend, X), scalar_gradient(X)),
        "jacobian": (di.jacobian(vector, backend, X, c), vector_jacobian(X, A)),
        "pushforward": (di.pushforward(vector, backend, X, (T,), c)[0], vector_jacobian(X, A) @ T),
        "pullback": (di.pullback(vector, backend, X, (w,), c)[0], w @ vector_jacobian(X, A)),
        "hvp": (di.hvp(scalar, backend, X, (T,))[0], scalar_hessian(X) @ T),
        "hessian": (di.hessian(scalar, backend, X), scalar_hessian(X)),
        "derivative": (di.derivative(curve, backend, np.array(0.7)), [np.cos(0.7), 3 * 0.7**2]),
        "second_derivative": (di.second_derivative(curve, backend, np.array(0.7)), [-np.sin(0.7), 6 * 0.7]),
    }
    for operator, (result, exact) in results.items():
        assert isinstance(result, np.ndarray) and result.dtype == np.float64, operator
        np.testing.assert_allclose(result, exact, rtol=1e-12, atol=1e-14, err_msg=operator)
        np.testing.assert_allclose(result, native[operator], rtol=1e-12, atol=1e-14, err_msg=operator)


@pytest.mark.parametrize("backend", BOTH)
def test_batched_tangents_and_combined_forms(backend: Any) -> None:
    c, tangents = di.Constant(A), (T, 2 * T, -T)
    y, products = di.value_and_pushforward(vector, backend, X, tangents, c)
    np.testing.assert_allclose(y, np.tanh(A @ X), rtol=1e-14)
    for t, product in zip(tangents, products):
        np.testing.assert_allclose(product, vector_jacobian(X, A) @ t, rtol=1e-12, atol=1e-14)
    g, hvps = di.gradient_and_hvp(scalar, backend, X, tangents)
    np.testing.assert_allclose(g, scalar_gradient(X), rtol=1e-12)
    for t, product in zip(tangents, hvps):
        np.testing.assert_allclose(product, scalar_hessian(X) @ t, rtol=1e-12, atol=1e-14)
    y, g, h = di.value_gradient_and_hessian(scalar, backend, X)
    np.testing.assert_allclose([y, *g], [scalar(X), *scalar_gradient(X)], rtol=1e-14)
    np.testing.assert_allclose(h, scalar_hessian(X), rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("backend", BOTH)
def test_tensors_in_tensors_out_in_their_own_dtype(backend: Any) -> None:
    for dtype in (tf.float32, tf.float64):
        x = tf.constant(X, dtype)
        g = di.gradient(scalar, backend, x)
        assert isinstance(g, tf.Tensor) and g.dtype == dtype
        np.testing.assert_allclose(g.numpy(), scalar_gradient(X), rtol=1e-6 if dtype == tf.float32 else 1e-14)
    variable = tf.Variable(X)  # read as a tensor: never assigned
    g = di.gradient(scalar, backend, variable)
    assert isinstance(g, tf.Tensor) and not isinstance(g, tf.Variable)
    np.testing.assert_allclose(g.numpy(), scalar_gradient(X), rtol=1e-14)
    np.testing.assert_array_equal(variable.numpy(), X)


def test_the_family_converts_both_ways_and_describes_tensors() -> None:
    from di.families import converter, family_of, get_family

    family = get_family("tensorflow")
    x = tf.constant(X)
    assert family_of(x) == "tensorflow" and family_of(tf.Variable(X)) == "tensorflow" and not family.mutable
    back = family.to_numpy(x)
    assert isinstance(back, np.ndarray) and back.dtype == np.float64 and back.flags.writeable
    assert isinstance(family.to_numpy(tf.constant(1.0)), np.ndarray)  # a 0-d tensor: a 0-d array
    assert family.from_numpy(np.ones(2, np.float32)).dtype == tf.float32
    assert family.describe_dtype(x.dtype) == "float64" and family.is_floating(tf.bfloat16)
    torch = pytest.importorskip("torch")
    assert converter("tensorflow", "torch")(x).dtype == torch.float64


def test_f_gets_the_array_api_operators_and_tensors_keep_their_own_after() -> None:
    plain = {name: tf.Tensor.__dict__.get(name) for name in ("T", "reshape", "astype", "ndim", "__matmul__")}
    assert not hasattr(tf.ones(3), "T")  # plain TensorFlow: what a user has before di runs

    def array_api(x: Any, a: Any) -> Any:  # @ of a matrix and a vector, .T, .mT, .reshape, promotion, indexing
        assert x.T.shape == x.shape and a.mT.shape == (3, 2) and x.ndim == 1
        return xp_sum(a @ x + x.reshape((3, 1))[[0, 1], 0] * tf.constant(2.0, tf.float32) + a.T[1:, 0])

    def xp_sum(value: Any) -> Any:
        return di.array_namespace(value).sum(value)

    for backend in (EAGER, COMPILED):
        gradient = di.gradient(array_api, backend, X, di.Constant(A))
        np.testing.assert_allclose(gradient, A.sum(axis=0) + np.array([2.0, 2.0, 0.0]), rtol=1e-12)
        assert di.value_and_jacobian(lambda x: x.T * 2.0, backend, tf.constant(X))[1].shape == (3, 3)
    # what TensorFlow's process-wide switch would have added is gone again (gated off: absent)
    assert {name: tf.Tensor.__dict__.get(name) for name in ("ndim", "__matmul__")} == {
        name: plain[name] for name in ("ndim", "__matmul__")
    }
    assert not hasattr(tf.ones(3), "T") and not hasattr(tf.ones(3), "astype") and not hasattr(tf.ones(3), "mT")
    assert not hasattr(tf.Tensor, "reshape") and tf.ones((2, 3)).ndim == 2
    with pytest.raises(tf.errors.InvalidArgumentError):
        tf.constant(A) @ tf.constant(X)  # TensorFlow's own @: matrices only
    with pytest.raises(tf.errors.InvalidArgumentError):
        tf.ones(2, tf.float32) + tf.ones(2, tf.float64)  # TensorFlow's own promotion: none


def test_an_eager_call_changes_no_attribute_of_the_tensor_class() -> None:
    """Python's attribute caches for ``tf.Tensor`` and its subclasses survive an eager
    call (a change to the class invalidates them, and TensorFlow's own Python then
    runs slower): the methods' gates open and close, the class dict is the same
    inside ``f`` as before and after the call."""
    inside: list[dict[str, Any]] = []

    def f(x: Any) -> Any:
        inside.append(dict(tf.Tensor.__dict__))
        return di.array_namespace(x).sum(x.reshape((3, 1)).T ** 2)

    np.testing.assert_allclose(di.gradient(f, EAGER, X), 2 * X, rtol=1e-12)  # (the first call installs the gates)
    before = dict(tf.Tensor.__dict__)
    np.testing.assert_allclose(di.gradient(f, EAGER, X), 2 * X, rtol=1e-12)
    for seen in (inside[-1], dict(tf.Tensor.__dict__)):
        assert seen.keys() == before.keys() and all(seen[k] is v for k, v in before.items())


def test_a_callers_own_tensor_method_is_what_a_tensor_has_outside_f() -> None:
    """A method the caller put on ``tf.Tensor`` (TensorFlow's own switch, or their
    own) is what tensors have outside ``f``; inside, ``f`` gets the array API's."""
    from di.engines.tensorflow.behavior import numpy_behavior

    with numpy_behavior():  # (the gates in place)
        pass
    saved = tf.Tensor.__dict__["astype"]
    try:
        tf.Tensor.astype = lambda self, dtype: "the caller's"
        seen: list[Any] = []

        def f(x: Any) -> Any:
            seen.append(x.astype(tf.float64))
            return di.array_namespace(x).sum(x * x)

        np.testing.assert_allclose(di.gradient(f, EAGER, X), 2 * X, rtol=1e-12)
        assert seen and all(hasattr(value, "dtype") and value.dtype == tf.float64 for value in seen)
        assert tf.ones(2).astype(tf.float64) == "the caller's"
    finally:
        tf.Tensor.astype = saved
    with numpy_behavior():
        pass
    assert not hasattr(tf.ones(2), "astype")


@pytest.mark.parametrize("backend", BOTH)
def test_the_behavior_is_on_while_f_runs_and_the_backward_pass_is_tensorflows_own(backend: Any) -> None:
    seen: dict[str, bool] = {}

    @tf.custom_gradient  # type: ignore[misc]
    def cube(x: Any) -> Any:
        seen["f"] = hasattr(x, "T")

        def gradient(upstream: Any) -> Any:  # run by the tape's backward pass, after f has returned
            seen["backward"] = hasattr(upstream, "T")
            return upstream * 3.0 * x * x

        return x * x * x, gradient

    def f(x: Any) -> Any:
        return tf.reduce_sum(cube(x.reshape((3, 1))))  # .reshape: the array API's method, on inside f

    np.testing.assert_allclose(di.gradient(f, backend, X), 3 * X**2, rtol=1e-12)
    assert seen == {"f": True, "backward": False}
    np.testing.assert_allclose(di.pullback(f, backend, X, (2.0,))[0], 6 * X**2, rtol=1e-12)


def test_the_scoped_promotion_passes_operands_of_one_dtype_and_promotes_the_rest() -> None:
    import operator

    from di.engines.tensorflow.behavior import _promote_when_needed, numpy_behavior

    a, b = tf.ones(2, tf.float32), tf.constant([2.0, 3.0], tf.float32)
    with numpy_behavior():
        assert _promote_when_needed(a, b) == (a, b)  # one dtype: as they are (no cast op)
        assert _promote_when_needed(a, 2.5) == (a, 2.5)  # x * 2.5: TensorFlow's operator converts the number itself
        for number in (2, 2.5, True):  # 2.5 * x (force_same_dtype): the number takes the tensor's dtype here
            tensor, promoted = _promote_when_needed(a, number, force_same_dtype=True)
            assert tensor is a and promoted.dtype == tf.float32 and float(promoted) == float(number)
        mixed = _promote_when_needed(a, tf.ones(2, tf.float64))  # two dtypes: TensorFlow's NumPy promotion
        assert [t.dtype for t in mixed] == [tf.float64, tf.float64]
        assert (a + tf.ones(2, tf.float64)).dtype == tf.float64
    # a Python number on either side of a floating tensor is NumPy's weak scalar: the tensor's dtype, NumPy's values
    operators = (operator.add, operator.sub, operator.mul, operator.truediv, operator.pow, operator.floordiv)
    for dtype in ("float32", "float64"):
        values = np.array([1.5, 3.0, 0.25], dtype)
        tensor = tf.constant(values)
        for number in (2, 2.5, True, 7.0):
            for op in operators:
                with numpy_behavior():
                    after, before = op(tensor, number), op(number, tensor)
                for result, expected in ((after, op(values, number)), (before, op(number, values))):
                    assert result.dtype.name == dtype and expected.dtype == np.dtype(dtype)
                    np.testing.assert_allclose(result.numpy(), expected, rtol=1e-6, err_msg=f"{op.__name__} {number}")


def test_the_namespace_maps_the_array_api_onto_tensorflow() -> None:
    x, v = tf.constant(X), X
    xp = di.array_namespace(x)
    assert xp is di.array_namespace(tf.Variable(X))
    checks = {
        "concat": (xp.concat([x, x]), np.concatenate([v, v])),
        "stack": (xp.stack([x, x], axis=1), np.stack([v, v], axis=1)),
        "matmul": (xp.matmul(tf.constant(A), x), A @ v),
        "vecdot": (xp.vecdot(x, x), v @ v),
        "reshape": (xp.reshape(x, (3, 1)), v.reshape(3, 1)),
        "permute_dims": (xp.permute_dims(tf.constant(A), (1, 0)), A.T),
        "std": (xp.std(x, correction=1), np.std(v, ddof=1)),
        "cumulative_sum": (xp.cumulative_sum(x, include_initial=True), np.concatenate([[0.0], np.cumsum(v)])),
        "where": (xp.where(x > 0, x, -x), np.abs(v)),
        "clip": (xp.clip(x, -0.5, 1.0), np.clip(v, -0.5, 1.0)),
        "flip": (xp.flip(x), v[::-1]),
        "max": (xp.max(x), v.max()),
        "acos": (xp.acos(x / 4), np.arccos(v / 4)),
        "linalg.vector_norm": (xp.linalg.vector_norm(x), np.linalg.norm(v)),
        "astype": (xp.astype(x, xp.float32), v.astype(np.float32)),
        "zeros": (xp.zeros(2), np.zeros(2)),
    }
    for name, (result, expected) in checks.items():
        assert isinstance(result, tf.Tensor), name
        np.testing.assert_allclose(result.numpy(), expected, rtol=1e-6, err_msg=name)
    assert xp.isdtype(x.dtype, "real floating") and not xp.isdtype(tf.int32, "real floating")

    @tf.function
    def symbolic(x: Any) -> Any:  # the namespace of a traced tensor is the same
        assert di.array_namespace(x) is xp
        return xp.sum(xp.sin(x))

    np.testing.assert_allclose(symbolic(x).numpy(), np.sum(np.sin(v)))


class Traced:
    """``f`` counting its traces (a Python side effect runs once per trace in a
    compiled program, at every call eagerly)."""

    def __init__(self) -> None:
        self.count = 0

    def __call__(self, x: Any, c: Any, n: Any = 2) -> Any:
        self.count += 1
        xp = di.array_namespace(x)
        return xp.sum(c * x**n)


def test_compiled_programs_trace_once_and_read_constants_as_inputs() -> None:
    f = Traced()
    prep = di.prepare_gradient(f, COMPILED, X, di.Constant(A[0]))
    assert f.count == 1  # traced at preparation
    for row in (A[0], A[1], 3 * A[1]):
        np.testing.assert_allclose(di.gradient(f, prep, COMPILED, X, di.Constant(row)), 2 * row * X)
    assert f.count == 1  # a new Constant value is a new input of the same program
    eager = Traced()
    eager_prep = di.prepare_gradient(eager, EAGER, X, di.Constant(A[0]))
    for _ in range(3):
        di.gradient(eager, eager_prep, EAGER, X, di.Constant(A[0]))
    assert eager.count == 3  # eager: f runs at every call


def test_the_fast_path_reads_shapes_through_the_private_method_and_the_public_fallback_agrees(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from tensorflow.python.framework.ops import EagerTensor

    from di.engines.tensorflow import building, shapes

    # The compiled fast path reads EagerTensor._shape_tuple (a private method, ~2 us cheaper per new tensor than
    # the public tensor.shape): this fails when TensorFlow drops it, and the fallback below takes over.
    assert shapes.eager_shape is EagerTensor._shape_tuple
    tensors = [tf.constant(X), tf.constant(A), tf.constant(1.0), tf.zeros((0, 3))]
    assert [shapes.public_shape(t) for t in tensors] == [shapes.eager_shape(t) for t in tensors]
    probe = tf.zeros((2, 0))
    assert probe.shape == (2, 0)  # (read once: TensorFlow's own tensor.shape reads _shape_tuple the first time)
    with monkeypatch.context() as patch:  # (TensorFlow's own ops read it too: patched only around the choice)
        patch.setattr(EagerTensor, "_shape_tuple", None)  # as if TensorFlow dropped it
        assert shapes.shape_reader(probe) is shapes.public_shape
    reads: list[Any] = []
    monkeypatch.setattr(building, "eager_shape", lambda tensor: reads.append(tensor) or shapes.public_shape(tensor))
    f = Traced()
    x = tf.constant(X)
    prep = di.prepare_gradient(f, COMPILED, x, di.Constant(tf.constant(A[0])))
    for row in (A[0], A[1], A[1]):
        gradient = di.gradient(f, prep, COMPILED, tf.constant(X), di.Constant(tf.constant(row)))
        np.testing.assert_allclose(gradient.numpy(), 2 * row * X)
    assert f.count == 1  # the public path keeps the fast path's single trace
    assert reads  # (and the fast path read the shapes through it)


def test_static_contexts_are_compiled_in_one_trace_per_value() -> None:
    f = Traced()
    prep = di.prepare_gradient(f, COMPILED, X, di.Constant(A[0]), di.Constant(2))
    for n in (2, 3, 2, 3):
        exact = n * A[0] * X ** (n - 1)
        np.testing.assert_allclose(di.gradient(f, prep, COMPILED, X, di.Constant(A[0]), di.Constant(n)), exact)
    assert f.count == 2


def test_new_shapes_generalise_and_a_retrace_storm_warns_then_stops() -> None:
    f = Traced()
    prep = di.prepare_gradient(f, COMPILED, X, di.Constant(1.0), strict=False)
    for size in range(4, 10):  # TensorFlow traces a second time with the shape left unknown, then reuses it
        np.testing.assert_allclose(di.gradient(f, prep, COMPILED, np.ones(size), di.Constant(1.0)), 2 * np.ones(size))
    assert f.count == 2
    f = Traced()
    prep = di.prepare_gradient(f, COMPILED, X, di.Constant(1.0), di.Constant(2))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with pytest.raises(di.RecompileLimitError, match=r"traced f 16 times"):
            for n in range(3, 40):  # each value of a static context is a trace of its own
                di.gradient(f, prep, COMPILED, X, di.Constant(1.0), di.Constant(n))
    assert f.count == 15 and any(issubclass(w.category, di.RecompileWarning) for w in caught)


def test_python_control_flow_on_values_is_eager_only() -> None:
    def branching(x: Any) -> Any:
        xp = di.array_namespace(x)
        return xp.sum(x**2) if x[0] > 0 else xp.sum(x**3)

    np.testing.assert_allclose(di.gradient(branching, EAGER, X), 2 * X)
    with pytest.raises(di.InvalidOutputError, match=r"Python control flow.*xp\.where"):
        di.gradient(branching, COMPILED, X)


@pytest.mark.parametrize("backend", BOTH)
def test_numpy_and_python_numbers_inside_f_are_refused(backend: Any) -> None:
    with pytest.raises(di.InvalidOutputError, match=r"NumPy|Python"):
        di.jacobian(lambda x: np.sin(x), backend, X)
    with pytest.raises(di.InvalidOutputError, match="float"):
        di.gradient(lambda x: float(x[0]) * 2.0, backend, X)


def test_a_cache_reaches_f_as_an_immutable_tensor() -> None:
    def writes(x: Any, buffer: Any) -> Any:
        buffer[0] = 1.0
        return x

    with pytest.raises(TypeError, match="item assignment"):  # f's own error, unchanged
        di.jacobian(writes, EAGER, X, di.Cache(np.zeros(3)))


def test_complex_x_follows_the_convention() -> None:
    z = X + 1j * X[::-1]

    def real_square(x: Any) -> Any:
        xp = di.array_namespace(x)
        return xp.real(xp.sum(x * x))

    np.testing.assert_allclose(di.gradient(real_square, EAGER, z), 2 * np.conj(z), rtol=1e-12)


# --- DifferentiateWith both ways -------------------------------------------------------------


def wave(x: Any) -> Any:
    xp = di.array_namespace(x)
    return xp.sin(x) * x


def test_tensorflow_hosts_a_jax_function() -> None:
    pytest.importorskip("jax")
    g = di.DifferentiateWith(wave, di.AutoJAX())
    x, t = tf.constant(X), tf.constant(T)
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = tf.reduce_sum(g(x) ** 2)
    with tf.GradientTape() as reference:
        reference.watch(x)
        y_native = tf.reduce_sum(wave(x) ** 2)
    np.testing.assert_allclose(y.numpy(), y_native.numpy(), rtol=1e-14)
    np.testing.assert_allclose(tape.gradient(y, x).numpy(), reference.gradient(y_native, x).numpy(), rtol=1e-12)
    with tf.autodiff.ForwardAccumulator(x, t) as accumulator:  # forward mode: the pushforward of JAX
        y = g(x)
    with tf.autodiff.ForwardAccumulator(x, t) as native:
        y_native = wave(x)
    np.testing.assert_allclose(accumulator.jvp(y).numpy(), native.jvp(y_native).numpy(), rtol=1e-12)

    @tf.function
    def traced_gradient(x: Any) -> Any:
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = tf.reduce_sum(g(x))
        return tape.gradient(y, x)

    np.testing.assert_allclose(traced_gradient(x).numpy(), np.sin(X) + X * np.cos(X), rtol=1e-12)
    with pytest.raises(di.UnsupportedOperatorError, match="second derivative through g"):
        with tf.GradientTape() as outer:
            outer.watch(x)
            with tf.GradientTape() as inner:
                inner.watch(x)
                y = tf.reduce_sum(g(x))
            gradient = inner.gradient(y, x)
        outer.jacobian(gradient, x, experimental_use_pfor=False)


def test_a_tensorflow_function_inside_jax_torch_and_autograd() -> None:
    g = di.DifferentiateWith(scalar, EAGER)
    exact = scalar_gradient(X)
    jax = pytest.importorskip("jax")
    np.testing.assert_allclose(np.asarray(jax.grad(g)(jax.numpy.asarray(X))), exact, rtol=1e-6)
    np.testing.assert_allclose(np.asarray(jax.grad(scalar)(jax.numpy.asarray(X))), exact, rtol=1e-6)
    torch = pytest.importorskip("torch")
    x = torch.tensor(X, requires_grad=True)
    g(x).backward()
    reference = torch.tensor(X, requires_grad=True)
    scalar(reference).backward()
    np.testing.assert_allclose(x.grad.numpy(), reference.grad.numpy(), rtol=1e-12)
    autograd = pytest.importorskip("autograd")
    np.testing.assert_allclose(autograd.grad(g)(X), autograd.grad(scalar)(X), rtol=1e-12)


def _engine_frames() -> int:
    """How many frames of di's TensorFlow engine the caller's caller runs under."""
    import sys
    from pathlib import Path

    engine = Path(di.__file__).parent / "engines" / "tensorflow"
    frame, count = sys._getframe(2), 0
    while frame is not None:
        count += Path(frame.f_code.co_filename).parent == engine
        frame = frame.f_back
    return count


def test_eager_programs_keep_few_frames_under_f_and_the_backward_pass() -> None:
    # TensorFlow records the Python stack (up to 30 frames, each with its line number) at every eager
    # operation: each frame of the engine's between f's operations, or the backward pass's, and the
    # caller is paid at each of them. f runs under fx, the computation and the program; the backward
    # pass under the computation and the program.
    seen: dict[str, int] = {}

    @tf.custom_gradient
    def doubled(x: Any) -> Any:
        seen["forward"] = _engine_frames()

        def backward(dy: Any) -> Any:
            seen["backward"] = _engine_frames()
            return 2.0 * dy

        return 2.0 * x, backward

    x, v = tf.constant(X), tf.constant(np.cos(X))
    prep = di.prepare_pullback(doubled, EAGER, x, (v,))
    seen.clear()
    (pulled,) = di.pullback(doubled, prep, EAGER, x, (v,))
    np.testing.assert_allclose(pulled.numpy(), 2.0 * np.cos(X))
    assert seen == {"forward": 3, "backward": 2}

    def total(x: Any) -> Any:
        return tf.reduce_sum(doubled(x) * x)

    for operator in ("gradient", "hvp"):
        prep = di.prepare_gradient(total, EAGER, x) if operator == "gradient" else di.prepare_hvp(total, EAGER, x, (v,))
        seen.clear()
        if operator == "gradient":
            np.testing.assert_allclose(di.gradient(total, prep, EAGER, x).numpy(), 4.0 * X)
        else:
            np.testing.assert_allclose(di.hvp(total, prep, EAGER, x, (v,))[0].numpy(), 4.0 * np.cos(X))
        assert seen["forward"] == 3, operator


def test_a_strict_eager_runner_calls_its_program_first_and_still_compares_first() -> None:
    # Python finds a frame's line by reading its line table from the start, and TensorFlow asks for
    # it at every eager operation: the strict runner of an eager program has the program's call
    # first in its code, its comparison run on the loop's first pass; it still refuses before f runs.
    import dis

    calls: list[Any] = []

    def counted(x: Any, a: Any) -> Any:
        calls.append(1)
        return tf.reduce_sum(tf.sin(x) * x) * a

    x, a = tf.constant(X), di.Constant(3.0)
    gradient_prep = di.prepare_gradient(counted, EAGER, x, a)
    pullback_prep = di.prepare_pullback(scalar, EAGER, x, (tf.constant(1.0), tf.constant(2.0)))
    for prep, name in ((gradient_prep, "gradient"), (pullback_prep, "pullback")):
        # (marked, so that the preparation also indexes di's line numbers: tests/test_line_numbers.py)
        assert prep.programs[name].records_python_stack is True
        runner = prep.runners[name]
        first_call = next(ins for ins in dis.get_instructions(runner) if ins.opname == "CALL")
        program_line = min(ins.positions.lineno for ins in dis.get_instructions(runner) if ins.argval == "program")
        assert first_call.positions is not None and first_call.positions.lineno == program_line, name
    calls.clear()
    gradient = di.gradient(counted, gradient_prep, EAGER, x, a)
    np.testing.assert_allclose(gradient.numpy(), 3.0 * (np.sin(X) + X * np.cos(X)))
    assert len(calls) == 1
    pulled = di.pullback(scalar, pullback_prep, EAGER, x, (tf.constant(1.0), tf.constant(2.0)))
    np.testing.assert_allclose([p.numpy() for p in pulled], [scalar_gradient(X), 2.0 * scalar_gradient(X)])
    calls.clear()
    with pytest.raises(di.PreparationMismatchError, match=r"x\s+differs"):
        di.gradient(counted, gradient_prep, EAGER, tf.constant(X[:2]), a)
    with pytest.raises(di.PreparationMismatchError, match=r"f\s+differs"):
        di.gradient(scalar, gradient_prep, EAGER, x, a)
    with pytest.raises(di.PreparationMismatchError, match=r"context 1\s+differs"):
        di.gradient(counted, gradient_prep, EAGER, x, di.Cache(3.0))
    assert calls == []
    with pytest.raises(di.PreparationMismatchError, match=r"ty\s+differs"):
        di.pullback(scalar, pullback_prep, EAGER, x, (tf.constant(1.0),))
