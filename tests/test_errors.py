"""Errors: preparation mismatch reports, invalid inputs and outputs, errors raised
inside f, and the error class hierarchy."""

from __future__ import annotations

import dataclasses
import json
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from conftest import (
    BACKENDS,
    BACKENDS_AND_SCHEMES,
    ENGINES,
    FAMILIES,
    as_family,
    assert_close,
    backend_params,
    capabilities,
    engine_name,
    to_numpy,
)
from functions import scenario

import di

ROOT = Path(__file__).resolve().parents[1]


def _sum_squares(x, *values):
    xp = di.array_namespace(x)
    return xp.sum(x**2)


def _other(x, *values):
    xp = di.array_namespace(x)
    return xp.sum(x**2)


def _rows(message: str) -> dict[str, str]:
    """``{label: rest of line}`` for the per-argument lines of a mismatch report."""
    rows = {}
    for line in message.splitlines()[1:]:
        match = re.match(r"\s+(f|backend|x|context \d+)\s+(ok|differs)\b(.*)$", line)
        if match:
            rows[match.group(1)] = match.group(2) + match.group(3)
    return rows


def _mismatch(call) -> tuple[str, dict[str, str]]:
    with pytest.raises(di.PreparationMismatchError) as info:
        call()
    message = str(info.value)
    return message, _rows(message)


def _assert_report(rows: dict[str, str], differs: set[str], labels: list[str]) -> None:
    assert list(rows) == labels, f"report lines {list(rows)} != {labels}"
    for label, rest in rows.items():
        status = rest.split()[0]
        assert status == ("differs" if label in differs else "ok"), f"{label}: {rest}"


# --- PreparationMismatchError ----------------------------------------------------------------


def test_mismatch_report_for_another_shape(backend):
    x = np.zeros(5)
    a = di.Constant(np.eye(5))
    prep = di.prepare_gradient(_sum_squares, backend, x, a)
    for call in (
        lambda: di.gradient(_sum_squares, prep, backend, np.zeros(6), a),
        lambda: di.value_and_gradient(_sum_squares, prep, backend, np.zeros(6), a),
    ):
        message, rows = _mismatch(call)
        assert message.splitlines()[0].strip(), "empty first line"
        _assert_report(rows, {"x"}, ["f", "backend", "x", "context 1"])
        assert "prepared numpy float64 (5,)" in rows["x"] and "given numpy float64 (6,)" in rows["x"], rows["x"]
        assert "(5, 5)" in rows["context 1"] and "Constant" in rows["context 1"]
        assert "prepare_gradient" in message and "strict=False" in message


def test_mismatch_report_for_another_f(backend):
    x = np.zeros(3)
    prep = di.prepare_gradient(_sum_squares, backend, x)
    _, rows = _mismatch(lambda: di.gradient(_other, prep, backend, x))
    _assert_report(rows, {"f"}, ["f", "backend", "x"])


def test_mismatch_report_for_another_backend(backend):
    other = (
        di.AutoFiniteDiff(method="forward") if backend != di.AutoFiniteDiff(method="forward") else di.AutoFiniteDiff()
    )
    x = np.zeros(3)
    prep = di.prepare_gradient(_sum_squares, backend, x)
    _, rows = _mismatch(lambda: di.gradient(_sum_squares, prep, other, x))
    _assert_report(rows, {"backend"}, ["f", "backend", "x"])
    assert repr(backend) in rows["backend"] and repr(other) in rows["backend"], rows["backend"]


def test_mismatch_report_for_another_dtype(backend):
    prep = di.prepare_gradient(_sum_squares, backend, np.zeros(3))
    _, rows = _mismatch(lambda: di.gradient(_sum_squares, prep, backend, np.zeros(3, dtype=np.float32)))
    _assert_report(rows, {"x"}, ["f", "backend", "x"])
    assert "float64" in rows["x"] and "float32" in rows["x"]


