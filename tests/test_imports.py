"""Lazy engine imports, missing engines, and backend selectors."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
import textwrap

import pytest

import di

_ENGINES = ("jax", "torch", "autograd", "tensorflow", "mlx", "pytensor")
_SELECTORS = {
    "jax": "AutoJAX",
    "torch": "AutoTorch",
    "autograd": "AutoAutograd",
    "tensorflow": "AutoTensorFlow",
    "mlx": "AutoMLX",
    "pytensor": "AutoPyTensor",
}
_DISPLAY = {
    "jax": "JAX",
    "torch": "PyTorch",
    "autograd": "autograd",
    "tensorflow": "TensorFlow",
    "mlx": "MLX",
    "pytensor": "PyTensor",
}


def _run(code: str, *, env_path: str | None = None) -> dict:
    """Run ``code`` in a fresh interpreter; it prints one JSON object as its last line."""
    env = None
    if env_path is not None:
        import os

        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [env_path, os.environ.get("PYTHONPATH")]))}
    result = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=120, env=env
    )
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_import_di_imports_no_engine():
    report = _run(
        """
        import json, sys
        import di
        after_import = sorted(m for m in ("jax", "torch", "autograd", "array_api_compat") if m in sys.modules)
        available = [repr(b) for b in di.available_backends()]
        after_available = sorted(m for m in ("jax", "torch", "autograd") if m in sys.modules)
        selectors = [di.AutoJAX(jit=True), di.AutoTorch(), di.AutoAutograd(), di.AutoFiniteDiff(),
                     di.backend("jax"), di.backend("torch"), di.backend("autograd"), di.backend("finitediff")]
        hashes = [hash(s) for s in selectors]
        after_selectors = sorted(m for m in ("jax", "torch", "autograd") if m in sys.modules)
        print(json.dumps({"import": after_import, "available": after_available, "selectors": after_selectors,
                          "backends": available}))
        """
    )
    assert report["import"] == [], f"import di imported {report['import']}"
    assert report["available"] == [], f"di.available_backends() imported {report['available']}"
    assert report["selectors"] == [], f"building selectors imported {report['selectors']}"
    assert report["backends"] == [repr(b) for b in di.available_backends()]


def test_finite_differences_import_no_engine():
    report = _run(
        """
        import json, sys
        import numpy as np
        import di
        x = np.array([1.0, 2.0])
        g = di.gradient(lambda x, a: (a * x * x).sum(), di.AutoFiniteDiff(), x, di.Constant(np.ones(2)))
        y, _ = di.value_and_gradient(lambda x: (x * x).sum(), di.AutoFiniteDiff(method="forward"), x)
        print(json.dumps({"engines": sorted(m for m in ("jax", "torch", "autograd") if m in sys.modules),
                          "g": g.tolist(), "y": float(y)}))
        """
    )
    assert report["engines"] == [], f"finite differences imported {report['engines']}"
    assert report["g"] == pytest.approx([2.0, 4.0], rel=1e-6)
    assert report["y"] == pytest.approx(5.0)


def test_each_engine_is_imported_only_when_used():
    # One interpreter, engines used one after another: each use imports that engine only.
    report = _run(
        """
        import json, sys
        import numpy as np
        import di
        steps = {}
        for name in ("finitediff", "autograd", "torch", "jax"):
            selector = di.backend(name)
            if not selector.is_installed:
                continue
            g = di.gradient(lambda x: (x * x).sum(), selector, np.array([1.0, 2.0]))
            steps[name] = {"engines": sorted(m for m in ("jax", "torch", "autograd") if m in sys.modules),
                           "g": np.asarray(g).tolist()}
        print(json.dumps(steps))
        """
    )
    expected: list[str] = []
    for name in ("finitediff", "autograd", "torch", "jax"):
        if name != "finitediff" and not di.backend(name).is_installed:
            assert name not in report
            continue
        if name != "finitediff":
            expected = sorted([*expected, name])
        assert report[name]["engines"] == expected, f"after using {name}: {report[name]['engines']}"
        assert report[name]["g"] == pytest.approx([2.0, 4.0], rel=1e-6)


_MISSING = """
import json, sys
sys.modules[{engine!r}] = None  # as if the engine were not installed: import fails, find_spec is None
import numpy as np
import di
result = {{"available": [repr(b) for b in di.available_backends()], "errors": []}}
selector = di.{selector}()
result["is_installed"] = selector.is_installed
calls = [
    lambda: di.prepare_gradient(lambda x: (x * x).sum(), selector, np.zeros(2)),
    lambda: di.gradient(lambda x: (x * x).sum(), selector, np.zeros(2)),
    lambda: di.value_and_gradient(lambda x: (x * x).sum(), selector, np.zeros(2)),
]
for call in calls:
    try:
        call()
    except Exception as err:
        result["errors"].append({{
            "type": type(err).__name__,
            "di": isinstance(err, di.BackendNotInstalledError) and isinstance(err, di.DIError),
            "import_error": isinstance(err, ImportError),
            "message": str(err),
        }})
    else:
        result["errors"].append(None)
