"""Measurements beside the per-call rows: di's own cost (zero backend), the
strict signature check, ``import di``, preparation and family conversions."""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from time import perf_counter_ns
from typing import Any

import numpy as np

import di
from bench.report import ROOT, Table, format_ns, format_ratio
from bench.timing import Settings, compare
from di.backends.protocol import Adapter, Program
from di.backends.registry import register_backend

__all__ = [
    "ZeroBackend",
    "conversion_table",
    "import_table",
    "preparation_table",
    "signature_check_table",
    "zero_backend_table",
]

ENGINE_MODULES = ("jax", "jaxlib", "torch", "autograd")


# --- the zero backend -------------------------------------------------------------


@dataclass(frozen=True)
class ZeroBackend(di.AbstractBackend):
    """A backend whose programs return a precomputed constant: timing
    ``di.gradient`` through it measures ``di``'s own per-call cost."""

    family: str = "numpy"


class ZeroAdapter(Adapter):
    """Adapter of :class:`ZeroBackend`: computes in the selector's family and
    returns a constant, whatever ``f``, ``x`` and the contexts."""

    def __init__(self, backend: di.AbstractBackend) -> None:
        super().__init__(backend)
        assert isinstance(backend, ZeroBackend)
        self.capabilities = replace(self.capabilities, family=backend.family)
        self.constants: dict[tuple[Any, ...], tuple[Any, Any]] = {}

    def prepare_gradient_programs(self, f: Callable[..., Any], x: Any, contexts: Sequence[Any]) -> dict[str, Program]:
        # Built once per shape and dtype, so an unprepared call times di's preparation,
        # not the engine making the constants (a JAX op costs tens of microseconds).
        key = (tuple(x.shape), str(x.dtype))
        if key not in self.constants:
            self.constants[key] = (x.sum() * 0, x * 0)
        pair = self.constants[key]
        g = pair[1]

        def constant(x: Any, *values: Any) -> Any:
            return g

        def constant_pair(x: Any, *values: Any) -> Any:
            return pair

        return {"gradient": constant, "value_and_gradient": constant_pair}


register_backend(ZeroBackend, ZeroAdapter)


def nothing(x: Any, *values: Any) -> Any:
    """The do-nothing ``f`` of the zero backend (never called)."""
    return 0.0


def family_array(family: str, n: int) -> Any:
    """A float32 array of ``n`` values in ``family``."""
    values = np.linspace(0.5, 1.5, n, dtype=np.float32)
    if family == "torch":
        import torch

        return torch.from_numpy(values)
    if family == "jax":
        import jax.numpy as jnp

        return jnp.asarray(values)
    return values


def zero_backend_table(settings: Settings, families: Sequence[str]) -> tuple[Table, dict[str, float]]:
    """``di.gradient`` / ``value_and_gradient`` through the zero backend against
    the bare program call; the difference is ``di``'s own per-call cost."""
    table = Table(
        "Zero backend: di's own cost per call",
        ["x family", "contexts", "operator", "bare program", "through di", "di's own cost", "ratio"],
        intro=(
            "A registered backend whose program returns a precomputed constant (`ZeroBackend` in "
            "`bench/extras.py`), n = 10 float32. 'bare program' calls that program directly; 'through di' calls "
            "`di.gradient(f, prep, backend, x, *contexts)` (strict prep); the difference is what `di` adds to "
            "every prepared call on any backend. The `strict=False prep` row is the same call without the "
            "signature check, so the check's cost on the hot path is the difference between the two gradient rows. "
            "The unprepared row calls `di.gradient(f, backend, x, *contexts)`: "
            "its own cost is di's preparation (argument checks, adapter lookup, signature) plus the call."
        ),
    )
    costs: dict[str, float] = {}
    for family in families:
        x = family_array(family, 10)
        backend = ZeroBackend(family)
        for n_contexts in (0, 2):
            contexts = (di.Constant(family_array(family, 10)), di.Constant(2.0))[:n_contexts]
            prep = di.prepare_gradient(nothing, backend, x, *contexts)
            loose = di.prepare_gradient(nothing, backend, x, *contexts, strict=False)
            for operator in ("gradient", "gradient, strict=False prep", "value_and_gradient", "gradient, unprepared"):
                chosen = loose if "strict=False" in operator else prep
                bare, through_di = _zero_thunks(operator, chosen, backend, x, contexts)
                timing = compare(bare, through_di, settings)
                own = timing.diff_ns
                costs[f"{family}/{n_contexts}/{operator}"] = own
                table.rows.append(
                    [
                        family,
                        str(n_contexts),
                        operator,
                        format_ns(timing.a_ns),
                        format_ns(timing.b_ns),
                        format_ns(own),
                        format_ratio(timing.ratio),
                    ]
                )
    return table, costs