@pytest.mark.parametrize("family_name", [name for name in FAMILIES if name != "numpy"])
def test_mismatch_report_for_another_family(backend, family_name):
    prep = di.prepare_gradient(_sum_squares, backend, np.zeros(3))
    _, rows = _mismatch(lambda: di.gradient(_sum_squares, prep, backend, as_family(np.zeros(3), family_name)))
    _assert_report(rows, {"x"}, ["f", "backend", "x"])
    assert "numpy" in rows["x"] and family_name in rows["x"]


def test_mismatch_report_for_a_context(backend):
    a = di.Constant(np.eye(3))
    prep = di.prepare_gradient(_sum_squares, backend, np.zeros(3), a, di.Constant(2.0))
    # Another shape of context 1.
    _, rows = _mismatch(lambda: di.gradient(_sum_squares, prep, backend, np.zeros(3), di.Constant(np.eye(4)), a))
    _assert_report(rows, {"context 1", "context 2"}, ["f", "backend", "x", "context 1", "context 2"])
    assert "(3, 3)" in rows["context 1"] and "(4, 4)" in rows["context 1"]


def test_mismatch_report_for_too_few_and_too_many_contexts(backend):
    a = di.Constant(np.eye(3))
    prep = di.prepare_gradient(_sum_squares, backend, np.zeros(3), a)
    _, rows = _mismatch(lambda: di.gradient(_sum_squares, prep, backend, np.zeros(3)))
    _assert_report(rows, {"context 1"}, ["f", "backend", "x", "context 1"])
    _, rows = _mismatch(lambda: di.gradient(_sum_squares, prep, backend, np.zeros(3), a, di.Constant(np.eye(3))))
    _assert_report(rows, {"context 2"}, ["f", "backend", "x", "context 1", "context 2"])


@pytest.mark.parametrize("backend", backend_params([b for b in BACKENDS if capabilities(b).cache]))
def test_mismatch_report_for_another_context_kind(backend):
    prep = di.prepare_gradient(_sum_squares, backend, np.zeros(3), di.Constant(np.zeros(3)))
    _, rows = _mismatch(lambda: di.gradient(_sum_squares, prep, backend, np.zeros(3), di.Cache(np.zeros(3))))
    _assert_report(rows, {"context 1"}, ["f", "backend", "x", "context 1"])
    assert "Constant" in rows["context 1"] and "Cache" in rows["context 1"]


def test_matching_call_passes_the_check_and_strict_false_skips_it():
    backend = di.AutoFiniteDiff()
    prep = di.prepare_gradient(_sum_squares, backend, np.zeros(3), strict=True)
    x = np.array([1.0, 2.0, 3.0])
    assert_close(di.gradient(_sum_squares, prep, backend, x), 2.0 * x, backend, x.dtype)
    loose = di.prepare_gradient(_sum_squares, backend, np.zeros(3), strict=False)
    assert_close(di.gradient(_sum_squares, loose, backend, x), 2.0 * x, backend, x.dtype)
    with pytest.raises(di.PreparationMismatchError):
        di.gradient(_sum_squares, prep, backend, np.zeros(4))


# --- invalid inputs -----------------------------------------------------------------------------


@pytest.mark.parametrize("backend", backend_params(ENGINES))  # refused before a program runs
def test_raw_array_where_a_context_is_expected(backend):
    a = np.eye(3)
    x = np.zeros(3)
    calls = {
        "prepare": lambda: di.prepare_gradient(_sum_squares, backend, x, a),
        "gradient": lambda: di.gradient(_sum_squares, backend, x, a),
        "value_and_gradient": lambda: di.value_and_gradient(_sum_squares, backend, x, a),
    }
    prep = di.prepare_gradient(_sum_squares, backend, x, di.Constant(a))
    calls["prepared gradient"] = lambda: di.gradient(_sum_squares, prep, backend, x, a)
    calls["prepared value_and_gradient"] = lambda: di.value_and_gradient(_sum_squares, prep, backend, x, a)
    for label, call in calls.items():
        with pytest.raises(di.InvalidInputError) as info:
            call()
        message = str(info.value)
        assert "context 1" in message and "Constant" in message and "Cache" in message, f"{label}: {message}"


