"""``DifferentiateWith`` inside torch: ``.backward()``, ``torch.autograd.grad``,
forward-mode AD, ``torch.func`` (grad, vmap, jacrev, jacfwd, jvp) and
``torch.compile`` as one opaque operator, each compared with torch differentiating
the same ``f`` natively."""

from __future__ import annotations

import importlib.util
from typing import Any

import numpy as np
import pytest
from helpers import CompileCounter
from mixing_support import (
    BATCH,
    DATA,
    INPUTS,
    PARAMS,
    Recorder,
    X,
    close,
    counting_preps,
    layer,
    layer_mean,
    loss,
    wave,
)

import di

torch = pytest.importorskip("torch")
func = torch.func

INNERS = [
    *([di.AutoJAX(), di.AutoJAX(jit=True)] if importlib.util.find_spec("jax") else []),
    di.AutoFiniteDiff(),
]
RTOL, ATOL = 1e-4, 1e-5  # float32, torch's default


def t32(value: Any) -> Any:
    return torch.utils._pytree.tree_map(lambda leaf: torch.tensor(leaf, dtype=torch.float32), value)


@pytest.fixture(params=INNERS, ids=lambda b: repr(b).split("(")[0] + ("-jit" if getattr(b, "jit", False) else ""))
def inner(request: pytest.FixtureRequest) -> di.AbstractBackend:
    return request.param


def test_backward_and_autograd_grad_with_a_constant(inner: di.AbstractBackend) -> None:
    f = Recorder(loss)
    g = di.DifferentiateWith(f, inner, di.Constant(t32(DATA)))
    x = t32(X).requires_grad_()
    (g(x) * 3.0).backward()
    reference = t32(X).requires_grad_()
    (loss(reference, t32(DATA)) * 3.0).backward()
    close(x.grad, reference.grad, RTOL, ATOL)
    assert x.grad.dtype == torch.float32
    (grad,) = torch.autograd.grad(g(x, t32(DATA) * 2.0), x)
    close(grad, torch.autograd.grad(loss(reference, t32(DATA) * 2.0), reference)[0], RTOL, ATOL)
    assert "torch" not in f.libraries  # the inner engine ran f


def test_forward_mode_ad(inner: di.AbstractBackend) -> None:
    import torch.autograd.forward_ad as forward_ad

    g = di.DifferentiateWith(wave, inner)
    tangent = t32(DATA)
    with forward_ad.dual_level():
        out = forward_ad.unpack_dual(g(forward_ad.make_dual(t32(X), tangent))).tangent
        expected = forward_ad.unpack_dual(wave(forward_ad.make_dual(t32(X), tangent))).tangent
    close(out, expected, RTOL, ATOL)


def test_torch_func_transforms(inner: di.AbstractBackend) -> None:
    g = di.DifferentiateWith(loss, inner)
    w = di.DifferentiateWith(wave, inner)
    x, data, batch = t32(X), t32(DATA), t32(BATCH)
    close(func.grad(g)(x, data), func.grad(loss)(x, data), RTOL, ATOL)
    close(func.vmap(g, in_dims=(0, None))(batch, data), func.vmap(loss, in_dims=(0, None))(batch, data), RTOL, ATOL)
    close(
        func.vmap(func.grad(g), in_dims=(0, None))(batch, data),
        func.vmap(func.grad(loss), in_dims=(0, None))(batch, data),
        RTOL,
        ATOL,
    )
    close(func.jacrev(w)(x), func.jacrev(wave)(x), RTOL, ATOL)
    close(func.jacfwd(w)(x), func.jacfwd(wave)(x), RTOL, ATOL)
    close(func.jvp(w, (x,), (data,)), func.jvp(wave, (x,), (data,)), RTOL, ATOL)
    close(func.vmap(func.jacrev(w))(batch), func.vmap(func.jacrev(wave))(batch), RTOL, ATOL)
    total = func.grad(lambda b: (func.vmap(w)(b) ** 2).sum())
    close(total(batch), func.grad(lambda b: (func.vmap(wave)(b) ** 2).sum())(batch), RTOL, ATOL)


