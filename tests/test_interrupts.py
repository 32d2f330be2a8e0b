"""A ``KeyboardInterrupt`` raised inside ``f`` propagates out of ``di`` unchanged, and
leaves every prep usable: the next call gives the right answer, and ``x`` is intact.

The interrupt is raised on a chosen evaluation of ``f``: the first one of a call, or one
in the middle (finite differences evaluate ``f`` many times per call). Compiled
backends that traced ``f`` at preparation (``AutoJAX(jit=True)``) never call it again,
so there the interrupt is raised while tracing: in ``prepare_*`` or an unprepared call,
after which both the interrupted preparation and existing preps must work.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from conftest import BACKENDS, FAMILIES, as_family, backend_params, engine_name, to_numpy

import di
from di.testing import approximates


class Interrupting:
    """``f(x) = sum(sin(x) * x)`` (jacobian form: ``sin(x) * x``) that raises
    ``KeyboardInterrupt`` on evaluation number ``at`` after :meth:`arm`."""

    def __init__(self, vector: bool = False) -> None:
        self.vector = vector
        self.countdown: int | None = None
        self.evaluations = 0
        self.raised = 0

    def arm(self, at: int = 1) -> None:
        self.countdown = at

    def disarm(self) -> None:
        self.countdown = None

    def __call__(self, x: Any, *values: Any) -> Any:
        self.evaluations += 1
        if self.countdown is not None:
            self.countdown -= 1
            if self.countdown == 0:
                self.countdown = None
                self.raised += 1
                raise KeyboardInterrupt("interrupted inside f")
        xp = di.array_namespace(x)
        y = xp.sin(x) * x
        return y if self.vector else xp.sum(y)


def _expected(x: np.ndarray, operator: str) -> np.ndarray:
    derivative = np.sin(x) + x * np.cos(x)
    if operator == "gradient":
        return derivative
    if operator == "jacobian":
        return np.diag(derivative)
    if operator == "hvp":  # along ones
        return 2.0 * np.cos(x) - x * np.sin(x)
    raise AssertionError(operator)


def _run(operator: str, f: Interrupting, backend: Any, x: Any, prep: Any = None) -> Any:
    head = (prep,) if prep is not None else ()
    if operator == "gradient":
        return di.gradient(f, *head, backend, x)
    if operator == "jacobian":
        return di.jacobian(f, *head, backend, x)
    return di.hvp(f, *head, backend, x, (_ones_like(x),))[0]


def _ones_like(x: Any) -> Any:
    """Ones of x's family, shape and dtype (JAX float64 made under enable_x64, as x was)."""
    name = "torch" if type(x).__module__.startswith("torch") else "jax" if "jax" in type(x).__module__ else "numpy"
    return as_family(np.ones(tuple(x.shape), dtype=str(x.dtype).replace("torch.", "")), name)


def _prepare(operator: str, f: Interrupting, backend: Any, x: Any) -> Any:
    if operator == "gradient":
        return di.prepare_gradient(f, backend, x)
    if operator == "jacobian":
        return di.prepare_jacobian(f, backend, x)
    return di.prepare_hvp(f, backend, x, (_ones_like(x),))


def _check(result: Any, x: np.ndarray, operator: str, backend: Any) -> None:
    rtol = 1e-6 if approximates(backend) else 1e-12
    if operator == "hvp" and approximates(backend):
        rtol = 1e-4
    np.testing.assert_allclose(to_numpy(result), _expected(x, operator), rtol=rtol, atol=rtol)


def _interrupted(call: Callable[[], Any]) -> bool:
    """Whether ``call`` raised the KeyboardInterrupt of f (it must not raise anything else)."""
    try:
        call()
    except KeyboardInterrupt as err:
        assert type(err) is KeyboardInterrupt and err.args == ("interrupted inside f",), repr(err)
        return True
    return False


OPERATORS = ["gradient", "jacobian", "hvp"]


@pytest.mark.parametrize("operator", OPERATORS)
@pytest.mark.parametrize("backend", backend_params())
@pytest.mark.parametrize("family_name", FAMILIES)
def test_interrupt_in_f_propagates_and_the_prep_stays_usable(backend: Any, operator: str, family_name: str) -> None:
    f = Interrupting(vector=operator == "jacobian")
    x_np = np.array([0.3, -1.2, 2.0, 0.7])
    x = as_family(x_np, family_name)
    prep = _prepare(operator, f, backend, as_family(np.zeros(4), family_name))
    _check(_run(operator, f, backend, x, prep), x_np, operator, backend)

    # An interrupt on the first evaluation of f in a prepared call, then one in the middle of a call.
    for at in (1, 3):
        before = f.evaluations
        _run(operator, f, backend, x, prep)
        per_call = f.evaluations - before
        if per_call < at:
            continue  # this call evaluates f fewer times (a compiled program evaluates it never)
        f.arm(at)
        assert _interrupted(lambda: _run(operator, f, backend, x, prep)), "the KeyboardInterrupt did not propagate"
        f.disarm()
        np.testing.assert_array_equal(to_numpy(x), x_np, err_msg="x was left modified")
        if family_name == "torch":
            assert not x.requires_grad and x.grad is None
        # The prep is usable at once, for the same point and for another one.
        _check(_run(operator, f, backend, x, prep), x_np, operator, backend)
        other = -0.5 * x_np
        _check(_run(operator, f, backend, as_family(other, family_name), prep), other, operator, backend)

    # An interrupt while preparing, and in an unprepared call: both propagate, and afterwards new preps
    # and the existing one work.
    f.arm(1)
    interrupted = _interrupted(lambda: _prepare(operator, f, backend, x))
    f.disarm()
    if interrupted:
        fresh = _prepare(operator, f, backend, x)
        _check(_run(operator, f, backend, x, fresh), x_np, operator, backend)
    f.arm(1)
    assert _interrupted(lambda: _run(operator, f, backend, x)), "the KeyboardInterrupt did not propagate"
    f.disarm()
    _check(_run(operator, f, backend, x), x_np, operator, backend)
    _check(_run(operator, f, backend, x, prep), x_np, operator, backend)
    assert f.raised >= 1


@pytest.mark.parametrize("backend", backend_params([b for b in BACKENDS if engine_name(b) == "torch"]))
def test_interrupt_leaves_no_graph_on_a_torch_cache(backend: Any) -> None:
    """A Cache written by f before the interrupt holds no autograd graph afterwards, and is reusable."""
    import torch

    armed = {"on": False}

    def f(x, buffer):
        buffer[...] = x * x
        if armed["on"]:
            raise KeyboardInterrupt("interrupted inside f")
        return (buffer * x).sum()

    x = torch.tensor([0.5, -1.0, 2.0], dtype=torch.float64)
    cache = di.Cache(torch.zeros(3, dtype=torch.float64))
    prep = di.prepare_gradient(f, backend, x, cache)
    armed["on"] = True
    with pytest.raises(KeyboardInterrupt):
        di.gradient(f, prep, backend, x, cache)
    armed["on"] = False
    g = di.gradient(f, prep, backend, x, cache)
    np.testing.assert_allclose(to_numpy(g), 3.0 * to_numpy(x) ** 2, rtol=1e-12)
    assert cache.value.grad_fn is None and not cache.value.requires_grad
