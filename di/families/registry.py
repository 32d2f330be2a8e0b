"""The family registry: detection by class, conversion through one hub.

NumPy's family, the hub, is registered here. Every other family comes with the
engine that brings it (its record's ``family``, registered with the engine) or
is registered from outside with :func:`register_family`; importing a family
module imports no library. The engines are registered by a higher layer, which
this registry asks to (:func:`di.loaders.load_engines`) before it first answers.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable
from typing import Any

import numpy as np

from di.errors import InvalidOptionTypeError
from di.families.family import Family
from di.loaders import load_engines

__all__ = [
    "ArraySpec",
    "converter",
    "dtype_kind",
    "families",
    "family_of",
    "get_family",
    "identity",
    "is_64_bit",
    "is_floating_dtype",
    "register_family",
    "spec_of",
]

_FAMILIES: dict[str, Family] = {}
_FAMILY_BY_TYPE: dict[type, str | None] = {}
_CONVERTERS: dict[tuple[str, str], Callable[[Any], Any]] = {}
_LOAD_LOCK = threading.RLock()
_loaded_into: dict[str, Family] | None = None
"""The table the engines' families were registered into (a table put in its place,
as a test isolating its registrations does, has them registered again)."""
_loading = False


class ArraySpec:
    """What a prep remembers about one array: family, shape, dtype, device.

    It holds no data, only metadata, so a prep never keeps a caller's array alive.

    Args:
        family: the array family's name.
        shape: the shape, as a tuple of ints.
        dtype: the family's own dtype object.
        device: the device (``None`` where the family has one only).

    Examples:
        >>> import numpy as np
        >>> from di.families import spec_of
        >>> spec_of(np.zeros((2, 3), dtype=np.float32))
        ArraySpec(numpy float32 (2, 3))
    """

    __slots__ = ("device", "dtype", "family", "shape")

    def __init__(self, family: str, shape: tuple[int, ...], dtype: Any, device: Any) -> None:
        self.family = family
        self.shape = shape
        self.dtype = dtype
        self.device = device

    def describe(self) -> str:
        """One-line human description, used in mismatch reports."""
        record = get_family(self.family)
        device = "" if self.device is None or record.is_default_device(self.device) else f" on {self.device}"
        return f"{self.family} {record.dtype_name(self.dtype)} {self.shape}{device}"

    def __repr__(self) -> str:
        return f"ArraySpec({self.describe()})"

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, ArraySpec)
            and self.family == other.family
            and self.shape == other.shape
            and self.dtype == other.dtype
            and self.device == other.device
        )

    def __hash__(self) -> int:
        return hash((self.family, self.shape, str(self.dtype), str(self.device)))


def identity(value: Any) -> Any:
    """The conversion that converts nothing."""
    return value


def register_family(family: Family) -> Family:
    """Register an array family, so that every backend accepts its arrays and
    returns results in it.

    Args:
        family: an instance of a :class:`di.families.Family` subclass.

    Returns:
        ``family``, registered under ``family.name`` (replacing one of that name).

    Raises:
        InvalidOptionTypeError: ``family`` is not a :class:`~di.families.Family`
            instance with a name and a module (a ``di`` error and a ``TypeError``).

    Examples:
        >>> import di
        >>> from di.families import Family, get_family
        >>> get_family("numpy") is di.register_family(get_family("numpy"))
        True
    """
    _load_engine_families()  # the engines' first: a family registered here replaces theirs
    if not isinstance(family, Family) or not family.name or not family.module:
        hint = " (a class: pass an instance, MyFamily())" if isinstance(family, type) else ""
        raise InvalidOptionTypeError(
            f"register_family needs an instance of a di.families.Family subclass with a name and a module, "
            f"not {family!r}{hint}"
        )
    return _add(family)


def add_engine_family(family: Family) -> Family:
    """Register the family an engine brings, as :func:`register_family` does but
    without asking for the engines first: the engine registry calls it while it
    registers them (and so holds their lock, which asking would wait for).

    Examples:
        >>> from di.families import get_family
        >>> from di.families.registry import add_engine_family
        >>> add_engine_family(get_family("numpy")).name
        'numpy'
    """
    return _add(family)


def registered_names() -> list[str]:
    """The names of the families registered so far, asking for nothing.

    Examples:
        >>> from di.families.registry import registered_names
        >>> "numpy" in registered_names()
        True
    """
    return list(_FAMILIES)


def _add(family: Family) -> Family:
    _FAMILIES[family.name] = family
    _FAMILY_BY_TYPE.clear()
    _CONVERTERS.clear()
    return family


def _load_engine_families() -> None:
    """Have the engines' families registered, once, before the registry first
    answers (a thread asking meanwhile waits; the loading thread's own questions
    find the registry as far as it got)."""
    global _loaded_into, _loading
    if _loaded_into is _FAMILIES:
        return
    with _LOAD_LOCK:
        if _loaded_into is _FAMILIES or _loading:
            return
        _loading = True
        try:
            load_engines()
        finally:
            _loading = False
        _loaded_into = _FAMILIES


def families() -> tuple[Family, ...]:
    """Every registered family, NumPy first.

    Examples:
        >>> from di.families import families
        >>> families()[0].name
        'numpy'
    """
    _load_engine_families()
    return tuple(_FAMILIES.values())


def get_family(name: str) -> Family:
    """The registered family named ``name``.

    Raises:
        KeyError: no family of that name is registered.

    Examples:
        >>> from di.families import get_family
        >>> get_family("numpy").mutable
        True
    """
    try:
        return _FAMILIES[name]
    except KeyError:
        _load_engine_families()
        return _FAMILIES[name]


def family_of(value: Any) -> str | None:
    """The name of ``value``'s array family, or ``None`` if it is not an array.

    No library is imported: a family recognises its arrays once its module is in
    ``sys.modules``, which it must be for such an array to exist. NumPy scalars
    (``np.float64(1.0)``) count as NumPy arrays. Where several families take
    ``value``'s class, the one registered for the class nearest it (a subclass of
    ``np.ndarray`` with its own family, rather than NumPy's) wins.

    Args:
        value: any object.

    Returns:
        ``"numpy"``, ``"torch"``, ``"jax"``, another registered family's name,
        or ``None``.

    Examples:
        >>> import numpy as np
        >>> from di.families import family_of
        >>> family_of(np.zeros(3)), family_of(2.0)
        ('numpy', None)
    """
    cls = type(value)
    try:
        return _FAMILY_BY_TYPE[cls]
    except KeyError:
        _load_engine_families()
        name = _most_specific([family for family in _FAMILIES.values() if family.is_array(value)], cls)
        if name is not None or len(_FAMILY_BY_TYPE) < 256:
            _FAMILY_BY_TYPE[cls] = name
        return name


def _most_specific(matching: list[Family], cls: type) -> str | None:
    """The family among ``matching`` (those whose :meth:`~di.families.Family.is_array`
    takes an instance of ``cls``) whose array class is nearest ``cls`` in its MRO: a
    family registered for a subclass of ``ndarray`` wins over NumPy's, which takes
    it by ``isinstance``. Ties (and families that recognise arrays otherwise than
    by class) go to the first registered. Asked once per class: the result is cached."""
    if len(matching) <= 1:
        return matching[0].name if matching else None
    mro = cls.__mro__

    def distance(family: Family) -> int:
        module = sys.modules.get(family.module)
        types = family.array_types(module) if module is not None else ()
        return min((mro.index(t) for t in types if t in mro), default=len(mro))

    return min(matching, key=distance).name


def is_floating_dtype(dtype: Any) -> bool:
    """Whether ``dtype`` (of any family) is a real floating-point type.

    Args:
        dtype: a dtype of any registered family.

    Returns:
        ``True`` for float16, bfloat16, float32, float64 (and other real floats).

    Examples:
        >>> import numpy as np
        >>> from di.families import is_floating_dtype
        >>> is_floating_dtype(np.float32), is_floating_dtype(np.int64)
        (True, False)
    """
    is_floating_point = getattr(dtype, "is_floating_point", None)
    if isinstance(is_floating_point, bool):  # a dtype that says it itself
        return is_floating_point
    try:
        np_dtype = np.dtype(dtype)
    except TypeError:
        name = str(getattr(dtype, "name", dtype)).rsplit(".", 1)[-1]
        return name.startswith("float") or name == "bfloat16"
    if np_dtype.kind == "f":
        return True
    return np_dtype.kind == "V" and "bfloat16" in np_dtype.name  # ml_dtypes.bfloat16


def is_64_bit(dtype: Any) -> bool:
    """Whether a dtype of any family (or its name) has 8-byte elements (what JAX
    keeps only inside ``jax.enable_x64``).

    Examples:
        >>> import numpy as np
        >>> from di.families import is_64_bit
        >>> is_64_bit(np.float64), is_64_bit("float32")
        (True, False)
    """
    try:
        return np.dtype(dtype).itemsize == 8
    except TypeError:  # another library's dtype: its own size, else its name's
        itemsize = getattr(dtype, "itemsize", None)
        if isinstance(itemsize, int):
            return itemsize == 8
        name = str(getattr(dtype, "name", dtype)).rsplit(".", 1)[-1]
        return name in ("float64", "int64", "uint64", "complex64")


def dtype_kind(dtype: Any) -> str:
    """What kind of number a dtype of any family holds.

    Args:
        dtype: a dtype of any registered family.

    Returns:
        ``"float"`` (real floating point, bfloat16 included), ``"int"`` (signed
        or unsigned), ``"bool"``, ``"complex"``, or ``"other"`` (object, strings,
        dates, records: no numbers at all).

    Examples:
        >>> import numpy as np
        >>> from di.families import dtype_kind
        >>> [dtype_kind(np.dtype(t)) for t in (np.float32, np.uint8, bool, np.complex64, object)]
        ['float', 'int', 'bool', 'complex', 'other']
    """
    if is_floating_dtype(dtype):
        return "float"
    try:
        kind = np.dtype(dtype).kind
    except TypeError:  # another library's dtype: by its name
        name = str(getattr(dtype, "name", dtype)).rsplit(".", 1)[-1]
        if name == "bool":
            return "bool"
        if name.startswith(("int", "uint")):
            return "int"
        return "complex" if name.startswith(("complex", "cfloat", "cdouble")) else "other"
    return {"b": "bool", "i": "int", "u": "int", "c": "complex"}.get(kind, "other")


def spec_of(value: Any) -> ArraySpec:
    """Describe an array.

    Args:
        value: an array of a registered family.

    Returns:
        Its :class:`ArraySpec`.

    Raises:
        TypeError: ``value`` is not an array of a known family.

    Examples:
        >>> import numpy as np
        >>> from di.families import spec_of
        >>> spec_of(np.float64(1.0)).shape
        ()
    """
    name = family_of(value)
    if name is None:
        raise TypeError(f"not an array: {type(value).__name__}")
    family = _FAMILIES[name]
    return ArraySpec(name, family.shape(value), family.dtype(value), family.device(value))


def converter(source: str | None, target: str) -> Callable[[Any], Any]:
    """The function converting arrays of family ``source`` to family ``target``.

    Every conversion goes through one hub: NumPy (each family converts to and
    from it), or DLPack between two families that both take it (zero-copy):
    arrays on a device, and, into an immutable family, large host arrays (the
    target family's ``from_dlpack`` decides by size, see
    :func:`di.families.family.by_numpy`). A conversion into a mutable family from
    an immutable one copies.

    Args:
        source: family of the input, or ``None`` for non-array values (which pass
            through unchanged).
        target: family wanted.

    Returns:
        A one-argument function; the identity when no conversion is needed.

    Examples:
        >>> import numpy as np
        >>> from di.families import converter
        >>> converter("numpy", "numpy")(np.ones(2))
        array([1., 1.])
    """
    if source is None or source == target:
        return identity
    try:
        return _CONVERTERS[(source, target)]
    except KeyError:
        family = _FAMILIES[source]
        convert = _through_hub(family, _FAMILIES[target])
        if family.module in sys.modules:  # what the path takes is known once the source's arrays can exist
            _CONVERTERS[(source, target)] = convert
        return convert


def _speaks_dlpack(family: Family) -> bool:
    """Whether ``family``'s arrays can be handed to another library's
    :meth:`~di.families.Family.from_dlpack`: the family gives its own
    :meth:`~di.families.Family.dlpack_source`, or each of its array classes has
    ``__dlpack__`` and ``__dlpack_device__``. Asked once per conversion path; a
    family without them converts through NumPy (a copy where a library copies)."""
    if type(family).dlpack_source is not Family.dlpack_source:
        return True
    module = sys.modules.get(family.module)
    if module is None:  # no array of it exists yet (and the path is not cached: asked again once one does)
        return False
    return all(hasattr(cls, "__dlpack__") and hasattr(cls, "__dlpack_device__") for cls in family.array_types(module))


def _through_hub(source: Family, target: Family) -> Callable[[Any], Any]:
    if source.name == "numpy":
        return target.from_numpy
    if target.name == "numpy":
        return source.to_numpy
    from_numpy, to_numpy = target.from_numpy, source.to_numpy
    if type(target).from_dlpack is Family.from_dlpack or not _speaks_dlpack(source):
        return lambda value: from_numpy(to_numpy(value))
    from_dlpack, dlpack_source = target.from_dlpack, source.dlpack_source

    def convert(value: Any) -> Any:
        result = from_dlpack(dlpack_source(value))
        if result is NotImplemented:
            return from_numpy(to_numpy(value))
        return result

    return convert


def _register_numpy() -> None:
    from di.families.numpy import FAMILY

    _add(FAMILY)  # (asking for the engines here would import them while this module is half made)


_register_numpy()
