"""The transforms table of ``docs/transforms.md`` is what the adapters declare.

``docs/hooks.py`` generates it from each adapter's ``Capabilities.compositions``,
the records ``tests/test_transforms_*.py`` run; this checks the rendering and
the records' vocabulary.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import docs_hooks

import di
from di.backends.capabilities import OPERATOR_FAMILIES, Capabilities
from di.backends.registry import get_adapter
from di.backends.transforms import ASPECTS, BREAKS, REFUSALS, Composition

DOCS = Path(__file__).resolve().parents[1] / "docs"


def _rows(table: str) -> list[list[str]]:
    return [[cell.strip() for cell in line.strip().strip("|").split("|")] for line in table.splitlines()]


def test_the_aspects_are_the_operator_families_then_the_rest() -> None:
    assert ASPECTS[: len(OPERATOR_FAMILIES)] == tuple(OPERATOR_FAMILIES)
    assert set(ASPECTS[len(OPERATOR_FAMILIES) :]) == set(REFUSALS) | set(BREAKS)


def test_a_composition_refuses_unknown_aspects() -> None:
    with pytest.raises(ValueError, match="unknown aspects"):
        Composition("jax.jit", frozenset({"gradients"}))
    composition = Composition("torch.compile", breaks=frozenset({"unprepared"}))
    assert composition.status("unprepared") == "graph break" and composition.status("gradient") == "yes"


def test_capabilities_name_their_compositions() -> None:
    record = Capabilities(compositions=(Composition("a.b"), Composition("a.c")))
    assert record.transforms == ("a.b", "a.c")


def test_the_table_shows_every_declared_composition() -> None:
    pytest.importorskip("jax")
    pytest.importorskip("torch")
    pytest.importorskip("autograd")
    hooks = docs_hooks()
    rows = _rows(hooks.transforms_table())
    header, body = rows[0], rows[2:]
    shown = {row[0].strip("`"): dict(zip(header, row)) for row in body}
    declared = [
        (c, get_adapter(engine).capabilities)
        for engine in di.available_backends()  # every installed engine's declared compositions
        for c in get_adapter(engine).capabilities.compositions
    ]
    assert set(shown) == {c.transform for c, _ in declared}
    for composition, capabilities in declared:
        row = shown[composition.transform]
        assert row["unprepared"] == composition.status("unprepared")
        assert row["same-point preps"] == composition.status("same point")
        assert row["`Cache`"] == (composition.status("Cache") if capabilities.cache else "- (never)")
        assert row["operators"] == "all"
