"""An engine added from outside ``di``, written from ``docs/backends.md`` alone:
forward mode with dual numbers over NumPy.

A dual number ``a + b ε`` with ``ε² = 0`` carries a value ``a`` and a tangent
``b``: ``f(x + t ε) = f(x) + f'(x) t ε``, so evaluating ``f`` once on duals gives
its value and its derivative along ``t``, exact to rounding. The engine below
brings its own array type (:class:`Dual`) and the array namespace ``f`` computes
with on it, one primitive (the pushforward), the record that registers it
(:data:`ENGINE`) with its hooks: the values it traces, the rules that turn ``f``'s
misuse of them into ``di`` errors, and a ``DifferentiateWith`` host. It touches
no file of ``di``; ``docs/backends.md`` ("A whole engine: dual numbers") shows
exactly this code, and a test below keeps the two equal.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import types
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from extension_support import assert_page_shows, excerpt, python_blocks, restored_registries

import di
from di.backends.engine import Engine, TracedValues
from di.backends.outputs import OutputRules, checking
from di.backends.protocol import Adapter, Capabilities, Programs
from di.families import converter, family_of
from di.mixing.core import Host
from di.testing import backend_label, default_scenarios, parse_backend, test_differentiation


# docs excerpt begin: dual-numbers
class Dual:
    """An array of dual numbers ``value + tangent ε``, with ``ε² = 0``: each
    operation computes its value and, by the chain rule, its tangent."""

    __slots__ = ("tangent", "value")
    __array_ufunc__ = None  # NumPy defers to these operators: ndarray @ Dual calls Dual.__rmatmul__

    def __init__(self, value: Any, tangent: Any) -> None:
        self.value, self.tangent = value, tangent

    def __array_namespace__(self, api_version: str | None = None) -> Any:
        return DUAL_NUMPY  # what di.array_namespace(x) answers for duals

    shape = property(lambda self: np.shape(self.value))
    dtype = property(lambda self: np.result_type(self.value))

    def __getitem__(self, index: Any) -> Dual:
        return Dual(self.value[index], self.tangent[index])

    def __setitem__(self, index: Any, other: Any) -> None:  # f writing into a Cache
        other = dual(other)
        self.value[index], self.tangent[index] = other.value, other.tangent

    def reshape(self, shape: tuple[int, ...]) -> Dual:  # di rebuilds a pytree x with it
        return Dual(np.reshape(self.value, shape), np.reshape(self.tangent, shape))

    def astype(self, dtype: Any) -> Dual:
        return Dual(self.value.astype(dtype), self.tangent.astype(dtype))

    def __add__(self, other: Any) -> Dual:
        other = dual(other)
        return Dual(self.value + other.value, self.tangent + other.tangent)

    def __sub__(self, other: Any) -> Dual:
        other = dual(other)
        return Dual(self.value - other.value, self.tangent - other.tangent)

    def __mul__(self, other: Any) -> Dual:
        other = dual(other)
        return Dual(self.value * other.value, self.tangent * other.value + self.value * other.tangent)

    def __truediv__(self, other: Any) -> Dual:
        other = dual(other)
        value = self.value / other.value
        return Dual(value, (self.tangent - value * other.tangent) / other.value)

    def __matmul__(self, other: Any) -> Dual:
        other = dual(other)
        return Dual(self.value @ other.value, self.tangent @ other.value + self.value @ other.tangent)

    def __pow__(self, power: float) -> Dual:  # a constant power
        return Dual(self.value**power, power * self.value ** (power - 1) * self.tangent)

    def __neg__(self) -> Dual:
        return Dual(-self.value, -self.tangent)

    def __rsub__(self, other: Any) -> Dual:
        return dual(other) - self

    def __rtruediv__(self, other: Any) -> Dual:
        return dual(other) / self

    def __rmatmul__(self, other: Any) -> Dual:
        return dual(other) @ self

    __radd__, __rmul__ = __add__, __mul__

    def __gt__(self, other: Any) -> Any:  # comparisons read the values
        return self.value > (other.value if isinstance(other, Dual) else other)


def dual(value: Any) -> Dual:
    """``value`` as a dual: a constant's tangent is zero (a Python 0 for a Python
    number, which keeps the dtype of the arrays it meets)."""
    if isinstance(value, Dual):
        return value
    return Dual(value, np.zeros_like(value) if isinstance(value, np.ndarray) else 0)


def elementwise(function: Callable[[Any], Any], derivative: Callable[[Any], Any]) -> Callable[[Any], Dual]:
    def on_duals(x: Any) -> Dual:
        x = dual(x)
        return Dual(function(x.value), derivative(x.value) * x.tangent)

    return on_duals


def linear(function: Callable[..., Any]) -> Callable[..., Dual]:
    """A function linear in its first argument (an array, or a list of arrays),
    applied alike to the values and to the tangents."""

    def on_duals(x: Any, *args: Any, **kwargs: Any) -> Dual:
        if isinstance(x, (list, tuple)):  # concat, stack
            parts = [dual(a) for a in x]
            values, tangents = [p.value for p in parts], [p.tangent for p in parts]
            return Dual(function(values, *args, **kwargs), function(tangents, *args, **kwargs))
        x = dual(x)
        return Dual(function(x.value, *args, **kwargs), function(x.tangent, *args, **kwargs))

    return on_duals


def where(condition: Any, a: Any, b: Any) -> Dual:
    a, b = dual(a), dual(b)
    return Dual(np.where(condition, a.value, b.value), np.where(condition, a.tangent, b.tangent))


def maximum(x: Any, axis: int | None = None, keepdims: bool = False) -> Dual:
    """The largest values, with the tangents of the elements they are."""
    x = dual(x)
    if axis is None:
        return maximum(x.reshape((-1,)), 0, keepdims)
    index = np.expand_dims(np.argmax(x.value, axis=axis), axis)
    picked = [np.take_along_axis(part, index, axis) for part in (x.value, x.tangent)]
    return Dual(*picked) if keepdims else Dual(*(np.squeeze(part, axis) for part in picked))


DUAL_NUMPY = types.SimpleNamespace(  # the array API on duals, as far as the default scenarios use it
    __name__="dual_numpy",
    sin=elementwise(np.sin, np.cos),
    cos=elementwise(np.cos, lambda v: -np.sin(v)),
    exp=elementwise(np.exp, np.exp),
    tanh=elementwise(np.tanh, lambda v: 1 - np.tanh(v) ** 2),
    sum=linear(np.sum),
    reshape=linear(np.reshape),
    concat=linear(np.concatenate),
    stack=linear(np.stack),
    matmul=lambda a, b: dual(a) @ b,
    where=where,
    max=maximum,
)


# docs excerpt end: dual-numbers


# docs excerpt begin: dual-adapter
@dataclasses.dataclass(frozen=True)
class AutoDual(di.AbstractBackend):
    """Forward mode with dual numbers, over NumPy: exact derivatives, one
    evaluation of ``f`` per tangent."""


class DualRules(OutputRules):
    """How ``f``'s outputs and errors look on duals (``di.backends.outputs``)."""

    traces = True  # an output not computed from x carries no derivative: a Python float is refused
    conversion_errors = (TypeError,)  # what f's misuse of a dual raises: float(x[0]), np.sin(x)

    def value(self, y: Any) -> Any:
        return y.value if isinstance(y, Dual) else y

    def is_traced(self, y: Any, x: Any) -> bool:
        return isinstance(y, Dual)

    def is_conversion_error(self, error: BaseException) -> str:
        return "float()" if "float() argument" in str(error) and "'Dual'" in str(error) else ""

    def foreign_cause(self, error: BaseException) -> str:
        return "numpy" if "'Dual' does not support ufuncs" in str(error) else ""


