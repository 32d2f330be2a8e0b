"""Defects the differential fuzzer found (``python -m di fuzz``), each kept fixed on every
engine: the shrunk program that showed it agrees with the high-accuracy reference."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from conftest import backend_params

import di
from di.testing import engine_backends
from di.testing.fuzz import Program, check

ENGINES = engine_backends(compiled=False)

FOUND = {
    # MLX's namespace had no linalg.vector_norm (MLX has norm only): AttributeError
    "vector_norm": Program(("vector_norm",), "scalar", 2, 10100303),
    # on PyTensor xp.arange(n) % 2 == 0 was the Python False (a variable's == compares
    # identities), and xp.where refused it with PyTensor's TypeError
    "where_mask": Program(("where",), "scalar", 4, 10100308),
}

CURVES = {
    # PyTensor: v.shape[0] of an intermediate is a variable, so xp.arange(v.shape[0]) % 2 == 0
    # was the Python False there too (the namespace folds a shape PyTensor knows statically)
    "where_mask_of_a_curve": (Program(("where",), "scalar", 2, 300012, "scalar"), "second_derivative"),
    # MLX: the second derivative through max (its derivative gathers at indices computed from
    # x, which MLX differentiates in neither forward mode nor the transposed pullback) raised
    # MLX's ValueError; reverse over reverse, one entry of the output at a time, computes it
    "max_of_a_curve": (Program(("max",), "vector", 2, 400014, "scalar"), "second_derivative"),
}


@pytest.mark.parametrize("name", sorted(FOUND))
@pytest.mark.parametrize("backend", backend_params(ENGINES))
def test_a_program_the_fuzzer_found_agrees_with_the_reference(backend: Any, name: str) -> None:
    program = FOUND[name]
    check(program, "gradient", backend)


@pytest.mark.parametrize("name", sorted(CURVES))
@pytest.mark.parametrize("backend", backend_params(ENGINES))
def test_a_scalar_program_the_fuzzer_found_agrees_with_the_reference(backend: Any, name: str) -> None:
    program, operator = CURVES[name]
    check(program, operator, backend)


def norms(x: Any) -> Any:
    xp = di.array_namespace(x)
    rows = xp.linalg.vector_norm(x, axis=1, keepdims=True)
    return (
        xp.linalg.vector_norm(x)
        + xp.sum(rows * rows)
        + xp.linalg.vector_norm(x, ord=1)
        + xp.linalg.matrix_norm(x) * 0.5
        + xp.sum(xp.linalg.vector_norm(x, axis=0))
    )


@pytest.mark.parametrize("backend", backend_params(ENGINES))
def test_the_array_api_norms_on_every_engine(backend: Any) -> None:
    x = np.array([[0.3, -0.5, 0.9], [1.0, 0.2, -0.4]])
    flat = np.linalg.norm(x)
    expected = x / flat + 2 * x + np.sign(x) + 0.5 * x / flat + x / np.linalg.norm(x, axis=0)
    rtol, atol = di.testing.default_tolerances(backend, np.float64)
    np.testing.assert_allclose(np.asarray(di.gradient(norms, backend, x)), expected, rtol=max(rtol, 1e-6), atol=atol)


def test_a_compiled_torch_program_compiled_on_first_use_after_another_size() -> None:
    """AutoTorch(compile=True) under AutoSparse: the size-3 hessian of a program that
    slices at x.shape[0] // 2, then the size-2 one. The second prep's gradient_and_hvp
    program compiles on its first call; traced with dynamo's automatic dynamic shapes
    (the same code had been compiled for size 3), it got symbolic sizes, which the
    slicing and forward mode's make_dual could not take: dynamo's TorchRuntimeError.
    Its first trace is now specialized to the prep, as the first program's is."""
    pytest.importorskip("torch")
    backend = di.AutoTorch(compile=True, compile_options={"backend": "eager"})
    for size in (3, 2):
        check(Program(("half_sum",), "scalar", size, 161604859), "hessian", backend, "sparse")


