"""What the ``test_mixing_*`` modules share: functions written once for every engine,
a recorder of the arrays ``f`` meets, and a counter of the preparations
``DifferentiateWith`` makes.

Every ``f`` is written with ``xp = di.array_namespace(x)``, so the outer engine
can differentiate the same ``f`` natively: that is the reference each test
compares ``DifferentiateWith(f, inner)`` with. The recorder proves the inner
engine, not the outer one, ran ``f``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

import di
import di.mixing.calls
from di.pytrees import tree_leaves


def wave(x: Any) -> Any:
    """Vector to vector (Jacobians)."""
    xp = di.array_namespace(x)
    return xp.sin(x) * 2.0 + x**2


def loss(x: Any, data: Any) -> Any:
    """Vector and data to scalar (gradients, with a Constant)."""
    xp = di.array_namespace(x)
    return xp.sum(xp.tanh(x * data) ** 2) + xp.sum(x) * 0.5


def layer(params: Any, inputs: Any) -> Any:
    """A pytree of parameters to a pytree of outputs."""
    xp = di.array_namespace(params)
    hidden = xp.tanh(inputs @ params["w"] + params["b"])
    return {"mean": xp.mean(hidden), "hidden": hidden}


def layer_mean(params: Any, inputs: Any) -> Any:
    """The scalar of :func:`layer` (gradients over a pytree)."""
    return layer(params, inputs)["mean"]


class Recorder:
    """``f``, recording the library of the first leaf of each ``x`` it receives."""

    def __init__(self, f: Callable[..., Any]) -> None:
        self.f = f
        self.libraries: set[str] = set()
        self.__name__ = f.__name__

    def __call__(self, x: Any, *values: Any) -> Any:
        library = type(tree_leaves(x)[0]).__module__.split(".")[0]
        self.libraries.add("jax" if library == "jaxlib" else library)
        return self.f(x, *values)


@contextlib.contextmanager
def counting_preps() -> Iterator[dict[str, int]]:
    """Count the preps ``DifferentiateWith`` makes, by operator (``"value"``: the
    pushforward with no tangents whose value is ``f``'s)."""
    counts = {"value": 0, "pullback": 0, "pushforward": 0, "jacobian": 0}
    originals = {name: getattr(di.mixing.calls, f"prepare_{name}") for name in ("pullback", "pushforward", "jacobian")}

    def counted(name: str) -> Callable[..., Any]:
        def prepare(*args: Any, **kwargs: Any) -> Any:
            counts["value" if name == "pushforward" and not args[3] else name] += 1
            return originals[name](*args, **kwargs)

        return prepare

    try:
        for name in originals:
            setattr(di.mixing.calls, f"prepare_{name}", counted(name))
        yield counts
    finally:
        for name, original in originals.items():
            setattr(di.mixing.calls, f"prepare_{name}", original)


def close(actual: Any, expected: Any, rtol: float, atol: float = 0.0) -> None:
    """Every leaf of ``actual`` (any family) matches ``expected``'s."""
    actual_leaves, expected_leaves = tree_leaves(actual), tree_leaves(expected)
    assert len(actual_leaves) == len(expected_leaves)
    for a, e in zip(actual_leaves, expected_leaves):
        a = np.asarray(a.detach() if hasattr(a, "detach") else a, dtype=np.float64)
        e = np.asarray(e.detach() if hasattr(e, "detach") else e, dtype=np.float64)
        assert a.shape == e.shape
        np.testing.assert_allclose(a, e, rtol=rtol, atol=atol)


RNG = np.random.default_rng(0)
X = RNG.normal(size=4)
DATA = RNG.normal(size=4)
BATCH = RNG.normal(size=(3, 4))
PARAMS = {"w": RNG.normal(size=(3, 2)), "b": RNG.normal(size=2)}
INPUTS = RNG.normal(size=3)