class DualAdapter(Adapter):
    """One primitive, the pushforward; di builds every other first-order operator from it."""

    capabilities = Capabilities(  # the array family the engine computes in; its duals hold real numbers
        family="numpy",
        complex_numbers=False,
        complex_note="its dual numbers hold real parts only. Use another backend.",
    )

    def prepare_pushforward_programs(
        self, f: Callable[..., Any], x: Any, tx: Sequence[Any], contexts: Sequence[di.Context]
    ) -> Programs:
        backend = self.backend
        to_numpy = self.input_converters([x])[0]  # from the caller's family, decided once
        value_converters = self.context_converters(contexts)
        is_cache = [isinstance(context, di.Cache) for context in contexts]
        checked = checking(f, backend, "pushforward", DualRules())  # f's output checked, its errors translated

        def at(x: np.ndarray, t: np.ndarray, values: Sequence[Any]) -> tuple[np.ndarray, np.ndarray]:
            # A Cache's initial value never matters: f gets dual scratch space to write into.
            values = [Dual(np.empty_like(v), np.empty_like(v)) if cache else v for cache, v in zip(is_cache, values)]
            y = dual(checked(Dual(x, t), *values))
            return y.value, np.asarray(y.tangent, dtype=y.value.dtype)

        def value_and_pushforward(x: Any, tx: Sequence[Any], *values: Any) -> Any:
            if isinstance(x, Dual):
                raise di.UnsupportedOperatorError(
                    f"{backend!r} cannot run inside its own pushforward: nested dual numbers would mix their "
                    f"tangents. Inside f, use another backend, or di.DifferentiateWith."
                )
            x = np.asarray(to_numpy(x))
            values = [convert(value) for convert, value in zip(value_converters, values)]
            tangents = [np.asarray(converter(family_of(t), "numpy")(t)) for t in tx]
            results = [at(x, t, values) for t in tangents or [np.zeros_like(x)]]
            return results[0][0], tuple(tangent for _, tangent in results[: len(tx)])

        def pushforward(x: Any, tx: Sequence[Any], *values: Any) -> Any:
            return value_and_pushforward(x, tx, *values)[1]

        return {"pushforward": pushforward, "value_and_pushforward": value_and_pushforward}