def _zero_thunks(operator: str, prep: Any, backend: Any, x: Any, contexts: tuple[Any, ...]) -> tuple[Any, Any]:
    """The bare program call and the same call through ``di``."""
    name = operator.partition(",")[0]
    program = prep.programs[name]
    call = getattr(di, name)
    values = [c.value for c in contexts]

    def bare() -> Any:
        return program(x, *values)

    if operator.endswith("unprepared"):

        def through_di() -> Any:
            return call(nothing, backend, x, *contexts)

    else:

        def through_di() -> Any:
            return call(nothing, prep, backend, x, *contexts)

    return bare, through_di


# --- the strict signature check ----------------------------------------------------


def signature_check_table(settings: Settings, families: Sequence[str]) -> tuple[Table, dict[str, float]]:
    """``prep.check(f, backend, x, contexts)`` alone, with an array ``x`` and two
    ``Constant`` contexts (an array and a float)."""
    table = Table(
        "Strict signature check alone",
        ["x family", "prep.check(f, backend, x, contexts)", "empty call, same arguments", "check net of the call"],
        intro=(
            "`prep.check(f, backend, x, contexts)` with x an n = 10 float32 array and two `Constant` contexts "
            "(an array of x's family and a Python float), timed in blocks of many calls. The empty call is a "
            "method with the same signature that does nothing: the Python call overhead included in the first "
            "column. Target: under 1 us."
        ),
    )

    class Empty:
        def check(self, f: Any, backend: Any, x: Any, contexts: Any) -> None:
            return None

    empty = Empty()
    checks: dict[str, float] = {}
    for family in families:
        x = family_array(family, 10)
        backend = ZeroBackend(family)
        contexts = (di.Constant(family_array(family, 10)), di.Constant(2.0))
        prep = di.prepare_gradient(nothing, backend, x, *contexts)
        check = prep.check

        def checked(check: Any = check, backend: Any = backend, x: Any = x, contexts: Any = contexts) -> None:
            check(nothing, backend, x, contexts)

        def baseline(backend: Any = backend, x: Any = x, contexts: Any = contexts) -> None:
            empty.check(nothing, backend, x, contexts)

        timing = compare(baseline, checked, settings)
        checks[family] = timing.b_ns
        table.rows.append([family, format_ns(timing.b_ns), format_ns(timing.a_ns), format_ns(timing.diff_ns)])
    return table, checks


# --- import di -----------------------------------------------------------------------

_IMPORT_PROBE = """
import sys, time, json
t0 = time.perf_counter_ns()
{pre}
t1 = time.perf_counter_ns()
import di
t2 = time.perf_counter_ns()
engines = sorted(m for m in sys.modules if m.split('.')[0] in {engines!r})
print(json.dumps({{"pre_ns": t1 - t0, "di_ns": t2 - t1, "engines": engines}}))
"""


def _probe(pre: str, env: dict[str, str]) -> dict[str, Any]:
    code = _IMPORT_PROBE.format(pre=pre, engines=ENGINE_MODULES)
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True, env=env)
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def _importtime(env: dict[str, str]) -> dict[str, Any]:
    """``python -X importtime -c "import di"`` in a fresh subprocess: the self
    times of di's own modules, numpy's cumulative time, and the rest (standard
    library modules first imported by di), in nanoseconds."""
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", "import di"], cwd=ROOT, capture_output=True, text=True, env=env
    )
    own: dict[str, int] = {}
    numpy_us = total_us = 0
    for line in done.stderr.splitlines():
        parts = [part.strip() for part in line.removeprefix("import time:").split("|")]
        if len(parts) != 3 or not parts[0].isdigit():
            continue
        self_us, cumulative_us, module = int(parts[0]), int(parts[1]), parts[2]
        if module == "di" or module.startswith("di."):
            own[module] = self_us
        if module == "numpy":
            numpy_us = cumulative_us
        if module == "di":
            total_us = cumulative_us
    own_us = sum(own.values())
    top = sorted(own.items(), key=lambda item: -item[1])[:4]
    return {
        "own_ns": own_us * 1e3,
        "numpy_ns": numpy_us * 1e3,
        "rest_ns": (total_us - own_us - numpy_us) * 1e3,
        "total_ns": total_us * 1e3,
        "top": top,
    }


