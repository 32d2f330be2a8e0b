"""``DifferentiateWith`` around a stateful ``f``: a torch model in train mode (dropout
draws a mask, batch norm updates its running statistics) inside JAX's and autograd's
transforms gives what torch's own forward and backward give, because ``f`` runs once
per forward and backward pair and nothing else runs it (no probe of the output's
shape changes the model or the random stream)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import di

torch = pytest.importorskip("torch")

STEPS = 3
SEED = 1234


def model() -> Any:
    torch.manual_seed(0)
    net = torch.nn.Sequential(
        torch.nn.Linear(4, 6), torch.nn.BatchNorm1d(6), torch.nn.Tanh(), torch.nn.Dropout(0.5), torch.nn.Linear(6, 1)
    )
    return net.train()


def batches() -> list[np.ndarray]:
    rng = np.random.default_rng(7)
    return [rng.normal(size=(8, 4)).astype(np.float32) for _ in range(STEPS)]


class Counted:
    """``f(x) = sum(net(x) ** 2)``, counting its calls."""

    def __init__(self, net: Any) -> None:
        self.net, self.calls = net, 0

    def __call__(self, x: Any) -> Any:
        self.calls += 1
        return (self.net(x) ** 2).sum()


def torch_reference() -> tuple[list[float], list[np.ndarray], Any]:
    """Each step's value and gradient with respect to the batch, from torch alone."""
    net = model()
    values, grads = [], []
    for step, batch in enumerate(batches()):
        torch.manual_seed(SEED + step)
        x = torch.tensor(batch, requires_grad=True)
        y = (net(x) ** 2).sum()
        y.backward()
        values.append(float(y))
        grads.append(x.grad.numpy().copy())
    return values, grads, net


def check_state(net: Any, reference: Any) -> None:
    for (name, mine), (_, theirs) in zip(net.named_buffers(), reference.named_buffers()):
        np.testing.assert_allclose(mine.numpy(), theirs.numpy(), rtol=1e-5, atol=1e-6, err_msg=name)
    assert int(net[1].num_batches_tracked) == STEPS


def test_a_stateful_torch_model_inside_a_jitted_jax_step() -> None:
    jax = pytest.importorskip("jax")
    values, grads, reference = torch_reference()
    f = Counted(model())
    g = di.DifferentiateWith(f, di.AutoTorch())
    step = jax.jit(jax.value_and_grad(g))
    calls = []
    for index, batch in enumerate(batches()):
        torch.manual_seed(SEED + index)
        value, grad = step(jax.numpy.asarray(batch))
        calls.append(f.calls)
        np.testing.assert_allclose(float(value), values[index], rtol=1e-5)
        np.testing.assert_allclose(np.asarray(grad), grads[index], rtol=1e-4, atol=1e-6)
    check_state(f.net, reference)
    # the first step may describe f's output once (a probe that leaves the model and
    # the random stream as they were); after it, one call of f per forward and backward
    assert np.diff(calls).tolist() == [1] * (STEPS - 1)
    assert calls[0] <= 2


def test_a_stateful_torch_model_inside_eager_jax_grad() -> None:
    jax = pytest.importorskip("jax")
    values, grads, reference = torch_reference()
    f = Counted(model())
    g = di.DifferentiateWith(f, di.AutoTorch())
    for index, batch in enumerate(batches()):
        torch.manual_seed(SEED + index)
        value, grad = jax.value_and_grad(g)(jax.numpy.asarray(batch))
        np.testing.assert_allclose(float(value), values[index], rtol=1e-5)
        np.testing.assert_allclose(np.asarray(grad), grads[index], rtol=1e-4, atol=1e-6)
    check_state(f.net, reference)


def test_a_stateful_torch_model_inside_autograd() -> None:
    autograd = pytest.importorskip("autograd")
    values, grads, reference = torch_reference()
    f = Counted(model())
    g = di.DifferentiateWith(f, di.AutoTorch())
    for index, batch in enumerate(batches()):
        torch.manual_seed(SEED + index)
        before = f.calls
        grad, value = autograd.value_and_grad(g)(batch)[::-1]
        assert f.calls - before == 1
        np.testing.assert_allclose(float(value), values[index], rtol=1e-5)
        np.testing.assert_allclose(np.asarray(grad), grads[index], rtol=1e-4, atol=1e-6)
    check_state(f.net, reference)


def test_a_stateful_jax_free_f_inside_torch_runs_once_per_step() -> None:
    """The other direction: an autograd-engine f with a side effect (a call counter)
    inside torch's backward runs once per forward and backward."""
    pytest.importorskip("autograd")
    calls = []

    def f(x: Any) -> Any:
        calls.append(1)
        xp = di.array_namespace(x)
        return xp.sum(xp.sin(x) ** 2)

    g = di.DifferentiateWith(f, di.AutoAutograd())
    x = torch.linspace(0.1, 1.0, 5, dtype=torch.float64, requires_grad=True)
    for _ in range(3):
        before = len(calls)
        y = g(x)
        y.backward()
        assert len(calls) - before == 1
    np.testing.assert_allclose(x.grad.numpy(), 3 * np.sin(2 * x.detach().numpy()), rtol=1e-12)
