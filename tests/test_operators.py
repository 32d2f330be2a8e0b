"""Every operator on every backend against analytic results.

Each operator runs unprepared, prepared (on zeros and negated constants, executed
on the real values) and prepared twice, on three functions, with and without
contexts; results are checked for value, array family, shape and dtype.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import pytest
from conftest import BACKENDS, backend_id, engine_family, evaluates_only

import di
from di.backends.capabilities import Capabilities
from di.backends.protocol import Adapter, Programs
from di.backends.registry import get_adapter, register_backend
from di.contexts import Context
from di.families import family_of, get_family
from di.testing import approximates

jax = pytest.importorskip("jax")
torch = pytest.importorskip("torch")
jnp = jax.numpy

SECOND_ORDER_BACKENDS = [*BACKENDS, di.SecondOrder(di.AutoFiniteDiff(), di.AutoJAX())]
# ("prepared", one call of a prep, is the first call of "prepared-twice": the same prep and checks)
PREP_MODES = ["unprepared", "prepared-twice"]


def tolerance(backend: Any, order: int) -> float:
    if approximates(backend):
        return 1e-6 if order == 1 else 2e-5
    return 1e-10


def value_tolerance(backend: Any) -> float:
    """f's value: exact where the engine evaluates f in NumPy's float64, to the engine's
    accuracy where it computes f itself less accurately (MLX's float64 sin)."""
    if not approximates(backend) or isinstance(backend, di.SecondOrder):  # (SecondOrder: its inner engine's value)
        return 1e-12
    return 1e-12 if evaluates_only(backend) else tolerance(backend, 1)


# --- functions, written once with the array API -----------------------------------------

A = np.array([1.0, 0.5, 2.0])
W = np.array([[1.0, -2.0, 0.5], [0.3, 0.0, 1.5]])
M = np.array([[2.0, 1.0, 0.0], [1.0, 3.0, -1.0], [0.5, -1.0, 4.0]])


def mixed(x: Any, a: Any) -> Any:
    xp = di.array_namespace(x)
    return xp.stack([xp.sum(a * x**2), x[0] * x[1] * x[2]])


def sin_times(x: Any) -> Any:
    xp = di.array_namespace(x)
    return xp.sin(x) * x


def layer(x: Any, w: Any) -> Any:
    xp = di.array_namespace(x)
    return w @ xp.tanh(x)


def cubic(x: Any, a: Any) -> Any:
    xp = di.array_namespace(x)
    return xp.sum(a * x**3)


def quadratic_form(x: Any, m: Any) -> Any:
    xp = di.array_namespace(x)
    return xp.sum(x * (m @ x)) / 2


def cosine_sum(x: Any) -> Any:
    xp = di.array_namespace(x)
    return 2 * xp.sum(xp.cos(x))


def curve(t: Any) -> Any:
    xp = di.array_namespace(t)
    return xp.stack([t**2, xp.sin(t)])


def exp_curve(t: Any, c: Any) -> Any:
    xp = di.array_namespace(t)
    return xp.stack([xp.exp(c * t), t**3])


def t_cos_t(t: Any) -> Any:
    xp = di.array_namespace(t)
    return t * xp.cos(t)


X = np.array([0.7, -1.2, 1.5])
T = np.array(0.6)


@dataclasses.dataclass
class Case:
    name: str
    f: Callable[..., Any]
    x: Any
    constants: tuple[Any, ...]
    value: Callable[..., Any]
    first: Callable[..., Any]  # gradient, jacobian or derivative
    second: Callable[..., Any] | None = None  # hessian or second derivative


ARRAY_CASES = [
    Case(
        "mixed",
        mixed,
        X,
        (A,),
        lambda x, a: np.array([np.sum(a * x**2), np.prod(x)]),
        lambda x, a: np.array([2 * a * x, [x[1] * x[2], x[0] * x[2], x[0] * x[1]]]),
    ),
    Case("sin_times", sin_times, X, (), lambda x: np.sin(x) * x, lambda x: np.diag(np.cos(x) * x + np.sin(x))),
    Case("layer", layer, X, (W,), lambda x, w: w @ np.tanh(x), lambda x, w: w * (1 - np.tanh(x) ** 2)),
]
SCALAR_CASES = [
    Case(
        "cubic",
        cubic,
        X,
        (A,),
        lambda x, a: np.sum(a * x**3),
        lambda x, a: 3 * a * x**2,
        lambda x, a: np.diag(6 * a * x),
    ),
    Case(
        "quadratic_form",
        quadratic_form,
        X,
        (M,),
        lambda x, m: x @ m @ x / 2,
        lambda x, m: (m + m.T) @ x / 2,
        lambda x, m: (m + m.T) / 2,
    ),
    Case(
        "cosine_sum",
        cosine_sum,
        X,
        (),
        lambda x: 2 * np.sum(np.cos(x)),
        lambda x: -2 * np.sin(x),
        lambda x: np.diag(-2 * np.cos(x)),
    ),
]
CURVE_CASES = [
    Case(
        "curve",
        curve,
        T,
        (),
        lambda t: np.array([t**2, np.sin(t)]),
        lambda t: np.array([2 * t, np.cos(t)]),
        lambda t: np.array([2.0, -np.sin(t)]),
    ),
    Case(
        "exp_curve",
        exp_curve,
        T,
        (0.8,),
        lambda t, c: np.array([np.exp(c * t), t**3]),
        lambda t, c: np.array([c * np.exp(c * t), 3 * t**2]),
        lambda t, c: np.array([c * c * np.exp(c * t), 6 * t]),
    ),
    Case(
        "t_cos_t",
        t_cos_t,
        T,
        (),
        lambda t: t * np.cos(t),
        lambda t: np.cos(t) - t * np.sin(t),
        lambda t: -2 * np.sin(t) - t * np.cos(t),
    ),
]


def negated(value: Any) -> Any:
    return -value if isinstance(value, (float, np.ndarray)) else value


def run(
    operator: str,
    backend: Any,
    case: Case,
    mode: str,
    tangents: tuple[Any, ...] | None = None,
) -> list[Any]:
    """Run ``operator`` (and its value form) as ``mode`` says; return every result."""
    full_name = {
        "derivative": "value_and_derivative",
        "gradient": "value_and_gradient",
        "jacobian": "value_and_jacobian",
        "pushforward": "value_and_pushforward",
        "pullback": "value_and_pullback",
        "hvp": "gradient_and_hvp",
        "hessian": "value_gradient_and_hessian",
        "second_derivative": "value_derivative_and_second_derivative",
    }[operator]
    plain, full = getattr(di, operator), getattr(di, full_name)
    contexts = [di.Constant(c) for c in case.constants]
    t_args = (tangents,) if tangents is not None else ()
    x = case.x.copy()
    if mode == "unprepared":
        return [plain(case.f, backend, x, *t_args, *contexts), full(case.f, backend, x, *t_args, *contexts)]
    prep_t = (tuple(np.zeros_like(t) for t in tangents),) if tangents is not None else ()
    prepare = getattr(di, f"prepare_{operator}")
    prep = prepare(case.f, backend, np.zeros_like(x), *prep_t, *[di.Constant(negated(c)) for c in case.constants])
    results = []
    for _ in range(2 if mode == "prepared-twice" else 1):
        results += [
            plain(case.f, prep, backend, x, *t_args, *contexts),
            full(case.f, prep, backend, x, *t_args, *contexts),
        ]
    return results


def check(result: Any, expected: Any, tol: float, like: Any = X) -> None:
    assert type(result) is np.ndarray, f"expected a numpy array, got {type(result).__name__}"
    assert result.dtype == like.dtype
    np.testing.assert_allclose(result, expected, rtol=tol, atol=tol)


@pytest.mark.parametrize("mode", PREP_MODES)
@pytest.mark.parametrize("case", ARRAY_CASES, ids=lambda c: c.name)
@pytest.mark.parametrize("backend", BACKENDS, ids=backend_id)
def test_jacobian(backend: Any, case: Case, mode: str) -> None:
    results = run("jacobian", backend, case, mode)
    expected = case.first(case.x, *case.constants)
    for plain, (y, jac) in zip(results[::2], results[1::2]):
        assert plain.shape == expected.shape == (*y.shape, *case.x.shape)
        check(plain, expected, tolerance(backend, 1))
        check(jac, expected, tolerance(backend, 1))
        check(y, case.value(case.x, *case.constants), value_tolerance(backend))


@pytest.mark.parametrize("mode", PREP_MODES)
@pytest.mark.parametrize("case", ARRAY_CASES, ids=lambda c: c.name)
@pytest.mark.parametrize("backend", BACKENDS, ids=backend_id)
def test_pushforward_and_pullback(backend: Any, case: Case, mode: str) -> None:
    jac = case.first(case.x, *case.constants)
    tx = (np.array([1.0, 0.0, -1.0]), np.array([0.5, 2.0, 0.25]))
    m = jac.shape[0]
    ty = (np.array([1.0, -1.0, 2.0])[:m], np.array([0.0, 3.0, -0.5])[:m])
    results = run("pushforward", backend, case, mode, tx)
    for plain, (y, full) in zip(results[::2], results[1::2]):
        assert isinstance(plain, tuple) and len(plain) == 2
        check(y, case.value(case.x, *case.constants), value_tolerance(backend))
        for got, t in zip(plain, tx):
            check(got, jac @ t, tolerance(backend, 1))
        for got, t in zip(full, tx):
            check(got, jac @ t, tolerance(backend, 1))
    results = run("pullback", backend, case, mode, ty)
    for plain, (y, full) in zip(results[::2], results[1::2]):
        assert isinstance(plain, tuple) and len(plain) == 2
        for got, t in zip((*plain, *full), ty + ty):
            check(got, t @ jac, tolerance(backend, 1))
        check(y, case.value(case.x, *case.constants), value_tolerance(backend))


@pytest.mark.parametrize("mode", PREP_MODES)
@pytest.mark.parametrize("case", SCALAR_CASES, ids=lambda c: c.name)
@pytest.mark.parametrize("backend", SECOND_ORDER_BACKENDS, ids=backend_id)
def test_gradient_hvp_hessian(backend: Any, case: Case, mode: str) -> None:
    g_expected = case.first(case.x, *case.constants)
    h_expected = case.second(case.x, *case.constants)  # type: ignore[misc]
    tx = (np.array([1.0, -1.0, 0.5]),)
    results = run("hvp", backend, case, mode, tx)
    for plain, (g, full) in zip(results[::2], results[1::2]):
        check(plain[0], h_expected @ tx[0], tolerance(backend, 2))
        check(full[0], h_expected @ tx[0], tolerance(backend, 2))
        check(g, g_expected, tolerance(backend, 1))
    results = run("hessian", backend, case, mode)
    for plain, (y, g, full) in zip(results[::2], results[1::2]):
        assert plain.shape == (3, 3)
        check(plain, h_expected, tolerance(backend, 2))
        check(full, h_expected, tolerance(backend, 2))
        check(g, g_expected, tolerance(backend, 1))
        check(y, case.value(case.x, *case.constants), value_tolerance(backend))


@pytest.mark.parametrize("mode", PREP_MODES)
@pytest.mark.parametrize("case", CURVE_CASES, ids=lambda c: c.name)
@pytest.mark.parametrize("backend", SECOND_ORDER_BACKENDS, ids=backend_id)
def test_derivative_and_second_derivative(backend: Any, case: Case, mode: str) -> None:
    d_expected = case.first(case.x, *case.constants)
    d2_expected = case.second(case.x, *case.constants)  # type: ignore[misc]
    results = run("derivative", backend, case, mode)
    for plain, (y, full) in zip(results[::2], results[1::2]):
        check(plain, d_expected, tolerance(backend, 1), like=T)
        check(full, d_expected, tolerance(backend, 1), like=T)
        check(y, case.value(case.x, *case.constants), value_tolerance(backend), like=T)
    results = run("second_derivative", backend, case, mode)
    for plain, (y, d, full) in zip(results[::2], results[1::2]):
        check(y, case.value(case.x, *case.constants), value_tolerance(backend), like=T)
        check(plain, d2_expected, tolerance(backend, 2) * 10, like=T)
        check(full, d2_expected, tolerance(backend, 2) * 10, like=T)
        check(d, d_expected, tolerance(backend, 1), like=T)


# --- families and dtypes ---------------------------------------------------------------------


@pytest.mark.parametrize("backend", BACKENDS, ids=backend_id)
def test_results_come_back_in_the_callers_family(backend: Any) -> None:
    xs = {"torch": torch.tensor(X, dtype=torch.float32), "jax": jnp.asarray(X, dtype=jnp.float32)}
    expected = np.diag(np.cos(X) * X + np.sin(X))
    for family, x in xs.items():
        jac = di.jacobian(sin_times, backend, x)
        hv = di.hvp(cosine_sum, backend, x, (x,))[0]
        for result in (jac, hv):
            assert di.families.family_of(result) == family
            assert str(result.dtype).endswith("float32")
        np.testing.assert_allclose(np.asarray(jac), expected, rtol=1e-3, atol=1e-3)


def test_finite_difference_hessian_of_a_quadratic_is_accurate() -> None:
    rng = np.random.default_rng(0)
    m = rng.normal(size=(6, 6))
    x = rng.normal(size=6)
    hessian = di.hessian(quadratic_form, di.AutoFiniteDiff(), x, di.Constant(m))
    expected = (m + m.T) / 2
    assert np.max(np.abs(hessian - expected)) <= 1e-6 * np.max(np.abs(expected))


def test_out_for_jacobian_and_hessian() -> None:
    out = np.full((2, 3), np.nan)
    result = di.jacobian(layer, di.AutoJAX(), X, di.Constant(W), out=out)
    assert result is out
    np.testing.assert_allclose(out, W * (1 - np.tanh(X) ** 2))
    wrong = np.full((3, 3), 7.0)
    with pytest.raises(di.OutBufferError, match="like the result"):
        di.jacobian(layer, di.AutoJAX(), X, di.Constant(W), out=wrong)
    assert np.all(wrong == 7.0)
    out = torch.zeros(3, 3, dtype=torch.float64)
    _y, _g, h = di.value_gradient_and_hessian(cubic, di.AutoTorch(), torch.tensor(X), di.Constant(A), out=out)
    assert h is out
    np.testing.assert_allclose(out.numpy(), np.diag(6 * A * X))


# --- modes, fallbacks, same point ------------------------------------------------------------


@pytest.mark.parametrize("mode", ["forward", "reverse"])
def test_jax_mode_chooses_the_jacobian_strategy(mode: str, monkeypatch: pytest.MonkeyPatch) -> None:
    used: list[str] = []
    for name in ("jacfwd", "jacrev"):
        original = getattr(jax, name)

        def spy(*args: Any, _original: Any = original, _name: str = name, **kwargs: Any) -> Any:
            used.append(_name)
            return _original(*args, **kwargs)

        monkeypatch.setattr(jax, name, spy)
    jac = di.jacobian(layer, di.AutoJAX(mode=mode), X, di.Constant(W))
    np.testing.assert_allclose(jac, W * (1 - np.tanh(X) ** 2))
    assert used == ["jacfwd" if mode == "forward" else "jacrev"]


def test_default_jacobian_mode_follows_the_sizes(monkeypatch: pytest.MonkeyPatch) -> None:
    used: list[str] = []
    for name in ("jacfwd", "jacrev"):
        original = getattr(jax, name)

        def spy(*args: Any, _original: Any = original, _name: str = name, **kwargs: Any) -> Any:
            used.append(_name)
            return _original(*args, **kwargs)

        monkeypatch.setattr(jax, name, spy)
    with di.caching(False):  # (each call prepares: a prep cached by an earlier test would not choose again)
        di.jacobian(layer, di.AutoJAX(), X, di.Constant(W))  # 3 inputs, 2 outputs: reverse
        di.jacobian(sin_times, di.AutoJAX(), X)  # 3 inputs, 3 outputs: forward
    assert used == ["jacrev", "jacfwd"]


@dataclasses.dataclass(frozen=True)
class OnlyJVP(di.AbstractBackend):
    """Test backend: JAX's jvp and nothing else."""


@dataclasses.dataclass(frozen=True)
class OnlyVJP(di.AbstractBackend):
    """Test backend: JAX's vjp and nothing else."""


class JVPAdapter(Adapter):
    # JAX traces its own programs: second order may nest them (hvp, hessian, second derivative)
    capabilities = Capabilities(family="jax", differentiates="own")

    def prepare_pushforward_programs(
        self, f: Callable[..., Any], x: Any, tx: Sequence[Any], contexts: Sequence[Context]
    ) -> Programs:
        def value_and_pushforward(x: Any, tx: Sequence[Any], *values: Any) -> Any:
            x = jnp.asarray(x)
            pairs = [jax.jvp(lambda x: f(x, *values), (x,), (jnp.asarray(t, dtype=x.dtype),)) for t in tx]
            y = pairs[0][0] if pairs else f(x, *values)
            return y, tuple(dy for _, dy in pairs)

        return {"pushforward": lambda *a: value_and_pushforward(*a)[1], "value_and_pushforward": value_and_pushforward}


class VJPAdapter(Adapter):
    capabilities = Capabilities(family="jax", differentiates="own")

    def prepare_pullback_programs(
        self, f: Callable[..., Any], x: Any, ty: Sequence[Any], contexts: Sequence[Context]
    ) -> Programs:
        def value_and_pullback(x: Any, ty: Sequence[Any], *values: Any) -> Any:
            y, vjp = jax.vjp(lambda x: f(x, *values), jnp.asarray(x))
            return y, tuple(vjp(jnp.asarray(t, dtype=y.dtype))[0] for t in ty)

        return {"pullback": lambda *a: value_and_pullback(*a)[1], "value_and_pullback": value_and_pullback}


register_backend(OnlyJVP, JVPAdapter)
register_backend(OnlyVJP, VJPAdapter)


@pytest.mark.parametrize("backend", [OnlyJVP(), OnlyVJP()], ids=["only-jvp", "only-vjp"])
def test_one_primitive_gives_every_operator(backend: Any) -> None:
    with jax.enable_x64(True):
        support = get_adapter(backend).support()
        primitive = "pushforward" if isinstance(backend, OnlyJVP) else "pullback"
        assert support[primitive] == "native"
        assert {v for k, v in support.items() if k != primitive} == {"fallback"}
        jac_case, scalar_case, curve_case = ARRAY_CASES[0], SCALAR_CASES[0], CURVE_CASES[1]
        tx, ty = (np.array([1.0, 0.0, -1.0]),), (np.array([1.0, -1.0]),)
        jac = jac_case.first(X, A)
        np.testing.assert_allclose(di.jacobian(mixed, backend, X, di.Constant(A)), jac, rtol=1e-12)
        np.testing.assert_allclose(di.pushforward(mixed, backend, X, tx, di.Constant(A))[0], jac @ tx[0], rtol=1e-12)
        np.testing.assert_allclose(di.pullback(mixed, backend, X, ty, di.Constant(A))[0], ty[0] @ jac, rtol=1e-12)
        np.testing.assert_allclose(di.gradient(cubic, backend, X, di.Constant(A)), scalar_case.first(X, A))
        np.testing.assert_allclose(di.hvp(cubic, backend, X, tx, di.Constant(A))[0], np.diag(6 * A * X) @ tx[0])
        np.testing.assert_allclose(di.hessian(cubic, backend, X, di.Constant(A)), np.diag(6 * A * X))
        np.testing.assert_allclose(di.derivative(exp_curve, backend, T, di.Constant(0.8)), curve_case.first(T, 0.8))
        np.testing.assert_allclose(
            di.second_derivative(exp_curve, backend, T, di.Constant(0.8)), curve_case.second(T, 0.8)
        )


def test_no_primitive_is_a_clear_error() -> None:
    @dataclasses.dataclass(frozen=True)
    class Nothing(di.AbstractBackend):
        pass

    register_backend(Nothing, type("NothingAdapter", (Adapter,), {}))
    with pytest.raises(di.UnsupportedOperatorError, match="pushforward or pullback"):
        di.jacobian(sin_times, Nothing(), X)


def test_native_support_is_declared() -> None:
    for backend in (di.AutoJAX(), di.AutoTorch(), di.AutoAutograd()):
        assert get_adapter(backend).support()["hvp"] == "native"
    assert get_adapter(di.AutoJAX()).support() == dict.fromkeys(get_adapter(di.AutoJAX()).support(), "native")
    assert get_adapter(di.AutoFiniteDiff()).support()["derivative"] == "fallback"


@pytest.mark.parametrize("backend", BACKENDS, ids=backend_id)
def test_same_point_preparation(backend: Any) -> None:
    jac = ARRAY_CASES[0].first(X, A)
    prep = di.prepare_pullback_same_point(mixed, backend, X, (np.ones(2),), di.Constant(A))
    for w in (np.array([1.0, 0.0]), np.array([-2.0, 0.5])):
        np.testing.assert_allclose(
            di.pullback(mixed, prep, backend, X, (w,), di.Constant(A))[0], w @ jac, rtol=1e-6, atol=1e-6
        )
    with pytest.raises(di.PreparationMismatchError, match="same_point"):
        di.pullback(mixed, prep, backend, X + 1, (w,), di.Constant(A))
    with pytest.raises(di.PreparationMismatchError, match="same_point"):
        di.pullback(mixed, prep, backend, X, (w,), di.Constant(2 * A))
    hessian = np.diag(6 * A * X)
    prep = di.prepare_hvp_same_point(cubic, backend, X, (np.ones(3),), di.Constant(A))
    for v in (np.array([1.0, 0.0, 0.0]), np.array([0.5, -1.0, 2.0])):
        np.testing.assert_allclose(
            di.hvp(cubic, prep, backend, X, (v,), di.Constant(A))[0], hessian @ v, rtol=1e-5, atol=1e-5
        )
    with pytest.raises(di.PreparationMismatchError):
        di.hvp(cubic, prep, backend, X * 2, (v,), di.Constant(A))


def quartic_tree(x: Any, c: Any) -> Any:
    xp = di.array_namespace(x["u"])
    return xp.sum(c["a"] * x["u"] ** 4) / 4


@pytest.mark.parametrize("backend", SECOND_ORDER_BACKENDS, ids=backend_id)
def test_same_point_preps_copy_and_compare_a_pytree_point(backend: Any) -> None:
    """A dict x or dict Constant changed in place is refused (it was taken with the
    prepared answer, or raised NumPy's ValueError for an equal new dict); an equal
    new dict computes. At u = [1, 2], a = [1, 1]: gradient a u^3 = [1, 8], Hessian
    diag(3 a u^2) = diag(3, 12)."""
    tol = tolerance(backend, 2)

    def point() -> tuple[dict[str, Any], dict[str, Any]]:
        return {"u": np.array([1.0, 2.0])}, {"a": np.array([1.0, 1.0])}

    t = ({"u": np.array([1.0, 0.0])},)
    x, c = point()
    prep = di.prepare_hvp_same_point(quartic_tree, backend, x, t, di.Constant(c))
    x["u"][0] = 2.0  # at u = [2, 2] the answer is [12, 0]
    with pytest.raises(di.PreparationMismatchError, match="same_point"):
        di.hvp(quartic_tree, prep, backend, x, t, di.Constant(c))
    x, c = point()
    c["a"][0] = 2.0  # with a = [2, 1] the answer is [6, 0]
    with pytest.raises(di.PreparationMismatchError, match="same_point"):
        di.hvp(quartic_tree, prep, backend, x, t, di.Constant(c))
    x, c = point()
    np.testing.assert_allclose(di.hvp(quartic_tree, prep, backend, x, t, di.Constant(c))[0]["u"], [3.0, 0.0], atol=tol)

    ty = (np.array(2.0),)
    x, c = point()
    prep = di.prepare_pullback_same_point(quartic_tree, backend, x, ty, di.Constant(c))
    x["u"][1] = 3.0
    with pytest.raises(di.PreparationMismatchError, match="same_point"):
        di.pullback(quartic_tree, prep, backend, x, ty, di.Constant(c))
    x, c = point()
    c["a"][1] = 0.0
    with pytest.raises(di.PreparationMismatchError, match="same_point"):
        di.pullback(quartic_tree, prep, backend, x, ty, di.Constant(c))
    x, c = point()
    gradient = di.pullback(quartic_tree, prep, backend, x, ty, di.Constant(c))[0]["u"]
    np.testing.assert_allclose(gradient, [2.0, 16.0], rtol=tol, atol=tol)


def test_same_point_products_are_in_the_dtype_of_x() -> None:
    """A same-point pullback or hvp gives x's dtype whatever the cotangent's, as the
    other pullbacks do: a float64 cotangent for a float32 x gave float64 products on
    AutoTorch, AutoAutograd and AutoFiniteDiff, and a Python float cotangent raised
    AttributeError ('float' object has no attribute 'dim') on AutoTorch."""
    x = np.array([1.0, 2.0], dtype=np.float32)

    def squares(x: Any) -> Any:
        xp = di.array_namespace(x)
        return xp.sum(x**2)

    for backend in BACKENDS:
        for cotangent in (1.0, np.array(1.0), np.array(1)):
            prep = di.prepare_pullback_same_point(squares, backend, x, (cotangent,))
            (product,) = di.pullback(squares, prep, backend, x, (cotangent,))
            assert product.dtype == np.float32, (backend, cotangent)
            np.testing.assert_allclose(product, [2.0, 4.0], rtol=1e-6)
        tangent = (np.array([1.0, 0.0]),)
        prep = di.prepare_hvp_same_point(squares, backend, x, tangent)
        (product,) = di.hvp(squares, prep, backend, x, tangent)
        assert product.dtype == np.float32, backend
        np.testing.assert_allclose(product, [2.0, 0.0], atol=1e-5)


# --- torch with Cache: reverse-mode routes --------------------------------------------------


def cached_cube(x: Any, buffer: Any) -> Any:
    buffer[...] = x**3
    return buffer * 2


def cached_cube_sum(x: Any, buffer: Any) -> Any:
    buffer[...] = x**3
    return buffer.sum()


def test_torch_cache_operators() -> None:
    buffer = torch.zeros(3, dtype=torch.float64)
    x = torch.tensor(X)
    v = torch.tensor([1.0, -1.0, 0.5], dtype=torch.float64)
    jac = di.jacobian(cached_cube, di.AutoTorch(), x, di.Cache(buffer))
    np.testing.assert_allclose(jac.numpy(), np.diag(6 * X**2))
    (jv,) = di.pushforward(cached_cube, di.AutoTorch(), x, (v,), di.Cache(buffer))
    np.testing.assert_allclose(jv.numpy(), 6 * X**2 * v.numpy())
    (hv,) = di.hvp(cached_cube_sum, di.AutoTorch(), x, (v,), di.Cache(buffer))
    np.testing.assert_allclose(hv.numpy(), 6 * X * v.numpy())
    np.testing.assert_allclose(di.hessian(cached_cube_sum, di.AutoTorch(), x, di.Cache(buffer)).numpy(), np.diag(6 * X))
    assert buffer.grad_fn is None
    with pytest.raises(di.UnsupportedContextError, match="second_derivative"):
        di.second_derivative(lambda t, b: t * b.sum(), di.AutoTorch(), torch.tensor(0.5), di.Cache(buffer))


# --- argument errors -----------------------------------------------------------------------------


def test_operator_argument_errors() -> None:
    with pytest.raises(di.InvalidInputError, match="scalar x"):
        di.derivative(sin_times, di.AutoJAX(), X)
    with pytest.raises(di.InvalidInputError, match="tx must be a tuple"):
        di.pushforward(sin_times, di.AutoJAX(), X, np.ones(3))
    with pytest.raises(di.InvalidInputError, match="ty is missing"):
        di.pullback(sin_times, di.AutoJAX(), X)
    prep = di.prepare_jacobian(sin_times, di.AutoJAX(), X)
    with pytest.raises(di.InvalidInputError, match="prepare_jacobian, not prepare_hessian"):
        di.hessian(sin_times, prep, di.AutoJAX(), X)
    prep = di.prepare_pushforward(sin_times, di.AutoJAX(), X, (np.ones(3),))
    with pytest.raises(di.PreparationMismatchError, match="tx"):
        di.pushforward(sin_times, prep, di.AutoJAX(), X, (np.ones(3), np.ones(3)))
    with pytest.raises(di.InvalidOutputError, match="hvp needs f to return a real scalar"):
        di.hvp(sin_times, di.AutoTorch(), X, (np.ones(3),))


_OPERATOR_FUNCTIONS = [
    "derivative",
    "value_and_derivative",
    "gradient",
    "value_and_gradient",
    "jacobian",
    "value_and_jacobian",
    "hessian",
    "value_gradient_and_hessian",
    "second_derivative",
    "value_derivative_and_second_derivative",
    "pushforward",
    "value_and_pushforward",
    "pullback",
    "value_and_pullback",
    "hvp",
    "gradient_and_hvp",
]


@pytest.mark.parametrize("name", _OPERATOR_FUNCTIONS)
def test_operator_functions_take_the_keywords_they_declare(name: str) -> None:
    """Each public operator function shows its own signature and refuses, as Python
    would, a keyword it does not declare (they share one dispatcher)."""
    import inspect

    function = getattr(di, name)
    declared = set(inspect.signature(function).parameters)
    assert function.__name__ == name and "f" in declared and "args" in declared
    x = np.array([1.0, 2.0])
    for keyword, value in (("out", np.zeros(2)), ("has_aux", True)):
        if keyword in declared:
            continue
        with pytest.raises(TypeError, match=f"{name}\\(\\) got an unexpected keyword argument '{keyword}'"):
            function(lambda x: (x * x).sum(), di.AutoFiniteDiff(), x, **{keyword: value})


@pytest.mark.parametrize(
    "backend",
    [
        *BACKENDS,
        di.AutoTorch(compile=True, compile_options={"backend": "aot_eager"}),
        di.SecondOrder(di.AutoJAX(), di.AutoJAX()),
        di.SecondOrder(di.AutoJAX(jit=True), di.AutoJAX()),
    ],
    ids=backend_id,
)
def test_the_second_derivative_of_a_linear_f_is_an_ordinary_zero(backend: Any) -> None:
    """A linear f's second derivative is 0 on every backend, as an array the caller
    can convert and write: eager AutoTorch returned torch's immutable ZeroTensor
    (a NumPy caller got 'Cannot convert a ZeroTensor to numpy'), compiled
    AutoTorch raised dynamo's 'Cannot access data pointer of Tensor', and JAX over
    JAX refused the inner derivative, a constant, as 'not computed from x'."""

    def linear(t: Any) -> Any:
        return di.array_namespace(t).multiply(t, 3.0)

    torch = pytest.importorskip("torch")
    for t in (np.array(0.7), torch.tensor(0.7, dtype=torch.float64)):
        for d2 in (
            di.second_derivative(linear, backend, t),
            di.value_derivative_and_second_derivative(linear, backend, t)[2],
        ):
            as_numpy = d2.numpy() if isinstance(d2, torch.Tensor) else np.asarray(d2)
            assert float(as_numpy) == 0.0
            d2 += 1.0  # writable
            assert float(np.asarray(d2.numpy() if isinstance(d2, torch.Tensor) else d2)) == 1.0


@pytest.mark.parametrize("backend", BACKENDS, ids=backend_id)
def test_derivatives_in_the_output_space_have_the_outputs_dtype(backend: Any) -> None:
    """An f that casts a float32 x to float64 gets its jacobian, derivative and
    second derivative in its output's dtype on every backend, as its value
    (operators.md): AutoAutograd's reverse mode gave x's dtype (astype's vjp casts
    back), so its jacobian and second derivative disagreed with its own pushforward."""

    def widened(t: Any) -> Any:
        xp = di.array_namespace(t)
        return xp.astype(t**3, xp.float64)

    t = np.array(0.7, dtype=np.float32)
    y, dy, d2y = di.value_derivative_and_second_derivative(widened, backend, t)
    assert dy.dtype == d2y.dtype == y.dtype
    assert di.second_derivative(widened, backend, t).dtype == y.dtype
    np.testing.assert_allclose([float(dy), float(d2y)], [3 * 0.49, 6 * 0.7], rtol=1e-3)
    x = np.array([0.5, 2.0], dtype=np.float32)
    value, jacobian = di.value_and_jacobian(widened, backend, x)
    assert jacobian.dtype == value.dtype == di.pushforward(widened, backend, x, (x,))[0].dtype
    np.testing.assert_allclose(jacobian, np.diag(3 * x.astype(np.float64) ** 2), rtol=1e-3)


def _storage(array: Any) -> int:
    """The address of an array's buffer, whatever its family."""
    if isinstance(array, torch.Tensor):
        return int(array.data_ptr())
    if isinstance(array, jax.Array):
        return int(array.unsafe_buffer_pointer())
    return int(np.asarray(array).__array_interface__["data"][0])


@pytest.mark.parametrize("backend", SECOND_ORDER_BACKENDS, ids=backend_id)
def test_same_point_results_are_the_callers_own(backend: Any) -> None:
    """The value of value_and_pullback and the gradient of gradient_and_hvp, which a
    same-point prep computed at preparation, come back as copies (operators.md): on
    AutoJAX they were the prep's own array (g1 is g2), so g1.delete() broke the prep
    for good ('Array has been deleted'). Freeing or writing into a result leaves the
    next call's answer as it was: at x = [.1, .2, .3], f = sum(x^3)/2 is 0.018, its
    gradient 1.5 x^2 = [.015, .06, .135] and the hvp along e0 3 x0 e0 = [.3, 0, 0]."""
    lift = get_family(engine_family(backend) if not isinstance(backend, di.SecondOrder) else "numpy").from_numpy
    x = lift(np.array([0.1, 0.2, 0.3], dtype=np.float32))
    tx, ty = (lift(np.array([1.0, 0.0, 0.0], dtype=np.float32)),), (lift(np.array(1.0, dtype=np.float32)),)

    def half_cube(x: Any) -> Any:
        xp = di.array_namespace(x)
        return xp.sum(x * x * x) / 2

    def free(array: Any) -> None:
        if isinstance(array, jax.Array):
            array.delete()
        elif get_family(family_of(array)).mutable:  # (a TensorFlow tensor can be neither freed nor written)
            array[...] = -1.0

    gradient = np.array([0.015, 0.06, 0.135])
    calls = (
        (di.prepare_hvp_same_point, di.gradient_and_hvp, tx, gradient),
        (di.prepare_pullback_same_point, di.value_and_pullback, ty, np.array(0.018)),
    )
    for prepare, operator, tangents, expected in calls:
        prep = prepare(half_cube, backend, x, tangents)
        first, _ = operator(half_cube, prep, backend, x, tangents)
        second, _ = operator(half_cube, prep, backend, x, tangents)
        assert first is not second and _storage(first) != _storage(second), operator.__name__
        free(first)
        third, products = operator(half_cube, prep, backend, x, tangents)
        np.testing.assert_allclose(np.asarray(third), expected, rtol=1e-4, err_msg=operator.__name__)
        np.testing.assert_allclose(np.asarray(second), expected, rtol=1e-4, err_msg=operator.__name__)
        np.testing.assert_allclose(
            np.asarray(products[0]), [0.3, 0.0, 0.0] if tangents is tx else gradient, rtol=1e-3, atol=1e-5
        )


@pytest.mark.parametrize("backend", BACKENDS, ids=backend_id)
def test_a_strict_prep_takes_a_memmap_for_an_ndarray_and_the_reverse(backend: Any, tmp_path: Any) -> None:
    """A NumPy memmap (an ndarray subclass, which arrays.md says is taken) given for
    x or a Constant value to a strict prep made with an ndarray of its shape and
    dtype, or the reverse, was refused with a report printing two identical lines
    ('prepared numpy float64 (3,)   given numpy float64 (3,)'). Now each serves the
    other: f = sum(c x^2) / 2 has the gradient c x, and the hvp along t is c t."""

    def weighted(x: Any, c: Any) -> Any:
        xp = di.array_namespace(x)
        return xp.sum(c * x * x) / 2

    def memmap(name: str, values: list[float]) -> np.memmap:
        array = np.memmap(tmp_path / name, dtype=np.float64, mode="w+", shape=(3,))
        array[:] = values
        return array

    x, c, t = memmap("x", [1.0, 2.0, 3.0]), memmap("c", [2.0, 1.0, 0.5]), memmap("t", [1.0, 0.0, 1.0])
    plain_x, plain_c, plain_t = np.array(x), np.array(c), np.array(t)
    tol = tolerance(backend, 1)
    for prepared, given in (((plain_x, plain_c), (x, c)), ((x, c), (plain_x, plain_c))):
        prep = di.prepare_gradient(weighted, backend, prepared[0], di.Constant(prepared[1]))
        for arguments in (given, (given[0], prepared[1]), (prepared[0], given[1])):
            gradient = di.gradient(weighted, prep, backend, arguments[0], di.Constant(arguments[1]))
            np.testing.assert_allclose(gradient, [2.0, 2.0, 1.5], rtol=tol, atol=tol)
        tangents = (plain_t,) if prepared[0] is plain_x else (t,)
        prep = di.prepare_hvp(weighted, backend, prepared[0], tangents, di.Constant(prepared[1]))
        other = (t,) if prepared[0] is plain_x else (plain_t,)
        (product,) = di.hvp(weighted, prep, backend, given[0], other, di.Constant(given[1]))
        np.testing.assert_allclose(product, [2.0, 0.0, 0.5], rtol=tolerance(backend, 2), atol=tolerance(backend, 2))
    prep = di.prepare_gradient(weighted, backend, plain_x, di.Constant(plain_c))
    with pytest.raises(di.PreparationMismatchError, match=r"prepared numpy float64 \(3,\)   given numpy float32"):
        di.gradient(weighted, prep, backend, np.asarray(x, dtype=np.float32), di.Constant(c))