def import_table(repeats: int) -> tuple[Table, dict[str, Any]]:
    """``import di`` in fresh subprocesses: cold (numpy included) and with numpy
    already imported (di's own modules), and which engine modules it imported.

    Measured as a user's machine has it, with bytecode caches (kept in a temporary
    ``PYTHONPYCACHEPREFIX``, so the checkout is not written to, and warmed by one
    unrecorded import); also without them, as under ``PYTHONDONTWRITEBYTECODE=1``.
    """
    with tempfile.TemporaryDirectory(prefix="di-bench-pycache-") as cache:
        env = {key: value for key, value in os.environ.items() if key != "PYTHONDONTWRITEBYTECODE"}
        env["PYTHONPYCACHEPREFIX"] = cache
        no_cache = dict(env, PYTHONDONTWRITEBYTECODE="1", PYTHONPYCACHEPREFIX=os.path.join(cache, "unused"))
        _probe("import numpy", env)  # writes di's bytecode cache
        cold = [_probe("", env) for _ in range(repeats)]
        warm = [_probe("import numpy", env) for _ in range(repeats)]
        uncached = [_probe("import numpy", no_cache) for _ in range(repeats)]
        traces = [_importtime(env) for _ in range(repeats)]
    engines = sorted({m for probe in cold + warm + uncached for m in probe["engines"]})
    cold_ns = statistics.median(p["di_ns"] for p in cold)
    own_ns = statistics.median(p["di_ns"] for p in warm)
    uncached_ns = statistics.median(p["di_ns"] for p in uncached)
    numpy_ns = statistics.median(p["pre_ns"] for p in warm)
    table = Table(
        "import di",
        ["measure", "median time", "engine modules imported"],
        intro=(
            f"Fresh `{sys.executable} -c ...` subprocesses, median of {repeats}, with bytecode caches (in a "
            "temporary `PYTHONPYCACHEPREFIX`) unless said otherwise; 'engine modules' lists any module of "
            f"{', '.join(ENGINE_MODULES)} found in `sys.modules` after `import di`. The `-X importtime` rows split one "
            "cold import: di's own share is the sum of the self times of the `di` modules (target: under 10 ms), "
            "numpy's is its cumulative time. Target: no engine module."
        ),
    )
    table.rows.append(["import di (cold, numpy included)", format_ns(cold_ns), ", ".join(engines) or "none"])
    table.rows.append(["import numpy alone", format_ns(numpy_ns), "-"])
    table.rows.append(["import di after numpy (di's own modules)", format_ns(own_ns), "-"])
    table.rows.append(
        ["import di after numpy, no bytecode cache (PYTHONDONTWRITEBYTECODE=1)", format_ns(uncached_ns), "-"]
    )
    shares = {key: statistics.median(trace[key] for trace in traces) for key in ("own_ns", "numpy_ns", "rest_ns")}
    slowest = min(traces, key=lambda trace: abs(trace["own_ns"] - shares["own_ns"]))["top"]
    table.rows.append(
        [
            "`python -X importtime -c 'import di'`: di's own modules (self times)",
            format_ns(shares["own_ns"]),
            "slowest: " + ", ".join(f"{module} {us / 1e3:.2f} ms" for module, us in slowest),
        ]
    )
    table.rows.append(["`-X importtime`: numpy (cumulative)", format_ns(shares["numpy_ns"]), "-"])
    table.rows.append(
        ["`-X importtime`: standard-library modules first imported by di", format_ns(shares["rest_ns"]), "-"]
    )
    return table, {
        "cold_ns": cold_ns,
        "own_ns": shares["own_ns"],
        "wall_own_ns": own_ns,
        "numpy_ns": numpy_ns,
        "importtime_numpy_ns": shares["numpy_ns"],
        "engines": engines,
    }


# --- preparation -----------------------------------------------------------------------