def traced_values() -> list[TracedValues]:
    """The values the engine traces: other backends refuse them by name."""
    return [TracedValues(Dual, "AutoDual's pushforward", lambda x: x.value)]


# docs excerpt end: dual-adapter


# docs excerpt begin: dual-host
class DualHost(Host):
    """``g = di.DifferentiateWith(f, backend)`` called on duals: its value and
    its tangent (``backend``'s pushforward) as one dual."""

    display = "dual numbers"

    def owns(self, value: Any) -> bool:
        return isinstance(value, Dual)

    def call(self, g: di.DifferentiateWith, x: Any, leaves: list[Any], treedef: Any, values: list[Any]) -> Any:
        positions = g.operand_positions(self, values)  # the Constants given as duals
        if any(np.any(values[i].tangent) for i in positions):
            raise di.InvalidInputError(f"{g!r} differentiates x only: put the Constants that vary into x")
        operands = [values[i].value for i in positions]
        duals = [dual(leaf) for leaf in leaves]
        point = [np.asarray(d.value) for d in duals]
        operand_specs = {i: (v.shape, v.dtype.name) for i, v in zip(positions, operands)}
        call = g.call_for(treedef, [(p.shape, p.dtype.name) for p in point], values, operand_specs)
        output = call.output(point, operands)
        y = call.value(point, operands)  # lists of output leaves, in the family of g's backend
        (tangents,) = call.pushforward(point, operands, [[np.asarray(d.tangent) for d in duals]])
        to_numpy = converter(call.family, "numpy")
        return output.unflatten([Dual(to_numpy(v), to_numpy(t)) for v, t in zip(y, tangents)])


# docs excerpt end: dual-host

# docs excerpt begin: dual-record
ENGINE = Engine(
    name="dual",  # di.backend("dual"), --backends dual
    selectors=AutoDual,
    adapter=DualAdapter,
    display="dual numbers",
    host=DualHost(),
    traced=traced_values,
)
# docs excerpt end: dual-record

REGISTRATION = "di.register_engine(ENGINE)\n"


@pytest.fixture(scope="module", autouse=True)
def registered() -> Iterator[None]:
    with restored_registries():
        di.register_engine(ENGINE)
        yield


BACKEND = AutoDual()
SECOND_ORDER = ("hvp", "hessian", "second_derivative")


def sin_exp(x: Any) -> Any:
    xp = di.array_namespace(x)
    return xp.sum(xp.sin(x) * xp.exp(x))


def sin_exp_gradient(x: np.ndarray) -> np.ndarray:
    return (np.cos(x) + np.sin(x)) * np.exp(x)


# --- listed, by name, on the command line ----------------------------------------------------------


def test_it_is_listed_and_found_by_name_and_label() -> None:
    assert BACKEND in di.available_backends()
    assert di.available_backends()[-1] == BACKEND  # after the built-in engines
    assert di.backend("dual") == BACKEND and di.backend("DUAL") == BACKEND
    assert backend_label(BACKEND) == "dual" and parse_backend("dual") == BACKEND
    assert BACKEND.engine_display == "dual numbers"  # what its messages call it
    x = np.array([0.7, -0.2])
    np.testing.assert_allclose(di.gradient(sin_exp, di.backend("dual"), x), sin_exp_gradient(x), rtol=1e-15)


