"""``python -m di plan MODULE:FUNCTION``: the plan table of di.AutoFastest for a user's function."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import di
from di.cli import main
from di.cli.common import EXIT_DISAGREE, EXIT_OK, EXIT_USAGE

ROOT = Path(__file__).resolve().parents[1]
FD_CANDIDATES = "finitediff,finitediff-forward"
FAST = ("--backends", FD_CANDIDATES, "--budget", "0.02")

FUNCTIONS = """
def squares(x):
    return (x * x).sum()


def cubes(x):
    return x * x * x


def broken(x):
    raise ArithmeticError("broken on purpose")
"""


@pytest.fixture
def module(tmp_path: Path) -> Path:
    path = tmp_path / "plan_functions.py"
    path.write_text(textwrap.dedent(FUNCTIONS))
    return path


def test_plan_prints_the_table_and_writes_json(
    module: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rows = tmp_path / "plan.json"
    status = main(
        [
            "plan",
            f"{module}:squares",
            "--x-shape",
            "4",
            "--backends",
            FD_CANDIDATES,
            "--budget",
            "0.02",
            "--json",
            str(rows),
        ]
    )
    out = capsys.readouterr().out
    assert status == EXIT_OK, out
    assert "AutoFastest plan: gradient, x numpy float64 (4,) (measured)" in out
    assert "AutoFiniteDiff(method='forward')" in out and "chosen" in out and "slower" in out
    assert "Fastest: AutoFiniteDiff(" in out
    data = json.loads(rows.read_text())
    assert data["operator"] == "gradient"
    assert sorted(row["status"] for row in data["rows"]) == ["chosen", "slower"]
    assert all(row["median_s"] > 0 for row in data["rows"])


@pytest.mark.parametrize(
    ("operator", "signature"), [("hvp", "tx (numpy float32 (3,))"), ("pullback", "ty (numpy float32 (3,))")]
)
def test_plan_of_operators_with_tangents(
    module: Path, operator: str, signature: str, capsys: pytest.CaptureFixture[str]
) -> None:
    function = "squares" if operator == "hvp" else "cubes"
    status = main(
        ["plan", f"{module}:{function}", "--operator", operator, "--x-shape", "3", "--dtype", "float32", *FAST]
    )
    out = capsys.readouterr().out
    assert status == EXIT_OK, out
    assert f"AutoFastest plan: {operator}, x numpy float32 (3,), {signature}" in out


def test_plan_with_a_cache_file_reuses_the_plan(
    module: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cache = tmp_path / "plans.json"
    arguments = ["plan", f"{module}:squares", "--x-shape", "2", "--backends", FD_CANDIDATES, "--budget", "0.02"]
    assert main([*arguments, "--cache", str(cache)]) == EXIT_OK
    assert "(measured)" in capsys.readouterr().out
    assert main([*arguments, "--cache", str(cache)]) == EXIT_OK
    assert f"(cache {cache})" in capsys.readouterr().out


def test_plan_for_torch_inputs(module: Path, capsys: pytest.CaptureFixture[str]) -> None:
    if not di.AutoTorch().is_installed:
        pytest.skip("needs PyTorch")
    status = main(
        ["plan", f"{module}:squares", "--x-shape", "3", "--family", "torch", "--backends", "torch,finitediff"]
    )
    out = capsys.readouterr().out
    assert status == EXIT_OK, out
    assert "x torch float64 (3,)" in out


def test_plan_exits_1_when_every_candidate_fails(module: Path, capsys: pytest.CaptureFixture[str]) -> None:
    status = main(["plan", f"{module}:broken", "--x-shape", "2", "--backends", FD_CANDIDATES, "--budget", "0.02"])
    out = capsys.readouterr().out
    assert status == EXIT_DISAGREE
    assert "Every candidate failed; the first: ArithmeticError: broken on purpose" in out
    assert "preparing: ArithmeticError: broken on purpose" in out or "first call: ArithmeticError" in out


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["--operator", "laplacian"], "--operator must be one of"),
        (["--budget", "0"], "budget_s must be a positive number"),
        (["--backends", "nosuchengine"], "--backends"),
    ],
)
def test_plan_usage_errors_exit_2(
    module: Path, arguments: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["plan", f"{module}:squares", *arguments]) == EXIT_USAGE
    assert message in capsys.readouterr().err


def test_python_m_di_plan_runs_end_to_end(module: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "di", "plan", f"{module}:squares", "--x-shape", "5", *FAST],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "AutoFastest plan: gradient, x numpy float64 (5,) (measured)" in done.stdout
