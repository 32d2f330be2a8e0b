"""Helpers shared by the test modules (imported as ``from helpers import ...``,
as ``functions`` is): walking a prep for arrays, counting torch.compile's work,
small functions of x."""

from __future__ import annotations

import importlib.util
import types
from pathlib import Path
from typing import Any

import di
from di.families import family_of


def sin_times(x: Any) -> Any:
    """``sin(x) * x``, elementwise: a map whose jacobian is diagonal."""
    xp = di.array_namespace(x)
    return xp.sin(x) * x


def sin_times_sum(x: Any) -> Any:
    """The sum of :func:`sin_times`: a scalar with a diagonal Hessian."""
    xp = di.array_namespace(x)
    return xp.sum(xp.sin(x) * x)


def reachable_arrays(root: Any) -> list[str]:
    """Paths of every numpy/torch/JAX array reachable from a prep through di's own
    objects (slots, instance attributes, containers, closures of di functions)."""
    found: list[str] = []
    seen: set[int] = set()

    def walk(obj: Any, path: str) -> None:
        if id(obj) in seen:
            return
        seen.add(id(obj))
        if family_of(obj) is not None:
            found.append(path)
            return
        if isinstance(obj, dict):
            for key, value in obj.items():
                walk(value, f"{path}[{key!r}]")
        elif isinstance(obj, (list, tuple, set, frozenset)):
            for index, value in enumerate(obj):
                walk(value, f"{path}[{index}]")
        elif isinstance(obj, types.FunctionType):
            if obj.__module__.startswith("di"):
                for cell, name in zip(obj.__closure__ or (), obj.__code__.co_freevars):
                    walk(cell.cell_contents, f"{path}.<{name}>")
                walk(obj.__defaults__, f"{path}.__defaults__")
        elif type(obj).__module__.startswith("di"):
            for name in getattr(type(obj), "__slots__", ()):
                if hasattr(obj, name):
                    walk(getattr(obj, name), f"{path}.{name}")
            for name, value in getattr(obj, "__dict__", {}).items():
                walk(value, f"{path}.{name}")

    walk(root, "prep")
    return found


class CompileCounter:
    """A torch.compile backend that counts graph compilations and runs them eagerly."""

    def __init__(self) -> None:
        self.count = 0

    def __call__(self, gm: Any, example_inputs: Any) -> Any:
        self.count += 1
        return gm.forward


def docs_hooks() -> types.ModuleType:
    """docs/hooks.py loaded as a module (it is not a package): the tables it
    generates for the documentation, for tests that check them."""
    path = Path(__file__).resolve().parents[1] / "docs" / "hooks.py"
    spec = importlib.util.spec_from_file_location("di_docs_hooks", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
