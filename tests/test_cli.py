"""``python -m di`` end to end, in a subprocess: output, exit status, JSON and PNG files."""

from __future__ import annotations

import json
import re
import struct
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import di
from di.cli import main
from di.cli.sweep import PLOT_DPI, PLOT_SIZE_INCHES

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


def not_scenarios():
    return [1, 2]
"""

FUNCTION_MODULE = """
import di


def smooth(x):
    xp = di.array_namespace(x)
    return xp.sum(xp.sin(x) * x)


def weighted(x, a, c):
    xp = di.array_namespace(x)
    return c * xp.sum(a * x * x)


def banded(x, scale):
    xp = di.array_namespace(x)
    return scale * xp.concat([x[1:] * x[:-1], x[:1] ** 2])


def chained(x):
    xp = di.array_namespace(x)
    return xp.sum(xp.exp(x[1:] * x[:-1] * 0.3)) + xp.sum(xp.sin(x) * 5.0)


def branchy(x):
    # Python control flow on a value: fine eagerly, impossible under jax.jit.
    xp = di.array_namespace(x)
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
    assert "ERROR" in lines["jax-jit"] and "InvalidOutputError" in lines["jax-jit"], done.stdout
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
    assert main(["--backends", "theano"]) == 2
    assert "--backends" in capsys.readouterr().err
    assert main(["--backends", "finitediff", "--operators", "nothing"]) == 2
    assert main(["check", "math:sqrt", "--operator", "curl"]) == 2
    assert main(["--backends", "finitediff", "--prep-modes", "sometimes"]) == 2
    assert "--prep-modes" in capsys.readouterr().err


