"""Shared fixtures and helpers: the backends under test, tolerances, array conversion.

Test modules import the helpers directly (``from conftest import ...``); pytest puts
this directory on ``sys.path`` (rootdir-relative ``prepend`` import mode).
"""

from __future__ import annotations

import gc
import os
import shutil
import sys
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

# Each test worker gets its own temporary directory, set before any engine is imported. Engines
# that build native code cache it there, shared unguarded between processes: MLX compiles each
# fused CPU kernel with g++ into $TMPDIR/mlx/<version>/cpu, writing the source and the library in
# place, so two workers building one kernel at once race on the same files.
if os.environ.get("PYTEST_XDIST_WORKER"):
    _worker_tmp = Path(tempfile.gettempdir()) / f"di-tests-{os.environ['PYTEST_XDIST_WORKER']}"
    _worker_tmp.mkdir(exist_ok=True)
    os.environ["TMPDIR"] = str(_worker_tmp)

    # The workers share the XLA programs they compile: eager JAX compiles each operation at each new
    # signature and compiled selectors each program, and the two workers meet most of the same ones
    # (half of the JAX compile time, measured). JAX's persistent cache, in a directory of this run (the
    # workers' parent process's, removed when the run ends), keeps every program however quick to
    # compile. A cache entry read half-written (JAX does not lock without eviction) is compiled again.
    os.environ.setdefault("JAX_COMPILATION_CACHE_DIR", str(Path(tempfile.gettempdir()) / f"di-jax-{os.getppid()}"))
    os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0")
    os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES", "-1")

# MLX's compilation is off in the suite, except where tests/test_mlx_details.py and
# tests/test_mlx_programs.py turn it on for their own tests of di's compiled MLX programs (traces,
# statics, storms, threads): MLX 0.32 builds every fused CPU kernel with g++ (seconds each) and
# loads it into the process. It was first turned off for a worker that hung in MLX's stream thread;
# the cause proved to be MLX's reduction of an empty array, which di's MLX namespace now answers
# itself (docs/engines/mlx.md). Elsewhere the mlx-compile selectors run di's compiled-program path
# with mx.compile as a pass-through; `python -m di` runs them compiled.
os.environ.setdefault("MLX_DISABLE_COMPILE", "1")

import numpy as np
import pytest
from functions import SCENARIOS, Scenario
from hypothesis import settings

import di
from di.backends.protocol import Capabilities
from di.backends.registry import engines, get_adapter
from di.backends.selectors import engine_of, load_family
from di.families import family_of, get_family
from di.testing import approximates, backend_label, default_tolerances, engine_backends
from di.testing.arrays import to_numpy as _testing_to_numpy

# --- hypothesis -------------------------------------------------------------------

# By default every run tests the same examples (seeded from each test), so a draw that lands on
# a rounding edge case cannot turn one CI run red by luck; DI_HYPOTHESIS_RANDOM=1 draws afresh
# (with DI_HYPOTHESIS_PROFILE=dev, 200 examples per property) to explore.
settings.register_profile("seeded", derandomize=True, database=None)
settings.register_profile("random")
settings.load_profile("random" if os.environ.get("DI_HYPOTHESIS_RANDOM") else "seeded")

# --- backends ---------------------------------------------------------------------
#
# The every-backend matrices, read from the engine registry (di.testing.engine_backends): an
# engine registered with di.register_engine joins every test below by registering, with no edit
# to the tests. Each behaviour test picks the leanest matrix that covers its subject, so the suite
# stays fast as engines are added; no engine is ever left out of a behaviour.

ENGINES: list[di.AbstractBackend] = engine_backends(compiled=False)
"""Each installed engine's default selector: the matrix of behaviours that do not depend on how
the engine builds or compiles its programs (what is refused before any program runs, conversions
between array families, the public surface). A compiled variant there would repeat its engine."""

BACKENDS: list[di.AbstractBackend] = engine_backends()
"""ENGINES and each engine's compiled selectors (those its record declares ``compiled``):
the matrix of behaviours a compiled program could change (the operators' results, contexts
traced or compiled in, what f raises, preparations and their reuse, outputs)."""

APPROXIMATIONS: list[di.AbstractBackend] = [b for b in engine_backends(every_label=True) if approximates(b)]
"""Every labelled selector of an engine that approximates (central and forward differences).
A further scheme changes the accuracy and the points f is evaluated at, nothing else: tests
of those opt in with ``BACKENDS_AND_SCHEMES``."""

BACKENDS_AND_SCHEMES: list[di.AbstractBackend] = list(dict.fromkeys([*BACKENDS, *APPROXIMATIONS]))
"""BACKENDS and every scheme of the approximating engines: for tests of accuracy."""

# The reference among the backends: exact (AD) derivatives.
AD_BACKENDS = [b for b in BACKENDS if not approximates(b)]


