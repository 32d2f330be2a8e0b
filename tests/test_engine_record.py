"""The hooks of an engine's record as an engine from outside ``di`` gives them:
objects or ``"module:NAME"`` paths, for an engine with a library or without one."""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from extension_support import restored_registries

import di
from di.backends.engine import Engine, TracedValues
from di.backends.registry import get_adapter
from di.backends.source import ProgramSource
from di.mixing.core import Host

FINITE_DIFFERENCES = "di.engines.finitediff.adapter:FiniteDiffAdapter"


class Box:
    """A value an engine without a library traces (no array family's)."""

    def __init__(self, value: np.ndarray) -> None:
        self.value = value


@dataclasses.dataclass(frozen=True)
class AutoBoxes(di.AbstractBackend):
    """The boxes' engine (it computes as finite differences do)."""


class BoxHost(Host):
    """``g`` on boxes: ``g``'s value at the box's value, boxed, and the call recorded."""

    display = "boxes"

    def __init__(self) -> None:
        self.calls: list[Any] = []

    def owns(self, value: Any) -> bool:
        return isinstance(value, Box)

    def call(self, g: di.DifferentiateWith, x: Any, leaves: list[Any], treedef: Any, values: list[Any]) -> Any:
        self.calls.append(x)
        return Box(g(x.value))


def box_values() -> list[TracedValues]:
    return [TracedValues(Box, "boxes.trace", lambda box: box.value)]


HOST = BoxHost()


@pytest.fixture(autouse=True)
def isolated() -> Iterator[None]:
    with restored_registries():
        HOST.calls.clear()
        yield


@pytest.mark.parametrize("by", ["object", "path"])
def test_the_host_of_an_engine_without_a_library_serves_its_values(by: str) -> None:
    host = HOST if by == "object" else f"{__name__}:HOST"
    di.register_engine(Engine("boxes", AutoBoxes, FINITE_DIFFERENCES, host=host))

    def double_sin(x: np.ndarray) -> np.ndarray:
        return 2 * np.sin(x)

    # g's own engine (finite differences) needs no library either: told apart by record, not by module
    g = di.DifferentiateWith(double_sin, di.AutoFiniteDiff())
    x = np.array([0.5, 1.0])
    result = g(Box(x))
    assert isinstance(result, Box) and len(HOST.calls) == 1
    np.testing.assert_allclose(result.value, 2 * np.sin(x))
    np.testing.assert_allclose(g(x), 2 * np.sin(x))  # NumPy values: f itself, no host
    assert len(HOST.calls) == 1


def test_an_engine_without_a_host_leaves_its_values_to_the_others() -> None:
    di.register_engine(Engine("boxes", AutoBoxes, FINITE_DIFFERENCES))
    g = di.DifferentiateWith(lambda x: 2 * np.sin(x), di.AutoFiniteDiff())
    with pytest.raises(di.InvalidInputError, match="is neither a number nor an array"):
        g(Box(np.ones(2)))


@pytest.mark.parametrize("by", ["object", "path"])
def test_traced_values_of_an_engine_without_a_library_are_refused_by_the_others(by: str) -> None:
    traced = box_values if by == "object" else f"{__name__}:box_values"
    di.register_engine(Engine("boxes", AutoBoxes, FINITE_DIFFERENCES, traced=traced))
    get_adapter(AutoBoxes())  # loading the adapter registers the values its engine traces
    assert ProgramSource(get_adapter(AutoBoxes())).takes == ("numpy", "boxes")
    assert ProgramSource(get_adapter(di.AutoFiniteDiff())).takes == ("numpy", "finitediff")
    with pytest.raises(di.InvalidInputError, match=r"x is traced by boxes\.trace, and AutoFiniteDiff"):
        di.gradient(lambda x: (x * x).sum(), di.AutoFiniteDiff(), Box(np.ones(2)))


def test_hooks_of_another_kind_are_refused_when_the_record_is_made() -> None:
    with pytest.raises(di.InvalidOptionTypeError, match=r"host takes a di\.mixing\.core\.Host instance"):
        Engine("boxes", AutoBoxes, FINITE_DIFFERENCES, host=object())
    with pytest.raises(di.InvalidOptionTypeError, match="traced takes a function returning TracedValues"):
        Engine("boxes", AutoBoxes, FINITE_DIFFERENCES, traced=box_values())  # type: ignore[arg-type]
    with pytest.raises(di.InvalidOptionError, match="is not a 'module:name' path"):
        Engine("boxes", AutoBoxes, FINITE_DIFFERENCES, host="no_colon")
    record = Engine("boxes", AutoBoxes, FINITE_DIFFERENCES, host=HOST, traced=box_values)
    assert record.host is HOST and record.traced is box_values


@pytest.mark.parametrize(
    ("module", "installed"),
    [("engine_pkg", True), ("engine_pkg.core", True), ("engine_pkg.absent", False), ("absent_pkg_of_di.core", False)],
)
def test_an_engine_s_module_is_found_without_importing_its_parents(
    module: str, installed: bool, tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    package = tmp_path / "engine_pkg"
    package.mkdir()
    (package / "__init__.py").write_text("raise RuntimeError('imported')\n")
    (package / "core.py").write_text("")
    monkeypatch.syspath_prepend(str(tmp_path))
    record = dataclasses.replace(next(iter(di.backends.registry.engines())), module=module)
    # found in its parent's folder: the parent is not imported (it would raise), a missing parent is no error
    assert record.is_installed() is installed
    assert "engine_pkg" not in sys.modules