def test_pytree_input_and_output(inner: di.AbstractBackend) -> None:
    inputs = t32(INPUTS)
    g = di.DifferentiateWith(layer, inner, di.Constant(inputs))
    params = t32(PARAMS)
    out = g(params)
    close(out, layer(params, inputs), RTOL, ATOL)
    mean = di.DifferentiateWith(layer_mean, inner, di.Constant(inputs))
    close(func.grad(mean)(params), func.grad(layer_mean)(params, inputs), RTOL, ATOL)
    hidden = func.jacrev(lambda p: g(p)["hidden"])(params)
    close(hidden, func.jacrev(lambda p: layer(p, inputs)["hidden"])(params), RTOL, ATOL)


def test_float64_is_kept(inner: di.AbstractBackend) -> None:
    g = di.DifferentiateWith(loss, inner, di.Constant(torch.tensor(DATA)))
    x = torch.tensor(X).requires_grad_()
    g(x).backward()
    reference = torch.tensor(X).requires_grad_()
    loss(reference, torch.tensor(DATA)).backward()
    assert x.grad.dtype == torch.float64
    close(x.grad, reference.grad, 1e-6 if isinstance(inner, di.AutoFiniteDiff) else 1e-12, 1e-9)


def test_torch_compile_one_graph_without_a_break() -> None:
    pytest.importorskip("jax")
    counter = CompileCounter()
    g = di.DifferentiateWith(loss, di.AutoJAX(), di.Constant(t32(DATA)))

    def step(x: Any, data: Any) -> Any:
        return (g(x, data) * 3.0).sum()

    compiled = torch.compile(step, fullgraph=True, backend=counter)
    for shift in range(3):
        x = (t32(X) + shift).requires_grad_()
        compiled(x, t32(DATA)).backward()
        reference = (t32(X) + shift).requires_grad_()
        (loss(reference, t32(DATA)) * 3.0).backward()
        close(x.grad, reference.grad, RTOL, ATOL)
    assert counter.count == 1
    aot = torch.compile(step, fullgraph=True, backend="aot_eager")
    x = t32(X).requires_grad_()
    aot(x, t32(DATA)).backward()
    close(x.grad, func.grad(lambda x: loss(x, t32(DATA)) * 3.0)(t32(X)), RTOL, ATOL)


def test_a_numpy_black_box_with_finite_differences_inside_backward() -> None:
    def black_box(x: Any) -> Any:  # NumPy only: torch cannot trace it
        return np.sum(np.sin(np.asarray(x)) * np.arange(1.0, 5.0))

    with pytest.raises(di.InvalidOutputError, match="DifferentiateWith"):
        di.gradient(black_box, di.AutoTorch(), X)
    g = di.DifferentiateWith(black_box, di.AutoFiniteDiff())
    x = t32(X).requires_grad_()
    g(x).backward()
    close(x.grad, np.cos(X) * np.arange(1.0, 5.0), RTOL, ATOL)


def test_one_prep_per_signature_reused_and_a_new_shape_prepared_again() -> None:
    g = di.DifferentiateWith(loss, di.AutoFiniteDiff())
    with counting_preps() as counts:
        for shift in range(3):
            close(func.grad(g)(t32(X + shift), t32(DATA)), func.grad(loss)(t32(X + shift), t32(DATA)), RTOL, ATOL)
        assert counts["pullback"] == 1
        longer, longer_data = t32(np.concatenate([X, X])), t32(np.concatenate([DATA, DATA]))
        close(func.grad(g)(longer, longer_data), func.grad(loss)(longer, longer_data), RTOL, ATOL)
        assert counts["pullback"] == 2


def test_second_order_through_g_is_refused_naming_both_engines() -> None:
    g = di.DifferentiateWith(loss, di.AutoFiniteDiff(), di.Constant(t32(DATA)))
    with pytest.raises(di.UnsupportedOperatorError, match=r"inside torch.*AutoFiniteDiff.*di\.hessian"):
        func.hessian(g)(t32(X))
    x = t32(X).requires_grad_()
    (grad,) = torch.autograd.grad(g(x), x, create_graph=True)
    with pytest.raises(di.UnsupportedOperatorError):
        grad.sum().backward()