def capabilities(backend: di.AbstractBackend) -> Capabilities:
    """What the backend's adapter declares it offers (imports its engine)."""
    return get_adapter(backend).capabilities


def can_write_cache(backend: di.AbstractBackend) -> bool:
    """Whether ``f`` may write into a ``Cache`` with ``buf[...] = ...`` on this backend: its
    engine takes caches, and the arrays it computes with can be written in place."""
    declared = capabilities(backend)
    return declared.cache and get_family(declared.family).mutable


def evaluates_only(backend: di.AbstractBackend) -> bool:
    """Whether the engine only evaluates ``f`` (finite differences) rather than tracing it: it
    cannot tell an output computed from ``x`` from one that is not, and differentiates any
    program as ``SecondOrder``'s outer backend."""
    return capabilities(backend).differentiates == "any"


# The selectors, by label, whose traced values convert with float() (eager torch's, TensorFlow's and MLX's
# tensors): a float() of a value computed from x slips through them unseen. No capability declares it.
# (mlx-compile too where MLX compilation is off: mx.compile then passes f through, untraced)
LETS_FLOAT_THROUGH = {"torch", "tensorflow", "mlx"}
if os.environ.get("MLX_DISABLE_COMPILE"):
    LETS_FLOAT_THROUGH.add("mlx-compile")


def refuses_float(backend: di.AbstractBackend) -> bool:
    """Whether the engine itself refuses ``float()`` of a value it traces (``f`` computed a Python
    number from ``x``): an engine that traces, unless its traced values convert."""
    return not evaluates_only(backend) and backend_label(backend) not in LETS_FLOAT_THROUGH


def compiles(backend: di.AbstractBackend) -> bool:
    """Whether the selector compiles its programs at preparation (its engine's compile option
    is on)."""
    option = capabilities(backend).compile_option
    return bool(option) and bool(getattr(backend, option, False))


def engine_name(backend: di.AbstractBackend) -> str:
    """The name of the backend's engine (``"jax"``): for the few expectations no capability
    declares, listed by engine in the test that holds them."""
    record = engine_of(backend)
    return record.name if record is not None else ""


def engine_family(backend: di.AbstractBackend) -> str:
    """The array family the engine computes in (``"numpy"`` for an engine that brings none)."""
    return capabilities(backend).family


FAMILIES = list(
    dict.fromkeys(
        [
            "numpy",
            *(family.name for engine in engines() if engine.is_installed() and (family := load_family(engine))),
        ]
    )
)
"""The array families of the installed engines, NumPy first."""


def backend_id(backend: Any) -> str:
    """A short test id for a selector: its label (``jax-jit``, ``finitediff-forward``)."""
    return backend_label(backend)


def backend_params(backends: Iterable[di.AbstractBackend] | None = None) -> list[Any]:
    """``pytest.param`` per backend, with readable ids (default: BACKENDS)."""
    return [pytest.param(b, id=backend_id(b)) for b in (BACKENDS if backends is None else backends)]


def alternating_params(options: list[Any], backends: Iterable[di.AbstractBackend] | None = None) -> list[Any]:
    """``pytest.param(backend, option)`` per backend, the options taken in turn (for a test whose
    option is not the backend's business: each option still runs on several engines, and each
    engine once, instead of every pair)."""
    chosen = list(BACKENDS if backends is None else backends)
    return [
        pytest.param(b, options[i % len(options)], id=f"{backend_id(b)}-{options[i % len(options)]!r}")
        for i, b in enumerate(chosen)
    ]


def supports(backend: di.AbstractBackend, scenario: Scenario) -> bool:
    """Whether the scenario can run on the backend (one that writes into a ``Cache`` needs an
    engine that can: JAX's arrays are immutable, autograd refuses ``Cache`` altogether)."""
    return not scenario.writes_cache or can_write_cache(backend)


def backend_scenario_params(
    scenarios: Iterable[Scenario] = SCENARIOS, backends: Iterable[di.AbstractBackend] | None = None
) -> list[Any]:
    """``pytest.param(backend, scenario)`` for every supported pair (default: BACKENDS)."""
    chosen = list(BACKENDS if backends is None else backends)
    return [pytest.param(b, s, id=f"{backend_id(b)}-{s.name}") for s in scenarios for b in chosen if supports(b, s)]


def scenario_params(scenarios: Iterable[Scenario] = SCENARIOS) -> list[Any]:
    return [pytest.param(s, id=s.name) for s in scenarios]


def pytest_sessionfinish(session: pytest.Session) -> None:
    """The controlling process of a parallel run removes the workers' shared JAX cache."""
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        shutil.rmtree(Path(tempfile.gettempdir()) / f"di-jax-{os.getpid()}", ignore_errors=True)


@pytest.fixture
def mlx_compiling() -> Any:
    """MLX's compilation on for a test of di's compiled MLX programs (off elsewhere: see above)."""
    import mlx.core as mx

    mx.enable_compile()
    yield
    mx.disable_compile()


