"""Smoke test of the benchmark suite (``python -m bench``).

It runs the whole suite on the smallest size with the fewest repeats and checks
that it runs and reports every row with positive times and a ratio. It never
asserts anything about speed: that is what the suite itself reports.
"""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent

pytest.importorskip("bench.run", reason="the bench/ directory is not importable")

_UNITS = {"ns": 1.0, "us": 1e3, "ms": 1e6, "s": 1e9}


def _ns(cell: str) -> float:
    number, unit = cell.split()
    return float(number) * _UNITS[unit]


def _section(markdown: str, title: str) -> list[list[str]]:
    """The body rows of the markdown table under ``## <title>...``."""
    lines = markdown.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(f"## {title}"))
    rows = []
    for line in lines[start + 1 :]:
        if line.startswith("## "):
            break
        if line.startswith("| ") and not line.startswith("|---"):
            rows.append([cell.strip() for cell in line.strip().strip("|").split(" | ")])
    return rows[1:]  # without the header


def test_bench_runs_and_reports_every_row(tmp_path: Path) -> None:
    output = tmp_path / "results.md"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "bench",
            "--sizes",
            "10",
            "--dtypes",
            "float64",  # float64 takes the x64 scope on JAX: the path float32 does not
            "--repeats",
            "2",
            "--no-compile",
            "--no-spellings",  # (timed by test_the_spelling_bench_times_every_spelling)
            "--output",
            str(output),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "== Targets ==" in done.stdout
    markdown = output.read_text()
    for heading in ("## Machine", "## Versions", "## Targets", "## Zero backend", "## Strict signature check"):
        assert heading in markdown

    from bench.cases import ENGINES, MAX_N
    from bench.report import ROW_HEADERS

    rows = _section(markdown, "Per call")
    assert rows, "no per-call rows"
    native_col, di_col = ROW_HEADERS.index("native"), ROW_HEADERS.index("di")
    ratio_col, note_col = ROW_HEADERS.index("ratio di/native"), ROW_HEADERS.index("note")
    seen = set()
    for row in rows:
        assert len(row) == len(ROW_HEADERS), row
        assert "failed" not in row[note_col] and "DIFFER" not in row[note_col], row
        assert _ns(row[native_col]) > 0 and _ns(row[di_col]) > 0, row
        assert float(row[ratio_col]) > 0, row
        assert row[ROW_HEADERS.index("n")] == "10", row
        seen.add((row[0], row[1]))
    expected = {
        (engine.label, operator)
        for key, engine in ENGINES.items()
        if engine.installed and key != "torch-compile"  # --no-compile
        for operator in engine.operators
        if 10 <= MAX_N.get(operator, 10)
    }
    assert expected <= seen, sorted(expected - seen)
    assert {row[ROW_HEADERS.index("dtype")] for row in rows} == {"float64"}

    _check_real_rows(markdown)

    zero = _section(markdown, "Zero backend")
    assert zero and all(_ns(row[4]) > 0 for row in zero)
    checks = _section(markdown, "Strict signature check")
    assert checks and all(_ns(row[1]) > 0 for row in checks)


def _check_real_rows(markdown: str) -> None:
    """The real-input rows (bench/real.py): every group present, positive times, the
    same results on both sides; the compile table counts compiles."""
    from bench.report import ROW_HEADERS

    rows = _section(markdown, "Per call: real inputs")
    note_col, ratio_col = ROW_HEADERS.index("note"), ROW_HEADERS.index("ratio di/native")
    for row in rows:
        assert len(row) == len(ROW_HEADERS), row
        assert "failed" not in row[note_col] and "DIFFER" not in row[note_col], row
        assert float(row[ratio_col]) > 0, row
    functions = {(row[0], row[2]) for row in rows}
    expected = set()
    if importlib.util.find_spec("jax") is not None:
        expected |= {("AutoJAX(jit=True)", "dict of 64 leaves"), ("AutoJAX(jit=True)", "nested MLP dict/list")}
        expected |= {("AutoJAX()", "dict of 8 leaves")}
    if importlib.util.find_spec("torch") is not None:
        expected |= {("AutoTorch()", "dict of 1 leaves"), ("AutoTorch()", "nn.Module via functional_call")}
    if importlib.util.find_spec("autograd") is not None:
        expected |= {("AutoAutograd()", "nested MLP dict/list")}
    assert expected <= functions, sorted(expected - functions)
    callers = {row[0] for row in rows if row[1] == "gradient, numpy caller"}
    if importlib.util.find_spec("jax") is not None:
        assert "AutoJAX(jit=True)" in callers
        compiles = _section(markdown, "Compiles of a value_and_gradient-only loop")
        counted = [row for row in compiles if row[0] == "AutoJAX(jit=True)"]
        assert counted and all(int(row[4]) + int(row[6]) >= 1 and row[7] == "0" for row in counted), compiles
    assert "Issue 23:" in markdown


def test_compare_interleaves_and_returns_positive_medians() -> None:
    from bench.timing import Settings, compare

    calls: list[str] = []
    timing = compare(
        lambda: calls.append("a"),
        lambda: calls.append("b"),
        Settings(block_ns=1e4, budget_s=0.0, min_pairs=3, max_pairs=3),
        warmup=0,
    )
    assert timing.pairs == 3 and timing.block >= 1
    assert timing.a_ns > 0 and timing.b_ns > 0 and timing.ratio > 0
    k = timing.block
    timed = calls[-6 * k :]  # the measured blocks: a b, b a, a b
    assert timed == ["a"] * k + ["b"] * k + ["b"] * k + ["a"] * k + ["a"] * k + ["b"] * k