def _invalid_xs():
    cases = [
        ("int-array", np.arange(3)),
        ("bool-array", np.array([True, False])),
        ("list", [1.0, 2.0]),
        ("tuple", (1.0, 2.0)),
        ("None", None),
        ("str", "1.0"),
        ("int", 3),
        ("bool", True),
        ("complex", 1.0 + 2.0j),
    ]
    if "torch" in FAMILIES:
        import torch

        cases += [
            ("torch-int", torch.arange(3)),
        ]
    if "jax" in FAMILIES:
        import jax.numpy as jnp

        cases += [("jax-int", jnp.arange(3))]
    return [pytest.param(x, id=label) for label, x in cases]


@pytest.mark.parametrize("x", _invalid_xs())
@pytest.mark.parametrize("backend", backend_params(ENGINES))  # refused before a program runs
def test_invalid_x_is_refused_naming_x(backend, x):
    calls = (
        lambda: di.prepare_gradient(_sum_squares, backend, x),
        lambda: di.gradient(_sum_squares, backend, x),
        lambda: di.value_and_gradient(_sum_squares, backend, x),
    )
    for call in calls:
        with pytest.raises(di.InvalidInputError) as info:
            call()
        assert re.search(r"\bx\b", str(info.value)), str(info.value)
        assert isinstance(info.value, TypeError)


@pytest.mark.parametrize("backend", backend_params(ENGINES))  # refused before a program runs
def test_prep_in_the_wrong_position_is_an_invalid_x(backend):
    x = np.zeros(3)
    prep = di.prepare_gradient(_sum_squares, backend, x)
    with pytest.raises(di.InvalidInputError):
        di.gradient(_sum_squares, backend, prep, x)


def test_backend_must_be_a_selector():
    with pytest.raises(di.InvalidInputError, match="backend"):
        di.gradient(_sum_squares, "jax", np.zeros(3))
    with pytest.raises(di.InvalidInputError, match="backend"):
        di.prepare_gradient(_sum_squares, None, np.zeros(3))


@pytest.mark.parametrize("backend", backend_params(ENGINES))  # refused before a program runs
def test_f_must_be_callable(backend):
    with pytest.raises(di.InvalidInputError, match="f"):
        di.gradient(np.zeros(3), backend, np.zeros(3))


# --- invalid outputs -------------------------------------------------------------------------------


def _vector(x):
    return x * 2.0


def _matrix(x):
    xp = di.array_namespace(x)
    return xp.reshape(x, (2, 2))


def _python_int(x):
    return 3


def _int_array(x):
    xp = di.array_namespace(x)
    return xp.sum(xp.astype(x > 0, xp.int64))


def _complex_number(x):
    return 1.0 + 2.0j


def _complex_array(x):
    xp = di.array_namespace(x)
    return xp.sum(x) * (1.0 + 1.0j)


def _none(x):
    return None


def _string(x):
    return "0.5"


_BAD_OUTPUTS = [
    pytest.param(_vector, "(4,)", id="vector"),
    pytest.param(_matrix, "(2, 2)", id="matrix"),
    pytest.param(_python_int, "int", id="python-int"),
    pytest.param(_int_array, "int", id="int-array"),
    pytest.param(_complex_number, "complex", id="complex"),
    pytest.param(_complex_array, "complex", id="complex-array"),
    pytest.param(_none, "None", id="None"),
    pytest.param(_string, "str", id="str"),
]


