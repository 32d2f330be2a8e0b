"""What ``AutoTorch(compile=True)`` checks at preparation, because dynamo's trace
of a ``torch.func`` program cannot see it (``di/engines/torch/checks.py``): a
``torch.autograd.Function`` in ``f`` (whose own backward and jvp the compiled
program dropped, answering the derivative of its forward: PyTorch's issue 193279)
and an output cut off from ``x`` (answered as zeros). Both were silent wrong
answers; eager ``AutoTorch()`` gets both right. aot_eager only, few compiles:
the refusals come before anything is compiled."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import di

torch = pytest.importorskip("torch")

COMPILED = di.AutoTorch(compile=True, compile_options={"backend": "aot_eager"})
EAGER = di.AutoTorch()
X = [0.3, -1.2, 2.0]


class Thrice(torch.autograd.Function):
    """``sin`` with a custom derivative of 3 in both modes (not ``cos``)."""

    @staticmethod
    def forward(x: Any) -> Any:
        return torch.sin(x)

    @staticmethod
    def setup_context(ctx: Any, inputs: Any, output: Any) -> None:
        pass

    @staticmethod
    def backward(ctx: Any, g: Any) -> Any:
        return 3.0 * g

    @staticmethod
    def jvp(ctx: Any, t: Any) -> Any:
        return 3.0 * t

    generate_vmap_rule = True


def _thrice(x: Any) -> Any:
    xp = di.array_namespace(x)
    return xp.multiply(Thrice.apply(x), 1.0)


def _thrice_sum(x: Any) -> Any:
    xp = di.array_namespace(x)
    return xp.sum(Thrice.apply(x))


def _cut(x: Any) -> Any:
    return x.detach() * 2.0  # (a .detach(): what this test is about)


def _cut_sum(x: Any) -> Any:
    xp = di.array_namespace(x)
    return xp.sum(x.detach() * 2.0)


def _zero(x: Any) -> Any:
    return x * 0.0


def _zero_sum(x: Any) -> Any:
    xp = di.array_namespace(x)
    return xp.sum(x * 0.0)


def _calls(array_f: Callable[..., Any], scalar_f: Callable[..., Any]) -> dict[str, Callable[[Any], Any]]:
    """Each operator, called on a backend: the scalar ``f`` for the gradient."""
    x, t = torch.tensor(X), (torch.ones(3),)
    return {
        "gradient": lambda b: di.gradient(scalar_f, b, x),
        "pullback": lambda b: di.pullback(array_f, b, x, t)[0],
        "pushforward": lambda b: di.pushforward(array_f, b, x, t)[0],
    }


@pytest.mark.parametrize("operator", ["gradient", "pullback", "pushforward"])
def test_a_custom_autograd_function_is_refused_by_a_compiled_preparation(operator: str) -> None:
    call = _calls(_thrice, _thrice_sum)[operator]
    with pytest.raises(di.UnsupportedOperatorError) as caught:
        call(COMPILED)  # before: cos(x), [0.9553, 0.3624, -0.4161], the forward's derivative
    message = str(caught.value)
    assert message.startswith(f"{operator} with AutoTorch(compile=True")
    assert "torch.autograd.Function Thrice" in message and "193279" in message
    assert "Use AutoTorch() (eager)" in message
    # the remedy named gives the Function's own derivative
    np.testing.assert_allclose(call(EAGER).numpy(), [3.0, 3.0, 3.0])


@pytest.mark.parametrize("operator", ["gradient", "pullback"])
def test_an_output_cut_off_from_x_is_refused_by_a_compiled_preparation(operator: str) -> None:
    call = _calls(_cut, _cut_sum)[operator]
    for backend in (COMPILED, EAGER):  # before: zeros, compiled; eager refused it
        with pytest.raises(di.InvalidOutputError, match="that was not computed from x"):
            call(backend)


def test_the_cut_off_part_of_an_output_with_aux_is_refused_by_a_compiled_preparation() -> None:
    def f(x: Any) -> Any:
        xp = di.array_namespace(x)
        return xp.sum(x.detach() * 2.0), {"x": x}

    with pytest.raises(di.InvalidOutputError, match="that was not computed from x"):
        di.gradient(f, COMPILED, torch.tensor(X), has_aux=True)


@pytest.mark.parametrize("operator", ["gradient", "pullback"])
def test_an_output_constant_in_x_is_still_prepared_compiled_and_gives_zeros(operator: str) -> None:
    call = _calls(_zero, _zero_sum)[operator]
    np.testing.assert_array_equal(call(COMPILED).numpy(), [0.0, 0.0, 0.0])


def test_differentiate_with_inside_a_compiled_gradient_is_not_refused() -> None:
    # di's own Function is an opaque custom op under torch.compile: dynamo keeps its derivative
    pytest.importorskip("autograd")

    def g(x: Any) -> Any:
        xp = di.array_namespace(x)
        return xp.sin(x) * 2.0

    wrapped = di.DifferentiateWith(g, di.AutoAutograd())

    def f(x: Any) -> Any:
        xp = di.array_namespace(x)
        return xp.sum(wrapped(x))

    x = torch.tensor(X)
    np.testing.assert_allclose(di.gradient(f, COMPILED, x).numpy(), 2.0 * np.cos(X), rtol=1e-6)


def test_a_second_prep_at_another_size_compiles_for_its_own_size() -> None:
    """dynamo remembers sizes by function name and line, so the second prep of one f
    at another size was traced with symbolic sizes (automatic dynamic shapes): the
    DifferentiateWith inside f, registered for concrete shapes, broke the graph with
    a warning blaming di. Each prep's first trace is specialized to its signature."""
    pytest.importorskip("autograd")
    wrapped = di.DifferentiateWith(lambda x: di.array_namespace(x).sin(x) * 2.0, di.AutoAutograd())

    def f(x: Any) -> Any:
        xp = di.array_namespace(x)
        return xp.sum(wrapped(x))

    for size in (2, 3, 4):
        x = torch.linspace(-1.0, 1.0, size, dtype=torch.float64)
        prep = di.prepare_gradient(f, COMPILED, x)
        np.testing.assert_allclose(di.gradient(f, prep, COMPILED, x).numpy(), 2.0 * np.cos(x.numpy()), rtol=1e-12)