fd = di.gradient(lambda x: (x * x).sum(), di.AutoFiniteDiff(), np.array([1.0, 2.0]))
result["fd"] = fd.tolist()
print(json.dumps(result))
"""


@pytest.mark.parametrize("engine", _ENGINES)
def test_missing_engine_raises_backend_not_installed(engine):
    selector = _SELECTORS[engine]
    report = _run(_MISSING.format(engine=engine, selector=selector))
    assert report["is_installed"] is False
    assert f"{selector}(" not in " ".join(report["available"]), report["available"]
    assert "AutoFiniteDiff(method='central', step=None)" in report["available"]
    for error in report["errors"]:
        assert error is not None, "no error for a backend whose engine is missing"
        assert error["type"] == "BackendNotInstalledError" and error["di"] and error["import_error"], error
        assert f"pip install 'differentiation-interface[{engine}]'" in error["message"], error["message"]
        assert selector in error["message"] and _DISPLAY[engine] in error["message"], error["message"]
    # The other backends keep working.
    assert report["fd"] == pytest.approx([2.0, 4.0], rel=1e-6)


@pytest.mark.parametrize("engine", _ENGINES)
def test_broken_engine_install_raises_backend_not_installed(engine, tmp_path):
    # find_spec finds the engine, but importing it fails.
    package = tmp_path / engine
    package.mkdir()
    (package / "__init__.py").write_text("raise ImportError('this install is broken')\n")
    selector = _SELECTORS[engine]
    report = _run(_MISSING.format(engine="_not_an_engine_", selector=selector), env_path=str(tmp_path))
    assert report["is_installed"] is True
    for error in report["errors"]:
        assert error is not None
        assert error["type"] == "BackendNotInstalledError" and error["import_error"], error
        assert f"pip install 'differentiation-interface[{engine}]'" in error["message"], error["message"]


_BROKEN_DI_MODULE = """
import json, sys, types
import numpy as np
import di
di.gradient(lambda x: (x * x).sum(), di.AutoFiniteDiff(), np.ones(2))  # the operator layer loaded
# then a module of di's that the engine's adapter imports fails, as in a circular import: None makes
# Python raise ModuleNotFoundError for it, an empty module 'cannot import name ...' (an ImportError)
sys.modules["di.backends.transforms"] = {broken}
try:
    di.gradient(lambda x: (x * x).sum(), di.{selector}(), np.ones(2))
except Exception as err:
    print(json.dumps({{"type": type(err).__name__, "di": isinstance(err, di.DIError), "message": str(err)}}))
else:
    print(json.dumps({{"type": None}}))