@pytest.mark.parametrize("backend", [di.AutoTorch(), di.AutoTorch(compile=True, compile_options={"backend": "eager"})])
def test_a_zero_second_derivative_under_vmap_converts_to_numpy(backend: Any) -> None:
    """The second derivative of a linear f of a scalar, inside torch.func.vmap, is a
    ZeroTensor (torch's forward mode gives one, natively too); its conversion to a
    NumPy array raised torch's 'Cannot convert a ZeroTensor to numpy'. It is zeros."""
    pytest.importorskip("torch")
    program = Program((), "vector", 2, 181805580, "scalar")
    check(program, "second_derivative", backend, "torch.func.vmap")


@pytest.mark.parametrize("mode", ["unprepared", "torch.func.vmap"])
def test_a_compiled_second_derivative_dynamo_fails_in_reverse_over_forward(mode: str) -> None:
    """AutoTorch(compile=True)'s second derivative of a vector f of a scalar whose
    rows are normalized: dynamo failed tracing reverse over forward (its fake tensors
    give a view's gradient on the meta device; natively too, for jacrev(jacfwd(f))),
    and the prep raised dynamo's raw TorchRuntimeError. The prep now takes reverse
    over reverse, which dynamo traces, and says so in prep.info."""
    pytest.importorskip("torch")
    backend = di.AutoTorch(compile=True, compile_options={"backend": "eager"})
    program = Program(("row_norms",), "vector", 2, 181805580, "scalar")
    check(program, "second_derivative", backend, mode)


def test_the_reverse_over_reverse_second_derivative_is_said_and_agrees_analytically() -> None:
    torch = pytest.importorskip("torch")
    backend = di.AutoTorch(compile=True, compile_options={"backend": "eager"})

    def f(t: Any, m: Any) -> Any:
        xp = di.array_namespace(t)
        rows = xp.reshape((m[0] * 0.5 + 1.0) * t, (2, 1))
        # (dynamo fails on the row norms scaled after the reshape, not on them alone)
        return 1.5 * xp.reshape(rows / (xp.linalg.vector_norm(rows, axis=1, keepdims=True) + 1.0), (2,))

    m = torch.tensor([[0.3, -0.7], [0.2, 0.1]], dtype=torch.float64)
    t = torch.tensor(0.4, dtype=torch.float64)
    prep = di.prepare_second_derivative(f, backend, t, di.Constant(m))
    assert "reverse over reverse" in prep.info.program
    # each entry is 1.5 c t / (|c t| + 1) with c = m[0] / 2 + 1 > 0: at t > 0, -3 c^2 / (c t + 1)^3
    c = m[0] * 0.5 + 1.0
    for at in (t, torch.tensor(1.5, dtype=torch.float64)):
        got = di.second_derivative(f, prep, backend, at, di.Constant(m))
        torch.testing.assert_close(got, -3 * c**2 / (c * at + 1.0) ** 3)


@pytest.mark.parametrize("compile", [True, False])
def test_a_second_derivative_through_concat_under_xla(compile: bool) -> None:
    """AutoTensorFlow(compile=True)'s second derivative of a scalar program that
    interleaves (a tf.concat of strided slices) raised TensorFlow's raw LookupError
    (no gradient for XlaDynamicUpdateSlice): under jit_compile the gradient of
    concat's slices is that XLA op, which nested forward accumulators differentiate
    (natively too). Reverse over reverse, which compiles, answers there."""
    pytest.importorskip("tensorflow")
    program = Program(("interleave",), "scalar", 2, 202006064, "scalar")
    check(program, "second_derivative", di.AutoTensorFlow(compile=compile), "unprepared")


def test_a_float32_hvp_through_take_inside_vmap() -> None:
    """AutoTorch's hvp inside torch.func.vmap of a float32 program with take, then
    sum(v) * 0.1: torch's forward over reverse gets a float64 tangent there and
    index_add_ refused it (RuntimeError, natively too). The torch.func hvp is
    reverse over reverse now, which has no forward mode."""
    pytest.importorskip("torch")
    program = Program(("take", "scaled_sum"), "scalar", 2, 212106472, dtype="float32")
    check(program, "hvp", di.AutoTorch(), "torch.func.vmap")
    check(program, "hvp", di.AutoTorch(compile=True, compile_options={"backend": "eager"}), "prepared")