def scaled_wave(x: Any, c: Any) -> Any:
    """``x`` and a context ``c`` to a vector: ``sin(x) * c * sum(x * c)``."""
    xp = di.array_namespace(x)
    return xp.sin(x) * c * xp.sum(x * c)


def scaled_wave_torch(x: Any, c: Any) -> Any:
    """:func:`scaled_wave` in torch's own operations: the reference."""
    return torch.sin(x) * c * torch.sum(x * c)


def test_forward_mode_in_x_under_a_vmap_over_the_context(inner: di.AbstractBackend) -> None:
    # torch.func.jvp materialises the context's tangent as zeros; under vmap they are batched
    # and cannot be read as one bool, and were taken for a derivative asked of the context
    g = di.DifferentiateWith(scaled_wave, inner)
    x = torch.tensor([0.5, 1.0, 2.0], dtype=torch.float64)
    tangent = torch.ones(3, dtype=torch.float64)
    points = torch.stack([x, x * 2.0 - 0.3])
    contexts = torch.tensor([[1.5, -0.7, 0.3], [4.5, -2.1, 0.9]], dtype=torch.float64)
    rtol, atol = (1e-6, 1e-8) if isinstance(inner, di.AutoFiniteDiff) else (1e-12, 1e-12)

    def pushforward(f: Any) -> Any:
        return func.vmap(lambda c: func.jvp(lambda x: f(x, c), (x,), (tangent,)))

    close(pushforward(g)(contexts), pushforward(scaled_wave_torch)(contexts), rtol, atol)
    close(
        func.vmap(func.jacfwd(g))(points, contexts),
        func.vmap(func.jacfwd(scaled_wave_torch))(points, contexts),
        rtol,
        atol,
    )
    close(
        func.vmap(func.jacfwd(g), in_dims=(None, 0))(x, contexts),
        func.vmap(func.jacfwd(scaled_wave_torch), in_dims=(None, 0))(x, contexts),
        rtol,
        atol,
    )

    def forward_over_reverse(f: Any) -> Any:  # linear in the cotangent: the point's tangents are zeros
        def pullback(c: Any, u: Any) -> Any:
            return func.vjp(lambda x: f(x, c), x)[1](u)[0]

        return func.vmap(lambda c: func.jvp(lambda u: pullback(c, u), (tangent,), (x,)))

    close(forward_over_reverse(g)(contexts), forward_over_reverse(scaled_wave_torch)(contexts), rtol, atol)


def test_a_derivative_with_respect_to_a_constant_is_refused() -> None:
    g = di.DifferentiateWith(loss, di.AutoFiniteDiff(), di.Constant(t32(DATA)))
    data = t32(DATA).requires_grad_()
    with pytest.raises(di.InvalidInputError, match="context 1"):
        g(t32(X).requires_grad_(), data).backward()
    with pytest.raises(di.InvalidInputError, match="context 1"):
        func.jacfwd(g, argnums=1)(t32(X), t32(DATA))
    with pytest.raises(di.InvalidInputError, match="context 1"):
        func.jvp(lambda d: g(t32(X), d), (t32(DATA),), (t32(DATA),))
    # under vmap too, where the context's tangent is batched: refused, not taken for zeros
    w = di.DifferentiateWith(scaled_wave, di.AutoFiniteDiff())
    points, contexts = t32(BATCH), t32(BATCH) * 0.5 + 1.0
    with pytest.raises(di.InvalidInputError, match="context 1"):
        func.vmap(func.jacfwd(w, argnums=1))(points, contexts)
    with pytest.raises(di.InvalidInputError, match="context 1"):
        func.vmap(lambda x, c: func.jvp(lambda d: w(x, d), (c,), (c,)))(points, contexts)
    with pytest.raises(di.InvalidInputError, match="context 1"):  # one nonzero tangent in the batch
        func.vmap(lambda c, t: func.jvp(lambda d: w(t32(X), d), (c,), (t,)))(contexts, torch.eye(*contexts.shape))


def _weighted_sum(x: Any, c: Any) -> Any:
    xp = di.array_namespace(x)
    return xp.sum(x * c)


