"""The differential fuzzer's short seeded budget: random array-API programs through
every installed engine agree with the high-accuracy reference; its machinery (the
reference, the shrinking, the reproduction) works on a planted disagreement."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest
from conftest import backend_params

import di
from di.cli import main
from di.testing import engine_backends
from di.testing.fuzz import Finding, Program, check, fuzz, inside_modes, reference, shrink

ENGINES = engine_backends(compiled=False)


def test_a_short_seeded_budget_finds_no_disagreement() -> None:
    report = fuzz(seconds=3.0, seed=0)
    assert report.programs >= 1 and report.calls >= 1
    assert not report.findings, "\n\n".join(finding.as_test() for finding in report.findings)


def test_the_reference_is_accurate() -> None:
    program = Program(("sin", "matmul"), "scalar", 4, 5)
    inputs = program.inputs()
    x, matrix, scale = inputs.x, inputs.matrix, inputs.scale
    v = matrix @ np.sin(x)
    expected = scale * np.cos(x) * (matrix.T @ (2 * v / 4))
    np.testing.assert_allclose(reference(program, "gradient"), expected, rtol=1e-10)
    hessian = reference(program, "hessian").reshape(4, 4)
    exact = scale * (
        np.diag(np.cos(x)) @ matrix.T @ matrix @ np.diag(np.cos(x)) * 2 / 4
        - np.diag(np.sin(x) * (matrix.T @ (2 * v / 4)))
    )
    np.testing.assert_allclose(hessian, exact, rtol=1e-7, atol=1e-9)


def test_a_pytree_x_is_laid_out_as_di_lays_out_its_results() -> None:
    program = Program(("sin", "matmul"), "vector", 4, 5, "pytree")
    check(program, "jacobian", di.AutoFiniteDiff(), "prepared")
    check(program, "pullback", di.AutoFiniteDiff())
    check(Program(("tanh",), "vector", 4, 5, "scalar"), "derivative", di.AutoFiniteDiff())


@pytest.mark.parametrize("backend", backend_params([b for b in ENGINES if inside_modes(b, "gradient")]))
def test_calls_inside_each_declared_transform_agree(backend: Any) -> None:
    program = Program(("sin", "matmul"), "scalar", 4, 1, "pytree")
    for mode in inside_modes(backend, "gradient"):
        check(program, "gradient", backend, mode)
    check(Program(("tanh", "matmul"), "vector", 4, 1), "jacobian", backend, inside_modes(backend, "jacobian")[0])


FLOAT32_CALLS = [
    (Program(("sin", "matmul"), "scalar", 4, 1, dtype="float32"), "gradient"),
    (Program(("sin",), "scalar", 4, 5, "pytree", dtype="float32"), "value_and_gradient"),
    (Program(("tanh", "interleave"), "vector", 4, 2, dtype="float32"), "value_and_jacobian"),
    (Program(("exp",), "scalar", 4, 3, dtype="float32"), "hvp"),
    (Program(("sin",), "vector", 2, 4, "scalar", dtype="float32"), "second_derivative"),
]


@pytest.mark.parametrize("backend", backend_params(ENGINES))
def test_float32_programs_agree_and_give_float32_results(backend: Any) -> None:
    """A float32 x (and float32 contexts and tangents) gets results in float32 that
    agree with the float64 reference within float32's tolerance, on every engine."""
    for program, operator in FLOAT32_CALLS:
        check(program, operator, backend, "prepared")


def test_a_result_in_another_dtype_is_a_silent_wrong_finding(monkeypatch: Any) -> None:
    import di.testing.fuzz.search as search
    from di.testing.fuzz.calls import DtypeMismatch

    original = di.gradient
    monkeypatch.setattr(di, "gradient", lambda *args: np.asarray(original(*args), dtype=np.float64))
    program = Program(("sin",), "scalar", 4, 1, dtype="float32")
    kind, detail = search.disagreement(program, "gradient", di.AutoFiniteDiff(), "unprepared") or ("", "")
    assert kind == "silent wrong" and "a result in float64, x in float32" in detail
    with pytest.raises(DtypeMismatch):
        check(program, "gradient", di.AutoFiniteDiff())


@dataclass(frozen=True)
class Wrong(di.AutoFiniteDiff):
    """A planted defect: finite differences whose gradient is off by 1% once the
    program has a matrix product."""


def test_a_planted_disagreement_is_shrunk_and_printed_as_a_test(monkeypatch: Any) -> None:
    import di.testing.fuzz.search as search

    original = search.call

    def planted(operator: str, program: Program, backend: Any, mode: str) -> Any:
        result = original(operator, program, di.AutoFiniteDiff(), mode)
        return result * 1.01 if "matmul" in program.steps and isinstance(backend, Wrong) else result

    monkeypatch.setattr(search, "call", planted)
    program = Program(("sin", "tanh", "matmul", "flip"), "scalar", 4, 2, "pytree")
    small, mode = shrink(program, "gradient", Wrong(), "prepared", "silent wrong")
    assert (small.steps, small.size, small.form, mode) == (("matmul",), 2, "array", "unprepared")
    finding = Finding("silent wrong", di.AutoFiniteDiff(), "gradient", mode, small, "planted")
    namespace: dict[str, Any] = {}
    exec(finding.as_test(), namespace)  # the printed test runs (here it passes: the real engine agrees)
    (test,) = [value for name, value in namespace.items() if name.startswith("test_fuzz_")]
    test()


def test_the_command_line_runs_the_fuzzer(capsys: Any) -> None:
    assert main(["fuzz", "--minutes", "0.01", "--seed", "1", "--backends", "finitediff"]) in (0, 1)
    assert "programs" in capsys.readouterr().out


def test_a_misspelt_function_gets_the_near_match_among_those_the_file_defines(tmp_path: Any, capsys: Any) -> None:
    path = tmp_path / "problem.py"
    path.write_text("import numpy as np\nfrom math import sqrt\n\ndef rosen(x):\n    return np.sum(x ** 2)\n")
    assert main(["check", f"{path}:rosne", "--no-bench"]) == 2
    error = capsys.readouterr().err
    assert "did you mean 'rosen'?" in error
    assert "sqrt" not in error


def test_di_check_prints_each_backends_error_in_full(tmp_path: Any, capsys: Any) -> None:
    pytest.importorskip("jax")
    path = tmp_path / "numpy_only.py"
    path.write_text("import numpy as np\n\ndef bad(x):\n    return np.sum(np.sin(x) ** 2)\n")
    main(["check", f"{path}:bad", "--no-bench", "--backends", "jax,finitediff"])
    out = " ".join(capsys.readouterr().out.split())
    assert "errors in full:" in out
    assert "di.DifferentiateWith(f, di.AutoFiniteDiff()) is f with finite-difference derivatives" in out
