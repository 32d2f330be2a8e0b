"""How long what ``torch.compile`` sees of ``di`` lives: a ``DifferentiateWith``
traced by dynamo (and the ``f`` and data it owns) is freed with the compiled
function, and works as long as that function does."""

from __future__ import annotations

import gc
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
