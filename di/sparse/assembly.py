"""The engine side of :class:`di.AutoSparse`'s programs: seeds in batches, the
gather of the nonzeros out of the compressed products, and the result in the
caller's family (a sparse matrix, or a dense array).

Everything here goes through the adapter protocol and the family records: no
engine is named.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from di.families import Family, converter, family_of, get_family
from di.sparse.decompression import Decompression

__all__ = ["assembler", "chunks", "empty_data", "gatherer", "numpy_dtype", "solver"]


def numpy_dtype(value: Any) -> Any:
    """The NumPy dtype of an array of any family (bfloat16 as float32, which NumPy has)."""
    family = family_of(value)
    name = get_family(family).describe_dtype(value.dtype) if family else str(getattr(value, "dtype", "float64"))
    return np.dtype("float32" if name == "bfloat16" else name)


def chunks(count: int, chunk_size: int | None) -> list[slice]:
    """The colors ``0 .. count - 1`` in batches of at most ``chunk_size``.

    Examples:
        >>> from di.sparse.assembly import chunks
        >>> chunks(5, 2)
        [slice(0, 2, None), slice(2, 4, None), slice(4, 5, None)]
    """
    size = count if chunk_size is None else max(int(chunk_size), 1)
    return [slice(start, min(start + size, count)) for start in range(0, count, max(size, 1))]


def gatherer(family: str, index: np.ndarray | None) -> Callable[[Sequence[Any]], Any]:
    """``gather(products)``: the compressed products stacked and flattened, and the
    nonzeros read at ``index`` (``None``: the flattened products themselves)."""
    record = get_family(family)
    xp = record.namespace()
    where = None if index is None else record.index(index)
    stack = xp.stack
    if type(record).whole is not Family.whole:  # (a family whose arrays carry a sharding in their type)

        def stack(run: Sequence[Any]) -> Any:
            return record.whole(xp.stack(run))

    def gather(products: Sequence[Any]) -> Any:
        if not products:
            return xp.zeros((0,))
        # Runs of products of one shape are stacked: the products of one batched
        # call are slices of one array, and a compiler sees that stacking them
        # back is that array (concatenating their reshapes costs a copy: about
        # 100 us for 200 products of 200 entries in a compiled program).
        runs: list[list[Any]] = [[products[0]]]
        for product in products[1:]:
            if tuple(product.shape) == tuple(runs[-1][0].shape):
                runs[-1].append(product)
            else:
                runs.append([product])
        parts = [xp.reshape(stack(run), (-1,)) for run in runs]
        flat = parts[0] if len(parts) == 1 else xp.concat(parts)
        return flat if where is None else record.gather(flat, where)

    return gather


def empty_data(family: str, dtype: Any) -> Any:
    """No nonzeros, in ``family``."""
    return converter("numpy", family)(np.zeros(0, dtype=dtype))


def solver(decompression: Decompression) -> Callable[[Any], Any]:
    """``solve(flat)``: the nonzeros (NumPy, CSR order) from flattened compressed
    products of any family, by the decompression's substitution (on the host)."""
    substitution = decompression.substitution
    assert substitution is not None
    index = decompression.index

    def solve(flat: Any) -> Any:
        numpy_flat = np.asarray(converter(family_of(flat), "numpy")(flat))
        return substitution.solve(numpy_flat)[index]

    return solve


def _to(family: str) -> Callable[[Any], Any]:
    """Convert arrays of any family to ``family``."""

    def convert(data: Any) -> Any:
        return converter(family_of(data), family)(data)

    return convert


def assembler(
    decompression: Decompression, family: str, dense_result: bool, dense_shape: tuple[int, ...]
) -> Callable[[Any], Any]:
    """``assemble(data)``: the result in the caller's family from the nonzeros (any
    family, CSR order): a sparse matrix, or a dense array of ``dense_shape``."""
    if dense_result:
        return _dense_assembler(decompression, family, dense_shape)
    build, to_caller = (
        get_family(family).sparse_matrix(decompression.indices, decompression.indptr, decompression.shape),
        _to(family),
    )

    def sparse(data: Any) -> Any:
        return build(to_caller(data))

    with warnings.catch_warnings():  # torch warns once per process that sparse CSR is in beta
        warnings.simplefilter("ignore", UserWarning)
        sparse(np.zeros(decompression.indices.size))
    return sparse


def _dense_assembler(decompression: Decompression, family: str, dense_shape: tuple[int, ...]) -> Callable[[Any], Any]:
    record, to_caller = get_family(family), _to(family)
    positions = record.index(decompression.flat_positions)
    size = math.prod(dense_shape)

    xp = record.namespace()

    def dense(data: Any) -> Any:
        flat = record.scatter(to_caller(data), positions, size)
        method = getattr(flat, "reshape", None)  # the array API has no reshape method: the namespace's without
        return method(dense_shape) if method is not None else xp.reshape(flat, dense_shape)

    return dense