def _writes_then_interrupts(x: Any) -> Any:
    with torch.no_grad():  # (a write torch lets through: nothing records it)
        x.mul_(1.0)
    raise KeyboardInterrupt("ctrl-c inside f")


def _writes(x: Any) -> Any:
    xp = di.array_namespace(x)
    with torch.no_grad():
        x.mul_(1.0)
    return xp.sum(x * x)


def test_the_preparation_check_lets_an_interrupt_through_and_refuses_a_write() -> None:
    """The uncompiled evaluation that the check makes replaced a KeyboardInterrupt
    raised after f wrote into x with di's InvalidInputError (its version check
    raised in a finally); a write alone is refused, naming the operator."""
    x = torch.tensor([0.3, -1.2, 2.0], dtype=torch.float64)
    with pytest.raises(KeyboardInterrupt) as info:
        di.prepare_gradient(_writes_then_interrupts, COMPILED, x)
    assert type(info.value) is KeyboardInterrupt and info.value.args == ("ctrl-c inside f",)
    with pytest.raises(di.InvalidInputError, match=r"gradient with AutoTorch.*f wrote into x"):
        di.prepare_gradient(_writes, COMPILED, x)


def _cubic(x: Any) -> Any:
    xp = di.array_namespace(x)
    return x * x * x - x * xp.sum(x * x)


def _cubic_sum(x: Any) -> Any:
    xp = di.array_namespace(x)
    return xp.sum(x * x * x)


@pytest.mark.parametrize("operator", ["pushforward", "pullback", "hvp"])
def test_one_tangent_reaches_the_compiled_program_bare_and_several_still_work(
    operator: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """dynamo guards and flattens a tuple argument at every call (about 7 us of a
    compiled pushforward at n = 1e5): one tensor tangent goes to the compiled
    program bare. A strict=False prep given two tangents still computes both (as a
    tuple, compiled once more), and one tangent after that goes bare again."""
    from di.engines.torch import compile as torch_compile

    received: list[type] = []
    watching = torch_compile.TorchCompiler.watching

    def recording(self: Any, compiled: Any, *rest: Any) -> Any:
        def recorded(*args: Any) -> Any:
            received.append(type(args[1]))
            return compiled(*args)

        return watching(self, recorded, *rest)

    monkeypatch.setattr(torch_compile.TorchCompiler, "watching", recording)
    f = _cubic_sum if operator == "hvp" else _cubic
    x = torch.tensor(X, dtype=torch.float64)
    u, w = torch.tensor([1.0, 0.5, -2.0], dtype=torch.float64), torch.tensor([0.0, 1.0, 3.0], dtype=torch.float64)
    call, prepare = getattr(di, operator), getattr(di, f"prepare_{operator}")
    prep = prepare(f, COMPILED, x, (u,), strict=False)
    expected = [call(f, EAGER, x, (t,))[0] for t in (u, w)]
    received.clear()
    one = call(f, prep, COMPILED, x, (u,))
    assert received == [torch.Tensor]
    two = call(f, prep, COMPILED, x, (u, w))
    assert received[1:] == [tuple]
    again = call(f, prep, COMPILED, x, (w,))
    assert received[2:] == [torch.Tensor]
    for got, want in zip([one[0], *two, again[0]], [expected[0], *expected, expected[1]]):
        torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)


