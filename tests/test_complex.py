"""Complex x on every engine: one convention (docs/complex.md), checked against analytic references.

For a real-valued f of z = a + ib the gradient is df/da + i df/db; for a holomorphic f the
pushforward is J v, the pullback J^H w, the jacobian and derivative the complex derivative; the
Hessian is the real one of shape (2, *x.shape, 2, *x.shape). Every engine of the registry, eager
and compiled, in NumPy and its own family, at complex64 and complex128.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np
import pytest
from conftest import (
    BACKENDS,
    BACKENDS_AND_SCHEMES,
    ENGINES,
    FAMILIES,
    as_family,
    backend_params,
    capabilities,
    to_numpy,
    tolerance,
)
from hypothesis import given, settings
from hypothesis import strategies as st

import di
from di.backends.registry import get_adapter
from di.complex.view import RealView
from di.families import get_family
from di.testing import approximates
from di.testing.complex_scenarios import _real_hessian as columns_of_the_hvp

A = 1.0 + 2.0j  # f's coefficient


def real_f(z: Any) -> Any:
    """Re(sum(A z^2)) + |z|^2 / 2: real-valued, not holomorphic."""
    xp = di.array_namespace(z)
    return xp.real(xp.sum(z * z * A)) + xp.sum(xp.real(z * xp.conj(z))) / 2


def real_f_gradient(z: np.ndarray) -> np.ndarray:
    return 2 * np.conj(A * z) + z


def real_f_hvp(v: np.ndarray) -> np.ndarray:
    return 2 * np.conj(A * v) + v


def holomorphic(z: Any) -> Any:
    """exp(z) z + z^3, elementwise."""
    xp = di.array_namespace(z)
    return xp.exp(z) * z + z * z * z


def holomorphic_derivative(z: np.ndarray) -> np.ndarray:
    return np.exp(z) * (1 + z) + 3 * z * z


def squared_moduli(z: Any) -> Any:
    """|z|^2 elementwise: real-valued."""
    xp = di.array_namespace(z)
    return xp.real(z * xp.conj(z))


def conjugate(z: Any) -> Any:
    """conj(z): complex-valued, nowhere holomorphic."""
    return di.array_namespace(z).conj(z)


def real_hessian(z: np.ndarray) -> np.ndarray:
    """The reference (2, n, 2, n) real Hessian of real_f (its hvp's columns along each real and
    imaginary unit, the construction the complex scenarios use)."""
    return columns_of_the_hvp(real_f_hvp, z.size)


def point(dtype: Any, n: int = 4, seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x, v, w = (rng.normal(size=n) + 1j * rng.normal(size=n) for _ in range(3))
    return x.astype(dtype) * 0.5, v.astype(dtype), w.astype(dtype)


def close(actual: Any, expected: Any, backend: Any, dtype: Any, what: str) -> None:
    """``actual`` (any family, complex or real) matches ``expected`` within the backend's
    tolerance at the real precision of ``dtype``, its dtype that of ``expected``'s kind."""
    real_dtype = np.float32 if np.dtype(dtype) == np.complex64 else np.float64
    rtol, atol = tolerance(backend, real_dtype)
    if approximates(backend):  # (the Hessian from differences of gradients: a few times the gradient's error)
        rtol, atol = max(rtol, 1e-6), max(atol, 1e-6)
    actual, expected = to_numpy(actual), np.asarray(expected)
    assert actual.shape == expected.shape, f"{what}: shape {actual.shape} != {expected.shape}"
    if np.iscomplexobj(expected):
        assert actual.dtype == np.dtype(dtype), f"{what}: dtype {actual.dtype}, not {np.dtype(dtype)}"
    scale = max(1.0, float(np.max(np.abs(expected)))) if expected.size else 1.0
    np.testing.assert_allclose(actual, expected, rtol=rtol, atol=atol * scale, err_msg=f"{what} on {backend!r}")