def test_the_command_line_runs_the_scenarios_on_it(tmp_path: Path) -> None:
    tests = Path(__file__).resolve().parent
    paths = [str(tests.parent), str(tests), os.environ.get("PYTHONPATH", "")]
    rows_path = tmp_path / "rows.json"
    options = ["--backends", "dual,finitediff", "--operators", "gradient,jacobian", "--no-bench", "--quiet"]
    done = subprocess.run(
        [sys.executable, "-m", "di", "--engine", f"{Path(__file__).stem}:ENGINE", *options, "--json", str(rows_path)],
        env={**os.environ, "PYTHONPATH": os.pathsep.join(p for p in paths if p)},
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    rows = [row for row in json.loads(rows_path.read_text()) if row["backend"] == "dual"]
    statuses = {row["scenario"]: row["status"] for row in rows}
    assert statuses["gradient/sum_sin/f64"] == "ok" and statuses["jacobian/sparse_tridiagonal/f64"] == "ok"
    real = {status for scenario, status in statuses.items() if "aux" not in scenario and "complex" not in scenario}
    assert real == {"ok"}
    # its capabilities say no complex numbers: the complex scenarios are skipped, not failed
    assert {status for scenario, status in statuses.items() if "complex" in scenario} == {"skip"}


def test_the_command_line_refuses_an_engine_that_is_not_a_record(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "di", "--engine", "math:pi", "--backends", "finitediff", "--no-bench"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 2
    assert "--engine math:pi names a float, not an engine record" in done.stderr


# --- the default scenarios ---------------------------------------------------------------------


def test_every_first_order_default_scenario_passes_and_the_rest_is_refused_up_front() -> None:
    scenarios = default_scenarios()
    report = test_differentiation(BACKEND, scenarios)  # raises, listing every failure
    assert not report.failed
    ran = {result.scenario for result in report.passed}
    for scenario in scenarios:
        if scenario.operator not in SECOND_ORDER and not scenario.has_aux and "complex" not in scenario.tags:
            assert scenario.name in ran, f"{scenario.name} did not run"
            continue
        skipped = [r for r in report.skipped if r.scenario == scenario.name]
        assert skipped, f"{scenario.name} ran: AutoDual should refuse it (second order, has_aux or complex x)"
        for result in skipped:
            assert isinstance(result.error, di.UnsupportedOperatorError), result.line()
    groups = {tag for s in scenarios if s.name in ran for tag in s.tags}
    assert {"pytree", "sparse", "array-api", "cache", "constant"} <= groups


# --- exact, on pytrees, sparse ------------------------------------------------------------------


def test_derivatives_are_exact_to_rounding_in_the_dtype_of_x() -> None:
    x = np.array([0.3, -1.2, 2.5, 4.0])
    np.testing.assert_allclose(di.gradient(sin_exp, BACKEND, x), sin_exp_gradient(x), rtol=1e-15, atol=0)
    gradient32 = di.gradient(sin_exp, BACKEND, x.astype(np.float32))
    assert gradient32.dtype == np.float32
    np.testing.assert_allclose(gradient32, sin_exp_gradient(x), rtol=1e-5)

    def cube(x: Any) -> Any:
        return x**3 - 2 * x

    assert di.derivative(cube, BACKEND, 1.5) == pytest.approx(3 * 1.5**2 - 2, rel=1e-16, abs=0)


def test_a_pytree_x_is_rebuilt_from_duals_inside_f() -> None:
    seen: list[Any] = []

    def loss(params: Any, data: Any) -> Any:
        w, b = params["w"], params["b"]
        seen.append(type(w))
        xp = di.array_namespace(w)
        return xp.sum(xp.tanh(data @ w + b) ** 2)

    data = np.array([[1.0, 2.0], [-0.5, 0.3], [0.2, -1.0]])
    params = {"w": np.array([0.1, -0.3]), "b": np.array(0.2)}
    gradient = di.gradient(loss, BACKEND, params, di.Constant(data))
    z = np.tanh(data @ params["w"] + params["b"])
    outer = 2 * z * (1 - z**2)
    np.testing.assert_allclose(gradient["w"], data.T @ outer, rtol=1e-14)
    np.testing.assert_allclose(gradient["b"], outer.sum(), rtol=1e-14)
    assert gradient["b"].shape == () and Dual in seen  # f computed on duals: no object array, no TypeError


def test_auto_sparse_over_it_gives_the_sparse_jacobian() -> None:
    def tridiagonal(x: Any) -> Any:
        xp = di.array_namespace(x)
        zero = x[:1] * 0
        padded = xp.concat([zero, x, zero])
        return padded[:-2] - 2 * padded[1:-1] + padded[2:] + x * x

    x = np.linspace(-1.0, 1.0, 12)
    expected = np.diag(2 * x - 2) + np.diag(np.ones(11), 1) + np.diag(np.ones(11), -1)
    sparse = di.AutoSparse(BACKEND)
    prep = di.prepare_jacobian(tridiagonal, sparse, x)
    jacobian = di.jacobian(tridiagonal, prep, sparse, x)
    np.testing.assert_allclose(jacobian.toarray(), expected, rtol=1e-15, atol=0)
    assert jacobian.nnz == 34 and prep.colors == 3  # three pushforwards, not twelve


# --- DifferentiateWith: hosted by the dual engine, and the dual engine inside others -------------------


def test_it_hosts_differentiate_with_a_numpy_black_box_differentiated_by_finite_differences() -> None:
    calls: list[type] = []

    def black_box(x: np.ndarray) -> np.ndarray:  # NumPy only: duals cannot pass through it
        calls.append(type(x))
        return np.sin(x) * x

    g = di.DifferentiateWith(black_box, di.AutoFiniteDiff())

    def f(x: Any) -> Any:
        xp = di.array_namespace(x)
        return xp.sum(g(x) * xp.exp(x))

    x = np.array([0.4, -1.1, 2.0])
    expected = ((np.cos(x) * x + np.sin(x)) + np.sin(x) * x) * np.exp(x)
    np.testing.assert_allclose(di.gradient(f, BACKEND, x), expected, rtol=1e-8)
    assert calls and set(calls) == {np.ndarray}  # the black box never saw a dual


def test_a_hosted_call_with_a_pytree_x_and_an_array_constant() -> None:
    def energy(x: Any, scale: Any) -> Any:
        xp = di.array_namespace(x["a"])
        return xp.stack([xp.sum(scale * x["a"] ** 2), xp.sum(x["a"]) * x["b"]])

    scale = np.array([1.0, 2.0])
    g = di.DifferentiateWith(energy, di.AutoFiniteDiff(), di.Constant(scale))

    def f(x: Any) -> Any:
        xp = di.array_namespace(x)
        y = g({"a": x[:2], "b": x[2]})
        return xp.sum(y * y)

    x = np.array([0.5, -0.25, 1.5])
    a, b = x[:2], x[2]
    y0, y1 = np.sum(scale * a**2), np.sum(a) * b
    expected = np.concatenate([2 * y0 * 2 * scale * a + 2 * y1 * b, [2 * y1 * np.sum(a)]])
    np.testing.assert_allclose(di.gradient(f, BACKEND, x), expected, rtol=1e-7)


def test_its_own_differentiate_with_is_f_itself() -> None:
    calls: list[type] = []

    def f(x: Any) -> Any:
        calls.append(type(x))
        xp = di.array_namespace(x)
        return xp.sin(x)

    g = di.DifferentiateWith(f, BACKEND)

    def outer(x: Any) -> Any:
        xp = di.array_namespace(x)
        return xp.sum(g(x))

    x = np.array([0.1, 0.2])
    np.testing.assert_allclose(di.gradient(outer, BACKEND, x), np.cos(x), rtol=1e-15)
    # one evaluation on duals per pushforward of the gradient's two columns: the dual engine ran f itself
    # (hosted, g would ask AutoDual for a value and a pushforward apart, each evaluating f again)
    assert calls.count(Dual) == 2


@pytest.mark.parametrize("engine", ["autograd", "jax", "torch"])
def test_its_functions_are_differentiable_inside_the_other_engines(engine: str) -> None:
    pytest.importorskip(engine)
    g = di.DifferentiateWith(sin_exp, BACKEND)  # the gradient inside comes from the dual pushforward
    x = np.array([0.3, -0.7, 1.1])
    if engine == "autograd":
        import autograd

        gradient = autograd.grad(g)(x)
    elif engine == "jax":
        import jax

        with jax.enable_x64(True):
            gradient = np.asarray(jax.grad(g)(jax.numpy.asarray(x)))
    else:
        import torch

        tensor = torch.tensor(x, requires_grad=True)
        g(tensor).backward()
        gradient = tensor.grad.numpy()
    np.testing.assert_allclose(gradient, sin_exp_gradient(x), rtol=1e-12)


# --- refused, clearly ---------------------------------------------------------------------------


def test_another_backend_inside_f_is_refused_naming_the_pushforward() -> None:
    def inner(x: Any) -> Any:
        xp = di.array_namespace(x)
        return xp.sum(xp.sin(x))

    def f(x: Any) -> Any:
        xp = di.array_namespace(x)
        return xp.sum(di.gradient(inner, di.AutoFiniteDiff(), x) * x)

    with pytest.raises(di.InvalidInputError, match="x is traced by AutoDual's pushforward"):
        di.gradient(f, BACKEND, np.array([1.0, 2.0]))


def test_the_engine_inside_itself_is_refused() -> None:
    def f(x: Any) -> Any:
        return di.gradient(sin_exp, BACKEND, x) * 1.0

    with pytest.raises(di.UnsupportedOperatorError, match="cannot run inside its own pushforward"):
        di.jacobian(f, BACKEND, np.array([1.0, 2.0]))


def test_numpy_called_on_a_dual_is_a_di_error_saying_what_to_write() -> None:
    def numpy_inside(x: Any) -> Any:
        return np.sum(np.sin(x))

    with pytest.raises(di.InvalidOutputError, match=r"f called NumPy on a value dual numbers traces") as err:
        di.gradient(numpy_inside, BACKEND, np.array([1.0, 2.0]))
    assert "xp.sin(x), not np.sin(x)" in str(err.value)
    assert isinstance(err.value.__cause__, TypeError)


def test_a_python_number_made_of_a_dual_is_a_di_error() -> None:
    def to_float(x: Any) -> Any:
        return float(x[0]) * x

    with pytest.raises(di.InvalidOutputError, match=r"into a Python number with float\(\)"):
        di.jacobian(to_float, BACKEND, np.array([1.0, 2.0]))

    def constant(x: Any) -> Any:
        return 3.0

    with pytest.raises(di.InvalidOutputError, match="f returned a Python float, which carries no derivative"):
        di.gradient(constant, BACKEND, np.array([1.0, 2.0]))


def test_what_f_raises_keeps_its_type_and_message() -> None:
    def failing(x: Any) -> Any:
        raise TypeError("f's own type error")

    with pytest.raises(TypeError, match=r"^f's own type error$"):
        di.gradient(failing, BACKEND, np.array([1.0, 2.0]))


@pytest.mark.parametrize("operator", SECOND_ORDER)
def test_second_order_is_refused_at_preparation_naming_the_way_that_works(operator: str) -> None:
    x = np.array([0.5, 1.0]) if operator != "second_derivative" else np.array(0.5)
    tangents = ((np.ones(2),),) if operator == "hvp" else ()
    with pytest.raises(di.UnsupportedOperatorError, match=r"AutoDual\(\) cannot compute") as err:
        getattr(di, f"prepare_{operator}")(sin_exp, BACKEND, x, *tangents)
    assert "di.SecondOrder(di.AutoFiniteDiff(), AutoDual())" in str(err.value)
    hessian = di.hessian(sin_exp, di.SecondOrder(di.AutoFiniteDiff(), BACKEND), np.array([0.5, 1.0]))
    np.testing.assert_allclose(hessian, np.diag(2 * np.cos([0.5, 1.0]) * np.exp([0.5, 1.0])), rtol=1e-6, atol=1e-8)


# --- the documentation shows this code ----------------------------------------------------------


def test_docs_backends_page_shows_the_engine_exactly() -> None:
    assert_page_shows(excerpt(__file__, "dual-numbers"), __file__)
    previous = excerpt(__file__, "dual-numbers")
    for name in ("dual-adapter", "dual-host", "dual-record"):
        assert_page_shows(excerpt(__file__, name), __file__, after=previous)
        previous = excerpt(__file__, name)
    assert any(REGISTRATION in block for block in python_blocks()), "the page registers it as the test does"