"""


@pytest.mark.parametrize("engine", ("jax", "torch", "autograd"))  # the adapters that import it (compositions)
@pytest.mark.parametrize(
    ("broken", "error"),
    [("None", "ModuleNotFoundError"), ("types.ModuleType('di.backends.transforms')", "ImportError")],
    ids=["missing", "cannot-import-name"],
)
def test_a_broken_di_module_is_not_reported_as_a_missing_engine(engine, broken, error):
    """An ImportError from one of di's own modules (a circular import, a name it lacks)
    propagates as it is: it read 'AutoTorch needs PyTorch, which is not installed' with
    a pip hint, for an engine that is installed."""
    if not di.backend(engine).is_installed:
        pytest.skip(f"{engine} is not installed")
    report = _run(_BROKEN_DI_MODULE.format(broken=broken, selector=_SELECTORS[engine]))
    assert report["type"] == error and not report["di"], report
    assert "di.backends.transforms" in report["message"] and "not installed" not in report["message"], report


# --- selectors -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "options", "expected"),
    [
        ("jax", {"jit": True}, di.AutoJAX(jit=True)),
        ("jax", {}, di.AutoJAX()),
        ("JAX", {}, di.AutoJAX()),
        ("torch", {}, di.AutoTorch()),
        ("autograd", {}, di.AutoAutograd()),
        ("finitediff", {}, di.AutoFiniteDiff()),
        ("finitediff", {"method": "forward"}, di.AutoFiniteDiff(method="forward")),
    ],
)
def test_backend_by_name(name, options, expected):
    selector = di.backend(name, **options)
    assert selector == expected
    assert type(selector) is type(expected)
    assert hash(selector) == hash(expected)


def test_backend_by_name_refuses_unknown_names_and_options():
    with pytest.raises(ValueError, match="nope"):
        di.backend("nope")
    with pytest.raises(TypeError):
        di.backend("jax", no_such_option=True)
    with pytest.raises(ValueError):
        di.AutoFiniteDiff(method="backward")


def test_selectors_are_frozen_hashable_and_compare_by_value():
    selectors = [
        di.AutoJAX(),
        di.AutoJAX(jit=True),
        di.AutoTorch(),
        di.AutoAutograd(),
        di.AutoFiniteDiff(),
        di.AutoFiniteDiff(method="forward"),
        di.AutoFiniteDiff(step=1e-4),
    ]
    table = {s: i for i, s in enumerate(selectors)}
    assert len(table) == len(selectors), "distinct selectors collide"
    rebuilt = [
        di.AutoJAX(jit=False),
        di.AutoJAX(jit=True),
        di.AutoTorch(),
        di.AutoAutograd(),
        di.AutoFiniteDiff(method="central"),
        di.AutoFiniteDiff(method="forward"),
        di.AutoFiniteDiff(step=1e-4),
    ]
    for i, s in enumerate(rebuilt):
        assert table[s] == i
    assert di.AutoJAX() != di.AutoJAX(jit=True)
    assert di.AutoFiniteDiff() != di.AutoFiniteDiff(method="forward")
    for s in selectors:
        assert isinstance(s, di.AbstractBackend)
        field = dataclasses.fields(s)[0].name if dataclasses.fields(s) else None
        if field is not None:
            with pytest.raises(dataclasses.FrozenInstanceError):
                setattr(s, field, None)


def test_available_backends_lists_installed_engines_in_order():
    available = di.available_backends()
    assert available[-1] == di.AutoFiniteDiff()
    order = [
        di.AutoJAX(),
        di.AutoTorch(),
        di.AutoAutograd(),
        di.AutoTensorFlow(),
        di.AutoMLX(),
        di.AutoPyTensor(mode="FAST_COMPILE"),
        di.AutoFiniteDiff(),
    ]
    assert available == [b for b in order if b in available]
    for engine, selector in zip(_ENGINES, order):
        import importlib.util

        assert (selector in available) == (importlib.util.find_spec(engine) is not None)
