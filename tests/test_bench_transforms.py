"""Smoke test of ``python -m bench.transforms``: it runs, reports every row with
positive times, and the di side agrees with the native one (checked inside the
bench when it builds each case). It asserts nothing about speed: that is what the
bench reports."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("jax")
pytest.importorskip("torch")
transforms = pytest.importorskip("bench.transforms", reason="the bench/ directory is not importable")
timing = pytest.importorskip("bench.timing")


def test_the_transforms_bench_reports_every_row(tmp_path: Path) -> None:
    settings = timing.Settings(block_ns=1e4, budget_s=0.01, min_pairs=1, max_pairs=2)
    rows = transforms.transform_rows(settings, runs=1, compile_backend="eager")  # (inductor: minutes)
    kinds = ("jax.jit loop", "jax.jit loop", "torch.func.vmap", "torch.compile")
    assert [(row["kind"], row["n"]) for row in rows] == [(kind, n) for n in transforms.SIZES for kind in kinds]
    for row in rows:
        assert all(t.a_ns > 0 and t.b_ns > 0 for t in row["timings"])
        if row["kind"] == "jax.jit loop":
            assert row["programs"] == "1 / 1", "the jitted loop is one compiled program either way"
    table = transforms.render(rows)
    assert table.count("\n") == len(rows) + 1
