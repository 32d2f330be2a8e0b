"""The compiled torch programs' common call in one frame (di.engines.torch.compiled_call).

A prepared call on ``AutoTorch(compile=True)`` makes its common case (outside
transforms, a dense tensor ``x`` and one dense tensor tangent of its dtype and
device) in one frame of di's, and hands every other call to the layered program.
These tests hold both to the same results: analytic values on every branch that
leaves the common call, and the layered program's own result beside the fused
one. dynamo's ``eager`` backend compiles in a second; inductor changes nothing here.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import di  # noqa: E402

BACKEND = di.AutoTorch(compile=True, compile_options={"backend": "eager"})
X = np.array([0.5, -1.0, 2.0])
V = np.array([1.0, 2.0, -1.0])


def cube_sum(x: Any) -> Any:
    xp = di.array_namespace(x)
    return xp.sum(x**3)


def cube(x: Any) -> Any:
    return x**3


def _tensor(values: Any, dtype: Any = torch.float64) -> Any:
    return torch.tensor(np.asarray(values), dtype=dtype)


EXPECTED = {  # of cube_sum, or of cube for the tangent operators with g
    "gradient": 3 * X**2,
    "value_and_gradient": 3 * X**2,
    "pushforward": 3 * X**2 * V,
    "pullback": 3 * X**2 * V,
    "hvp": 6 * X * V,
}
TANGENTS = ("pushforward", "pullback", "hvp")


def _prepared(operator: str, x: Any, v: Any, strict: bool = True) -> tuple[Callable[..., Any], Any]:
    f = cube if operator in ("pushforward", "pullback") else cube_sum
    if operator == "value_and_gradient":
        prep = di.prepare_gradient(f, BACKEND, x, value=True, strict=strict)
    elif operator in TANGENTS:
        prep = getattr(di, f"prepare_{operator}")(f, BACKEND, x, (v,), strict=strict)
    else:
        prep = di.prepare_gradient(f, BACKEND, x, strict=strict)
    return f, prep


def _call(operator: str, f: Any, prep: Any, x: Any, tangents: Any) -> Any:
    if operator in TANGENTS:
        return getattr(di, operator)(f, prep, BACKEND, x, tangents)[0]
    result = getattr(di, operator)(f, prep, BACKEND, x)
    return result[1] if operator == "value_and_gradient" else result


def _layered(program: Any) -> Any:
    """The layered program a fused one hands its uncommon calls."""
    cells = dict(zip(program.__code__.co_freevars, (c.cell_contents for c in program.__closure__)))
    return cells["general"]


def _numpy(value: Any) -> Any:
    return value.detach().numpy()


@pytest.mark.parametrize("operator", list(EXPECTED))
def test_the_common_call_enters_three_functions_of_di_and_agrees_with_the_layered_program(operator: str) -> None:
    """The call enters dispatch, the runner (with its matchers) and the fused call,
    then dynamo's watch and the compiled function: none of the layers (the
    transform dispatch, the runner of the inputs, the detaching and owning
    steps), which were four frames of di's before the compiled function. The
    layered program, called on the same arguments, gives the same result."""
    x, v = _tensor(X), _tensor(V)
    f, prep = _prepared(operator, x, v)
    _call(operator, f, prep, x, (v,))
    entered: list[tuple[str, str]] = []
    root = di.__file__.rsplit("/", 1)[0]

    def profile(frame: Any, event: str, arg: Any) -> None:
        if event == "call" and frame.f_code.co_filename.startswith(root):
            entered.append((frame.f_code.co_name, frame.f_code.co_filename.removeprefix(root)))

    sys.setprofile(profile)
    try:
        result = _call(operator, f, prep, x, (v,))
    finally:
        sys.setprofile(None)
    fused = "run_with_tangents" if operator in TANGENTS else "run"
    assert entered[0][0] == "dispatch" and (fused, "/engines/torch/compiled_call.py") in entered, entered
    for layer in ("ownership.py", "running.py", "transforms.py"):  # (owning's step, owned, is no layer)
        assert ("run", f"/engines/torch/{layer}") not in entered, entered
    assert not any(file == "/engines/torch/running.py" for _, file in entered), entered
    np.testing.assert_allclose(_numpy(result), EXPECTED[operator])
    program = prep.programs[operator]
    layered = _layered(program)
    args = (x, (v,)) if operator in TANGENTS else (x,)
    by_layers, in_one_frame = layered(*args), program(*args)
    pairs = zip(*(r if isinstance(r, tuple) else (r,) for r in (by_layers, in_one_frame)))
    for a, b in pairs:
        np.testing.assert_array_equal(_numpy(a), _numpy(b))


CASES: dict[str, Callable[[], tuple[Any, Any]]] = {
    "a non-contiguous x": lambda: (_tensor(np.stack([X, X], axis=1))[:, 0], _tensor(V)),
    "an x that requires grad": lambda: (_tensor(X).requires_grad_(), _tensor(V)),
    "a non-contiguous tangent": lambda: (_tensor(X), _tensor(np.stack([V, V], axis=1))[:, 0]),
    "a float32 tangent": lambda: (_tensor(X), _tensor(V, torch.float32)),
    "a NumPy tangent": lambda: (_tensor(X), V.copy()),
}
OTHER_SIGNATURES = ("a float32 tangent", "a NumPy tangent")  # (a strict prep refuses them)


BROKEN_CALLS = [
    (operator, case)
    for operator in ("gradient", "pushforward", "hvp")
    for case in CASES
    if operator != "gradient" or "tangent" not in case
]


@pytest.mark.parametrize(("operator", "case"), BROKEN_CALLS)
def test_each_call_that_is_not_the_common_one_gets_the_same_result(operator: str, case: str) -> None:
    """Every condition of the common call, broken one at a time, gives the analytic
    result (strict preps, but strict=False for a tangent of another signature); an
    x that requires grad gets a result that carries its graph (create_graph is
    on). A strided x on forward mode failed inside dynamo before the compiled
    programs' inputs were made contiguous (its recompile for other strides made
    them symbolic, which make_dual cannot take), strict or not."""
    x, v = CASES[case]()
    f, prep = _prepared(operator, _tensor(X), _tensor(V), strict=case not in OTHER_SIGNATURES)
    result = _call(operator, f, prep, x, (v,))
    np.testing.assert_allclose(_numpy(result), EXPECTED[operator], rtol=1e-6)
    assert result.requires_grad is (case == "an x that requires grad")
    x_before = _numpy(x).copy()
    again = _call(operator, f, prep, x, (v,))
    np.testing.assert_array_equal(_numpy(x), x_before)
    np.testing.assert_array_equal(_numpy(again), _numpy(result))


def test_the_product_of_the_identity_is_a_copy_of_the_tangent_on_the_common_call() -> None:
    """The compiled product of a linear f is its tangent, as given: the common
    call copies it (the owning step), so writing into the result leaves the tangent."""
    x, v = _tensor(X), _tensor(V)

    def identity(x: Any) -> Any:
        return x

    prep = di.prepare_pushforward(identity, BACKEND, x, (v,))
    (product,) = di.pushforward(identity, prep, BACKEND, x, (v,))
    assert product is not v
    product[...] = 99.0
    np.testing.assert_array_equal(_numpy(v), V)


def test_inside_a_transform_the_call_runs_the_traced_program() -> None:
    """Under torch.func.grad the fused call hands the call to the layered program,
    which runs the traced form: the derivative of the pushforward of cube along
    v with respect to x, summed, is 6 x v."""
    v = _tensor(V)
    prep = di.prepare_pushforward(cube, BACKEND, _tensor(X), (v,))

    def summed(x: Any) -> Any:
        return di.pushforward(cube, prep, BACKEND, x, (v,))[0].sum()

    np.testing.assert_allclose(_numpy(torch.func.grad(summed)(_tensor(X))), 6 * X * V)


def test_an_inference_tensor_x_takes_the_layered_program() -> None:
    """An inference tensor keeps no version counter to check a write with: the
    layered program runs it, with the same result."""
    v = _tensor(V)
    prep = di.prepare_pushforward(cube, BACKEND, _tensor(X), (v,))
    with torch.inference_mode():
        x = _tensor(X)
    (product,) = di.pushforward(cube, prep, BACKEND, x, (v,))
    np.testing.assert_allclose(_numpy(product), 3 * X**2 * V)


def test_a_write_into_x_is_refused_on_the_common_call() -> None:
    """An f that writes into x (forward mode lets it) is refused after it ran, as the
    layered program refuses it, naming the operator: here f starts writing after
    the preparation (a flag it closes over, which dynamo compiles in: a recompile
    in the common call), and the result is the refusal, not a number."""
    x, v = _tensor(X), _tensor(V)
    writing = [False]

    def writes_later(x: Any) -> Any:
        y = x**3
        if writing[0]:
            x.mul_(1.0)
        return y

    prep = di.prepare_pushforward(writes_later, BACKEND, x, (v,))
    np.testing.assert_allclose(_numpy(di.pushforward(writes_later, prep, BACKEND, x, (v,))[0]), 3 * X**2 * V)
    writing[0] = True
    with pytest.raises(di.DIError, match="pushforward"):
        di.pushforward(writes_later, prep, BACKEND, x, (v,))


@pytest.mark.parametrize("operator", ["value_and_gradient", "value_and_jacobian", "value_and_pushforward"])
def test_a_value_that_is_x_itself_is_a_copy_without_contexts(operator: str) -> None:
    """The value of the identity is x itself (torch.compile returns its input as
    the output): with no context, the value is compared with x's memory alone,
    and copied, so writing into it leaves x as it was."""
    x = _tensor(2.0) if operator == "value_and_gradient" else _tensor(X)

    def identity(x: Any) -> Any:
        return x

    call = getattr(di, operator)
    if operator == "value_and_pushforward":
        prep = di.prepare_pushforward(identity, BACKEND, x, (_tensor(V),), value=True)
        y, _ = call(identity, prep, BACKEND, x, (_tensor(V),))
    else:
        prep = getattr(di, f"prepare_{operator.removeprefix('value_and_')}")(identity, BACKEND, x, value=True)
        y, _ = call(identity, prep, BACKEND, x)
    assert y is not x
    y.detach()[...] = 99.0
    np.testing.assert_array_equal(_numpy(x), 2.0 if operator == "value_and_gradient" else X)