def test_a_numpy_x_with_a_torch_context_is_hosted_by_torch() -> None:
    """A NumPy x with a torch Constant (torch picks the host from the context)
    raised a bare StopIteration looking for x's torch leaf; it runs, compiled too,
    as with a JAX context, and a context that requires grad is refused as when x
    is a tensor."""
    g = di.DifferentiateWith(_weighted_sum, di.AutoFiniteDiff(), di.Constant(np.ones(2)))
    x, c = np.array([1.0, 2.0]), torch.tensor([3.0, 4.0], dtype=torch.float64)
    for value in (g(x, c), torch.compile(lambda c: g(x, c), backend="aot_eager", fullgraph=True)(c)):
        assert isinstance(value, torch.Tensor) and value.dtype == torch.float64
        assert float(value) == 11.0
    with pytest.raises(di.InvalidInputError, match="derivative with respect to context 1"):
        g(x, c.clone().requires_grad_()).backward()
    with pytest.raises(di.InvalidInputError, match="derivative with respect to context 1"):
        di.gradient(lambda c: g(np.ones(2), c), di.AutoTorch(), np.ones(2))


def test_torch_compile_of_a_vmap_and_the_refusal_inside_a_differentiating_transform() -> None:
    w = di.DifferentiateWith(wave, di.AutoFiniteDiff())
    batch = t32(BATCH)
    close(torch.compile(func.vmap(w), fullgraph=True, backend="eager")(batch), func.vmap(wave)(batch), RTOL, ATOL)
    g = di.DifferentiateWith(loss, di.AutoFiniteDiff(), di.Constant(t32(DATA)))
    # dynamo wraps the di error it meets while tracing; its message is the di error's
    with pytest.raises(Exception, match=r"inside a torch\.func grad transform.*outside torch\.compile"):
        torch.compile(func.grad(g), fullgraph=True, backend="eager")(t32(X))


def _bfloat16_square_sum(x: Any) -> Any:
    xp = di.array_namespace(x)
    return xp.sum(xp.square(x))


def _bfloat16_square(x: Any) -> Any:
    xp = di.array_namespace(x)
    return xp.square(x)


def _bfloat16_tree_sum(x: Any) -> Any:
    xp = di.array_namespace(x["a"])
    return xp.sum(xp.square(x["a"])) + xp.sum(xp.square(x["b"]))


def test_a_numpy_bfloat16_x_comes_back_in_bfloat16_from_torch() -> None:
    """torch computes in bfloat16; its results reach a NumPy caller as ml_dtypes'
    bfloat16 (they came back float32, and an out= in bfloat16 was refused)."""
    ml_dtypes = pytest.importorskip("ml_dtypes")
    bf16 = np.dtype(ml_dtypes.bfloat16)
    backend = di.AutoTorch()
    x, t = np.array([0.5, 1.25], dtype=bf16), np.array([1.0, 2.0], dtype=bf16)

    def check(result: Any, expected: list[Any] | float) -> None:
        assert isinstance(result, np.ndarray) and result.dtype == bf16
        np.testing.assert_array_equal(result.astype(np.float64), expected)

    check(di.gradient(_bfloat16_square_sum, backend, x), [1.0, 2.5])
    value, grad = di.value_and_gradient(_bfloat16_square_sum, backend, x)
    check(value, 1.8125)
    check(grad, [1.0, 2.5])
    check(di.hessian(_bfloat16_square_sum, backend, x), [[2.0, 0.0], [0.0, 2.0]])
    (hvp,) = di.hvp(_bfloat16_square_sum, backend, x, (t,))
    check(hvp, [2.0, 4.0])
    (pullback,) = di.pullback(_bfloat16_square, backend, x, (t,))
    check(pullback, [1.0, 5.0])
    (pushforward,) = di.pushforward(_bfloat16_square, backend, x, (t,))
    check(pushforward, [1.0, 5.0])
    check(di.derivative(_bfloat16_square, backend, np.array(1.5, dtype=bf16)), 3.0)
    tree = di.gradient(_bfloat16_tree_sum, backend, {"a": x, "b": np.array([2.0], dtype=np.float32)})
    check(tree["a"], [1.0, 2.5])
    assert tree["b"].dtype == np.float32
    np.testing.assert_array_equal(tree["b"], [4.0])
    out = np.empty(2, dtype=bf16)
    assert di.gradient(_bfloat16_square_sum, backend, x, out=out) is out
    check(out, [1.0, 2.5])
    out = np.empty((2, 2), dtype=bf16)
    assert di.hessian(_bfloat16_square_sum, backend, x, out=out) is out
    check(out, [[2.0, 0.0], [0.0, 2.0]])