_MODULES_WHEN_FROZEN = 0


@pytest.fixture(autouse=True)
def _freeze_what_imports_loaded() -> None:
    """Keep the garbage collector off the engines' own objects.

    An engine's import leaves millions of objects that live for the whole session, and every full
    collection (Python's own, or a test's ``gc.collect()``) walks them all: about a second each
    with the engines loaded. Once a test has imported more modules, what is alive is collected
    once and frozen (``gc.freeze``), so later collections walk only what tests create. A test's
    own objects are made after the freeze, so a test that checks one is freed still sees it go.
    """
    global _MODULES_WHEN_FROZEN
    if len(sys.modules) > _MODULES_WHEN_FROZEN + 100:
        gc.collect()
        gc.freeze()
        _MODULES_WHEN_FROZEN = len(sys.modules)


@pytest.fixture
def backends() -> list[di.AbstractBackend]:
    """Every installed backend selector under test, with every scheme of the approximating ones."""
    return list(BACKENDS_AND_SCHEMES)


@pytest.fixture(params=backend_params())
def backend(request: pytest.FixtureRequest) -> di.AbstractBackend:
    """Each backend of BACKENDS in turn."""
    return request.param


# --- tolerances ---------------------------------------------------------------------


# The errors measured on this suite's scenarios, by label: tighter than what the engines' records
# allow in general (di.testing.default_tolerances), which other approximating engines get.
_MEASURED_TOLERANCES = {
    "finitediff": (1e-7, 1e-8),  # O(h^2) with h ~ eps**(1/3): measured worst ~1e-8
    "finitediff-forward": (1e-5, 1e-5),  # O(h) truncation, h ~ sqrt(eps): measured worst ~6e-6
}


def tolerance(backend: di.AbstractBackend, dtype: Any) -> tuple[float, float]:
    """``(rtol, atol)`` for comparing a result of ``backend`` at ``dtype`` with the exact
    answer; ``atol`` is relative to the largest entry of the exact answer (see
    :func:`assert_close`)."""
    if np.dtype(to_numpy_dtype(dtype)) == np.float32:
        return 1e-4, 1e-5
    if not approximates(backend):
        return 1e-10, 1e-12
    return _MEASURED_TOLERANCES.get(backend_label(backend)) or default_tolerances(backend, dtype)


def to_numpy_dtype(dtype: Any) -> Any:
    """A numpy dtype for a numpy, torch or jax dtype."""
    if isinstance(dtype, type) or isinstance(dtype, np.dtype):
        return np.dtype(dtype)
    return np.dtype(str(getattr(dtype, "name", dtype)).rsplit(".", 1)[-1])  # torch.float32, TensorFlow's DType


def assert_close(actual: Any, expected: Any, backend: di.AbstractBackend, dtype: Any, what: str = "") -> None:
    """``actual`` (any family) matches ``expected`` within the backend's tolerance.

    The absolute tolerance scales with ``max(1, max |expected|)`` so that a
    coordinate whose exact value is near zero is judged against the size of the rest.
    """
    rtol, atol = tolerance(backend, dtype)
    expected = np.asarray(expected, dtype=np.float64)
    scale = max(1.0, float(np.max(np.abs(expected)))) if expected.size else 1.0
    actual = to_numpy(actual).astype(np.float64)
    assert actual.shape == expected.shape, f"{what}: shape {actual.shape} != {expected.shape}"
    np.testing.assert_allclose(actual, expected, rtol=rtol, atol=atol * scale, err_msg=f"{what} on {backend!r}")


# --- arrays ---------------------------------------------------------------------------


def family(value: Any) -> str:
    """The array family of a value (``"numpy"``, ``"torch"``, ...; numpy scalars are numpy),
    else the type's name."""
    return family_of(value) or type(value).__name__


def to_numpy(value: Any) -> np.ndarray:
    """A numpy copy of an array of any family (or of a Python scalar)."""
    return np.array(_testing_to_numpy(value), copy=True)


def as_family(x: np.ndarray, name: str) -> Any:
    """A copy of the numpy array ``x`` in family ``name``, with the same dtype (float64 stays
    float64 in every family, JAX's included)."""
    target = get_family(name)
    # the scope in which the family keeps 8-byte components (complex128's too: JAX's x64)
    with target.scope(("float64",) if x.dtype.itemsize >= 8 else ()):
        result = target.from_numpy(np.array(x, copy=True))
    assert dtype_name(result) == x.dtype.name, (name, dtype_name(result), x.dtype)
    return result


def dtype_name(value: Any) -> str:
    """``"float32"``, ``"float64"``, ... for an array of any family."""
    return str(getattr(value.dtype, "name", value.dtype)).rsplit(".", 1)[-1]  # torch.float32, TensorFlow's DType
