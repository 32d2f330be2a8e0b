"""What AutoTorch leaves behind, lets through and says: a ``Cache`` buffer holds no
graph after any operator, an interrupt inside ``f`` propagates unchanged whatever
``f`` wrote, a write into ``x`` found at an untraced evaluation names the operator,
and a ``torch.autograd.Function`` that ``torch.func`` cannot run is refused by ``di``."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from conftest import backend_id

import di

torch = pytest.importorskip("torch")

COMPILED = di.AutoTorch(compile=True, compile_options={"backend": "aot_eager"})
EAGER_AND_COMPILED = [
    pytest.param(di.AutoTorch(), id=backend_id(di.AutoTorch())),
    pytest.param(COMPILED, id="torch-compile"),
]

X = np.array([0.3, -1.2, 2.0])
T = np.array([1.0, 0.5, -0.25])
S = 0.7

# --- a Cache holds no graph --------------------------------------------------------------------


def _writes_vector(x: Any, buf: Any) -> Any:
    xp = di.array_namespace(x)
    buf[...] = x * x
    return xp.sin(buf) * xp.sum(x)


def _writes_scalar(x: Any, buf: Any) -> Any:
    xp = di.array_namespace(x)
    buf[...] = x * x
    return xp.sum(xp.sin(buf))


def _writes_curve(x: Any, buf: Any) -> Any:
    xp = di.array_namespace(x)
    buf[...] = x * x
    return xp.stack([xp.sin(buf), buf * x])


def _jacobian(x: np.ndarray) -> np.ndarray:
    return np.diag(np.cos(x * x) * 2 * x * np.sum(x)) + np.outer(np.sin(x * x), np.ones_like(x))


def _hessian(x: np.ndarray) -> np.ndarray:
    return np.diag(2 * np.cos(x * x) - 4 * x * x * np.sin(x * x))


# operator -> (f, x, takes tangents, the reference of its own result)
_CACHE_CASES: dict[str, tuple[Any, Any, bool, Any]] = {
    "jacobian": (_writes_vector, X, False, _jacobian(X)),
    "pushforward": (_writes_vector, X, True, _jacobian(X) @ T),
    "pullback": (_writes_vector, X, True, _jacobian(X).T @ T),
    "derivative": (_writes_curve, np.array(S), False, np.array([np.cos(S * S) * 2 * S, 3 * S * S])),
    "gradient": (_writes_scalar, X, False, np.cos(X * X) * 2 * X),
    "hvp": (_writes_scalar, X, True, _hessian(X) @ T),
    "hessian": (_writes_scalar, X, False, _hessian(X)),
}
_COMBINED = {
    "jacobian": "value_and_jacobian",
    "pushforward": "value_and_pushforward",
    "pullback": "value_and_pullback",
    "derivative": "value_and_derivative",
    "gradient": "value_and_gradient",
    "hvp": "gradient_and_hvp",
    "hessian": "value_gradient_and_hessian",
}


def _tensor(a: Any, grad: bool = False) -> Any:
    return torch.tensor(a, dtype=torch.float64, requires_grad=grad)


def _assert_no_graph(buf: Any) -> None:
    assert not buf.requires_grad and buf.grad_fn is None, (buf.requires_grad, buf.grad_fn)
    buf.numpy()  # refused for a tensor that requires grad


def _times_constant(f: Any) -> Any:
    """``f`` of ``x * c``, a Constant ``c`` before the buffer: what ``f`` writes
    into the buffer depends on ``c`` (1, so the derivatives are ``f``'s)."""

    def times(x: Any, c: Any, buf: Any) -> Any:
        return f(x * c, buf)

    return times


def _own_result(operator: str, name: str, result: Any) -> Any:
    if name != operator:
        result = result[-1]
    return result[0] if operator in ("pushforward", "pullback", "hvp") else result


# (AutoTorch(compile=True) refuses a Cache for hvp and hessian: docs/contexts.md)
_CACHE_BACKENDS_AND_OPERATORS = [
    pytest.param(backend, operator, id=f"{name}-{operator}")
    for backend, name in ((di.AutoTorch(), backend_id(di.AutoTorch())), (COMPILED, "torch-compile"))
    for operator in _CACHE_CASES
    if not (backend is COMPILED and operator in ("hvp", "hessian"))
]


@pytest.mark.parametrize("combined", [False, True], ids=["plain", "combined"])
@pytest.mark.parametrize("requiring", ["x", "constant"])
@pytest.mark.parametrize(("backend", "operator"), _CACHE_BACKENDS_AND_OPERATORS)
def test_a_cache_holds_no_graph_after_preparation_or_call(
    backend: Any, operator: str, requiring: str, combined: bool
) -> None:
    """With x (or a Constant) requiring grad, preparing a jacobian, pushforward,
    pullback or derivative (and every call of value_gradient_and_hessian) left the
    caller's buffer holding a graph (grad_fn CopyBackwards, numpy() refused): f's
    untraced evaluation wrote into it and nothing detached it."""
    f, x0, tangents, expected = _CACHE_CASES[operator]
    x = _tensor(x0, requiring == "x")
    contexts: tuple[Any, ...] = ()
    if requiring == "constant":
        f, contexts = _times_constant(f), (di.Constant(_tensor(1.0, True)),)
    name = _COMBINED[operator] if combined else operator
    args = (x, (_tensor(T),)) if tangents else (x,)
    prepared = torch.zeros(x.shape, dtype=torch.float64)
    prep = getattr(di, f"prepare_{operator}")(f, backend, *args, *contexts, di.Cache(prepared))
    _assert_no_graph(prepared)
    for _ in range(2):
        given = torch.zeros(x.shape, dtype=torch.float64)
        result = getattr(di, name)(f, prep, backend, *args, *contexts, di.Cache(given))
        _assert_no_graph(given)
        np.testing.assert_allclose(_own_result(operator, name, result).detach().numpy(), expected, rtol=1e-12)


def test_a_value_that_keeps_the_graph_survives_later_writes_into_the_buffer() -> None:
    """value_gradient_and_hessian's value kept the caller's graph through the
    caller's buffer, which the next call overwrote: backward through the first
    value then failed ('modified by an inplace operation'). f fills a copy now."""
    x = _tensor(X, True)
    prep = di.prepare_hessian(_writes_scalar, di.AutoTorch(), x, di.Cache(torch.zeros(3, dtype=torch.float64)))
    buf = torch.zeros(3, dtype=torch.float64)
    value, _, _ = di.value_gradient_and_hessian(_writes_scalar, prep, di.AutoTorch(), x, di.Cache(buf))
    di.value_gradient_and_hessian(_writes_scalar, prep, di.AutoTorch(), x, di.Cache(buf))
    (grad,) = torch.autograd.grad(value, x)
    np.testing.assert_allclose(grad.numpy(), np.cos(X * X) * 2 * X, rtol=1e-12)
    np.testing.assert_allclose(value.item(), np.sum(np.sin(X * X)), rtol=1e-12)


# --- an interrupt after a write into x ------------------------------------------------------


class _WritesThenInterrupts:
    """Writes into x (x * 1: the value is unchanged, torch counts the write), then
    raises a KeyboardInterrupt, once armed."""

    def __init__(self) -> None:
        self.armed = False

    def __call__(self, x: Any) -> Any:
        xp = di.array_namespace(x)
        if self.armed:
            x *= 1.0
            raise KeyboardInterrupt("ctrl-c inside f")
        return xp.sin(x) * x


def _interrupted_call(operator: str, f: Any, backend: Any, x: Any, prep: Any = None) -> None:
    tangents = (torch.ones(2, dtype=torch.float64),)
    args = (x, tangents) if operator in ("pushforward", "pullback") else (x,)
    if prep is None:
        getattr(di, operator)(f, backend, *args)
    else:
        getattr(di, operator)(f, prep, backend, *args)


# (a prepared pullback runs reverse mode, where torch refuses the write before f
# reaches its interrupt; the unprepared compiled calls interrupt the warm-up of
# the compile, and the untraced evaluation a compiled pullback's preparation makes;
# an eager square jacobian runs reverse mode too unless mode="forward" asks, and an
# eager pushforward runs two reverse passes)
_INTERRUPTED = [
    pytest.param(
        di.AutoTorch(mode="forward") if operator == "jacobian" and backend is not COMPILED else backend,
        operator,
        prepared,
        id=f"{name}-{operator}-{'prepared' if prepared else 'unprepared'}",
    )
    for backend, name in ((di.AutoTorch(), backend_id(di.AutoTorch())), (COMPILED, "torch-compile"))
    for operator in ("pushforward", "jacobian", "pullback", "derivative")
    for prepared in (False, True)
    if not (operator == "pullback" and prepared) and not (operator == "pushforward" and backend is not COMPILED)
]


@pytest.mark.parametrize(("backend", "operator", "prepared"), _INTERRUPTED)
def test_an_interrupt_after_a_write_into_x_propagates_unchanged(backend: Any, operator: str, prepared: bool) -> None:
    """A KeyboardInterrupt raised by f after it wrote into x became di's
    InvalidInputError (the check of x's version counter raised in a finally):
    forward mode's prepared programs, and the untraced evaluation a jacobian's or a
    pullback's preparation makes. docs/reliability.md: it propagates unchanged."""
    x = torch.tensor(S if operator == "derivative" else [1.0, 2.0], dtype=torch.float64)
    f = _WritesThenInterrupts()
    prep = None
    if prepared:
        args = (x, (torch.ones(2, dtype=torch.float64),)) if operator in ("pushforward", "pullback") else (x,)
        prep = getattr(di, f"prepare_{operator}")(f, backend, *args)
    f.armed = True
    with pytest.raises(KeyboardInterrupt) as info:
        _interrupted_call(operator, f, backend, x, prep)
    assert type(info.value) is KeyboardInterrupt and info.value.args == ("ctrl-c inside f",)


# --- the operator named for a write found at an untraced evaluation -------------------------


def _writes_into_x(x: Any, *values: Any) -> Any:
    x *= 1.0
    return x * 2.0


# (without a Cache, the programs of pushforward (two reverse passes eagerly) and derivative (forward mode) find
# the write themselves)
@pytest.mark.parametrize(
    ("operator", "cache"),
    [
        (o, c)
        for o in ("jacobian", "pullback", "pushforward", "derivative")
        for c in (False, True)
        if c or o not in ("pushforward", "derivative")
    ],
    ids=lambda v: ("cache" if v else "no-cache") if isinstance(v, bool) else v,
)
def test_a_write_found_at_an_untraced_evaluation_names_the_operator(operator: str, cache: bool) -> None:
    """The refusal read 'InvalidInputError: AutoTorch(...), evaluating f untraced,:
    f wrote into x ...', naming no operator: the value program (a pullback's
    output shape, a jacobian's output; with a Cache, every forward-mode operator's)
    did not know which operator was being prepared."""
    x = torch.tensor(S if operator == "derivative" else [1.0, 2.0], dtype=torch.float64)
    contexts = (di.Cache(torch.zeros(x.shape, dtype=torch.float64)),) if cache else ()
    args = (x, (torch.ones(x.shape, dtype=torch.float64),)) if operator in ("pushforward", "pullback") else (x,)
    with pytest.raises(di.InvalidInputError) as info:
        getattr(di, f"prepare_{operator}")(_writes_into_x, di.AutoTorch(), *args, *contexts)
    message = str(info.value)
    assert message.startswith(f"{operator} with AutoTorch(compile=False"), message
    assert "(evaluating f untraced): f wrote into x in place" in message
    assert "already holds what f wrote" in message


# --- a torch.autograd.Function torch.func cannot run ------------------------------------------


class _Classic(torch.autograd.Function):
    """The classic style: forward(ctx, x) and backward only (a derivative of 3)."""

    @staticmethod
    def forward(ctx: Any, x: Any) -> Any:
        xp = di.array_namespace(x)
        return xp.sin(x)

    @staticmethod
    def backward(ctx: Any, g: Any) -> Any:
        return 3.0 * g


class _BackwardOnly(torch.autograd.Function):
    """setup_context and backward, no jvp and no vmap rule."""

    @staticmethod
    def forward(x: Any) -> Any:
        xp = di.array_namespace(x)
        return xp.sin(x)

    @staticmethod
    def setup_context(ctx: Any, inputs: Any, output: Any) -> None:
        pass

    @staticmethod
    def backward(ctx: Any, g: Any) -> Any:
        return 3.0 * g


class _WithJvp(_BackwardOnly):
    """setup_context, backward and jvp, no vmap rule."""

    @staticmethod
    def jvp(ctx: Any, t: Any) -> Any:
        return 3.0 * t


def _through(function: Any, scalar: bool) -> Any:
    def f(x: Any) -> Any:
        xp = di.array_namespace(x)
        y = function.apply(x)
        return xp.sum(y) if scalar else y

    return f


def _call(operator: str, function: Any, backend: Any) -> Any:
    x = torch.tensor(S if operator in ("derivative", "second_derivative") else [0.3, -1.2], dtype=torch.float64)
    scalar = operator in ("gradient", "hvp", "hessian")
    f, ones = _through(function, scalar), torch.ones(x.shape, dtype=torch.float64)
    if operator in ("pushforward", "pullback", "hvp"):
        return getattr(di, operator)(f, backend, x, (ones,))
    if operator == "pushforward2":
        return di.pushforward(f, backend, x, (ones, ones))
    return getattr(di, operator)(f, backend, x)


_REFUSED = [
    *[
        (_Classic, op, "reverse" if op == "jacobian-reverse" else None, "setup_context")
        for op in ("jacobian", "jacobian-reverse", "derivative", "second_derivative")
    ],
    *[(_BackwardOnly, op, None, "has no jvp") for op in ("derivative", "second_derivative")],
    *[(_WithJvp, "jacobian", "forward", "generate_vmap_rule = True")],
]
"""(eager pushforwards, two reverse passes, run them all: below)"""


@pytest.mark.parametrize(
    ("function", "operator", "mode", "remedy"),
    [pytest.param(*case, id=f"{case[0].__name__}-{case[1]}-{case[2]}") for case in _REFUSED],
)
def test_an_autograd_function_torch_func_cannot_run_is_refused_by_di(
    function: Any, operator: str, mode: Any, remedy: str
) -> None:
    """A torch.autograd.Function without setup_context (the classic forward(ctx, x)),
    without jvp, or without a vmap rule leaked torch's raw RuntimeError or
    NotImplementedError ('must override the setup_context staticmethod', 'You
    must implement the jvp function', 'You tried to vmap over ...'); di now says
    which operator, what to add, and what works as it is."""
    with pytest.raises(di.UnsupportedOperatorError) as info:
        _call(operator.split("-")[0], function, di.AutoTorch(mode=mode))
    message = str(info.value)
    assert message.startswith(f"{operator.split('-')[0].rstrip('2')} with AutoTorch("), message
    assert remedy in message
    assert isinstance(info.value.__cause__, (RuntimeError, NotImplementedError))
    assert "autograd.Function" in str(info.value.__cause__) or "vmap" in str(info.value.__cause__)


def test_an_eager_square_jacobian_runs_reverse_mode_and_a_function_without_vmap_rule() -> None:
    """A square jacobian on eager AutoTorch() is taken in reverse mode (torch's
    batched vjp: half the time of its batched jvp, the fastest native spelling
    torch.func.jacrev), which runs a Function with no vmap rule that forward mode
    refuses (above, mode="forward"); prep.info.program says which mode ran."""
    np.testing.assert_array_equal(_call("jacobian", _WithJvp, di.AutoTorch()).numpy(), 3.0 * np.eye(2))
    x = torch.tensor([0.3, -1.2, 2.0], dtype=torch.float64)

    def g(x: Any) -> Any:
        xp = di.array_namespace(x)
        return xp.sin(x) * xp.sum(x)

    expected = torch.func.jacfwd(g)(x)
    for backend, mode in ((di.AutoTorch(), "reverse"), (di.AutoTorch(mode="forward"), "forward")):
        prep = di.prepare_jacobian(g, backend, x)
        assert f"({mode} mode" in prep.info.program
        torch.testing.assert_close(di.jacobian(g, prep, backend, x), expected)
    tall = di.prepare_jacobian(lambda x: di.array_namespace(x).concat([x, x]), di.AutoTorch(), x)
    assert "(forward mode" in tall.info.program


@pytest.mark.parametrize("function", [_Classic, _BackwardOnly, _WithJvp], ids=lambda f: f.__name__)
def test_eager_pushforward_runs_an_autograd_function_torch_func_cannot(function: Any) -> None:
    """The eager pushforward is two reverse passes (a double vjp), which run a
    Function through its own backward (a derivative of 3) where torch.func.jvp
    refused it (classic style, no jvp, no vmap rule for several tangents)."""
    for operator, count in (("pushforward", 1), ("pushforward2", 2)):
        products = _call(operator, function, di.AutoTorch())
        assert len(products) == count
        for product in products:
            np.testing.assert_array_equal(product.numpy(), [3.0, 3.0])


@pytest.mark.parametrize("function", [_Classic, _BackwardOnly, _WithJvp], ids=lambda f: f.__name__)
@pytest.mark.parametrize("operator", ["hvp", "hessian"])
def test_eager_second_order_runs_an_autograd_function_torch_func_cannot(function: Any, operator: str) -> None:
    """hvp and hessian on eager AutoTorch() differentiate twice in reverse mode
    (double backward), which runs a Function torch.func refuses (classic style, no
    jvp, no vmap rule) through its own backward: a derivative of 3 whatever x, so
    a zero second derivative. They were refused (forward over reverse)."""
    result = _call(operator, function, di.AutoTorch())
    result = result[0] if operator == "hvp" else result
    np.testing.assert_array_equal(result.numpy(), np.zeros((2,) if operator == "hvp" else (2, 2)))
    assert _call("gradient", function, di.AutoTorch()).numpy().tolist() == [3.0, 3.0]


def test_a_function_torch_func_cannot_run_is_refused_in_hvp_inside_a_transform() -> None:
    """Inside a torch.func transform the hvp is torch.func's forward over reverse,
    which cannot run a classic-style Function: refused as before, with the remedy."""
    f, x = _through(_Classic, True), torch.tensor([[0.3, -1.2]], dtype=torch.float64)
    with pytest.raises(di.UnsupportedOperatorError, match="setup_context"):
        torch.func.vmap(lambda x: di.hvp(f, di.AutoTorch(), x, (torch.ones_like(x),))[0])(x)


def test_what_the_refusals_of_an_autograd_function_say_works_does() -> None:
    """The remedies named: gradient and pullback run the classic style; jacobian
    with AutoTorch(mode='reverse') runs a Function without jvp or vmap rule; its
    custom backward (a derivative of 3) is used; generate_vmap_rule = True fixes
    the rest. f's own NotImplementedError keeps its type."""
    three = np.full(2, 3.0)
    np.testing.assert_allclose(_call("gradient", _Classic, di.AutoTorch()).numpy(), three)
    np.testing.assert_allclose(_call("pullback", _Classic, di.AutoTorch())[0].numpy(), three)
    np.testing.assert_allclose(_call("jacobian", _BackwardOnly, di.AutoTorch(mode="reverse")).numpy(), np.diag(three))

    class Batched(_WithJvp):
        generate_vmap_rule = True

    np.testing.assert_allclose(_call("jacobian", Batched, di.AutoTorch()).numpy(), np.diag(three))

    def unfinished(x: Any) -> Any:
        raise NotImplementedError("f is not written yet")

    with pytest.raises(NotImplementedError, match="f is not written yet") as info:
        di.jacobian(unfinished, di.AutoTorch(), torch.ones(2, dtype=torch.float64))
    assert type(info.value) is NotImplementedError


class _OnceDifferentiable(_WithJvp):
    """_WithJvp's rules, its backward marked once_differentiable (a derivative of 3)."""

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx: Any, g: Any) -> Any:
        return 3.0 * g


def test_eager_pushforward_of_a_once_differentiable_backward_runs_forward_mode() -> None:
    """The double vjp differentiates f's backward; one marked once_differentiable
    records no graph (its second pass read zeros, silently): the call runs
    torch.func.jvp instead, which uses the Function's jvp rule (several tangents
    there ask for a vmap rule, as before)."""
    (product,) = _call("pushforward", _OnceDifferentiable, di.AutoTorch())
    np.testing.assert_array_equal(product.numpy(), [3.0, 3.0])
    y, (product,) = di.value_and_pushforward(
        _through(_OnceDifferentiable, False),
        di.AutoTorch(),
        torch.tensor([0.3, -1.2], dtype=torch.float64),
        (torch.ones(2, dtype=torch.float64),),
    )
    np.testing.assert_array_equal(product.numpy(), [3.0, 3.0])
    np.testing.assert_allclose(y.numpy(), np.sin([0.3, -1.2]))