def test_dynamo_failing_on_a_program_that_runs_uncompiled_is_a_di_error() -> None:
    """dynamo's fake tensors fail a jvp of a jvp of a scalar t broadcast against a
    vector (natively too); the uncompiled program runs. The failure is a
    di.UnsupportedOperatorError naming the backend, the operator and the way out,
    chained to dynamo's TorchRuntimeError, where it was dynamo's error alone."""
    from di.engines.torch.compile import TorchCompiler

    c = torch.tensor([0.3, -0.7], dtype=torch.float64)
    one = torch.ones((), dtype=torch.float64)

    def derivative(t: Any) -> Any:
        return torch.func.jvp(lambda t: torch.sin(t * c), (t,), (one,))[1]

    def second_derivative(t: Any) -> Any:
        return torch.func.jvp(derivative, (t,), (one,))[1]

    t = torch.tensor(0.4, dtype=torch.float64)
    np.testing.assert_allclose(second_derivative(t), -(c**2) * torch.sin(t * c))
    compiler = TorchCompiler(COMPILED)
    with pytest.raises(di.UnsupportedOperatorError, match=r"second_derivative of f .*Use AutoTorch\(\)") as raised:
        compiler.compile_now(second_derivative, lambda program: program(t), operator="second_derivative")
    assert repr(COMPILED) in str(raised.value)
    assert isinstance(raised.value.__cause__, torch._dynamo.exc.TorchRuntimeError)


def _take_then_sum(x: Any) -> Any:
    xp = di.array_namespace(x)
    v = xp.take(x, xp.flip(xp.arange(x.shape[0]))) * 0.5 + x
    v = v + xp.sum(v) * 0.1
    return xp.sum(v * v)


def test_a_compiled_hvp_where_forward_mode_fails_takes_reverse_over_reverse_and_leaves_torch_as_it_was() -> None:
    """Forward over reverse of _take_then_sum fails in float32 (torch's float64
    tangent); dynamo's eager backend left saved-tensor hooks disabled and a dual
    level open, so every later forward-mode call of the process failed. The prep
    takes reverse over reverse, says so, and torch's state is as it was."""
    backend = di.AutoTorch(compile=True, compile_options={"backend": "eager"})
    x = torch.tensor([0.3, 0.7])
    tangents = (torch.tensor([1.0, -1.0]), torch.tensor([0.5, 2.0]))
    prep = di.prepare_hvp(_take_then_sum, backend, x, tangents)
    assert "reverse over reverse" in prep.info.program and "forward over reverse failed" in prep.info.program
    # v = A x with A = [[1, 0.5], [0.5, 1]] then (I + 0.1 11^T) v: f = |B x|^2, H = 2 B^T B
    b = (torch.eye(2) + 0.1) @ torch.tensor([[1.0, 0.5], [0.5, 1.0]])
    for got, t in zip(di.hvp(_take_then_sum, prep, backend, x, tangents), tangents):
        torch.testing.assert_close(got, 2 * b.T @ b @ t)
    assert torch._C._autograd._saved_tensors_hooks_is_enabled()
    _, dy = torch.func.jvp(torch.sin, (x,), (tangents[0],))  # forward mode still works
    torch.testing.assert_close(dy, torch.cos(x) * tangents[0])


def test_a_compiled_result_that_differs_from_the_uncompiled_program_is_refused() -> None:
    """Inductor's code for jacrev(grad(f)) through take gave a wrong Hessian (3.5
    for 2.5, natively too); the prep compares the compiled program with the same
    program run uncompiled, and refuses with the way out."""
    from di.engines.torch.func_builder import _miscompiled

    exact = torch.tensor([[2.5, 2.0], [2.0, 2.5]])
    wrong = torch.tensor([[3.5, 2.5], [2.5, 3.5]])
    _miscompiled(exact + 1e-9, exact, COMPILED, "hessian", lambda: exact)  # rounding passes
    with pytest.raises(di.UnsupportedOperatorError, match=r"compiled hessian of f differs.*'aot_eager'"):
        _miscompiled(wrong, exact, COMPILED, "hessian", lambda: exact)
    with pytest.raises(di.UnsupportedOperatorError):  # float32 rounding is allowed, not more
        _miscompiled(exact.float() * 1.01, exact.float(), COMPILED, "hessian", lambda: exact.float())
    _miscompiled(exact.float() * (1 + 1e-5), exact.float(), COMPILED, "hessian", lambda: exact.float())
    # an f whose uncompiled runs differ from each other (random numbers) proves nothing
    _miscompiled(wrong, exact, COMPILED, "hessian", lambda: 2 * exact)


def test_a_compiled_hvp_of_an_f_that_draws_random_numbers_is_not_refused() -> None:
    """Dropout-like noise: compiled and uncompiled runs draw other numbers, and
    so do two uncompiled runs; the check does not take that for a miscompilation."""

    def noisy(x: Any) -> Any:
        xp = di.array_namespace(x)
        return xp.sum(x**3 * (1.0 + 0.1 * torch.rand(x.shape, dtype=x.dtype)))

    x, t = torch.tensor([0.3, 0.7]), torch.tensor([1.0, -1.0])
    (hv,) = di.hvp(noisy, di.AutoTorch(compile=True, compile_options={"backend": "eager"}), x, (t,))
    assert hv.shape == (2,) and bool(((hv / (6 * x * t)) > 0.99).all() and ((hv / (6 * x * t)) < 1.11).all())