def _median_ns(fn: Callable[[], Any], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = perf_counter_ns()
        fn()
        times.append(perf_counter_ns() - start)
    return statistics.median(times)


def preparation_table(
    f: Callable[..., Any],
    function_name: str,
    sizes: Sequence[int],
    repeats: int,
    engines: Sequence[str],
    labels: dict[str, str] | None = None,
) -> Table:
    """``di.prepare_gradient`` per backend and size; for ``AutoJAX(jit=True)``
    beside the native ``jax.jit(...).lower(x).compile()`` of a fresh function."""
    table = Table(
        "Preparation: di.prepare_gradient",
        ["backend", "function", "n", "di.prepare_gradient", "native equivalent", "ratio", "native equivalent is"],
        intro=(
            f"Median of {repeats} preparations (each one new: JAX traces and compiles again, since di wraps f "
            "afresh). The eager backends have no native preparation to compare with: the cost is di's."
        ),
    )
    labels = labels or {}
    for n in sizes:
        x_np = np.linspace(-1.0, 1.0, n)
        for key in engines:
            if (key == "finitediff" and n > 1000) or key == "torch-compile":
                continue  # torch.compile: the per-call table's rows compile; seconds each
            if key in ("jax", "jax-jit"):
                import jax
                import jax.numpy as jnp

                x: Any = jnp.asarray(x_np, dtype=jnp.float32)
                backend: di.AbstractBackend = di.AutoJAX(jit=key == "jax-jit")
            elif key == "torch":
                import torch

                x = torch.from_numpy(x_np.astype(np.float32))
                backend = di.AutoTorch()
            elif key == "autograd":
                x, backend = x_np, di.AutoAutograd()
            else:
                x, backend = x_np, di.AutoFiniteDiff()
            try:
                di_ns = _median_ns(lambda backend=backend, x=x: di.prepare_gradient(f, backend, x), repeats)
            except Exception as err:
                table.rows.append(
                    [labels.get(key, repr(backend)), function_name, str(n), "-", "-", "-", repr(err)[:200]]
                )
                continue
            native_ns: float | None = None
            what = "-"
            if key == "jax-jit":

                def native(x: Any = x) -> Any:
                    fresh = jax.jit(jax.grad(lambda x: f(x)))
                    return fresh.lower(x).compile()

                native_ns = _median_ns(native, repeats)
                what = "jax.jit(jax.grad(fresh f)).lower(x).compile()"
            ratio = None if native_ns is None else di_ns / native_ns
            table.rows.append(
                [
                    labels.get(key, repr(backend)),
                    function_name,
                    str(n),
                    format_ns(di_ns),
                    format_ns(native_ns),
                    format_ratio(ratio),
                    what,
                ]
            )
    return table


# --- conversions ---------------------------------------------------------------------------


def conversion_table(settings: Settings, n: int) -> Table:
    """``di.families`` converters between numpy, torch and jax at size ``n``,
    beside the native idiom each engine offers."""
    import jax
    import jax.dlpack
    import jax.numpy as jnp
    import torch

    from di.families import converter

    base = np.linspace(0.0, 1.0, n, dtype=np.float32)
    arrays = {"numpy": base, "torch": torch.from_numpy(base.copy()), "jax": jnp.asarray(base)}
    natives: dict[tuple[str, str], tuple[str, Callable[[Any], Any]]] = {
        ("numpy", "torch"): ("torch.from_numpy(a)", torch.from_numpy),
        ("torch", "numpy"): ("t.numpy()", lambda t: t.numpy()),
        ("torch", "jax"): ("jax.dlpack.from_dlpack(t)", jax.dlpack.from_dlpack),
        ("jax", "torch"): ("torch.from_dlpack(j)", torch.from_dlpack),
        ("jax", "numpy"): ("np.asarray(j)", np.asarray),
        ("numpy", "jax"): ("jnp.array(a) (copy)", jnp.array),
    }
    table = Table(
        f"Conversions between families at n = {n:.0e}",
        ["from", "to", "di.families converter", "native idiom", "native", "ratio", "result shares memory"],
        intro=(
            f"float32, n = {n}. JAX results are waited for with `block_until_ready()`. numpy -> jax copies on "
            "purpose, and so do torch -> jax below 2**18 elements (where the copy is as fast) and jax -> torch (a "
            "torch result may be written in place, a JAX buffer must not change); torch -> jax from 2**18 "
            "elements shares the buffer by DLPack (JAX only reads it); numpy <-> torch and jax -> numpy are "
            "zero-copy."
        ),
    )
    for (source, target), (idiom, native_fn) in natives.items():
        convert = converter(source, target)
        value = arrays[source]
        if target == "jax":

            def native(value: Any = value, native_fn: Any = native_fn) -> Any:
                return native_fn(value).block_until_ready()

            def through_di(value: Any = value, convert: Any = convert) -> Any:
                return convert(value).block_until_ready()

        else:

            def native(value: Any = value, native_fn: Any = native_fn) -> Any:
                return native_fn(value)

            def through_di(value: Any = value, convert: Any = convert) -> Any:
                return convert(value)

        timing = compare(native, through_di, settings)
        shares = _shares_memory(value, convert(value))
        table.rows.append(
            [
                source,
                target,
                format_ns(timing.b_ns),
                idiom,
                format_ns(timing.a_ns),
                format_ratio(timing.ratio),
                shares,
            ]
        )
    return table


def _address(value: Any) -> int | None:
    if isinstance(value, np.ndarray):
        return int(value.__array_interface__["data"][0])
    if hasattr(value, "data_ptr"):
        return int(value.data_ptr())
    try:
        return int(value.unsafe_buffer_pointer())
    except Exception:
        return None


def _shares_memory(a: Any, b: Any) -> str:
    first, second = _address(a), _address(b)
    if first is None or second is None:
        return "?"
    return "yes" if first == second else "no (copy)"
