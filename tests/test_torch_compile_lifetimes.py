"""How long what ``torch.compile`` sees of ``di`` lives: a ``DifferentiateWith``
traced by dynamo (and the ``f`` and data it owns) is freed with the compiled
function, and works as long as that function does; and each program
``AutoTorch(compile=True)`` compiles has dynamo's limits to itself, a call that
fails while traced keeping ``f``'s own error at them."""

from __future__ import annotations

import gc
import re
import weakref
from typing import Any

import numpy as np
import pytest
from conftest import BACKENDS, backend_params

import di

torch = pytest.importorskip("torch")

# the inner backends a torch host hands g's derivatives to (torch's own differentiates f natively)
INNER = backend_params([b for b in BACKENDS if not isinstance(b, di.AutoTorch)])


class Simulator:
    """An ``f`` owning data: the test watches it through a weak reference."""

    def __init__(self, scale: float) -> None:
        self.scale = scale
        self.table = np.ones(1000)

    def __call__(self, x: Any) -> Any:
        xp = di.array_namespace(x)
        return xp.multiply(x, self.scale)


def _compiled_loss(g: di.DifferentiateWith) -> Any:
    return torch.compile(lambda t: (g(t) ** 2).sum(), backend="aot_eager")


def _gradient(compiled: Any, n: int = 3) -> np.ndarray:
    t = torch.ones(n, dtype=torch.float64, requires_grad=True)
    compiled(t).backward()
    return t.grad.numpy()


@pytest.mark.parametrize("inner", INNER)
def test_compiled_g_freed_with_the_compiled_function(inner: di.AbstractBackend) -> None:
    simulator = Simulator(2.0)
    alive = weakref.ref(simulator)
    g = di.DifferentiateWith(simulator, inner)
    compiled = _compiled_loss(g)
    np.testing.assert_allclose(_gradient(compiled), [8.0, 8.0, 8.0], rtol=1e-6)
    del simulator, g, compiled
    gc.collect()
    assert alive() is None


@pytest.mark.parametrize("inner", INNER)
def test_compiled_g_works_while_the_compiled_function_lives(inner: di.AbstractBackend) -> None:
    simulator = Simulator(3.0)
    alive = weakref.ref(simulator)
    compiled = _compiled_loss(di.DifferentiateWith(simulator, inner))
    del simulator
    gc.collect()
    np.testing.assert_allclose(_gradient(compiled), [18.0, 18.0, 18.0], rtol=1e-6)
    gc.collect()  # a new shape: a new trace, its own registration
    np.testing.assert_allclose(_gradient(compiled, 4), [18.0] * 4, rtol=1e-6)
    gc.collect()
    np.testing.assert_allclose(_gradient(compiled), [18.0, 18.0, 18.0], rtol=1e-6)
    assert alive() is not None


def test_compiled_g_passed_as_argument_outlived_by_another() -> None:
    first, second = (di.DifferentiateWith(Simulator(s), di.AutoFiniteDiff()) for s in (2.0, 5.0))
    compiled = torch.compile(lambda g, t: (g(t) ** 2).sum(), backend="aot_eager")
    t = torch.ones(3, dtype=torch.float64)
    assert float(compiled(first, t)) == pytest.approx(12.0)
    assert float(compiled(second, t)) == pytest.approx(75.0)
    alive = weakref.ref(first.f)
    del first
    gc.collect()
    assert alive() is None
    assert float(compiled(second, t)) == pytest.approx(75.0)
    third = di.DifferentiateWith(Simulator(7.0), di.AutoFiniteDiff())
    assert float(compiled(third, t)) == pytest.approx(147.0)


def test_backward_after_g_freed_is_explained() -> None:
    g = di.DifferentiateWith(Simulator(3.0), di.AutoFiniteDiff())
    compiled = _compiled_loss(g)
    t = torch.ones(3, dtype=torch.float64, requires_grad=True)
    loss = compiled(t)
    del g, compiled
    gc.collect()
    # The forward keeps the pullback it made (f runs once per forward and backward pair), so the
    # backward may still run; what it must never do is fail without saying why, or differ.
    try:
        loss.backward()
    except di.DIError as error:
        assert re.search(r"has since been freed.*Keep g alive", str(error), re.S), error
    else:
        np.testing.assert_allclose(t.grad.numpy(), [18.0, 18.0, 18.0], rtol=1e-6)


# --- AutoTorch(compile=True) at dynamo's cap on compiles ----------------------------------------

COMPILED = di.AutoTorch(compile=True, compile_options={"backend": "aot_eager"})


def _matrix_norm(x: Any, w: Any) -> Any:
    xp = di.array_namespace(x)
    return xp.sum((w @ x) ** 2)


def _scaled(scale: float) -> Any:
    def f(x: Any) -> Any:
        xp = di.array_namespace(x)
        return xp.sum(x**2) * scale

    return f


def test_compiled_preps_each_have_their_own_cap() -> None:
    # dynamo counts compiles per code object for the life of the process: with every prep
    # compiling the same closures, the cap was reached by the preps together
    with torch._dynamo.config.patch(accumulated_recompile_limit=2):
        for scale in (1.0, 2.0, 3.0, 4.0):
            f = _scaled(scale)
            prep = di.prepare_gradient(f, COMPILED, np.ones(3))
            np.testing.assert_allclose(di.gradient(f, prep, COMPILED, np.ones(3)), [2.0 * scale] * 3)


def test_compiled_failing_calls_keep_f_error_at_the_cap() -> None:
    w = di.Constant(np.ones((3, 3)))
    # (static shapes: with dynamo's automatic dynamic shapes, whether a graph for the
    # new shape already exists depends on what the process compiled before)
    with torch._dynamo.config.patch(accumulated_recompile_limit=3, automatic_dynamic_shapes=False):
        prep = di.prepare_gradient(_matrix_norm, COMPILED, np.ones(3), w, strict=False)
        for _ in range(6):  # each call fails while traced, and counts toward the cap
            with pytest.raises(RuntimeError, match="size mismatch") as caught:
                di.gradient(_matrix_norm, prep, COMPILED, np.ones(4), w)
            assert not isinstance(caught.value, di.RecompileLimitError)
        np.testing.assert_allclose(di.gradient(_matrix_norm, prep, COMPILED, np.ones(3), w), [18.0] * 3)
        # a call f can take, needing a compile the cap refuses: the limit named is the one hit
        with pytest.raises(di.RecompileLimitError, match=r"accumulated_recompile_limit, 3\).*Prepare again"):
            di.gradient(_matrix_norm, prep, COMPILED, np.ones(4), di.Constant(np.ones((4, 4))))
        fresh = di.prepare_gradient(_matrix_norm, COMPILED, np.ones(4), di.Constant(np.ones((4, 4))))
        np.testing.assert_allclose(
            di.gradient(_matrix_norm, fresh, COMPILED, np.ones(4), di.Constant(np.ones((4, 4)))), [32.0] * 4
        )
