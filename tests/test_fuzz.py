"""The differential fuzzer's short seeded budget: random array-API programs through
every installed engine agree with the high-accuracy reference; its machinery (the
reference, the shrinking, the reproduction) works on a planted disagreement."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest

import di
from di.cli import main
from di.testing.fuzz import Program, _shrink, fuzz, reference


def test_a_short_seeded_budget_finds_no_disagreement() -> None:
    report = fuzz(seconds=3.0, seed=0)
    assert report.programs >= 1 and report.calls >= 1
    assert not report.findings, "\n\n".join(finding.as_test() for finding in report.findings)


def test_the_reference_is_accurate() -> None:
    program = Program(("sin", "matmul"), "scalar", 4, 5)
    x, matrix = program.inputs()
    v = matrix @ np.sin(x)
    expected = np.cos(x) * (matrix.T @ (2 * v / 4))
    np.testing.assert_allclose(reference(program, "gradient", x, matrix), expected, rtol=1e-10)


@dataclass(frozen=True)
class Wrong(di.AutoFiniteDiff):
    """A planted defect: finite differences whose gradient is off by 1% once the
    program has a matrix product."""


def test_a_planted_disagreement_is_shrunk_and_printed_as_a_test(monkeypatch: Any) -> None:
    import di.testing.fuzz as fuzzing

    original = fuzzing._call

    def planted(operator: str, program: Program, backend: Any, x: Any, matrix: Any, prepared: bool) -> Any:
        result = original(operator, program, di.AutoFiniteDiff(), x, matrix, prepared)
        return result * 1.01 if "matmul" in program.steps and isinstance(backend, Wrong) else result

    monkeypatch.setattr(fuzzing, "_call", planted)
    program = Program(("sin", "tanh", "matmul", "flip"), "scalar", 4, 2)
    small = _shrink(program, "gradient", Wrong(), False, "silent wrong")
    assert small.steps == ("matmul",)


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