def test_bad_option_values_are_usage_errors_before_any_work(
    modules: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    smooth = f"{modules / 'my_functions.py'}:smooth"
    small = ["--backends", "finitediff", "-k", "sum_sin/f64", "--no-bench", "--quiet"]
    missing = tmp_path / "missing" / "rows.json"
    cases = [
        (["check", smooth, "--x-shape", "-3", "--no-bench"], "--x-shape must be sizes >= 0, not '-3'"),
        (["check", smooth, "--seed", "-1", "--no-bench"], "--seed must be an integer >= 0, not -1"),
        (
            ["check", smooth, "--json", str(missing), "--no-bench"],
            f"--json {missing}: the folder {str(missing.parent)!r} does not exist",
        ),
        (
            ["--scenarios", f"{modules / 'my_scenarios.py'}:not_scenarios", "--no-bench"],
            f"--scenarios {modules / 'my_scenarios.py'}:not_scenarios must give a list of di.testing.Scenario, "
            "not one holding int 1",
        ),
        (["--rtol", "-1", *small], "--rtol must be a finite number >= 0, not -1.0"),
        (["--atol", "nan", *small], "--atol must be a finite number >= 0, not nan"),
        (["plan", smooth, "--atol", "inf", "--backends", "finitediff"], "--atol must be a finite number >= 0, not inf"),
        (
            ["check", smooth, "--sizes", "0", "--plot", str(tmp_path / "sweep.png"), "--backends", "finitediff"],
            "--sizes must be positive integers",
        ),
        (["--sizes", "10,-1", "--plot", str(tmp_path / "sweep.png"), *small], "--sizes must be positive integers"),
        (["--sizes", "ten", *small], "--sizes must be comma-separated integers, not 'ten'"),
    ]
    for argv, message in cases:
        assert main(argv) == 2, argv
        captured = capsys.readouterr()
        assert (captured.err, captured.out) == (f"di: error: {message}\n", ""), argv
    assert not missing.parent.exists()


def test_default_backends_are_the_installed_ones_plus_compiled_jax() -> None:
    from di.cli.common import parse_backends

    backends = parse_backends(None)
    assert set(di.available_backends()) <= set(backends)
    assert (di.AutoJAX(jit=True) in backends) == (di.AutoJAX() in backends)


# --- what a new user tripped on -------------------------------------------------------------------


def test_check_passes_contexts_after_x_in_order(modules: Path, tmp_path: Path) -> None:
    rows_path = tmp_path / "rows.json"
    status = main(
        [
            "check",
            f"{modules / 'my_functions.py'}:weighted",
            "--x-shape",
            "4",
            "--constant",
            "np.arange(1.0, 5.0)",
            "--constant",
            "2.5",
            "--backends",
            "finitediff,finitediff-forward",
            "--no-bench",
            "--json",
            str(rows_path),
        ]
    )
    assert status == 0
    rows = json.loads(rows_path.read_text())
    assert [row["status"] for row in rows] == ["ok", "ok"]
    assert all(row["max_rel_error"] < 1e-5 for row in rows)  # against 2 c a x, c = 2.5, a = 1..4
    assert all(row["time_median"] is None for row in rows)  # --no-bench: nothing timed


def test_check_contexts_given_as_shapes_are_random_arrays(modules: Path, capsys: pytest.CaptureFixture[str]) -> None:
    arguments = ["check", f"{modules / 'my_functions.py'}:weighted", "--x-shape", "3", "--no-bench"]
    arguments += ["--constant", "shape=3", "--constant", "1.0", "--backends", "finitediff", "--dtype", "float32"]
    assert main(arguments) == 0
    assert "2 contexts" in capsys.readouterr().out


def test_check_says_how_to_pass_missing_contexts(modules: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", f"{modules / 'my_functions.py'}:weighted", "--backends", "finitediff"]) == 2
    err = capsys.readouterr().err
    assert "takes 2 arguments after x (a, c) but 0 were given" in err
    assert "--constant VALUE" in err and "shape=3,4" in err
    assert main(["check", f"{modules / 'my_functions.py'}:smooth", "--constant", "1.0"]) == 2
    assert "takes 0 argument(s) after x but 1 contexts were given" in capsys.readouterr().err
    bad = ["--constant", "np.nope(3)", "--constant", "1.0"]
    assert main(["check", f"{modules / 'my_functions.py'}:weighted", *bad]) == 2
    assert "--constant np.nope(3): cannot evaluate it (AttributeError" in capsys.readouterr().err


def test_check_sparse_puts_the_pattern_in_the_notes_not_the_error(modules: Path, tmp_path: Path) -> None:
    pytest.importorskip("jax")  # the pattern is traced with JAX
    rows_path = tmp_path / "rows.json"
    arguments = ["check", f"{modules / 'my_functions.py'}:banded", "--operator", "jacobian", "--x-shape", "6"]
    arguments += ["--constant", "3.0", "--sparse", "--backends", "finitediff", "--no-bench", "--json", str(rows_path)]
    assert main(arguments) == 0
    (row,) = json.loads(rows_path.read_text())
    assert row["status"] == "ok" and row["message"] == ""
    assert row["note"].startswith("pattern: 11 nonzeros, ")  # two per row of x[i] x[i+1], one of x[0]^2


def test_check_sparse_hessian_reads_finite_difference_noise_as_zeros(modules: Path, tmp_path: Path) -> None:
    pytest.importorskip("jax")  # the pattern is traced with JAX
    rows_path = tmp_path / "rows.json"
    arguments = ["check", f"{modules / 'my_functions.py'}:chained", "--operator", "hessian", "--x-shape", "40"]
    arguments += ["--sparse", "--backends", "finitediff", "--no-bench", "--json", str(rows_path)]
    assert main(arguments) == 0
    (row,) = json.loads(rows_path.read_text())
    assert row["status"] == "ok", row
    assert row["note"].startswith("pattern: 118 nonzeros, ")  # tridiagonal: 40 + 2 * 39


def test_check_accepts_no_bench_and_a_bad_option_shows_the_check_usage(
    modules: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["check", f"{modules / 'my_functions.py'}:smooth", "--backends", "finitediff", "--no-bench"]) == 0
    assert "Every backend that ran agrees with the reference." in capsys.readouterr().out
    with pytest.raises(SystemExit):
        main(["check", f"{modules / 'my_functions.py'}:smooth", "--no-such-option"])
    err = capsys.readouterr().err
    assert err.startswith("usage: di check") and "--no-such-option" in err


def test_the_unknown_backend_message_lists_every_label(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--backends", "theano"]) == 2
    err = capsys.readouterr().err
    known = err.split("known backends: ")[1].split(";")[0]
    for label in ("jax", "jax-jit", "torch", "torch-compile", "autograd", "finitediff", "finitediff-forward"):
        assert label in known.replace(",", " ").split(), label


def test_help_shows_the_default_shape(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["check", "--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    assert "--x-shape SHAPE shape of x, e.g. 100 or 3,4 ('' for a scalar; default: 100)" in help_text
    assert "--constant VALUE" in help_text and "--cache-buffer VALUE" in help_text


def test_the_correctness_summary_says_skips(capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("autograd")  # autograd refuses Cache contexts: those scenarios are skipped
    status = main(["--backends", "autograd", "--operators", "gradient", "-k", "/f64", "--no-bench", "--quiet"])
    assert status == 0
    out = capsys.readouterr().out
    (row,) = [line for line in out.splitlines() if line.startswith("│ autograd")]
    cell = row.split("│")[2].strip()
    counts = re.fullmatch(r"(\d+) ok, (\d+) skipped", cell)
    assert counts is not None, row
    assert int(counts[1]) >= 1 and int(counts[2]) >= 1


OUT_OF_TREE_SCENARIOS = """
import dataclasses

import numpy as np

import di
from di.testing import Scenario


@dataclasses.dataclass(frozen=True)
class AutoOutOfTreeFD(di.AutoFiniteDiff):
    name = "di_test_out_of_tree_fd"


def squares(x):
    xp = di.array_namespace(x)
    return xp.sum(x * x)


def scenarios():
    x = np.array([1.0, 2.0, 3.0])
    return [Scenario("gradient", squares, x, res1=2 * x, name="gradient/squares")]
"""


def test_backends_may_name_a_selector_the_scenarios_module_defines(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # docs/testing.md: a label may be a backend registered out of tree; the --scenarios
    # module is where such a backend is defined, so it is imported before --backends is read
    (tmp_path / "out_of_tree_scenarios.py").write_text(textwrap.dedent(OUT_OF_TREE_SCENARIOS))
    argv = ["--backends", "di_test_out_of_tree_fd", "--scenarios", f"{tmp_path / 'out_of_tree_scenarios.py'}:scenarios"]
    assert main([*argv, "--no-bench", "--quiet"]) == 0
    captured = capsys.readouterr()
    assert "1 scenarios x 1 backends (di_test_out_of_tree_fd)" in captured.out, captured.err
    assert re.search(r"(\d+) cases: \1 passed, 0 failed", captured.out), captured.out
