"""The adapter protocol's record of capabilities, and the compile hooks strategies use."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import pytest

import di
from di.backends.capabilities import OPERATOR_FAMILIES, Capabilities
from di.backends.fallbacks import programs
from di.backends.protocol import Adapter, Programs
from di.backends.registry import get_adapter, register_backend
from di.contexts import Context
from di.engines.finitediff.adapter import FiniteDiffAdapter


class OnePrimitive(Adapter):
    """An out-of-tree adapter: its record and one primitive."""

    capabilities = Capabilities(
        family="numpy", cache=False, cache_note="no buffers here", aux=frozenset({"pushforward"})
    )

    def prepare_pushforward_programs(
        self, f: Callable[..., Any], x: Any, tx: Sequence[Any], contexts: Sequence[Context], *, has_aux: bool = False
    ) -> Programs:
        return FiniteDiffAdapter(di.AutoFiniteDiff()).prepare_pushforward_programs(f, x, tx, contexts, has_aux=has_aux)


@dataclasses.dataclass(frozen=True)
class OnePrimitiveBackend(di.AbstractBackend):
    pass


register_backend(OnePrimitiveBackend, OnePrimitive)


def test_the_record_is_declared_and_its_native_operators_are_the_methods() -> None:
    record = OnePrimitive.capabilities
    assert record.native == frozenset({"pushforward"})
    assert (record.family, record.cache, record.cache_note) == ("numpy", False, "no buffers here")
    # second order from first would nest the engine in itself, which it does not say it can
    nested = {"hvp", "hessian", "second_derivative"}
    assert OnePrimitive.support() == {
        family: "native" if family == "pushforward" else "unsupported" if family in nested else "fallback"
        for family in OPERATOR_FAMILIES
    }
    with pytest.raises(di.UnsupportedContextError, match="no buffers here"):
        di.gradient(lambda x: (x * x).sum(), OnePrimitiveBackend(), np.ones(2), di.Cache(np.zeros(2)))
    gradient = di.gradient(lambda x: (x * x).sum(), OnePrimitiveBackend(), np.array([1.0, 2.0]))
    np.testing.assert_allclose(gradient, [2, 4])


def test_the_record_is_the_only_declaration() -> None:
    class Declared(Adapter):
        capabilities = Capabilities(family="numpy", cache=False, cache_note="read only", float64=True)

    assert Declared.capabilities.native == frozenset()
    for name in ("family", "supports_cache", "cache_note", "evaluates_in_float64", "native_pytrees"):
        assert not hasattr(Declared, name), name  # read from the record, nowhere else
    adapter = Declared(di.AutoFiniteDiff())
    assert adapter.instance_capabilities() == Declared.capabilities
    adapter.capabilities = dataclasses.replace(Declared.capabilities, cache=True)  # an instance's own record
    assert adapter.instance_capabilities().cache and not Declared.capabilities.cache


def test_attributes_declaring_what_the_record_holds_are_refused() -> None:
    with pytest.raises(di.InvalidOptionError, match=r"Capabilities\(family=\.\.\., cache=\.\.\.\)"):

        class Attributes(Adapter):
            family = "numpy"
            supports_cache = False


def test_has_aux_is_refused_where_the_record_does_not_list_it() -> None:
    class NoAux(OnePrimitive):
        capabilities = Capabilities(family="numpy")

    no_aux, declared = _selector(), _selector()
    register_backend(no_aux, NoAux)
    register_backend(declared, OnePrimitive)
    with pytest.raises(di.UnsupportedOperatorError, match="capabilities do not list pushforward in aux"):
        di.gradient(lambda x: ((x * x).sum(), x), no_aux(), np.ones(2), has_aux=True)
    x = np.array([1.0, 2.0])
    g, aux = di.gradient(lambda x: ((x * x).sum(), x), declared(), x, has_aux=True)  # the same f and call
    np.testing.assert_allclose(g, [2.0, 4.0], rtol=1e-6)
    np.testing.assert_array_equal(aux, x)
    with pytest.raises(di.InvalidOptionError, match="take no has_aux"):
        Capabilities(aux=frozenset({"hvp"}))


def test_the_records_of_the_engines() -> None:
    pytest.importorskip("jax")
    pytest.importorskip("torch")
    pytest.importorskip("autograd")
    records = {b: get_adapter(b).capabilities for b in (di.AutoJAX(), di.AutoTorch(), di.AutoAutograd())}
    assert records[di.AutoJAX()].differentiates == "own" and records[di.AutoJAX()].compile_option == "jit"
    assert records[di.AutoTorch()].compile_option == "compile"
    assert not records[di.AutoAutograd()].cache
    assert get_adapter(di.AutoFiniteDiff()).capabilities.differentiates == "any"
    assert get_adapter(di.AutoTorch()).instance_capabilities().pytrees == {"gradient"}
    # compiled gradients take pytrees leaf by leaf too (flattened inside the graph; issue 23)
    assert get_adapter(di.AutoTorch(compile=True)).instance_capabilities().pytrees == {"gradient"}
    assert get_adapter(di.AutoJAX(jit=True)).compiled and not get_adapter(di.AutoJAX()).compiled
    with pytest.raises(ValueError, match="differentiates"):
        Capabilities(differentiates="some")


# --- traceable_twin and compile_program ----------------------------------------------------------------


def test_engines_that_do_not_fuse_have_no_twin() -> None:
    for backend in di.available_backends():  # each engine's default (eager) selector
        adapter = get_adapter(backend)
        assert adapter.traceable_twin() is None, backend
        if not isinstance(backend, di.AutoJAX):
            with pytest.raises(di.UnsupportedOperatorError, match="does not compile"):
                adapter.compile_program(lambda x: x, np.ones(2), None, [])


def test_jax_compiles_a_program_built_from_its_twins_programs() -> None:
    jax = pytest.importorskip("jax")
    jit = get_adapter(di.AutoJAX(jit=True))
    twin = jit.traceable_twin()
    assert twin is get_adapter(di.AutoJAX(jit=False))
    traces = []

    def f(x: Any, a: Any, n: int) -> Any:
        traces.append(1)
        xp = di.array_namespace(x)
        return xp.sum(a[:n] * x[:n] ** 2)

    x = np.linspace(-1.0, 1.0, 4)  # float64: compiled in an x64 scope
    contexts = [di.Constant(np.ones(4)), di.Constant(3)]
    with jax.enable_x64(True):  # the twin's programs are prepared on what the compiled program receives
        engine_contexts = [di.Constant(jax.numpy.ones(4)), di.Constant(3)]
        gradient = programs(twin, "gradient", f, jax.numpy.asarray(x), engine_contexts)["gradient"]

    def core(x: Any, a: Any, n: int) -> Any:
        return gradient(x, a, n) * 2.0  # the strategy's own work, fused with the engine's

    compiled = jit.compile_program(core, x, None, contexts)
    traced = len(traces)
    assert traced >= 1  # compiled now
    for scale in (1.0, 2.0, 3.0):
        g = compiled(x, np.full(4, scale), 3)
        np.testing.assert_allclose(np.asarray(g), 4 * scale * np.where(np.arange(4) < 3, x, 0.0))
        assert np.asarray(g).dtype == np.float64
    assert len(traces) == traced  # traced contexts: no new trace
    compiled(x, np.ones(4), 2)  # a new static value compiles again, once
    compiled(x, np.ones(4), 2)
    assert len(traces) == traced + 1

    def halved(x: Any, a: Any, n: int) -> Any:
        return gradient(x, a, n) / 2.0

    before = len(traces)
    lazy = jit.compile_program(halved, x, None, contexts, on_first_use=True)
    assert len(traces) == before  # not compiled yet
    np.testing.assert_allclose(np.asarray(lazy(x, np.ones(4), 3)), np.asarray(compiled(x, np.ones(4), 3)) / 4)
    assert len(traces) == before + 1  # compiled by its first call


# --- what register_backend and the fallbacks refuse from a half-written engine ---------------------------


def _sum_squares(x: Any) -> Any:
    xp = di.array_namespace(x)
    return xp.sum(x * x)


def _selector() -> type[di.AbstractBackend]:
    """A fresh selector type (no ``name``: nothing is registered under a name)."""

    @dataclasses.dataclass(frozen=True)
    class AutoHalf(di.AbstractBackend):
        pass

    return AutoHalf


def test_register_backend_refuses_what_cannot_serve() -> None:
    selector = _selector()
    with pytest.raises(di.InvalidOptionTypeError, match=r"subclass of di\.AbstractBackend .* not the class int"):
        register_backend(int, OnePrimitive)  # type: ignore[arg-type]
    with pytest.raises(
        di.InvalidOptionTypeError, match=r"subclass of di\.backends\.protocol\.Adapter .* the class dict"
    ):
        register_backend(selector, dict)  # type: ignore[arg-type]
    with pytest.raises(di.InvalidOptionTypeError, match="an instance of OnePrimitive \\(pass the class itself"):
        register_backend(selector, OnePrimitive(selector()))  # type: ignore[arg-type]
    with pytest.raises(di.InvalidOptionError, match="an adapter path is 'module:Class'"):
        register_backend(selector, "mypackage.adapter")
    # nothing was registered by the refused calls
    with pytest.raises(di.InvalidInputError, match="no adapter is registered for AutoHalf"):
        di.gradient(_sum_squares, selector(), np.ones(2))


def test_an_adapter_path_that_does_not_resolve_is_named(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "di_test_adapter_needing_an_engine.py").write_text("import di_test_engine_not_installed\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    cases = [
        ("di_test_no_such_module:Adapter", di.InvalidOptionError, "names the module 'di_test_no_such_module'"),
        ("numpy:NoSuchThing", di.InvalidOptionError, "the module 'numpy' has no 'NoSuchThing'"),
        ("numpy:ndarray", di.InvalidOptionTypeError, "names the class ndarray, not a subclass of"),
        (
            "di_test_adapter_needing_an_engine:Adapter",
            di.BackendNotInstalledError,
            "AutoHalf needs di_test_engine_not_installed, which is not installed",
        ),
    ]
    for path, error, fragment in cases:
        selector = _selector()
        register_backend(selector, path)
        with pytest.raises(error) as info:
            di.gradient(_sum_squares, selector(), np.ones(2))
        assert fragment in str(info.value), str(info.value)
        assert path in str(info.value) or error is di.BackendNotInstalledError
        assert "[]" not in str(info.value)  # no pip extra the selector never declared


class _OnlyPushforward(Adapter):
    def prepare_pushforward_programs(
        self, f: Callable[..., Any], x: Any, tx: Sequence[Any], contexts: Sequence[Context]
    ) -> Programs:
        return {"pushforward": lambda x, tx, *values: tuple(2 * np.asarray(x) * np.asarray(t) for t in tx)}


class _ReturnsNone(Adapter):
    def prepare_pullback_programs(
        self, f: Callable[..., Any], x: Any, ty: Sequence[Any], contexts: Sequence[Context]
    ) -> Programs:
        return None  # type: ignore[return-value]


class _UnknownFamily(Adapter):
    capabilities = Capabilities(family="di_test_no_such_family")

    def prepare_pushforward_programs(
        self, f: Callable[..., Any], x: Any, tx: Sequence[Any], contexts: Sequence[Context]
    ) -> Programs:
        raise AssertionError("never prepared: the family is refused first")


def test_programs_an_adapter_leaves_out_are_named_at_preparation() -> None:
    only_pushforward, returns_none, unknown_family = _selector(), _selector(), _selector()
    register_backend(only_pushforward, _OnlyPushforward)
    register_backend(returns_none, _ReturnsNone)
    register_backend(unknown_family, _UnknownFamily)
    x = np.array([1.0, 2.0])
    for prepare in (
        lambda: di.prepare_pushforward(_sum_squares, only_pushforward(), x, (x,)),
        lambda: di.prepare_gradient(_sum_squares, only_pushforward(), x),
    ):
        with pytest.raises(di.InvalidOptionTypeError) as info:
            prepare()
        message = str(info.value)
        assert "_OnlyPushforward.prepare_pushforward_programs (the adapter of AutoHalf)" in message
        assert "without a callable 'value_and_pushforward'" in message
        assert "{'pushforward': ..., 'value_and_pushforward': ...}" in message
    with pytest.raises(di.InvalidOptionTypeError, match=r"prepare_pullback_programs .* returned a NoneType"):
        di.prepare_gradient(_sum_squares, returns_none(), x)
    with pytest.raises(di.InvalidOptionError, match="family 'di_test_no_such_family', which is not registered"):
        di.prepare_gradient(_sum_squares, unknown_family(), x)


def test_x_writes_takes_one_of_the_declared_fates() -> None:
    from di.backends.capabilities import X_WRITES

    assert Capabilities().x_writes == "refused" and set(X_WRITES) == {"refused", "own copy"}
    assert Capabilities(x_writes="own copy").x_writes == "own copy"
    with pytest.raises(di.InvalidOptionError, match="x_writes"):
        Capabilities(x_writes="visible")
