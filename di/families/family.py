"""The :class:`Family` record: what ``di`` knows about one kind of array.

An *array family* is a library's array type (NumPy's ``ndarray``, torch's
``Tensor``, JAX's ``Array``, or any other registered with
:func:`di.register_family`). Everything ``di`` does with the caller's arrays goes
through their family's record: recognising them without importing the library,
converting them (through one hub, NumPy, or DLPack between two libraries that
both speak it), describing them in a prep's signature, writing into an ``out=``
buffer, and building sparse results. No other module asks which library an
array comes from.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any, ClassVar

import numpy as np

from di.errors import UnsupportedOperatorError

__all__ = ["SHARED_HOST_MIN_ELEMENTS", "Family", "Matcher", "by_numpy", "extended_precision", "numpy_lacks"]

Matcher = Callable[[Any], bool]
_DLPACK_CPU = 1


SHARED_HOST_MIN_ELEMENTS = 1 << 18
"""The smallest host array an immutable family takes by DLPack without a copy
(:func:`by_numpy` with ``shared``). Below it the NumPy hub's copy is as fast
(torch -> JAX here: 44 against 44 us at 1e5 float32 elements, 265 against 68 us
at 1e6; a DLPack import has a constant cost of its own)."""


def by_numpy(value: Any, shared: bool = False) -> bool:
    """Whether an array that speaks DLPack reaches another library faster (or
    only) through the NumPy hub: it lives in host memory in a dtype NumPy has, or
    it spans several devices (a sharded JAX array, which DLPack cannot share as
    one buffer: NumPy gathers it). ``shared``: the receiving family may share the
    buffer (an immutable one, which only reads it), so a host array of at least
    :data:`SHARED_HOST_MIN_ELEMENTS` elements goes by DLPack, without a copy.

    Examples:
        >>> import numpy as np
        >>> from di.families.family import SHARED_HOST_MIN_ELEMENTS, by_numpy
        >>> by_numpy(np.zeros(4)), by_numpy(np.zeros(SHARED_HOST_MIN_ELEMENTS), shared=True)
        (True, False)
    """
    try:
        device_type = value.__dlpack_device__()[0]
    except BufferError:
        return True
    if device_type != _DLPACK_CPU or numpy_lacks(value.dtype):
        return False
    return not shared or _size(value) < SHARED_HOST_MIN_ELEMENTS


def _size(value: Any) -> int:
    size = getattr(value, "size", None)
    if isinstance(size, int):  # NumPy, JAX
        return size
    numel = getattr(value, "numel", None)  # torch (whose size is a method)
    return int(numel()) if callable(numel) else 0


def numpy_lacks(dtype: Any) -> bool:
    """Whether NumPy has no dtype like ``dtype`` (bfloat16): such arrays cannot
    pass through the NumPy hub without a cast, so they go by DLPack. Asked on
    every conversion: a NumPy dtype is told by its kind first (``str`` of one
    costs microseconds), ml_dtypes' bfloat16 being of kind ``"V"``."""
    if isinstance(dtype, np.dtype):
        return dtype.kind == "V" and "bfloat16" in dtype.name
    return "bfloat16" in str(dtype)


def extended_precision(dtype: Any) -> bool:
    """Whether ``dtype`` is NumPy's extended precision (``np.longdouble``, its
    complex twin): what only NumPy holds."""
    try:
        np_dtype = np.dtype(dtype)
    except TypeError:
        return False
    return (np_dtype.kind == "f" and np_dtype.itemsize > 8) or (np_dtype.kind == "c" and np_dtype.itemsize > 16)