@pytest.mark.parametrize(("f", "mentions"), _BAD_OUTPUTS)
@pytest.mark.parametrize("backend", backend_params(BACKENDS_AND_SCHEMES))  # (f is evaluated where the scheme says)
def test_f_must_return_a_real_scalar(backend, f, mentions):
    x = np.array([1.0, -2.0, 3.0, 0.5])
    calls = {
        "gradient": lambda: di.gradient(f, backend, x),
        "value_and_gradient": lambda: di.value_and_gradient(f, backend, x),
    }
    for label, call in calls.items():
        with pytest.raises(di.InvalidOutputError) as info:
            call()
        message = str(info.value)
        assert mentions in message, f"{label}: the message does not say {mentions!r}: {message}"
        assert "scalar" in message
        assert isinstance(info.value, di.DIError) and isinstance(info.value, TypeError)


def test_prepared_f_returning_a_vector_is_refused_on_execution():
    # Finite differences only call f when executing: the error comes then.
    backend = di.AutoFiniteDiff()
    prep = di.prepare_gradient(_vector, backend, np.zeros(5))
    with pytest.raises(di.InvalidOutputError, match=re.escape("(5,)")):
        di.gradient(_vector, prep, backend, np.ones(5))


def _dict_output(t):
    xp = di.array_namespace(t)
    return {"a": xp.multiply(t, t)}


@pytest.mark.parametrize(
    ("f", "mentions"),
    [
        pytest.param(_dict_output, "dict", id="dict"),
        pytest.param(_complex_array, "complex", id="complex"),
        pytest.param(_python_int, "int", id="python-int"),
    ],
)
@pytest.mark.parametrize("backend", backend_params(BACKENDS_AND_SCHEMES))  # (f is evaluated where the scheme says)
def test_a_derivative_refusing_f_s_output_names_derivative(backend, f, mentions):
    # autograd and finite differences build the derivative from their pushforward,
    # whose check named "pushforward": the caller asked for a derivative
    if f is _dict_output and engine_name(backend) == "jax":
        pytest.skip("JAX differentiates pytree outputs")
    t = np.array(1.5)
    calls = {
        "derivative": lambda: di.derivative(f, backend, t),
        "value_and_derivative": lambda: di.value_and_derivative(f, backend, t),
        "prepared": lambda: di.derivative(f, di.prepare_derivative(f, backend, t), backend, t),
    }
    for label, call in calls.items():
        with pytest.raises(di.InvalidOutputError) as info:
            call()
        message = str(info.value)
        assert message.startswith("derivative needs f to return a real floating-point array"), f"{label}: {message}"
        assert mentions in message and "pushforward" not in message, f"{label}: {message}"


# --- errors raised inside f ---------------------------------------------------------------------------


class _UserError(Exception):
    def __init__(self, message: str, code: int) -> None:
        super().__init__(message, code)
        self.code = code


def _raising(x, *values):
    raise _UserError("the model diverged", 42)


class _UserValueError(ValueError):
    pass


def _raising_value_error(x):
    raise _UserValueError("bad parameter")


@pytest.mark.parametrize("family_name", FAMILIES)
def test_errors_inside_f_come_through_unchanged(backend, family_name):
    x = as_family(np.array([1.0, 2.0]), family_name)
    calls = {
        "prepare + gradient": lambda: di.gradient(_raising, di.prepare_gradient(_raising, backend, x), backend, x),
        "gradient": lambda: di.gradient(_raising, backend, x),
        "value_and_gradient": lambda: di.value_and_gradient(_raising, backend, x),
    }
    for label, call in calls.items():
        with pytest.raises(_UserError) as info:
            call()
        assert type(info.value) is _UserError, f"{label}: {type(info.value)}"
        assert info.value.args == ("the model diverged", 42) and info.value.code == 42, label
        assert not isinstance(info.value, di.DIError)


def test_value_errors_inside_f_are_not_taken_for_di_errors(backend):
    with pytest.raises(_UserValueError, match="bad parameter") as info:
        di.gradient(_raising_value_error, backend, np.ones(2))
    assert type(info.value) is _UserValueError


