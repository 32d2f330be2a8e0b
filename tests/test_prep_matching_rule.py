"""A strict prep matches arguments by the documented rule (family, shape, dtype, device):
an ``nn.Parameter`` is a torch tensor like the plain one the prep was made with, on
every engine that takes torch tensors; the report names what differs; a
``strict=False`` prep reports only what it checks, and says so when a context is
missing (it raised a bare ``IndexError``)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from conftest import BACKENDS, backend_id

import di

torch = pytest.importorskip("torch")

FLOAT64 = torch.float64


def squares(x: Any, *values: Any) -> Any:
    xp = di.array_namespace(x)
    return xp.sum(x**2)


@pytest.mark.parametrize("backend", BACKENDS, ids=backend_id)
def test_a_prep_on_a_plain_tensor_takes_the_parameter_being_optimised(backend: di.AbstractBackend) -> None:
    try:
        prep = di.prepare_gradient(squares, backend, torch.zeros(5, dtype=FLOAT64))
    except di.DIError as error:  # an engine that does not take torch tensors says so at preparation
        pytest.skip(str(error).splitlines()[0])
    parameter = torch.nn.Parameter(torch.linspace(-1.0, 1.0, 5, dtype=FLOAT64))
    grad = di.gradient(squares, prep, backend, parameter)
    np.testing.assert_allclose(np.asarray(grad.detach()), 2 * parameter.detach().numpy(), rtol=1e-6, atol=1e-8)


def test_a_state_dict_constant_takes_named_parameters() -> None:
    net = torch.nn.Linear(2, 2).double()
    backend = di.AutoTorch()
    x = torch.ones(3, dtype=FLOAT64)
    prep = di.prepare_gradient(squares, backend, torch.zeros(3, dtype=FLOAT64), di.Constant(dict(net.state_dict())))
    grad = di.gradient(squares, prep, backend, x, di.Constant(dict(net.named_parameters())))
    np.testing.assert_allclose(grad.detach().numpy(), 2 * x.numpy())


class Dispatching(torch.Tensor):
    """A subclass that dispatches operators itself: a class of its own to a prep."""

    @classmethod
    def __torch_dispatch__(cls, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        return func(*args, **(kwargs or {}))


def test_the_report_names_the_difference_its_descriptions_do_not_show() -> None:
    backend = di.AutoFiniteDiff()
    prep = di.prepare_gradient(squares, backend, torch.zeros(4, dtype=FLOAT64))
    odd = torch.zeros(4, dtype=FLOAT64).as_subclass(Dispatching)
    with pytest.raises(di.PreparationMismatchError) as caught:
        di.gradient(squares, prep, backend, odd)
    line = next(line for line in str(caught.value).splitlines() if line.strip().startswith("x "))
    assert "prepared Tensor, given Dispatching" in line, line


def test_a_loose_prep_given_fewer_contexts_says_so() -> None:
    backend = di.AutoTorch()
    prep = di.prepare_gradient(squares, backend, torch.zeros(3, dtype=FLOAT64), di.Constant(1.0), strict=False)
    with pytest.raises(di.PreparationMismatchError) as caught:
        di.gradient(squares, prep, backend, torch.ones(3, dtype=FLOAT64))
    message = str(caught.value)
    assert "context 1  differs  prepared Constant float 1.0   given nothing" in message
    assert "that each context is given" in message


def test_a_loose_prep_reports_differs_only_for_what_it_checks() -> None:
    backend = di.AutoTorch()
    prep = di.prepare_gradient(squares, backend, torch.zeros(3, dtype=FLOAT64), di.Constant(1.0), strict=False)
    other = lambda x, c: squares(x)
    with pytest.raises(di.PreparationMismatchError) as caught:
        di.gradient(other, prep, backend, torch.ones(4, dtype=FLOAT64), di.Constant(torch.ones(2)))
    rows = {line.split()[0]: line for line in str(caught.value).splitlines()[1:-1]}
    assert "differs" in rows["f"]
    assert " unchecked " in rows["x"] and "differs" not in rows["x"]
    assert " unchecked " in rows["context"] and "differs" not in rows["context"]


def test_a_strict_prep_of_a_pytree_takes_a_leaf_made_a_parameter() -> None:
    backend = di.AutoTorch(create_graph=False)
    params = {"w": torch.tensor([1.0, 2.0], dtype=FLOAT64), "b": torch.tensor([0.5], dtype=FLOAT64)}
    prep = di.prepare_gradient(lambda p: squares(p["w"]) + squares(p["b"]), backend, params)
    f = prep.f
    params["b"] = torch.nn.Parameter(params["b"])
    grad = di.gradient(f, prep, backend, params)
    np.testing.assert_allclose(grad["b"].numpy(), [1.0])
    np.testing.assert_allclose(grad["w"].numpy(), [2.0, 4.0])