class Family:
    """One array family: subclass it, set :attr:`name` and :attr:`module`, and
    implement :meth:`array_types`, :meth:`to_numpy`, :meth:`from_numpy` and
    :meth:`namespace`; every other method has a default that suits a CPU
    library following the array API. Register an instance with
    :func:`di.register_family`, or name it in an engine's record (its
    ``family``), which registers it with the engine.

    The optional methods a library that departs from NumPy's ways may need:
    :meth:`index` (how ``di.AutoSparse`` gathers and scatters with NumPy
    positions: by default the NumPy array itself, which a library that refuses
    NumPy indices must convert), :meth:`scatter`, :meth:`sparse_matrix` (none by
    default: ``AutoSparse`` then needs ``dense_result=True``) and its reverse
    :meth:`sparse_to_scipy` (:func:`di.to_scipy`), :meth:`write_out`
    (``out=`` buffers), :meth:`from_dlpack` and :meth:`dlpack_source`
    (zero-copy between libraries), :meth:`scope` (a precision or device scope
    around an engine's call), :meth:`block` (asynchronous libraries), and the
    description of dtypes and devices (:meth:`describe_dtype`, :meth:`device`).
    A pytree ``x`` is rebuilt from one vector of the family with the array's own
    ``reshape`` method, else the namespace's ``reshape``.

    Attributes:
        name: the family's name, as :func:`di.families.family_of` returns it.
        display: the library's name as people write it (``"NumPy"``), for messages.
        module: the top-level module that defines the arrays; the family
            recognises arrays only once that module is in ``sys.modules`` (an
            array cannot exist before), so detection imports nothing.
        mutable: whether arrays can be written in place (``out=`` buffers,
            ``Cache`` contexts). Conversions from an immutable family into a
            mutable one copy, so a result the caller receives is its own; into
            an immutable family, a large host buffer (``x`` of a torch caller on
            a JAX backend) is shared by DLPack for the call that converted it,
            which only reads it (:func:`by_numpy`), smaller ones copied.

    Examples:
        >>> import numpy as np
        >>> from di.families import get_family
        >>> numpy_family = get_family("numpy")
        >>> numpy_family.name, numpy_family.describe_dtype(np.zeros(2, dtype=np.float32).dtype)
        ('numpy', 'float32')
    """

    name: ClassVar[str] = ""
    display: ClassVar[str] = ""
    module: ClassVar[str] = ""
    mutable: ClassVar[bool] = True

    # --- recognising arrays -------------------------------------------------------------

    def array_types(self, module: ModuleType) -> tuple[type, ...]:
        """The classes whose instances are this family's arrays, given the loaded
        :attr:`module`."""
        raise NotImplementedError

    def is_array(self, value: Any) -> bool:
        """Whether ``value`` is an array of this family (its class is one of
        :meth:`array_types`): the one test :func:`di.families.family_of` uses."""
        import sys

        module = sys.modules.get(self.module)
        return module is not None and isinstance(value, self.array_types(module))

    def foreign_leaves(self, value: Any) -> list[Any] | None:
        """The leaves of ``value`` when the library registers it as a container
        that ``optree`` does not know (JAX's ``tree_util`` registry), else
        ``None``; by default the library has no registry of its own."""
        return None

    # --- the conversion hub ---------------------------------------------------------------

    def to_numpy(self, value: Any) -> np.ndarray:
        """``value`` as a NumPy array, zero-copy where the library allows it."""
        raise NotImplementedError

    def from_numpy(self, array: np.ndarray) -> Any:
        """A NumPy array as an array of this family, keeping its dtype."""
        raise NotImplementedError

    def from_dlpack(self, value: Any) -> Any:
        """An array of another library that speaks DLPack, as an array of this
        family, zero-copy. ``NotImplemented`` (the default) makes conversions
        between two non-NumPy families go through NumPy."""
        return NotImplemented

    def dlpack_source(self, value: Any) -> Any:
        """What another family's :meth:`from_dlpack` receives for ``value``
        (an object with ``__dlpack__`` and ``__dlpack_device__``); by default
        ``value`` itself. A family that keeps the default and whose array classes
        lack those two methods reaches other libraries through NumPy
        (:meth:`to_numpy`, then the other family's ``from_numpy``: a copy where
        that library copies, as JAX does)."""
        return value

    # --- describing arrays ------------------------------------------------------------

    def shape(self, value: Any) -> tuple[int, ...]:
        """The shape of ``value`` as a tuple of ints."""
        return tuple(value.shape)

    def dtype(self, value: Any) -> Any:
        """The dtype object of ``value``."""
        return value.dtype

    def device(self, value: Any) -> Any:
        """The device of ``value`` (``None`` when the family has one only)."""
        return None

    def is_default_device(self, device: Any) -> bool:
        """Whether reports can leave ``device`` unsaid (the host CPU)."""
        return True

    def describe_dtype(self, dtype: Any) -> str:
        """The dtype's name without the library's prefix (``"float32"``)."""
        return str(getattr(dtype, "name", dtype)).rsplit(".", 1)[-1]

    def dtype_name(self, dtype: Any) -> str:
        """Alias of :meth:`describe_dtype`, for specs."""
        return self.describe_dtype(dtype)

    def is_floating(self, dtype: Any) -> bool:
        """Whether ``dtype`` is a real floating-point type (bfloat16 included)."""
        name = self.describe_dtype(dtype)
        return name.startswith("float") or name == "bfloat16"

    def matcher(self, value: Any) -> Matcher:
        """A predicate recognising arrays like ``value`` (same class, shape and
        dtype, and device where the family has several): the hot path of a strict
        prepared call, so it compares fields and builds nothing."""
        cls, shape, dtype = value.__class__, value.shape, value.dtype
        return lambda given: given.__class__ is cls and given.shape == shape and given.dtype == dtype

    def fields(self, value: Any) -> tuple[type, Any, Any] | None:
        """``(class, shape, dtype)`` of ``value`` when :meth:`matcher` recognises
        exactly the arrays with these three, for a prep's runner to compare inline
        (a Python call fewer on the hot path); ``None`` when the matcher checks
        more or otherwise, which is the default for a family that defines its own
        matcher."""
        if type(self).matcher is not Family.matcher:
            return None
        return value.__class__, value.shape, value.dtype

    def shortcut(self, value: Any) -> tuple[type, str, Any] | None:
        """``(class, attribute, object)`` such that an argument of that class whose
        attribute is that very object is one :meth:`matcher` recognises (JAX arrays
        alike share one abstract value, ``aval``), for a prep's runner to test inline
        before it calls the matcher (a Python call fewer on the hot path); ``None``,
        the default, where the family has no such attribute.

        Examples:
            >>> import numpy as np
            >>> from di.families import get_family
            >>> get_family("numpy").shortcut(np.zeros(2)) is None
            True
        """
        del value
        return None

    def leaves_matcher(self, values: Sequence[Any]) -> Callable[[Sequence[Any]], bool]:
        """A predicate recognising sequences of arrays like ``values``, each as
        :meth:`matcher` recognises it, in one loop: the hot path of a strict
        prepared call with a pytree ``x`` (the caller gives as many arrays as
        ``values``). By default each array's :meth:`fields` read inline where it
        has them, else the arrays' own matchers, one after the other."""
        found = [self.fields(value) for value in values]
        specs: list[tuple[Any, Any, Any]] = [spec for spec in found if spec is not None]
        if len(specs) == len(found):

            def fields_match(given: Sequence[Any]) -> bool:
                for array, (cls, shape, dtype) in zip(given, specs):
                    if array.__class__ is not cls or array.shape != shape or array.dtype != dtype:
                        return False
                return True

            return fields_match
        matchers = tuple(self.matcher(value) for value in values)

        def matches(given: Sequence[Any]) -> bool:
            for match, array in zip(matchers, given):
                if not match(array):
                    return False
            return True

        return matches

    def takes_dtype(self, dtype: Any) -> bool:
        """Whether arrays of another family with this ``dtype`` can be converted
        into this family keeping it (an engine computing in this family can take
        them); by default every dtype."""
        return True

    def refusal(self, value: Any, name: str) -> str:
        """Why ``value``, an array of this family passed as ``name`` (``"x"``,
        ``"tx[0]"``, ``"context 1"``), cannot be given to ``di``, with what to pass
        instead: a kind of array the engines would not read as ``f`` does (NumPy's
        masked arrays and matrices). ``""`` (the default) takes it."""
        return ""

    def traced_by(self, value: Any) -> str:
        """The engine transform tracing ``value`` (``"jax.vmap"``, ``"torch.func.grad"``),
        or ``""`` for a concrete array: a call inside such a transform composes with
        it, and what cannot is refused naming it. By default arrays are concrete."""
        return ""

    def annotation(self, value: Any) -> str:
        """What a prep's report says about ``value`` beyond its family, dtype, shape
        and device (``"weakly typed, traced by jax.vmap"``); by default nothing."""
        return ""

    def key(self, value: Any) -> Any:
        """A hashable summary of ``value``'s class, shape and dtype (and device),
        compared when :meth:`matcher` says no, to explain why."""
        return (value.__class__, self.shape(value), self.describe_dtype(value.dtype), str(self.device(value)))

    # --- computing with arrays ----------------------------------------------------------

    def namespace(self) -> Any:
        """The array-API namespace of this family's arrays (``stack``, ``concat``,
        ``tensordot``, ``zeros``, ``astype``, ``result_type``, ...)."""
        raise NotImplementedError

    def scope(self, dtypes: Sequence[Any] = ()) -> contextlib.AbstractContextManager[Any]:
        """The context in which arrays of these dtypes keep them (JAX makes 64-bit
        dtypes 32-bit outside ``enable_x64``); by default none."""
        return contextlib.nullcontext()

    def fused(self, function: Callable[..., Any]) -> Callable[..., Any]:
        """``function`` (a few array operations on this family's arrays, such as the
        real view of a complex ``x``, :mod:`di.complex`) as one call where the
        library compiles (JAX: ``jax.jit``, one dispatch instead of one per
        operation); by default ``function`` itself."""
        return function

    def astype(self, array: Any, dtype_name: str) -> Any:
        """``array`` cast to the dtype named ``dtype_name`` (``"float32"``)."""
        xp = self.namespace()
        return xp.astype(array, getattr(xp, dtype_name))

    # --- the caller's side ------------------------------------------------------------------

    def write_out(self, out: Any, result: Any) -> Any:
        """Copy ``result`` (of this family, shaped like ``out``) into the caller's
        buffer ``out`` and return ``out``."""
        raise NotImplementedError(f"{self.name} arrays are immutable: they cannot receive out=")

    def read_only(self, array: Any) -> bool | str:
        """Whether ``array``, of a mutable family, refuses writes (a NumPy array
        whose ``writeable`` flag is off): it cannot receive ``out=``. A string
        says why (the error shows it)."""
        return False

    def placement(self, like: Any) -> Callable[[Any], Any] | None:
        """The function putting a result of this family where ``like`` (the
        caller's array of this family) lives, for results converted from an engine
        of another family (which arrive where :meth:`from_numpy` puts arrays);
        ``None`` when they arrive there already. Made once per prep; by default
        ``None`` (the family has one place)."""
        return None

    def own(self, array: Any) -> Any:
        """A result the caller receives, as an array the caller owns: a view of
        memory the engine or the prep may still hold is copied. By default the
        array itself (conversions already gave a fresh array)."""
        return array

    def sparse_matrix(self, indices: np.ndarray, indptr: np.ndarray, shape: tuple[int, int]) -> Callable[[Any], Any]:
        """The builder of 2-D sparse matrices of this family with the CSR pattern
        ``indices``/``indptr`` (NumPy): it takes the nonzeros, an array of this
        family in CSR order, and returns a matrix whose index arrays the caller
        owns. Made once per prep; the builder is the hot path.

        Raises:
            UnsupportedOperatorError: the family has no sparse matrix type (pass
                ``dense_result=True`` to :class:`di.AutoSparse`).
        """
        raise UnsupportedOperatorError(
            f"{self.display or self.name} arrays have no sparse matrix type: use AutoSparse(..., dense_result=True) "
            f"for dense results in this family."
        )

    def index(self, positions: np.ndarray) -> Any:
        """Integer NumPy ``positions`` as an index array of this family, which
        ``di.AutoSparse`` gathers the nonzeros of compressed products with (and
        scatters with :meth:`scatter`); by default the NumPy array, which
        array-API libraries accept as an index. Override it for a library that
        refuses NumPy indices (MLX: ``mx.array(positions)``)."""
        return positions

    def whole(self, value: Any) -> Any:
        """``value`` held whole by every device it lives on, for a family whose
        arrays carry a sharding in their type (where reshaping and indexing a
        sharded array need an output sharding): ``di.AutoSparse`` gathers the
        nonzeros of compressed products so. By default ``value`` itself."""
        return value

    def gather(self, values: Any, positions: Any) -> Any:
        """The entries of the 1-D array ``values`` at ``positions`` (from :meth:`index`):
        by default the array API's ``take`` (every library has it; some, TensorFlow's,
        refuse index arrays in ``values[positions]``). Override it where another
        spelling runs faster in a compiled program."""
        return self.namespace().take(values, positions, axis=0)

    def scatter(self, data: Any, positions: Any, size: int) -> Any:
        """A 1-D array of ``size`` zeros of ``data``'s dtype with ``data`` at
        ``positions`` (from :meth:`index`)."""
        result = np.zeros(size, dtype=np.asarray(self.to_numpy(data)).dtype)
        result[np.asarray(positions)] = self.to_numpy(data)
        return self.from_numpy(result)

    def sparse_to_numpy(self, value: Any) -> np.ndarray | None:
        """``value`` as a dense NumPy array when it is one of this family's sparse
        matrices (what :meth:`sparse_matrix` builds), else ``None``."""
        return None

    def sparse_to_scipy(self, value: Any) -> Any:
        """``value`` as a ``scipy.sparse.csr_array`` when it is one of this family's
        sparse matrices, else ``None`` (:func:`di.to_scipy`). By default through
        :meth:`sparse_to_numpy`, densely (stored zeros are dropped): a family
        with a sparse matrix type overrides it to copy its index arrays."""
        dense = self.sparse_to_numpy(value)
        if dense is None:
            return None
        import scipy.sparse as sp

        return sp.csr_array(dense)

    def sparse_from_scipy(self, matrix: Any) -> Any:
        """A ``scipy.sparse`` matrix as this family's sparse matrix, its stored
        entries kept (:func:`di.from_scipy`): by :meth:`sparse_matrix` on its
        sorted CSR form.

        Raises:
            UnsupportedOperatorError: the family has no sparse matrix type.
        """
        import scipy.sparse as sp

        csr = sp.csr_array(matrix, copy=True)
        csr.sort_indices()
        return self.sparse_matrix(csr.indices, csr.indptr, csr.shape)(self.from_numpy(csr.data))

    def records_graph(self, value: Any) -> bool:
        """Whether ``value`` still records operations for differentiation (a graph
        a caller would carry along); by default arrays record nothing."""
        return False

    def copy(self, value: Any) -> Any:
        """A copy of ``value`` that shares no memory and records no graph (an
        immutable family's arrays cannot change: they are their own copy)."""
        if not self.mutable:
            return value
        return self.from_numpy(np.array(self.to_numpy(value), copy=True))

    def block(self, value: Any) -> None:
        """Wait until ``value`` (a result of this family) is computed: libraries
        that dispatch asynchronously return before they finish (timing needs it)."""

    # --- engines that compute in another family -------------------------------------

    def literal(self, value: Any, like: Any) -> Any:
        """A Python number or NumPy array ``value`` as an array of this family with
        ``like``'s dtype and device."""
        return self.astype(self.from_numpy(np.asarray(value)), self.describe_dtype(like.dtype))