def test_script_entry_point_help() -> None:
    done = subprocess.run(
        [sys.executable, "bench/run.py", "--help"], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert re.search(r"--quick", done.stdout)


def test_the_mixing_bench_runs_and_reports_every_row(tmp_path: Path) -> None:
    """``python -m bench.mixing`` on one small size, without wrap-torch2jax (whose
    C++ extension takes a minute to build): every row, positive times."""
    pytest.importorskip("jax")
    pytest.importorskip("torch")
    output = tmp_path / "mixing.md"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "bench.mixing",
            "--sizes",
            "20",
            "--runs",
            "1",
            "--budget",
            "0.05",
            "--skip-wrap",
            "--out",
            str(output),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    report = output.read_text()
    for title in ("A torch loss inside", "A JAX loss inside torch"):
        rows = [row for row in _section(report, title) if not row[0].startswith("-")]
        assert len(rows) == 1 and rows[0][0] == "20"
        assert _ns(rows[0][1]) > 0 and _ns(rows[0][3]) > 0


def test_the_spelling_bench_times_every_spelling(tmp_path: Path) -> None:
    """``python -m bench.spellings`` on one small size and two repeats: a row per
    operator (hessian included), every spelling timed against di with the same
    results, the fastest named and the target line written."""
    backends = [key for key in ("torch", "autograd") if importlib.util.find_spec(key) is not None]
    if not backends:
        pytest.skip("neither torch nor autograd is installed")
    output = tmp_path / "spellings.md"
    command = [sys.executable, "-m", "bench.spellings", "--sizes", "10", "--repeats", "2", "--output", str(output)]
    done = subprocess.run(
        [*command, "--backends", ",".join(backends)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    from bench.cases import ENGINES, SPELLED_OPERATORS
    from bench.spellings import HEADERS

    markdown = output.read_text()
    rows = _section(markdown, "Fastest native spelling")
    labels = {ENGINES[key].label for key in backends}
    assert {(row[0], row[1]) for row in rows} == {(label, op) for label in labels for op in SPELLED_OPERATORS}
    fastest, di_col, note = (
        HEADERS.index("fastest native spelling"),
        HEADERS.index("di"),
        HEADERS.index("every spelling"),
    )
    for row in rows:
        assert row[fastest].startswith("`") and _ns(row[di_col]) > 0, row
        assert "DIFFER" not in row[note] and "failed" not in row[note], row
    hvp = next(row for row in rows if row[0] == "AutoTorch()" and row[1] == "hvp") if "torch" in backends else None
    assert hvp is None or "torch.func.jvp(torch.func.grad(f))" in markdown
    assert "within 1.2 of the fastest native spelling" in markdown


def test_the_spelling_target_line_names_the_engines_it_left_out() -> None:
    """The target line speaks of every engine measured: one left out by default
    (compiled torch, a compile per spelling) is named, and the line passes only on
    the rows it has; measured, it is not named."""
    from bench.cases import ENGINES
    from bench.spellings import SKIPPED, target_line
    from bench.timing import Timing

    def row(backend: str, ratio: float) -> dict[str, object]:
        return {
            "backend": backend,
            "operator": "gradient",
            "n": 32,
            "timings": {"native": Timing(1e4, 1e4 * ratio, ratio, 0, ratio, ratio, 1, 1)},
        }

    skipped = [ENGINES[key].label for key in SKIPPED if key in ENGINES]
    line = target_line([row("AutoAutograd()", 1.05)])
    assert line.startswith("- PASS: every prepared operator, every engine measured,")
    assert all(f"not measured here: {label}" in line for label in skipped)
    missed = target_line([row("AutoAutograd()", 1.05), *[row(label, 1.4) for label in skipped]])
    assert missed.startswith("- MISS") and "not measured here" not in missed


def test_the_breakdown_table_names_an_engine_whose_case_splits_no_layers(monkeypatch: pytest.MonkeyPatch) -> None:
    import argparse

    import bench.run
    from bench.cases import GRADIENT, Case, Engine
    from bench.timing import Settings

    def build(f: Any, g: Any, x: Any, dtype: str, operators: Any) -> Case:
        return Case({GRADIENT: (lambda: None, lambda: None)})  # no breakdown (TensorFlow's compiled rows had none)

    monkeypatch.setitem(bench.run.ENGINES, "layerless", Engine("Layerless()", {}, build))
    args = argparse.Namespace(sizes=[10], functions=["rosenbrock"], backends=["layerless"])
    table, own_costs = bench.run.breakdown_table(args, Settings(block_ns=1e4, budget_s=0.0, min_pairs=3, max_pairs=3))
    assert table.rows == [["Layerless()", "no breakdown (the case gives no layers)", "", "", "", "", "", "", ""]]
    assert own_costs == {}


def test_an_engine_with_min_pairs_gets_that_many_pairs_per_row() -> None:
    import bench.run
    from bench.cases import GRADIENT, Case, Engine
    from bench.timing import Settings

    case = Case({GRADIENT: (lambda: None, lambda: None)})
    settings = Settings(block_ns=1e4, budget_s=1e-9, min_pairs=3, max_pairs=401)
    slow = Engine("Slow()", {}, lambda *args: case, min_pairs=11)
    row = bench.run._timed_row(slow, case, GRADIENT, "rosenbrock", 10, "float64", settings)
    assert row.pairs == 11
    plain = Engine("Plain()", {}, lambda *args: case)
    assert bench.run._timed_row(plain, case, GRADIENT, "rosenbrock", 10, "float64", settings).pairs == 3