def test_errors_inside_f_with_contexts_leave_the_inputs_alone(backend):
    x = np.array([1.0, 2.0])
    a = np.eye(2)
    with pytest.raises(_UserError):
        di.gradient(_raising, backend, x, di.Constant(a))
    np.testing.assert_array_equal(x, [1.0, 2.0])
    np.testing.assert_array_equal(a, np.eye(2))


# --- preps and operators --------------------------------------------------------------------------


def test_prep_from_prepare_gradient_serves_both_operators(backend):
    s = scenario("sin_squared_plus_float")
    x, _ = s.build()
    value, grad = s.expected(x, ())
    prep = di.prepare_gradient(s.f, backend, x)
    assert prep.operator == "gradient"
    assert prep.f is s.f and prep.backend == backend
    assert_close(di.gradient(s.f, prep, backend, x), grad, backend, x.dtype)
    y, g = di.value_and_gradient(s.f, prep, backend, x)
    assert_close(y, value, backend, x.dtype)
    assert_close(g, grad, backend, x.dtype)


@pytest.mark.parametrize("backend", backend_params(ENGINES))  # refused before a program runs
def test_prep_for_another_operator_is_refused(backend):
    x = np.zeros(3)
    jacobian_prep = di.prepare_jacobian(_vector, backend, x)
    hessian_prep = di.prepare_hessian(_sum_squares, backend, x)
    gradient_prep = di.prepare_gradient(_sum_squares, backend, x)
    for call, made_by, wanted in (
        (lambda: di.gradient(_sum_squares, jacobian_prep, backend, x), "prepare_jacobian", "prepare_gradient"),
        (lambda: di.value_and_gradient(_sum_squares, hessian_prep, backend, x), "prepare_hessian", "prepare_gradient"),
        (lambda: di.jacobian(_vector, gradient_prep, backend, x), "prepare_gradient", "prepare_jacobian"),
    ):
        with pytest.raises(di.InvalidInputError) as info:
            call()
        message = str(info.value)
        assert made_by in message and wanted in message, message
    # The gradient prep still works for both gradient operators afterwards.
    x1 = np.array([1.0, -2.0, 0.5])
    assert_close(di.gradient(_sum_squares, gradient_prep, backend, x1), 2.0 * x1, backend, x1.dtype)
    assert_close(di.value_and_gradient(_sum_squares, gradient_prep, backend, x1)[1], 2.0 * x1, backend, x1.dtype)


def test_prep_holds_no_caller_arrays(backend):
    import gc
    import weakref

    class Tracked(np.ndarray):
        pass

    x = np.zeros(3).view(Tracked)
    a = np.eye(3).view(Tracked)
    prep = di.prepare_gradient(_sum_squares, backend, x, di.Constant(a))
    refs = [weakref.ref(x), weakref.ref(a)]
    del x, a
    if any(r() is not None for r in refs):
        gc.collect()  # only if reference counting alone did not free them (slow with big heaps)
    assert all(r() is None for r in refs), "the prep keeps a caller's array alive"
    assert prep is not None


# --- the error hierarchy --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("error", "builtin"),
    [
        (di.PreparationMismatchError, ValueError),
        (di.InvalidInputError, TypeError),
        (di.InvalidOutputError, TypeError),
        (di.OutBufferError, ValueError),
        (di.UnsupportedContextError, TypeError),
        (di.BackendNotInstalledError, ImportError),
        (di.UnsupportedOperatorError, NotImplementedError),
        (di.InvalidOptionError, ValueError),
        (di.InvalidOptionTypeError, TypeError),
    ],
)
def test_errors_subclass_dierror_and_the_matching_builtin(error, builtin):
    assert issubclass(error, di.DIError)
    assert issubclass(error, builtin)
    assert issubclass(di.DIError, Exception)


