"""``di`` inside autograd's own transforms: an outer ``autograd.grad`` (or jacobian,
hessian, ``make_vjp``) of a function that calls ``di`` on ``AutoAutograd``.

The values are then autograd's boxes: every operator, prepared strictly outside
the transform and unprepared, nests autograd's own transforms and agrees with
the native composition (second derivatives); same-point preps are refused, and
other backends refuse boxes up front, naming the transform.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from transform_cases import OPERATORS, T, X, appliers, compositions, curve, di_function, prepare, scalar, vector

import di

autograd = pytest.importorskip("autograd")
from autograd.differential_operators import make_hvp, make_jvp, make_vjp  # noqa: E402

BACKEND = di.AutoAutograd()
APPLY = appliers("autograd")

NATIVE: dict[str, Callable[[Any], Any]] = {
    "gradient": lambda x: autograd.grad(scalar)(x),
    "derivative": lambda x: autograd.jacobian(curve)(x[0]),
    "jacobian": lambda x: autograd.jacobian(vector)(x),
    "pushforward": lambda x: make_jvp(vector)(x)(T)[1],
    "pullback": lambda x: make_vjp(vector)(x)[0](T),
    "hvp": lambda x: make_hvp(scalar)(x)[0](T),
    "hessian": lambda x: autograd.hessian(scalar)(x),
    "second_derivative": lambda x: autograd.jacobian(autograd.jacobian(curve))(x[0]),
}


def test_every_declared_transform_is_tested() -> None:
    assert {c.transform for c in compositions(BACKEND)} == set(APPLY)
    assert set(NATIVE) == set(OPERATORS)


@pytest.mark.parametrize("operator", list(OPERATORS))
@pytest.mark.parametrize("transform", list(APPLY))
def test_operator_inside_transform_agrees_with_autograd(transform: str, operator: str) -> None:
    composition = next(c for c in compositions(BACKEND) if c.transform == transform)
    assert composition.composes(operator) and composition.composes("unprepared")
    apply = APPLY[transform]
    x, t = X.copy(), T.copy()
    expected = apply(NATIVE[operator], x)
    prep = prepare(operator, BACKEND, x, t)
    np.testing.assert_allclose(apply(di_function(operator, BACKEND, prep, t), x), expected, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(apply(di_function(operator, BACKEND, None, t), x), expected, rtol=1e-12, atol=1e-14)


def test_second_derivatives_through_di_gradient() -> None:
    hessian = autograd.jacobian(lambda x: di.gradient(scalar, BACKEND, x))(X)
    np.testing.assert_allclose(hessian, autograd.hessian(scalar)(X), rtol=1e-12)


def test_same_point_preps_are_refused_inside() -> None:
    assert not compositions(BACKEND)[0].composes("same point")
    prep = di.prepare_pullback_same_point(vector, BACKEND, X, (T,))
    with pytest.raises(di.UnsupportedOperatorError, match=r"inside autograd\.grad"):
        APPLY["autograd.grad"](lambda x: di.pullback(vector, prep, BACKEND, x, (T,))[0], X)


def test_other_backends_refuse_boxes_up_front() -> None:
    for backend in (di.AutoFiniteDiff(), di.AutoJAX(), di.AutoTorch()):
        if not backend.is_installed:
            continue
        with pytest.raises(di.InvalidInputError, match=r"x is traced by autograd\.grad"):
            APPLY["autograd.grad"](lambda x, backend=backend: di.gradient(scalar, backend, x), X)


def test_a_prep_reports_a_box_by_the_array_inside() -> None:
    prep = di.prepare_gradient(scalar, BACKEND, np.zeros(2))
    with pytest.raises(di.PreparationMismatchError) as caught:
        APPLY["autograd.grad"](lambda x: di.gradient(scalar, prep, BACKEND, x), X)
    assert "given numpy float64 (3,) (traced by autograd.grad)" in str(caught.value)


@pytest.mark.parametrize("operator", ["pushforward", "pullback", "hvp"])
@pytest.mark.parametrize("prepared", [True, False], ids=["prepared", "unprepared"])
def test_derivatives_with_respect_to_the_tangents(operator: str, prepared: bool) -> None:
    """autograd.grad of a function of the tangents: they are boxes then, which an
    unprepared call refused ("ty[0] must be an array or pytree, not ArrayBox")
    while a prepared one took them. The products are linear in the tangent, so
    the derivative of |product|^2 is 2 M^T M t."""
    x, t = X.copy(), T.copy()
    f, call, combined = {
        "pushforward": (vector, di.pushforward, di.value_and_pushforward),
        "pullback": (vector, di.pullback, di.value_and_pullback),
        "hvp": (scalar, di.hvp, di.gradient_and_hvp),
    }[operator]
    matrix = autograd.hessian(scalar)(x) if operator == "hvp" else autograd.jacobian(vector)(x)
    if operator == "pullback":
        matrix = matrix.T
    prep = prepare(operator, BACKEND, x, t) if prepared else None
    head = (prep, BACKEND) if prepared else (BACKEND,)
    expected = 2 * matrix.T @ matrix @ t
    for label, product in (
        ("plain", lambda t: call(f, *head, x, (t,))[0]),
        ("combined", lambda t: combined(f, *head, x, (t,))[1][0]),
    ):
        got = autograd.grad(lambda t, product=product: autograd.numpy.sum(product(t) ** 2))(t)
        np.testing.assert_allclose(got, expected, rtol=1e-12, err_msg=label)


def test_boxes_are_refused_by_name_before_any_autograd_prep(tmp_path: Any) -> None:
    """In a fresh interpreter, autograd.grad around di.gradient on another backend
    (no AutoAutograd prep made yet) read 'di knows no array family of that library':
    autograd's box class was known only once di's autograd adapter had been imported.
    Now the box's package has that adapter imported on the slow path, and the
    message names the transform; import di and a plain call still import no adapter."""
    import subprocess
    import sys

    script = tmp_path / "boxes.py"
    script.write_text(
        "import sys\n"
        "import numpy as np, autograd\n"
        "import di\n"
        "def scalar(x):\n"
        "    xp = di.array_namespace(x)\n"
        "    return xp.sum(x * x)\n"
        "print(float(di.gradient(scalar, di.AutoFiniteDiff(), np.ones(2))[0]))\n"
        "print('di.engines.autograd.adapter' in sys.modules)\n"
        "try:\n"
        "    autograd.grad(lambda x: di.gradient(scalar, di.AutoFiniteDiff(), x)[0])(np.ones(3))\n"
        "except di.InvalidInputError as err:\n"
        "    print(err)\n"
    )
    result = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    gradient, imported, message = result.stdout.split("\n", 2)
    assert float(gradient) == pytest.approx(2.0) and imported == "False"
    assert message.startswith("x is traced by autograd.grad, and AutoFiniteDiff("), message
    assert "knows no array family" not in message


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_the_hessian_is_the_jacobian_of_the_gradient_with_one_evaluation_of_f(dtype: str) -> None:
    """The prepared hessian is autograd's fastest spelling, ``jacobian(grad(f))``, to the
    last bit (``autograd.hessian``, the jacobian of the jacobian, is slower at large n): f
    is traced once per call, and the value and gradient come with one evaluation more."""
    calls = []

    def counted(x: Any) -> Any:
        calls.append(1)
        return scalar(x)

    x = (X * np.linspace(0.5, 1.5, X.size)).astype(dtype)
    prep = di.prepare_hessian(counted, BACKEND, x)
    calls.clear()
    hessian = di.hessian(counted, prep, BACKEND, x)
    assert len(calls) == 1 and hessian.dtype == np.dtype(dtype)
    np.testing.assert_array_equal(hessian, autograd.jacobian(autograd.grad(scalar))(x))
    calls.clear()
    y, g, again = di.value_gradient_and_hessian(counted, prep, BACKEND, x)
    assert len(calls) == 2
    np.testing.assert_array_equal(again, hessian)
    np.testing.assert_array_equal(g, autograd.grad(scalar)(x))
    assert y == scalar(x) and g.dtype == np.dtype(dtype)
    empty = np.zeros(0, dtype=dtype)
    assert di.hessian(scalar, BACKEND, empty).shape == (0, 0)
    assert [a.shape for a in di.value_gradient_and_hessian(scalar, BACKEND, empty)] == [(), (0,), (0, 0)]