def complex_families(backend: Any) -> list[str]:
    """NumPy and the engine's own family, where it holds complex numbers."""
    return list(dict.fromkeys(["numpy", capabilities(backend).family]))


def takes(backend: Any, dtype: Any) -> bool:
    """Whether the backend's engine differentiates at a complex x of ``dtype`` (its
    capabilities say so, and its family has the dtype)."""
    record = capabilities(backend)
    return record.complex_numbers and get_family(record.family).takes_dtype(np.dtype(dtype))


CASES = [
    pytest.param(b, family, dtype, id=f"{b.label if hasattr(b, 'label') else b!r}-{family}-{np.dtype(dtype).name}")
    for b in BACKENDS
    for family in complex_families(b)
    if family in FAMILIES
    for dtype in (np.complex64, np.complex128)
    if get_family(family).takes_dtype(np.dtype(dtype))  # (a family without complex128 holds no such x)
]


def _id(param: Any) -> str:
    return param.id


@pytest.mark.parametrize(("backend", "family", "dtype"), CASES)
def test_every_operator_follows_the_convention(backend: Any, family: str, dtype: Any) -> None:
    x0, v0, w0 = point(dtype)
    x, v, w = (as_family(a, family) for a in (x0, v0, w0))
    if not takes(backend, dtype):
        with pytest.raises(di.UnsupportedOperatorError, match="complex"):
            di.gradient(real_f, backend, x)
        return
    g = real_f_gradient(x0)
    close(di.gradient(real_f, backend, x), g, backend, dtype, "gradient")
    y, g1 = di.value_and_gradient(real_f, backend, x)
    close(y, np.real(np.sum(A * x0 * x0)) + np.sum(np.abs(x0) ** 2) / 2, backend, dtype, "value")
    close(g1, g, backend, dtype, "value_and_gradient")
    close(di.hvp(real_f, backend, x, (v,))[0], real_f_hvp(v0), backend, dtype, "hvp")
    close(di.hessian(real_f, backend, x), real_hessian(x0), backend, dtype, "hessian")
    jacobian = np.diag(holomorphic_derivative(x0))
    close(di.jacobian(holomorphic, backend, x), jacobian, backend, dtype, "jacobian")
    y, pushed = di.value_and_pushforward(holomorphic, backend, x, (v,))
    close(y, np.exp(x0) * x0 + x0**3, backend, dtype, "value_and_pushforward's value")
    close(pushed[0], jacobian @ v0, backend, dtype, "pushforward")
    close(di.pullback(holomorphic, backend, x, (w,))[0], jacobian.conj().T @ w0, backend, dtype, "pullback")
    x_scalar = as_family(x0[:1].reshape(()), family)
    close(di.derivative(holomorphic, backend, x_scalar), holomorphic_derivative(x0[0]), backend, dtype, "derivative")
    np.testing.assert_array_equal(to_numpy(x), x0)  # x never written


@pytest.mark.parametrize("backend", backend_params([b for b in ENGINES if takes(b, np.complex128)]))
def test_real_valued_and_non_holomorphic_outputs(backend: Any) -> None:
    x, v, _ = point(np.complex128)
    w = np.arange(1.0, 5.0)
    # a real-valued f: each jacobian row in the gradient's convention, the pullback of a real w
    # its combination, the pushforward the real directional derivative
    close(di.jacobian(squared_moduli, backend, x), np.diag(2 * x), backend, np.complex128, "jacobian")
    close(di.pullback(squared_moduli, backend, x, (w,))[0], 2 * w * x, backend, np.complex128, "pullback")
    pushed = di.pushforward(squared_moduli, backend, x, (v,))[0]
    close(pushed, 2 * np.real(np.conj(x) * v), backend, np.complex128, "pushforward")
    with pytest.raises(di.InvalidInputError, match="real"):
        di.pullback(squared_moduli, backend, x, (w + 1j,))
    # a complex f that is not holomorphic: its jacobian is refused, its pushforward exists
    with pytest.raises(di.InvalidOutputError, match="holomorphic"):
        di.jacobian(conjugate, backend, x)
    close(di.pushforward(conjugate, backend, x, (v,))[0], np.conj(v), backend, np.complex128, "pushforward")
    close(di.pullback(conjugate, backend, x, (v,))[0], np.conj(v), backend, np.complex128, "pullback")
    # gradient, hvp and hessian need a real-valued f, and say how to get one
    with pytest.raises(di.InvalidOutputError, match=r"xp\.real"):
        di.gradient(lambda z: di.array_namespace(z).sum(z * z), backend, x)
    with pytest.raises(di.InvalidInputError, match="second_derivative"):
        di.second_derivative(holomorphic, backend, x[0])