def test_raised_errors_are_caught_by_their_builtin(backend):
    with pytest.raises(TypeError):
        di.gradient(_sum_squares, backend, np.arange(3))
    with pytest.raises(TypeError):
        di.gradient(_vector, backend, np.ones(3))
    prep = di.prepare_gradient(_sum_squares, backend, np.zeros(3))
    with pytest.raises(ValueError):
        di.gradient(_sum_squares, prep, backend, np.zeros(4))
    out = np.full(4, 7.0)
    with pytest.raises(ValueError):
        di.gradient(_sum_squares, prep, backend, np.zeros(3), out=out)
    np.testing.assert_array_equal(to_numpy(out), np.full(4, 7.0))


# --- options of selectors and sparsity sources -------------------------------------------------------

_BAD_OPTIONS = [
    pytest.param(lambda: di.AutoFiniteDiff(step=-1), ValueError, "step must be a positive float", id="fd-step"),
    pytest.param(lambda: di.AutoFiniteDiff(step="1e-3"), ValueError, "step must be a positive float", id="fd-step-str"),
    pytest.param(lambda: di.AutoFiniteDiff(method="backward"), ValueError, "'central' or 'forward'", id="fd-method"),
    pytest.param(lambda: di.AutoJAX(mode="fast"), ValueError, "AutoJAX(mode='fast')", id="jax-mode"),
    pytest.param(lambda: di.AutoTorch(mode="fast"), ValueError, "AutoTorch(mode='fast')", id="torch-mode"),
    pytest.param(
        lambda: di.AutoTorch(compile_options=3), TypeError, "compile_options must be a mapping", id="torch-opts"
    ),
    pytest.param(lambda: di.AutoSparse(coloring="star"), ValueError, "coloring must be one of", id="sparse-coloring"),
    pytest.param(lambda: di.AutoSparse(order="best"), ValueError, "order must be one of", id="sparse-order"),
    pytest.param(
        lambda: di.AutoSparse(chunk_size=0), ValueError, "chunk_size must be a positive int", id="sparse-chunk"
    ),
    pytest.param(lambda: di.AutoSparse(dense=3), TypeError, "AutoSparse(dense=...)", id="sparse-dense"),
    pytest.param(lambda: di.AutoSparse(sparsity="tracer"), TypeError, "AutoSparse(sparsity=...)", id="sparse-source"),
    pytest.param(lambda: di.AutoFastest([]), ValueError, "at least one candidate", id="fastest-empty"),
    pytest.param(lambda: di.AutoFastest(budget_s=0), ValueError, "budget_s must be a positive", id="fastest-budget"),
    pytest.param(lambda: di.AutoFastest(rtol=0), ValueError, "rtol must be positive", id="fastest-rtol"),
    pytest.param(lambda: di.AutoFastest([1]), TypeError, "must be backend selectors", id="fastest-candidate"),
    pytest.param(
        lambda: di.AutoFastest(di.AutoFiniteDiff()),
        TypeError,
        "takes a list of backend selectors, not one AutoFiniteDiff: pass AutoFastest([AutoFiniteDiff(",
        id="fastest-one-selector",
    ),
    pytest.param(lambda: di.AutoFastest("jax"), TypeError, "takes a list of backend selectors", id="fastest-str"),
    pytest.param(lambda: di.KnownSparsity(np.ones(3, dtype=bool)), ValueError, "2-D pattern", id="known-1d"),
    pytest.param(
        lambda: di.KnownSparsity(np.eye(2, dtype=bool), colors=[-1, 0]), ValueError, "colors", id="known-colors"
    ),
    pytest.param(lambda: di.DenseSparsity(points=0), ValueError, "points must be a positive int", id="dense-points"),
    pytest.param(lambda: di.DenseSparsity(atol="0"), ValueError, "atol must be >= 0", id="dense-atol"),
    pytest.param(lambda: di.TracerSparsity(method="jaxpr"), ValueError, "method must be one of", id="tracer-method"),
    pytest.param(lambda: di.backend("jaxx"), ValueError, "unknown backend 'jaxx'; known backends: 'jax'", id="name"),
    pytest.param(lambda: di.backend("jax", jitt=True), TypeError, "AutoJAX has no option 'jitt'", id="name-option"),
]