def weighted_parts(x: Any) -> Any:
    xp = di.array_namespace(x["a"])
    return xp.sum(x["a"] ** 2) + 10.0 * xp.sum(x["b"])


@pytest.mark.parametrize("inner", INNERS, ids=lambda b: type(b).__name__ + ("-jit" if getattr(b, "jit", 0) else ""))
def test_torch_compile_takes_a_dict_x(inner: Any) -> None:
    """A dict x under torch.compile raised dynamo's AttributeError ('TreeSpec'
    object has no attribute 'num_leaves') in the registration; its leaves, in
    torch's order (insertion: b before a here, of other shapes), reach g in di's."""
    g = di.DifferentiateWith(weighted_parts, inner)

    def step(x: Any) -> Any:
        return g({"b": x * 1.0, "a": x[:2]})

    results = []
    for run in (step, torch.compile(step, backend="aot_eager", fullgraph=True)):
        x = torch.arange(1.0, 4.0, dtype=torch.float64, requires_grad=True)
        y = run(x)
        y.backward()
        results.append((y.detach(), x.grad))
    for y, grad in results:  # sum(a**2) + 10 * sum(b), a = x[:2], b = x
        close(y, torch.tensor(65.0, dtype=torch.float64), RTOL, ATOL)
        close(grad, torch.tensor([12.0, 14.0, 10.0], dtype=torch.float64), RTOL, ATOL)


@pytest.mark.skipif(importlib.util.find_spec("jax") is None, reason="jax is not installed")
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_a_jitted_jax_f_takes_cpu_tensors_as_numpy_views(dtype: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """With AutoJAX(jit=True), g's forward and backward hand CPU tensors to JAX's jitted
    programs as NumPy views (faster for them than arrays JAX imported by DLPack): x, a
    Constant tensor operand and the cotangent; a pytree x and a captured JAX Constant
    too. Gradients are torch's own for the same f, in x's dtypes; f is traced once
    per signature, not per call."""
    import jax

    from di.engines.jax import host as jax_host

    seen: list[Any] = []
    linearize = jax_host.JaxHost.linearize

    def spying(self: Any, f: Any, backend: Any, x: Any, values: Any) -> Any:
        seen.append([type(leaf) for leaf in jax.tree_util.tree_leaves([x, list(values)])])
        return linearize(self, f, backend, x, values)

    monkeypatch.setattr(jax_host.JaxHost, "linearize", spying)
    traced = []

    def scaled_layer(params: Any, inputs: Any, scale: Any) -> Any:
        traced.append(1)
        out = layer(params, inputs)
        return out["mean"] * scale[0] + di.array_namespace(params["w"]).sum(out["hidden"] ** 2)

    torch_dtype = getattr(torch, dtype)
    scale = np.array([1.5], dtype=dtype)
    with jax.enable_x64(dtype == "float64"):
        g = di.DifferentiateWith(scaled_layer, di.AutoJAX(jit=True))
        inputs = torch.tensor(INPUTS, dtype=torch_dtype)
        for _ in range(3):
            params = {k: torch.tensor(v, dtype=torch_dtype).requires_grad_() for k, v in PARAMS.items()}
            grads = torch.autograd.grad(g(params, inputs, jax.numpy.asarray(scale)), list(params.values()))
            reference = {k: torch.tensor(v, dtype=torch_dtype).requires_grad_() for k, v in PARAMS.items()}
            native = torch.autograd.grad(scaled_layer(reference, inputs, torch.tensor(scale)), list(reference.values()))
            for got, expected in zip(grads, native):
                assert got.dtype == torch_dtype
                close(got, expected, 1e-5 if dtype == "float32" else 1e-12, 1e-6 if dtype == "float32" else 1e-12)
    assert len(traced) == 1 + 3  # (torch's own three; di's jitted programs trace f once)
    assert seen and all(kind is np.ndarray for kinds in seen for kind in kinds[:3])  # the leaves and the operand