NATIVE = [b for b in ENGINES if capabilities(b).complex_native]


def real_f_with_aux(z: Any) -> Any:
    return real_f(z), {"norm": di.array_namespace(z).sum(squared_moduli(z))}


@pytest.mark.parametrize("backend", backend_params(NATIVE))  # (compiled: test_every_operator_follows_the_convention)
def test_native_complex_programs_agree_with_the_real_view(backend: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """An engine declaring complex_native runs its own programs at the complex x (no real view is
    split), and they agree with the real view's, in NumPy and the engine's family, has_aux too."""
    splits: list[int] = []
    counted = RealView.split
    monkeypatch.setattr(RealView, "split", lambda self, value: splits.append(1) or counted(self, value))
    operators = capabilities(backend).complex_native

    def results(x: Any, v: Any) -> dict[str, Any]:
        found: dict[str, Any] = {}
        if "gradient" in operators:
            prep = di.prepare_gradient(real_f, backend, x)
            aux_prep = di.prepare_gradient(real_f_with_aux, backend, x, has_aux=True)
            (y, g), (g_aux, aux) = (
                di.value_and_gradient(real_f, prep, backend, x),
                di.gradient(real_f_with_aux, aux_prep, backend, x, has_aux=True),
            )
            found.update(gradient=di.gradient(real_f, prep, backend, x), value=y, value_and_gradient=g)
            found.update(aux_gradient=g_aux, aux=aux["norm"])
        if "hvp" in operators:
            prep = di.prepare_hvp(real_f, backend, x, (v,))
            g, (hv,) = di.gradient_and_hvp(real_f, prep, backend, x, (v,))
            found.update(hvp=di.hvp(real_f, prep, backend, x, (v,))[0], gradient_and_hvp=g, its_hvp=hv)
        return found

    x0, v0, _ = point(np.complex64)
    points = [(as_family(x0, fam), as_family(v0, fam)) for fam in complex_families(backend) if fam in FAMILIES]
    native = [results(x, v) for x, v in points]
    assert not splits, "a complex_native operator went through the real view"
    adapter = get_adapter(backend)
    monkeypatch.setattr(type(adapter), "capabilities", replace(adapter.capabilities, complex_native=frozenset()))
    for (x, v), by_engine in zip(points, native):
        through_view = results(x, v)
        assert by_engine.keys() == through_view.keys()
        for what, got in by_engine.items():
            close(got, to_numpy(through_view[what]), backend, np.complex64, what)
    assert splits


def tree_f(t: Any) -> Any:
    """Re(sum(A w^2)) + sum(b^2) + sum(|w|^2) sum(b), of a pytree with a complex leaf w and a real leaf b."""
    xp = di.array_namespace(t["b"])
    return (
        real_f(t["w"])
        - xp.sum(squared_moduli(t["w"])) / 2
        + xp.sum(t["b"] ** 2)
        + xp.sum(squared_moduli(t["w"])) * xp.sum(t["b"])
    )


@pytest.mark.parametrize("backend", backend_params([b for b in ENGINES if takes(b, np.complex64)]))
def test_a_pytree_with_complex_leaves_follows_the_convention(backend: Any) -> None:
    """Each complex leaf gets what a complex array x gets (its real view), the real leaves theirs."""
    dtype = np.complex128 if takes(backend, np.complex128) else np.complex64
    w, vw, _ = point(dtype, n=2)
    b, vb = np.array([0.7, -1.1, 0.2], w.real.dtype), np.array([1.0, 0.0, -1.0], w.real.dtype)
    x, v = {"w": w, "b": b}, {"w": vw, "b": vb}
    total, norm = b.sum(), np.sum(np.abs(w) ** 2)
    gradient = {"w": 2 * np.conj(A * w) + 2 * w * total, "b": 2 * b + norm}
    hvp = {"w": 2 * np.conj(A * vw) + 2 * vw * total + 2 * w * vb.sum(), "b": 2 * vb + 2 * np.vdot(w, vw).real}
    results = {
        "gradient": di.gradient(tree_f, backend, x),
        "pullback": di.pullback(tree_f, backend, x, (np.ones((), b.dtype),))[0],
        "hvp": di.hvp(tree_f, backend, x, (v,))[0],
        "jacobian": di.jacobian(lambda t: tree_f(t)[None], backend, x),
    }
    for leaf in ("w", "b"):
        for name in ("gradient", "pullback"):
            close(results[name][leaf], gradient[leaf], backend, dtype, f"{name}[{leaf!r}]")
        close(results["hvp"][leaf], hvp[leaf], backend, dtype, f"hvp[{leaf!r}]")
        close(results["jacobian"][leaf], gradient[leaf][None], backend, dtype, f"jacobian[{leaf!r}]")
    pushed = np.vdot(gradient["w"], vw).real + gradient["b"] @ vb
    close(di.pushforward(tree_f, backend, x, (v,))[0], pushed, backend, dtype, "pushforward")
    with pytest.raises(di.InvalidOutputError, match=r"xp\.real"):
        di.jacobian(lambda t: t["w"] * t["b"][0], backend, x)


def test_the_hessian_of_a_pytree_with_complex_leaves_holds_the_real_hessians_blocks() -> None:
    """Block [i][j] is the real Hessian's, each complex leaf as its real view (2, *leaf.shape)
    (the conversion is the same on every engine: none; one AD engine and finite differences)."""
    w, b = point(np.complex128, n=2)[0], np.array([0.7, -1.1, 0.2])
    for backend in (di.AutoAutograd(), di.AutoFiniteDiff()):
        hessian = di.hessian(tree_f, backend, {"w": w, "b": b})
        cross = np.broadcast_to(2 * np.stack([w.real, w.imag])[..., None], (2, 2, 3))  # d grad_w / d b
        close(hessian["w"]["b"], cross, backend, np.complex128, "hessian['w']['b']")
        close(hessian["b"]["w"], np.moveaxis(cross, -1, 0), backend, np.complex128, "hessian['b']['w']")
        close(hessian["b"]["b"], 2 * np.eye(3), backend, np.complex128, "hessian['b']['b']")
        real_view = columns_of_the_hvp(lambda v: 2 * np.conj(A * v) + 2 * v * b.sum(), 2)
        close(hessian["w"]["w"], real_view, backend, np.complex128, "hessian['w']['w']")


@pytest.mark.parametrize(
    ("backend", "family"),
    [
        pytest.param(di.AutoSparse(di.AutoFiniteDiff()), "numpy", id="finitediff-numpy"),
        pytest.param(di.AutoSparse(di.AutoTorch()), "torch", id="torch-torch"),
    ],
)
def test_a_sparse_jacobian_at_a_complex_x_follows_the_convention(backend: Any, family: str) -> None:
    """AutoSparse's jacobian is the real view's sparse matrix recombined, in the caller's family:
    the complex derivative of a holomorphic f, the gradient's convention per row of a real one.
    (Before, a torch x got a false non-holomorphic error, and a real-valued f a 1-D tensor.)"""
    if family not in FAMILIES:
        pytest.skip(f"{family} is not installed")
    x0, _, _ = point(np.complex128)
    x = as_family(x0, family)
    for f, expected in ((holomorphic, np.diag(holomorphic_derivative(x0))), (squared_moduli, np.diag(2 * x0))):
        jacobian = di.jacobian(f, backend, x)
        assert type(jacobian).__module__.split(".")[0] == {"numpy": "scipy", "torch": "torch"}[family]
        close(di.to_scipy(jacobian).toarray(), expected, backend, np.complex128, f"sparse jacobian of {f.__name__}")
    with pytest.raises(di.InvalidOutputError, match="holomorphic"):
        di.jacobian(conjugate, backend, x)


def test_differentiate_with_at_a_complex_x_is_refused_naming_what_to_do() -> None:
    """Each engine hosting DifferentiateWith has its own convention for complex cotangents at
    that boundary: refused (on the outer call's real view too), naming the remedy."""
    inner = di.DifferentiateWith(pymanopt_cost, di.AutoFiniteDiff())
    x = point(np.complex128, n=2)[0]
    with pytest.raises(di.InvalidInputError, match="real and imaginary parts as two real arrays"):
        di.gradient(inner, di.AutoAutograd(), x)
    # finite differences only evaluate it (no boundary to cross): the convention's gradient
    close(di.gradient(inner, di.AutoFiniteDiff(), x), 2 * np.conj(x), di.AutoFiniteDiff(), np.complex128, "gradient")


def pymanopt_cost(x: Any) -> Any:
    xp = di.array_namespace(x)
    return xp.real(xp.sum(x**2))


@pytest.mark.parametrize(
    "backend",
    backend_params(
        [
            *(b for b in BACKENDS_AND_SCHEMES if takes(b, np.complex128)),
            di.SecondOrder(di.AutoFiniteDiff(), di.AutoFiniteDiff()),
            di.AutoSparse(di.AutoFiniteDiff()),
        ]
    ),
)
def test_a_real_cost_of_a_complex_matrix_gets_twice_its_conjugate(backend: Any) -> None:
    x = np.array([[1.0 + 2.0j, -0.5j], [3.0, 0.25 - 1.0j]])
    kept = x.copy()
    prep = di.prepare_gradient(pymanopt_cost, backend, np.zeros_like(x))
    close(di.gradient(pymanopt_cost, prep, backend, x), 2 * np.conj(x), backend, np.complex128, "gradient")
    np.testing.assert_array_equal(x, kept)


coefficient = st.complex_numbers(min_magnitude=0.0, max_magnitude=2.0, allow_nan=False, allow_infinity=False)


@settings(max_examples=8, deadline=None)
@given(
    coefficients=st.lists(coefficient, min_size=1, max_size=4),
    z=st.complex_numbers(max_magnitude=1.5, allow_nan=False, allow_infinity=False),
)
def test_random_complex_polynomials(coefficients: list[complex], z: complex) -> None:
    """For a polynomial p: derivative is p'(z); the gradient of Re(p(z)) is conj(p'(z)),
    on an AD engine and on finite differences."""

    def p(x: Any) -> Any:
        total = x * 0
        for k, c in enumerate(coefficients):
            total = total + c * x**k
        return total

    def real_p(x: Any) -> Any:
        return di.array_namespace(x).real(p(x))

    derivative = sum(k * c * z ** (k - 1) for k, c in enumerate(coefficients) if k)
    x = np.asarray(z, dtype=np.complex128)
    for backend in (di.AutoAutograd(), di.AutoFiniteDiff()):
        np.testing.assert_allclose(di.derivative(p, backend, x), derivative, rtol=1e-6, atol=1e-6)
        np.testing.assert_allclose(di.gradient(real_p, backend, x), np.conj(derivative), rtol=1e-6, atol=1e-6)