@pytest.mark.parametrize(("make", "builtin", "fragment"), _BAD_OPTIONS)
def test_a_bad_option_raises_invalid_option_error(make, builtin, fragment):
    # building a selector imports no engine: every one is checked, installed or not
    with pytest.raises(di.InvalidOptionError) as info:
        make()
    assert isinstance(info.value, di.DIError) and isinstance(info.value, builtin)
    assert isinstance(info.value, di.InvalidOptionTypeError) == (builtin is TypeError)
    assert fragment in str(info.value)
    assert info.value.__context__ is None, "the message says it all: no lookup error behind it"


def test_a_selector_may_not_take_a_name_another_selector_has():
    for taken in ("jax", "JAX", "pytorch", "finitediff"):
        with pytest.raises(di.InvalidOptionError, match=f"the backend name {taken.lower()!r} is taken by di"):

            @dataclasses.dataclass(frozen=True)
            class AutoL(di.AbstractBackend):
                name = taken

    assert type(di.backend("jax")) is di.AutoJAX and type(di.backend("pytorch")) is di.AutoTorch

    @dataclasses.dataclass(frozen=True)
    class AutoOwn(di.AbstractBackend):
        name = "di_test_own_name"

    with pytest.raises(di.InvalidOptionError, match="taken by test_errors"):

        @dataclasses.dataclass(frozen=True)
        class AutoOther(di.AbstractBackend):
            name = "di_test_own_name"

    assert di.backend("di_test_own_name") == AutoOwn()


def test_a_named_subclass_of_a_selector_takes_its_own_name_only():
    @dataclasses.dataclass(frozen=True)
    class AutoMyFD(di.AutoFiniteDiff):
        name = "di_test_my_fd"

    assert type(di.backend("di_test_my_fd")) is AutoMyFD
    assert type(di.backend("fd")) is di.AutoFiniteDiff and type(di.backend("finite_diff")) is di.AutoFiniteDiff


def _define_again() -> type[di.AbstractBackend]:
    @dataclasses.dataclass(frozen=True)
    class AutoReloaded(di.AbstractBackend):
        name = "di_test_reloaded"

    return AutoReloaded


def test_the_same_selector_defined_again_takes_its_name_back():
    # a module reloaded defines its classes again: same module, same qualified name
    first, second = _define_again(), _define_again()
    assert first is not second
    assert type(di.backend("di_test_reloaded")) is second


# --- a missing engine inside a strategy ------------------------------------------------------------------------

_MISSING_INSIDE = textwrap.dedent(
    """
    import json, sys
    for engine in ("torch", "jax", "autograd"):
        sys.modules[engine] = None  # as if not installed: import fails, find_spec is None
    import numpy as np
    import di

    fd = di.AutoFiniteDiff()
    selectors = [
        di.SecondOrder(fd, di.AutoTorch()),
        di.SecondOrder(di.AutoJAX(), fd),
        di.SecondOrder(fd, di.SecondOrder(fd, di.AutoAutograd())),
    ]
    report = []
    for selector in selectors:
        try:
            di.hessian(lambda x: (x * x).sum(), selector, np.ones(2))
        except Exception as err:
            report.append([type(err).__name__, str(err)])
    print(json.dumps(report))
    """
)


def test_a_second_order_whose_engine_is_missing_names_it_and_its_extra():
    result = subprocess.run(
        [sys.executable, "-c", _MISSING_INSIDE], capture_output=True, text=True, timeout=120, cwd=ROOT
    )
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report == [
        [
            "BackendNotInstalledError",
            f"SecondOrder needs {display}, which is not installed.\n  pip install 'differentiation-interface[{extra}]'",
        ]
        for display, extra in (("PyTorch", "torch"), ("JAX", "jax"), ("autograd", "autograd"))
    ]


