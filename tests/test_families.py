"""Array families registered from outside: what a family gets from the registry
with the four required methods only (no DLPack), and which family an array of a
class that several families take belongs to."""

from __future__ import annotations

import sys
import types
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from conftest import ENGINES, assert_close, backend_params
from extension_support import restored_registries

import di
from di.families import converter, family_of

# --- a family whose arrays have no DLPack methods -------------------------------------------


class Boxed:
    """An array class that wraps a NumPy array and speaks neither DLPack nor the
    buffer protocol: its library converts through NumPy only."""

    __array_priority__ = 100

    def __init__(self, data: Any) -> None:
        self.data = np.asarray(data)

    shape = property(lambda self: self.data.shape)
    dtype = property(lambda self: self.data.dtype)
    ndim = property(lambda self: self.data.ndim)
    size = property(lambda self: self.data.size)

    def __array_namespace__(self, api_version: str | None = None) -> Any:
        return BOXED_NAMESPACE

    def __getitem__(self, key: Any) -> Boxed:
        return Boxed(self.data[key])


def _unboxed(value: Any) -> Any:
    if isinstance(value, Boxed):
        return value.data
    if isinstance(value, (list, tuple)):
        return type(value)(_unboxed(item) for item in value)
    return value


class _BoxedNamespace(types.ModuleType):
    """NumPy's functions on boxed arrays, returning boxed arrays."""

    def __getattr__(self, name: str) -> Any:
        function = getattr(np, name)
        if not callable(function) or isinstance(function, type):
            return function

        def boxed(*args: Any, **kwargs: Any) -> Any:
            result = function(*_unboxed(args), **{k: _unboxed(v) for k, v in kwargs.items()})
            return Boxed(result) if isinstance(result, (np.ndarray, np.generic)) else result

        return boxed


BOXED_NAMESPACE = _BoxedNamespace("boxlib.namespace")


class BoxedFamily(di.Family):
    """The four required methods, as docs/backends.md lists them, and no more."""

    name = "boxed"
    display = "Boxed"
    module = "boxlib"

    def array_types(self, module: types.ModuleType) -> tuple[type, ...]:
        return (module.Boxed,)

    def to_numpy(self, value: Any) -> np.ndarray:
        return value.data  # type: ignore[no-any-return]

    def from_numpy(self, array: np.ndarray) -> Any:
        return Boxed(array)

    def namespace(self) -> Any:
        return BOXED_NAMESPACE


@pytest.fixture
def boxed_family() -> Iterator[None]:
    module = types.ModuleType("boxlib")
    module.Boxed = Boxed  # type: ignore[attr-defined]
    sys.modules["boxlib"] = module
    try:
        with restored_registries():
            di.register_family(BoxedFamily())
            yield
    finally:
        del sys.modules["boxlib"]


def _sine_sum(x: Any) -> Any:
    xp = di.array_namespace(x)
    return xp.sum(xp.sin(x) * x)


def _sine_times(x: Any) -> Any:
    xp = di.array_namespace(x)
    return xp.sin(x) * 3.0


@pytest.mark.usefixtures("boxed_family")
@pytest.mark.parametrize("backend", backend_params(ENGINES))  # (conversions: compiled or not alike)
def test_a_family_without_dlpack_reaches_every_engine_through_numpy(backend: di.AbstractBackend) -> None:
    values = np.array([0.3, -1.2, 2.5])
    x = Boxed(values.copy())
    assert family_of(x) == "boxed"
    gradient = di.gradient(_sine_sum, backend, x)
    assert isinstance(gradient, Boxed) and gradient.dtype == np.float64
    assert_close(gradient.data, np.cos(values) * values + np.sin(values), backend, np.float64, "gradient")
    jacobian = di.jacobian(_sine_times, backend, x)
    assert isinstance(jacobian, Boxed)
    assert_close(jacobian.data, np.diag(3 * np.cos(values)), backend, np.float64, "jacobian")
    dense = di.jacobian(_sine_times, di.AutoSparse(backend, dense_result=True), x)
    assert isinstance(dense, Boxed) and dense.shape == (3, 3)
    assert_close(dense.data, np.diag(3 * np.cos(values)), backend, np.float64, "sparse jacobian")
    np.testing.assert_array_equal(x.data, values)


@pytest.mark.usefixtures("boxed_family")
@pytest.mark.parametrize("library", ["torch", "jax"])
def test_conversions_between_a_family_without_dlpack_and_one_with_it_copy_through_numpy(library: str) -> None:
    pytest.importorskip(library)
    values = np.array([1.0, 2.0])
    there = converter("boxed", library)(Boxed(values))
    assert family_of(there) == library
    back = converter(library, "boxed")(there)
    assert isinstance(back, Boxed)
    np.testing.assert_array_equal(back.data, values)


# --- a family for a subclass of another family's array class --------------------------------


class Tagged(np.ndarray):
    """An ``ndarray`` subclass with a family of its own."""


class TaggedFamily(di.Family):
    name = "tagged"
    display = "Tagged"
    module = "taglib"

    def array_types(self, module: types.ModuleType) -> tuple[type, ...]:
        return (module.Tagged,)

    def to_numpy(self, value: Any) -> np.ndarray:
        return value.view(np.ndarray)

    def from_numpy(self, array: np.ndarray) -> Any:
        return np.asarray(array).view(Tagged)

    def namespace(self) -> Any:
        return di.array_namespace(np.zeros(0))


@pytest.fixture
def tagged_family() -> Iterator[None]:
    module = types.ModuleType("taglib")
    module.Tagged = Tagged  # type: ignore[attr-defined]
    sys.modules["taglib"] = module
    try:
        with restored_registries():
            assert family_of(np.zeros(2).view(Tagged)) == "numpy"  # cached before the registration
            di.register_family(TaggedFamily())
            yield
    finally:
        del sys.modules["taglib"]


@pytest.mark.usefixtures("tagged_family")
@pytest.mark.parametrize("backend", backend_params(ENGINES))  # (conversions: compiled or not alike)
def test_a_family_of_an_ndarray_subclass_wins_over_numpy(backend: di.AbstractBackend) -> None:
    values = np.array([0.3, -1.2, 2.5])
    x = values.copy().view(Tagged)
    assert (family_of(x), family_of(values), family_of(np.float64(1.0))) == ("tagged", "numpy", "numpy")
    gradient = di.gradient(_sine_sum, backend, x)
    assert type(gradient) is Tagged
    assert_close(gradient.view(np.ndarray), np.cos(values) * values + np.sin(values), backend, np.float64, "gradient")
    plain = di.gradient(_sine_sum, backend, values)
    assert type(plain) is np.ndarray


@pytest.mark.parametrize("given", [3, None, "numpy", BoxedFamily], ids=["int", "none", "str", "class"])
def test_register_family_refuses_what_is_not_a_family_with_a_di_error(given: object) -> None:
    with pytest.raises(di.InvalidOptionTypeError, match="register_family needs an instance") as caught:
        di.register_family(given)  # type: ignore[arg-type]
    assert isinstance(caught.value, TypeError)
    if given is BoxedFamily:
        assert "pass an instance" in str(caught.value)
