"""``python -m di`` end to end, in a subprocess: output, exit status, JSON and PNG files."""

from __future__ import annotations

import json
import struct
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import di
from di.__main__ import PLOT_DPI, PLOT_SIZE_INCHES, main

ROOT = Path(__file__).resolve().parents[1]

SCENARIO_MODULE = """
import numpy as np
from di.testing import Scenario


def squares(x):
    return (x * x).sum()


def scenarios():
    x = np.array([1.0, 2.0, 3.0])
    return [
        Scenario("gradient", squares, x, res1=2 * x, name="gradient/right"),
        Scenario("gradient", squares, x, res1=3 * x, name="gradient/deliberately_wrong"),
    ]
"""

FUNCTION_MODULE = """
import array_api_compat


def smooth(x):
    xp = array_api_compat.array_namespace(x)
    return xp.sum(xp.sin(x) * x)


def branchy(x):
    # Python control flow on a value: fine eagerly, impossible under jax.jit.
    xp = array_api_compat.array_namespace(x)
    if x[0] > 0:
        return xp.sum(x * x)
    return xp.sum(x)
"""


def run_di(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "di", *args], cwd=cwd, capture_output=True, text=True, timeout=300, check=False
    )


@pytest.fixture
def modules(tmp_path: Path) -> Path:
    (tmp_path / "my_scenarios.py").write_text(textwrap.dedent(SCENARIO_MODULE))
    (tmp_path / "my_functions.py").write_text(textwrap.dedent(FUNCTION_MODULE))
    return tmp_path


def test_default_run_prints_the_tables_and_exits_0(tmp_path: Path) -> None:
    rows_path = tmp_path / "rows.json"
    done = run_di(
        "--backends", "finitediff,autograd", "--operators", "gradient,hessian", "-k", "/f64", "--json", str(rows_path)
    )
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    for text in (
        "Every backend on every scenario",
        "Correctness per backend and operator",
        "Fastest backend per scenario",
        "gradient/sum_sin/f64",
        "hessian/rosenbrock/f64",
        "finitediff",
        "autograd",
        "every backend agrees with the references",
    ):
        assert text in out, text
    assert "UnsupportedContextError" in out  # autograd's Cache scenarios: skipped, with the reason
    rows = json.loads(rows_path.read_text())
    assert {row["backend"] for row in rows} == {"finitediff", "autograd"}
    statuses = {(row["backend"], row["scenario"]): row["status"] for row in rows}
    assert statuses[("finitediff", "gradient/sum_sin/f64")] == "ok"
    assert statuses[("autograd", "gradient/cached_sum/f64")] == "skip"
    timed = [row for row in rows if row["status"] == "ok"]
    assert timed and all(row["time_median"] > 0 for row in timed)


def test_a_wrong_reference_makes_the_run_exit_1(modules: Path) -> None:
    done = run_di("--scenarios", str(modules / "my_scenarios.py:scenarios"), "--backends", "finitediff", "--no-bench")
    assert done.returncode == 1, done.stdout + done.stderr
    assert "FAIL" in done.stdout
    assert "finitediff | gradient/deliberately_wrong | prepared" in done.stdout
    assert "gradient/right" in done.stdout
    assert "SOME BACKENDS DISAGREE" in done.stdout


def test_check_shows_the_failing_backend_and_runs_the_others(modules: Path) -> None:
    pytest.importorskip("jax")
    pytest.importorskip("torch")
    done = run_di(
        "check", "my_functions:branchy", "--x-shape", "5", "--backends", "jax,jax-jit,torch,finitediff", cwd=modules
    )
    assert done.returncode == 1, done.stdout + done.stderr
    lines = {line.split()[1]: line for line in done.stdout.splitlines() if line.startswith("│ ")}
    assert "ERROR" in lines["jax-jit"] and "Tracer" in lines["jax-jit"], done.stdout
    for backend in ("jax", "torch", "finitediff"):
        assert " ok " in lines[backend], lines[backend]
    assert "1 of 4 backends failed or disagree" in done.stdout


def test_check_friendly_errors_for_imports(modules: Path) -> None:
    done = run_di("check", "no_such_module_xyz:f", cwd=modules)
    assert done.returncode == 2
    assert "cannot import module 'no_such_module_xyz'" in done.stderr
    assert "Traceback" not in done.stderr
    done = run_di("check", "my_functions:nope", cwd=modules)
    assert done.returncode == 2
    assert "has no function 'nope'" in done.stderr and "smooth" in done.stderr


def test_check_writes_json_and_a_png_of_the_size_sweep(modules: Path) -> None:
    pytest.importorskip("matplotlib")
    png, rows_path = modules / "sweep.png", modules / "rows.json"
    done = run_di(
        "check",
        "my_functions:smooth",
        "--x-shape",
        "20",
        "--backends",
        "finitediff,autograd",
        "--plot",
        str(png),
        "--sizes",
        "10,100,1000",
        "--json",
        str(rows_path),
        cwd=modules,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Every backend that ran agrees with the reference" in done.stdout
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", data[16:24])  # the IHDR chunk
    assert (width, height) == (int(PLOT_SIZE_INCHES[0] * PLOT_DPI), int(PLOT_SIZE_INCHES[1] * PLOT_DPI))
    rows = json.loads(rows_path.read_text())
    checks = [row for row in rows if row["kind"] == "check"]
    sweep = [row for row in rows if row["kind"] == "sweep"]
    assert {row["backend"] for row in checks} == {"finitediff", "autograd"}
    assert all(row["status"] == "ok" and row["max_rel_error"] < 1e-6 for row in checks)
    assert {(row["backend"], row["size"]) for row in sweep} == {
        (b, n) for b in ("finitediff", "autograd") for n in (10, 100, 1000)
    }


def test_usage_errors_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--backends", "tensorflow"]) == 2
    assert "--backends" in capsys.readouterr().err
    assert main(["--backends", "finitediff", "--operators", "nothing"]) == 2
    assert main(["check", "math:sqrt", "--operator", "curl"]) == 2
    assert main(["--backends", "finitediff", "--prep-modes", "sometimes"]) == 2
    assert "--prep-modes" in capsys.readouterr().err


def test_default_backends_are_the_installed_ones_plus_compiled_jax() -> None:
    from di.__main__ import _parse_backends

    backends = _parse_backends(None)
    assert set(di.available_backends()) <= set(backends)
    assert (di.AutoJAX(jit=True) in backends) == (di.AutoJAX() in backends)