# --- remedies that say what to write ----------------------------------------------------------------------------


def _square(x):
    xp = di.array_namespace(x)
    return xp.multiply(x, x)


@pytest.mark.parametrize("backend", backend_params(ENGINES))  # refused before a program runs
def test_a_tangent_not_in_a_tuple_is_told_to_wrap_it(backend):
    x, t = np.array([1.0, 2.0]), np.ones(2)
    calls = {
        "pushforward": lambda: di.pushforward(_square, backend, x, t),
        "pullback": lambda: di.pullback(_square, backend, x, t),
        "prepared": lambda: di.pushforward(_square, di.prepare_pushforward(_square, backend, x, (t,)), backend, x, t),
    }
    for label, call in calls.items():
        with pytest.raises(di.InvalidInputError) as info:
            call()
        message = str(info.value)
        # "(x,)" read as "pass x", and "(y,)" named nothing the caller has
        assert "a tuple of one, (v,)" in message and "(x,)" not in message and "(y,)" not in message, label


def test_a_float8_leaf_is_told_to_cast_itself():
    ml_dtypes = pytest.importorskip("ml_dtypes")
    backend, x = di.AutoFiniteDiff(), np.array([1.0, 2.0])
    float8 = np.ones(2).astype(ml_dtypes.float8_e4m3fn)
    with pytest.raises(di.InvalidInputError) as info:
        di.pushforward(_square, backend, x, (x, float8))
    assert "e.g. tx[1].astype(np.float32), or tx[1].to(float32)" in str(info.value)
    with pytest.raises(di.InvalidInputError) as info:
        di.gradient(lambda tree: tree["w"].sum(), backend, {"w": float8})
    assert "e.g. x['w'].astype(np.float32)" in str(info.value)


@pytest.mark.parametrize("backend", backend_params(ENGINES))  # refused before a program runs
def test_out_with_a_pytree_x_says_out_takes_array_results(backend):
    def f(tree):
        xp = di.array_namespace(tree["a"])
        return xp.sum(tree["a"] * tree["a"])

    x = {"a": np.array([1.0, 2.0])}
    out = np.full(2, 7.0)
    with pytest.raises(di.OutBufferError) as info:
        di.gradient(f, backend, x, out=out)
    message = str(info.value)
    assert "out= takes the result of an array x, not of a pytree x" in message and "immutable" not in message
    np.testing.assert_array_equal(out, np.full(2, 7.0))


def test_sparse_products_refusing_float_name_the_compiled_backend_the_user_chose():
    """AutoSparse(AutoJAX(jit=True)) with LocalTracerSparsity (which reads float() of
    a traced value as the point gives it) computes its products on AutoJAX(jit=False)
    inside AutoJAX(jit=True)'s compiled program: their refusal of float() named
    AutoJAX(jit=False, mode=None), a backend the user never chose."""
    pytest.importorskip("jax")
    pytest.importorskip("scipy")

    def scaled(x):
        return x * float(x[0])

    def scaled_sum(x):
        xp = di.array_namespace(x)
        return xp.sum(x * x) * float(x[0])

    backend = di.AutoSparse(di.AutoJAX(jit=True), sparsity=di.LocalTracerSparsity())
    for operator, f, product in ((di.jacobian, scaled, "pushforward"), (di.hessian, scaled_sum, "hvp")):
        with pytest.raises(di.InvalidOutputError) as info:
            operator(f, backend, np.array([1.0, 2.0, 3.0]))
        message = str(info.value)
        assert message.startswith(f"{product} cannot differentiate f with AutoJAX(jit=True, mode=None): "), message
        assert "jit=False" not in message and "float()" in message
